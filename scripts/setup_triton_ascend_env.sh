#!/usr/bin/env bash
# Create (or reuse) .venv-triton-ascend: triton-ascend's compiler for the Ascend compile check
# (tests/test_triton_ascend_compile.py). Its own venv because triton-ascend installs a top-level `triton` (3.2)
# that conflicts with the upstream triton of .venv. torch is the 2.13.0 CPU wheel (the launchers need it);
# never torch-npu (without CANN it breaks `import torch`).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV=.venv-triton-ascend
PINS=("triton-ascend==3.2.0" "ascendnpu-ir==1.2.0" "pybind11==3.1.0" "torch==2.13.0" "numpy" "pytest>=8")
if [ -f "$VENV/.complete" ] && [ "$(cat "$VENV/.complete")" = "${PINS[*]}" ]; then
  exit 0
fi
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "${PINS[@]}"
"$VENV/bin/python" -c "import triton.backends.ascend, ascendnpuir, torch" 
echo "${PINS[*]}" > "$VENV/.complete"
