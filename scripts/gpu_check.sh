#!/usr/bin/env bash
# The device check for a lent CUDA machine (docs/vllm.md, "GPU check"): one prepared script, under 10 minutes.
#
#   run(command="bash scripts/gpu_check.sh", carry=[".whl"], timeout_s=540)
#
# 1. the ops' Triton kernels compiled for and run on the GPU: `ascend-spec bench --device cuda` checks every op
#    against its baseline (value agreement) before timing it, for the triton and reference backends; JSON and the
#    table go to $OUT;
# 2. the drafter's CUDA graph capture and replay (tests/test_graph_dispatch.py, skipped without CUDA elsewhere);
# 3. vLLM 0.34.0's Model Runner V2: where vLLM >= 0.34 imports, a V2 engine decodes the tiny Qwen3 plain and with
#    ngram drafts and the tokens must be equal (scripts/gpu_v2_smoke.py). The device image has torch 2.11 and no
#    network: vLLM 0.34.0 needs torch 2.14, whose CUDA wheels do not fit the 64 MiB a call may carry, so on today's
#    image this step says so in one line. Wheels placed in .whl/ (the device tool's README has the pip download
#    line) are installed first.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/ascend_spec_gpu_check}"
mkdir -p "$OUT"
status=0
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "$OUT/environment.txt"

echo "== 1. ops on CUDA: agreement with the baselines, then timing"
for backend in triton reference; do
  timeout 150 python3 -m ascend_spec.cli bench --device cuda --backend "$backend" \
    --json "$OUT/bench_$backend.json" 2>&1 | tee "$OUT/bench_$backend.txt" || status=1
done

echo "== 2. CUDA graph capture and replay"
timeout 120 python3 -m pytest -q tests/test_graph_dispatch.py 2>&1 | tee "$OUT/graph_dispatch.txt" || status=1

echo "== 3. vLLM Model Runner V2 engines"
if python3 -c "import sys, vllm; v = tuple(int(x) for x in vllm.__version__.split('+')[0].split('.')[:2]); sys.exit(0 if v >= (0, 34) else 1)" 2>/dev/null; then
  timeout 240 python3 scripts/gpu_v2_smoke.py "$OUT/v2" 2>&1 | tee "$OUT/v2_engines.txt" || status=1
else
  echo "skipped: vLLM >= 0.34 does not import here (it needs torch 2.14; the image has $(python3 -c 'import torch; print(torch.__version__)') and no network)" | tee "$OUT/v2_engines.txt"
fi
exit "$status"
