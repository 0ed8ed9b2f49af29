#!/usr/bin/env bash
# Set up .venv and run the operator microbenchmarks on the best available device (CPU by default).
# Extra arguments go to `ascend-spec bench`, e.g. --json bench.json, --case max_softmax_confidence, --quick.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
. .venv/bin/activate
ascend-spec bench "$@"
