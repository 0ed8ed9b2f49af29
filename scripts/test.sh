#!/usr/bin/env bash
# Set up .venv and run the whole test suite: lint, then pytest (reference, Triton under the interpreter,
# AscendC kernels through the host model, oracles from fla-core and transformers, the plugin's engine tests on
# vLLM 0.32.0), then the engine matrix: each other vLLM release in its own .venv-vllm-RELEASE (built in the
# background while the main suite runs), running the engine tests marked for it (a supported release:
# `matrix or inert`; any other: `inert`, the plugin installed but not enabled).
# Last, vllm-ascend 0.30.0rc2's NPUModelRunner on the emulated NPU (.venv-vllm-ascend, tests/vllm_ascend_emu).
# The main suite runs on ASCEND_SPEC_TEST_WORKERS pytest-xdist workers (default 2, one a core of CI's machine; 0:
# in-process), a test file to a worker (module fixtures stay shared); after it, two lanes of single-process engine
# tests: the matrix releases, and beside them the vllm-ascend part; logs printed as each lane ends.
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
python -m pytest -q -n "${ASCEND_SPEC_TEST_WORKERS:-2}" --dist loadfile --durations=25 "$@"
[ -n "$matrix" ] || [ "$ascend" = 1 ] || exit 0
deactivate
wait "$setup_pid"
engine_matrix() {
  for release in "$@"; do
    if [ ! -f "$logs/ok-$release" ]; then
      cat "$logs/setup-$release.log"
      echo "engine matrix: setting up vLLM $release failed" >&2
      return 1
    fi
    start=$(date +%s)
    py=".venv-vllm-$release/bin/python"
    selection=$("$py" -c "from ascend_spec.vllm.releases import v1_release; print('matrix or inert' if v1_release() else 'inert')")
    echo "engine matrix: vLLM $release, tests marked '$selection'"
    "$py" -m pytest -q --durations=10 -m "$selection" tests/vllm || return 1
    echo "engine matrix: vLLM $release took $(($(date +%s) - start)) s"
  done
}
emulated_npu() {
  [ "$ascend" = 1 ] || return 0
  if [ ! -f "$logs/ok-vllm-ascend" ]; then
    cat "$logs/setup-vllm-ascend.log"
    echo "setting up vllm-ascend failed" >&2
    return 1
  fi
  start=$(date +%s)
  echo "vllm-ascend 0.30.0rc2 on the emulated NPU"
  .venv-vllm-ascend/bin/python -m pytest -q --durations=15 tests/vllm_ascend_emu || return 1
  echo "vllm-ascend took $(($(date +%s) - start)) s"
}
# Two lanes, one engine process each: the matrix releases one after another, and beside them the vllm-ascend
# part (the longest: its V2 runner runs under Triton's interpreter).
engine_matrix $matrix >"$logs/matrix.log" 2>&1 &
matrix_pid=$!
emulated_npu >"$logs/emulated-npu.log" 2>&1 &
npu_pid=$!
failed=0
wait "$npu_pid" || failed=1
cat "$logs/emulated-npu.log"
wait "$matrix_pid" || failed=1
cat "$logs/matrix.log"
exit "$failed"
