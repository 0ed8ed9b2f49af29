"""The mixed workload in an engine: the step-cost target decodes its successor function, and ngram and the
built-in DSpark drafter at a fixed K get every draft of the repetitive requests accepted and none of the
others' (vLLM's per-request metrics)."""

from __future__ import annotations

import pytest
from engine_helpers import ONE_OMP_THREAD

from ascend_spec.e2e.cli import speculative_config
from ascend_spec.e2e.engine import EngineSpec, run_isolated
from ascend_spec.e2e.mixed import (
    OTHER,
    REPETITIVE,
    class_lengths,
    make_mixed_models,
    mixed_prompts,
    mixed_tokens,
)

pytestmark = pytest.mark.slow

K = 3
MAX_TOKENS = 12


@pytest.mark.parametrize("method", ["ngram", "dspark"])
def test_fixed_k_accepts_the_repetitive_half_and_rejects_the_other(
    engine_dir, models_dir, method: str
) -> None:
    models = make_mixed_models(models_dir)
    prompts, classes = mixed_prompts(4, max_tokens=MAX_TOKENS, num_spec=K)
    speculative = speculative_config(method, K, models.dspark, models.target)
    spec = EngineSpec(target=models.target, speculative=speculative, plugin={}, max_num_seqs=4)
    run = run_isolated(spec, prompts, work_dir=engine_dir, max_tokens=MAX_TOKENS, env=ONE_OMP_THREAD)
    assert run.error is None, run.error
    oracle = mixed_tokens()
    assert run.tokens == [
        oracle.continuation(p[-1], MAX_TOKENS) for p in prompts
    ]  # what the target was built as
    per_class: dict[str, list[int]] = {REPETITIVE: [0, 0], OTHER: [0, 0]}
    for (steps, drafted, accepted), cls in zip(run.request_drafts, classes):
        assert steps > 0
        per_class[cls][0] += drafted
        per_class[cls][1] += accepted
    rep, other = per_class[REPETITIVE], per_class[OTHER]
    assert rep[0] > 0 and rep[1] == rep[0]  # every draft of the repetitive half accepted
    assert (
        other[0] >= 2 * K * (MAX_TOKENS // 2) and other[1] == 0
    )  # the other half drafts K a step, all rejected
    lengths = class_lengths(run.tokens, run.request_drafts, classes)
    assert lengths[REPETITIVE]["accept"] > 3.0 and lengths[OTHER] == {"verify": K + 1.0, "accept": 1.0}
