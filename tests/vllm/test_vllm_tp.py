"""Tensor parallelism (TP=2) in vLLM's CPU engine: two worker processes (the mp executor, gloo), one core each.

Dynamic verification plans on every rank: each rank scores its own drafts and picks its own lengths, and the
ranks must agree (a rank that skips the drafter or verifies other lengths than the others would leave a
collective unanswered). The plan is ragged and not full (a target profile that rises steeply past 8 tokens),
and the output equals plain decoding of the same engine at TP=2 on the bf16 Qwen3.5 hybrid (heads, KV heads and
GDN key/value heads all split in two): ngram planned on the acceptance estimate, DFlash on its draft logits.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from engine_helpers import PROMPTS, K, assert_matches_plain, run, speculative

from ascend_spec.e2e.engine import EngineRun
from ascend_spec.e2e.tiny_models import TinyModels
from ascend_spec.graph import CostProfile
from ascend_spec.vllm.cost_profiles import ENGINE_PROFILE_FORMAT

pytestmark = pytest.mark.slow

TP = 2
TP_ENGINE = {"tensor_parallel_size": TP, "distributed_executor_backend": "mp"}
# B = 5 requests with K = 3: up to 8 tokens cost what 1 costs, 16 cost 3x: the controller spends about 3
# drafts over 5 requests (ragged, some with none) unless survivals are very high.
STEP_TARGET = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 3.0, 24: 4.0, 32: 5.0}
DRAFT = {4: 0.2, 8: 0.2, 16: 0.2, 24: 0.2, 32: 0.2}
# What every rank's plan is made of: these counters must be equal on all ranks.
PLAN_KEYS = ("steps", "plain_steps", "totals", "lengths", "batch_sizes", "ragged_steps", "skipped_steps")


def _tp_env() -> dict[str, str]:
    """One core per rank (VLLM_CPU_OMP_THREADS_BIND "a|b" from the cores this process may run on; vLLM's "auto"
    needs a NUMA node per rank)."""
    cpus = sorted(os.sched_getaffinity(0))
    return {"VLLM_CPU_OMP_THREADS_BIND": f"{cpus[0]}|{cpus[-1]}"}


def _profile(path: Path) -> str:
    path.write_text(
        json.dumps(
            {
                "format": ENGINE_PROFILE_FORMAT,
                "target": CostProfile(STEP_TARGET).to_dict(),
                "draft": CostProfile(DRAFT).to_dict(),
            }
        )
    )
    return str(path)


def _dynamic(profile: str) -> dict:
    """Sync planning on the given profile, no calibration and no measured step corrections: every rank plans
    on the same inputs (per-rank timings would differ)."""
    return {"dynamic": {"mode": "sync", "profile": profile, "calibrate": False, "measure_steps": False}}


def _run_tp(engine_dir: Path, models: TinyModels, **kwargs) -> EngineRun:
    return run(engine_dir, models, extra=TP_ENGINE, env=_tp_env(), **kwargs)


def _check_gdn_state_split(run_: EngineRun, models: TinyModels) -> None:
    """The engine really ran at TP=2: each worker holds half of the GDN value heads' recurrent state."""
    value_heads = json.loads((models.target / "config.json").read_text())["linear_num_value_heads"]
    mamba = [g for g in run_.kv_cache_layout[1:] if g[0] == "MambaSpec"]
    assert mamba and all(g[4][1][0] == value_heads // TP for g in mamba), run_.kv_cache_layout


def _check_ranks_plan_identically(ours: EngineRun, profile: str) -> None:
    """Both workers ran the plugin's planner on the same profile and recorded the same plans, step for step
    (histograms, counts and the last step's lengths)."""
    ranks = ours.dynamic_ranks
    assert len(ranks) == TP and all(r is not None for r in ranks), ranks
    for stats in ranks:
        assert stats["profile_source"] == f"file {profile}"
        assert stats["steps"] > 0 and stats["last_lengths"]
    plans = [{key: r[key] for key in (*PLAN_KEYS, "last_lengths", "target_costs")} for r in ranks]
    assert plans[1] == plans[0], f"rank 0 planned {plans[0]}, rank 1 {plans[1]}"


def _check_ragged_not_full(ours: EngineRun) -> None:
    """Ragged plans with zero-draft requests, drafts verified, fewer than K per request on average."""
    stats = ours.dynamic
    lengths = {int(n): c for n, c in stats["lengths"].items()}
    assert stats["ragged_steps"] > 0 and lengths.get(0, 0) > 0 and max(lengths) <= K
    assert ours.num_draft_tokens > 0 and ours.mean_verify_length is not None
    assert 1.0 < ours.mean_verify_length < 1 + K, ours.mean_verify_length


@pytest.fixture(scope="module")
def plain_hybrid_tp(engine_dir: Path, hybrid_low_entropy: TinyModels) -> EngineRun:
    """Plain decoding at TP=2, with top-2 logits for the bf16 tie rule."""
    plain = _run_tp(engine_dir, hybrid_low_entropy, logprobs=True)
    assert len(plain.dynamic_ranks) == TP  # two workers answered
    _check_gdn_state_split(plain, hybrid_low_entropy)
    return plain


@pytest.mark.parametrize("method", ["ngram", "dflash"])
def test_tp2_dynamic_on_hybrid_matches_plain_and_ranks_plan_identically(
    engine_dir: Path, tmp_path: Path, hybrid_low_entropy: TinyModels, plain_hybrid_tp: EngineRun, method: str
) -> None:
    """ngram (planned on the acceptance estimate) and DFlash (its draft logits) at TP=2 on the hybrid: ragged
    plans, the output plain decoding's at TP=2, both ranks' plans identical."""
    profile = _profile(tmp_path / "step.json")
    ours = _run_tp(
        engine_dir,
        hybrid_low_entropy,
        speculative=speculative(method, hybrid_low_entropy),
        plugin=_dynamic(profile),
    )
    _check_gdn_state_split(ours, hybrid_low_entropy)
    stops = assert_matches_plain(plain_hybrid_tp, ours, allow_ties=True)
    print(
        f"{method}: mean verify length {ours.mean_verify_length:.3f}, accepted {ours.num_accepted}/"
        f"{ours.num_draft_tokens}, tie stops {len(stops)}, rank plans {[r['totals'] for r in ours.dynamic_ranks]}"
    )
    _check_ranks_plan_identically(ours, profile)
    _check_ragged_not_full(ours)
    assert ours.dynamic["score_kinds"] == {
        ("estimate" if method == "ngram" else "logits"): ours.dynamic["steps"]
    }
    assert ours.gdn_slots_per_request == 1
    if method == "ngram":  # accepted drafts: the lossless check covers accepted tokens
        assert ours.num_accepted > 0
    assert sum(len(t) for t in ours.tokens) == sum(len(t) for t in plain_hybrid_tp.tokens) > len(PROMPTS)


def test_tp2_with_measured_costs_every_rank_plans_on_rank_zeros_timings(
    engine_dir: Path, tmp_path: Path, hybrid_low_entropy: TinyModels, plain_hybrid_tp: EngineRun
) -> None:
    """The defaults (profiles measured at start-up, step corrections measured while decoding, one step in one
    timed): each rank times its own forwards and steps, a few percent apart, which flipped plans and left one rank
    waiting in a collective for the other. Every rank now plans on rank 0's timings: the profiles and the
    corrections handed to the controller are equal on both ranks, so are the plans, and the output is plain
    decoding's."""
    path = tmp_path / "measured.json"  # not there yet: measured at start-up and written
    plugin = {
        "dynamic": {"mode": "sync", "profile": str(path), "measure_every": 1, "warmup": 1, "repeats": 2}
    }
    ours = _run_tp(
        engine_dir, hybrid_low_entropy, speculative=speculative("dflash", hybrid_low_entropy), plugin=plugin
    )
    assert_matches_plain(plain_hybrid_tp, ours, allow_ties=True)
    ranks = ours.dynamic_ranks
    assert len(ranks) == TP and all(r is not None and r["steps"] > 0 for r in ranks), ranks
    assert all(r["profile_source"] == "measured" for r in ranks)
    assert ranks[0]["step_costs"]["corrections_ms"], "no correction was handed to the controller"
    for key in (*PLAN_KEYS, "last_lengths", "target_costs"):
        assert ranks[1][key] == ranks[0][key], (key, ranks[0][key], ranks[1][key])
    assert ranks[1]["step_costs"]["corrections_ms"] == ranks[0]["step_costs"]["corrections_ms"]
