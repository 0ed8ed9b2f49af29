"""vLLM >= 0.34 (Model Runner V2 only) on a CUDA device: the tiny Qwen3 decodes plain and with ngram drafts, with
and without the plugin's key, and with the plugin's dynamic verification; every run gives plain decoding's tokens (scripts/gpu_check.sh, step 3).

Argument: a work folder (models, caches). Exit status 1 when any run differs from plain decoding or fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ascend_spec.e2e.engine import EngineSpec, run_isolated
from ascend_spec.e2e.tiny_models import make_tiny_models

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}


def main() -> int:
    work = Path(sys.argv[1])
    models = make_tiny_models(work / "models", hybrid=False, low_entropy=True)
    prompts = [[1, 2, 3, 4, 5, 1, 2, 3], [7, 8, 9, 7, 8, 9, 7]]
    lengths = [16, 12]
    runs = {
        "plain": EngineSpec(target=models.target),
        "ngram": EngineSpec(target=models.target, speculative=NGRAM),
        "ngram + plugin": EngineSpec(target=models.target, speculative=NGRAM, plugin={}),
        # dynamic verification on V2: the plugin's manager, ngram planned on the acceptance estimate
        "ngram + dynamic": EngineSpec(target=models.target, speculative=NGRAM, plugin={"dynamic": {}}),
    }
    results = {
        name: run_isolated(spec, prompts, work_dir=work / "engines", max_tokens=lengths)
        for name, spec in runs.items()
    }
    failed = False
    for name, result in results.items():
        same = result.error is None and result.tokens == results["plain"].tokens
        failed |= not same
        print(
            f"{name:16} runner {result.runner} drafts {result.num_drafts} accepted {result.num_accepted} "
            f"{'equals plain' if same else 'DIFFERS: ' + str(result.error or result.tokens)}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
