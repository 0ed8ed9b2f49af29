#!/usr/bin/env bash
# Set up .venv and run the whole test suite: lint, then pytest (reference, Triton under the interpreter,
# AscendC kernels through the host model, oracles from fla-core and transformers).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
. .venv/bin/activate
export TRITON_INTERPRET=1 ASCEND_SPEC_CHECKS=1
ruff check .
ruff format --check .
python -m pytest -q "$@"
