"""Interleaved timing of resident engines (the sweep's harness): same tokens and counters as one engine run on
its own, every round timed, and an engine that fails to start reported without stalling the others."""

from __future__ import annotations

import os

import pytest
from engine_helpers import LENGTHS, PROMPTS, run, speculative

from ascend_spec.e2e.engine import EngineSpec
from ascend_spec.e2e.interleaved import run_interleaved

pytestmark = pytest.mark.slow

ENV = {"OMP_NUM_THREADS": "1"}


def test_interleaved_engines_give_the_tokens_and_counters_of_isolated_runs(engine_dir, dense_low_entropy):
    models = dense_low_entropy
    spec = speculative("dflash", models)
    alone = run(engine_dir, models, speculative=spec, plugin={}, env=ENV)
    plain = EngineSpec(target=models.target)
    drafted = EngineSpec(target=models.target, speculative=spec, plugin={})
    broken = EngineSpec(target=engine_dir / "no_such_model")
    pinned = [max(os.sched_getaffinity(0))]
    runs = run_interleaved(
        [plain, broken, drafted],
        PROMPTS,
        max_tokens=LENGTHS,
        rounds=3,
        work_dir=engine_dir,
        env=ENV,
        cpus=pinned,
    )
    assert runs[1].error is not None and "no_such_model" in runs[1].error
    for r in (runs[0], runs[2]):
        assert (
            r.error is None and r.seconds > 0 and r.cpu_seconds > 0 and [len(t) for t in r.tokens] == LENGTHS
        )
    assert runs[2].tokens == alone.tokens == runs[0].tokens  # greedy, lossless
    # the counters of the first timed round, as a lone engine reports its first timed run
    assert (runs[2].num_drafts, runs[2].num_draft_tokens, runs[2].num_accepted) == (
        alone.num_drafts,
        alone.num_draft_tokens,
        alone.num_accepted,
    )
    assert runs[0].num_drafts == 0
    assert runs[0].cpus == runs[2].cpus == pinned  # every engine process ran on the CPU it was pinned to


def test_pinned_cpus_must_be_this_process_s() -> None:
    outside = max(os.sched_getaffinity(0)) + 1
    with pytest.raises(ValueError, match=rf"cpus must be a non-empty subset .*; got \[{outside}\]"):
        run_interleaved([], [[1]], max_tokens=[1], rounds=1, cpus=[outside])
    with pytest.raises(ValueError, match=r"cpus must be a non-empty subset .*; got \[\]"):
        run_interleaved([], [[1]], max_tokens=[1], rounds=1, cpus=[])


def test_rounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"rounds must be >= 1; got 0"):
        run_interleaved([], [[1]], max_tokens=[1], rounds=0)
