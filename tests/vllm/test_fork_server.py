"""Engines forked from a fork server (ascend_spec.e2e.fork_server, on for every engine test) are engines started
in a fresh child process: the same tokens, logits, counters and GDN state layout; a hung one is killed."""

from __future__ import annotations

import subprocess

import pytest
from engine_helpers import run, speculative

from ascend_spec.e2e import fork_server
from ascend_spec.e2e.engine import EngineSpec, run_isolated

pytestmark = pytest.mark.slow


def _fields(r) -> dict:  # noqa: ANN001
    return {
        "tokens": r.tokens,
        "top2": r.top2,
        "num_drafts": r.num_drafts,
        "num_accepted": r.num_accepted,
        "accepted_per_position": r.accepted_per_position,
        "kv_cache_layout": r.kv_cache_layout,
        "runner_class": r.runner_class,
        "gdn_slots_per_request": r.gdn_slots_per_request,
        "gdn_state_bytes_per_request": r.gdn_state_bytes_per_request,
    }


def test_a_forked_engine_is_a_freshly_started_one(engine_dir, hybrid_low_entropy, monkeypatch) -> None:
    """MTP with GDN verification on the hybrid (the plugin patches vLLM inside the engine's constructor):
    forked and started as a new interpreter, every field of the run is equal."""
    kwargs = {"speculative": speculative("mtp", hybrid_low_entropy), "plugin": {}, "logprobs": True}
    forked = run(engine_dir, hybrid_low_entropy, **kwargs)
    monkeypatch.setattr(fork_server, "_enabled", False)
    started = run(engine_dir, hybrid_low_entropy, **kwargs)
    assert _fields(forked) == _fields(started)
    assert forked.num_accepted > 0 and forked.gdn_slots_per_request == 1


def test_a_forked_engine_past_its_timeout_is_killed_and_the_server_serves_on(
    engine_dir, dense_low_entropy
) -> None:
    spec = EngineSpec(target=dense_low_entropy.target)
    prompts = [[1, 2, 3]]
    with pytest.raises(subprocess.TimeoutExpired):
        run_isolated(spec, prompts, work_dir=engine_dir, max_tokens=4, timeout=0.5)
    again = run_isolated(spec, prompts, work_dir=engine_dir, max_tokens=4)
    assert again.error is None and len(again.tokens[0]) == 4
