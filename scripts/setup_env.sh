#!/usr/bin/env bash
# Create (or reuse) .venv with everything ascend-spec's tests and benchmarks need on a CPU-only machine.
# torch is pinned to the 2.13.0 CPU wheel: an unpinned torch would pull a multi-GB CUDA build.
# Never installs torch-npu (without CANN it breaks `import torch`).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet "torch==2.13.0"
python -m pip install --quiet -e ".[test]"
