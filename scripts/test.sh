#!/usr/bin/env bash
# Set up .venv and run the whole test suite: lint, then pytest (reference, Triton under the interpreter,
# AscendC kernels through the host model, oracles from fla-core and transformers, the plugin's engine tests on
# vLLM 0.32.0), then the engine jobs: each other vLLM release in its own .venv-vllm-RELEASE (built in the
# background while the main suite runs), running the engine tests marked for it (a supported release:
# `matrix or inert`; any other: `inert`, the plugin installed but not enabled), and vllm-ascend 0.30.0rc2's
# runners on the emulated NPU (.venv-vllm-ascend, tests/vllm_ascend_emu).
# The main suite runs on ASCEND_SPEC_TEST_WORKERS pytest-xdist workers (default 2, one a core of CI's machine; 0:
# in-process), a test file to a worker (module fixtures stay shared), engine files first (tests/conftest.py); after
# it, two lanes take the engine jobs longest first; each job's log is printed at the end, in the list's order.
# With arguments, only pytest on .venv runs, with those arguments. ASCEND_SPEC_MATRIX lists the other releases
# (default "0.30.0 0.27.1"; empty: none); ASCEND_SPEC_EMULATED_NPU_TESTS=0 skips the vllm-ascend part.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
matrix="${ASCEND_SPEC_MATRIX-0.30.0 0.27.1}"
ascend="${ASCEND_SPEC_EMULATED_NPU_TESTS:-1}"
if [ "$#" -ne 0 ]; then
  matrix=""
  ascend=0
fi
logs=$(mktemp -d)
# One after another (each is an editable install of this tree), in the background of the main suite.
(
  for release in $matrix; do
    if bash scripts/setup_env.sh "$release" >"$logs/setup-$release.log" 2>&1; then
      touch "$logs/ok-$release"
    fi
  done
  if [ "$ascend" = 1 ] && bash scripts/setup_vllm_ascend_env.sh >"$logs/setup-vllm-ascend.log" 2>&1; then
    touch "$logs/ok-vllm-ascend"
  fi
) &
setup_pid=$!
. .venv/bin/activate
export TRITON_INTERPRET=1 ASCEND_SPEC_CHECKS=1
ruff check .
ruff format --check .
python -m pytest -q -n "${ASCEND_SPEC_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder --durations=25 "$@"
[ -n "$matrix" ] || [ "$ascend" = 1 ] || exit 0
deactivate
wait "$setup_pid"
# The engine jobs, one pytest process each, longest first (docs/measurements.md, "The test command"): two lanes
# (one a core) each take the next job as their last one ends. A vllm-ascend file not named here joins npu_rest's job.
selection() {  # the engine tests a release runs: a supported release 'matrix or inert', any other 'inert'
  ".venv-vllm-$1/bin/python" -c "from ascend_spec.vllm.releases import v1_release; print('matrix or inert' if v1_release() else 'inert')"
}
npu_own_jobs="test_prefix_caching.py test_v2_runner.py test_adapter_engine.py"
dspark_inert="tests/vllm/test_vllm_dspark.py tests/vllm/test_vllm_inert.py"
npu_rest=""
for file in tests/vllm_ascend_emu/test_*.py; do
  case " $npu_own_jobs " in *" $(basename "$file") "*) ;; *) npu_rest="$npu_rest $file" ;; esac
done
{
  # measured on the 2-core VM (2026-12-07, fresh clone of 21cf67f; 0.30.0 and 0.27.1 forked): 272, 196, 157, 269,
  # 256, 196, 102 s
  prefix_listed=0
  for release in $matrix; do
    if [ -f "$logs/ok-$release" ] && [ "$(selection "$release")" != inert ]; then  # a supported release: two jobs
      echo "matrix $release tests/vllm --ignore=${dspark_inert// / --ignore=}"
      if [ "$ascend" = 1 ] && [ "$prefix_listed" = 0 ]; then
        echo "npu tests/vllm_ascend_emu/test_prefix_caching.py"
        prefix_listed=1
      fi
      echo "matrix $release $dspark_inert"
    fi
  done
  if [ "$ascend" = 1 ]; then
    if [ "$prefix_listed" = 0 ]; then echo "npu tests/vllm_ascend_emu/test_prefix_caching.py"; fi
    echo "npu tests/vllm_ascend_emu/test_v2_runner.py"
    if [ -n "$npu_rest" ]; then echo "npu$npu_rest"; fi
    echo "npu tests/vllm_ascend_emu/test_adapter_engine.py"
  fi
  for release in $matrix; do
    if [ ! -f "$logs/ok-$release" ] || [ "$(selection "$release")" = inert ]; then
      echo "matrix $release tests/vllm"
    fi
  done
} >"$logs/jobs"
echo 0 >"$logs/next"
take_job() {  # the next job's number (from 0), under a lock: two lanes take from one list
  (
    flock 9
    n=$(cat "$logs/next")
    echo $((n + 1)) >"$logs/next"
    echo "$n"
  ) 9>"$logs/next.lock"
}
run_job() {  # KIND ARGS...: "matrix RELEASE PYTEST-ARGS..." (tests/vllm on that release's venv) or "npu FILES..."
  kind=$1
  shift
  start=$(date +%s)
  if [ "$kind" = matrix ]; then
    release=$1
    shift
    if [ ! -f "$logs/ok-$release" ]; then
      cat "$logs/setup-$release.log"
      echo "engine matrix: setting up vLLM $release failed" >&2
      return 1
    fi
    marked=$(selection "$release")
    echo "engine matrix: vLLM $release, tests marked '$marked' in $*"
    ".venv-vllm-$release/bin/python" -m pytest -q --durations=10 -m "$marked" "$@" || return 1
    echo "engine matrix: vLLM $release ($*) took $(($(date +%s) - start)) s"
  else
    if [ ! -f "$logs/ok-vllm-ascend" ]; then
      cat "$logs/setup-vllm-ascend.log"
      echo "setting up vllm-ascend failed" >&2
      return 1
    fi
    echo "vllm-ascend 0.30.0rc2 on the emulated NPU: $*"
    .venv-vllm-ascend/bin/python -m pytest -q --durations=10 "$@" || return 1
    echo "vllm-ascend: $* took $(($(date +%s) - start)) s"
  fi
}
lane() {
  while :; do
    i=$(take_job)
    job=$(sed -n "$((i + 1))p" "$logs/jobs")
    [ -n "$job" ] || return 0
    start=$(date +%s)
    # shellcheck disable=SC2086
    if run_job $job >"$logs/job-$i.log" 2>&1; then result=passed; else result=failed && touch "$logs/failed-$i"; fi
    # as each job ends (its log comes at the end): a run stopped by a time limit still shows where it was
    echo "engine job $i ($job): $result in $(($(date +%s) - start)) s"
  done
}
lane &
lane_a=$!
lane &
lane_b=$!
wait "$lane_a" "$lane_b"
failed=0
i=0
while [ -f "$logs/job-$i.log" ]; do
  cat "$logs/job-$i.log"
  [ ! -f "$logs/failed-$i" ] || failed=1
  i=$((i + 1))
done
exit "$failed"
