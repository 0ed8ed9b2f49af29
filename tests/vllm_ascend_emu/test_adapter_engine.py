"""ascend-spec's vllm-ascend adapter inside vllm-ascend 0.30.0rc2's own ``NPUModelRunner`` on the emulated NPU.

The plugin is switched on as docs/vllm.md tells an Ascend user: ``additional_config={"ascend_spec": {...}}`` (the
``--additional-config`` JSON of ``vllm serve``) with ``VLLM_USE_V2_MODEL_RUNNER=0``. The oracle is vllm-ascend's
own decoding of the same checkpoint without the plugin (and plain decoding without drafts): greedy speculative
decoding is lossless, so every run must give the same tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from adapter_run import run_with_probe
from ascend_engine_env import EMULATED, needs_vllm_ascend

from ascend_spec.e2e.engine import EngineRun, EngineSpec
from ascend_spec.e2e.tiny_models import TinyModels, make_tiny_models
from ascend_spec.graph.cost_profile import CostProfile
from ascend_spec.graph.plan_report import ENGINE_PROFILE_FORMAT

pytestmark = [needs_vllm_ascend, pytest.mark.slow]

NPU_RUNNER = "vllm_ascend.worker.model_runner_v1.NPUModelRunner"
PROMPTS = [[1, 5, 9, 20, 33], [7, 8, 2, 4], [3, 14, 15, 92, 65, 35, 89, 79, 32]]
MAX_TOKENS = [24, 17, 20]
K = 3
# What docs/vllm.md's `vllm serve` line sets besides --additional-config; the ops' value checks off as in a
# user's engine (tests/conftest.py turns them on for the test process: host reads a user's engine never makes).
USER_ENV = {**EMULATED, "VLLM_USE_V2_MODEL_RUNNER": "0", "ASCEND_SPEC_CHECKS": "0"}


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    return make_tiny_models(tmp_path_factory.mktemp("adapter_models"), hybrid=False, low_entropy=True)


def _dflash(models: TinyModels) -> dict:
    return {"method": "dflash", "model": str(models.dflash), "num_speculative_tokens": K}


def _run(work: Path, spec: EngineSpec) -> tuple[EngineRun, dict]:
    run, probe = run_with_probe(spec, PROMPTS, MAX_TOKENS, work_dir=work, env=USER_ENV)
    assert run.error is None, run.error
    assert [len(t) for t in run.tokens] == MAX_TOKENS
    assert probe["runner"] == NPU_RUNNER
    return run, probe


@pytest.fixture(scope="module")
def plain(ascend_engine_dir: Path, dense: TinyModels) -> EngineRun:
    """vllm-ascend alone decoding without drafts (plugin installed, not enabled)."""
    return _run(ascend_engine_dir, EngineSpec(target=dense.target))[0]


@pytest.fixture(scope="module")
def dflash_off(ascend_engine_dir: Path, dense: TinyModels) -> tuple[EngineRun, dict]:
    """vllm-ascend's own DFlash K=3 (plugin installed, not enabled)."""
    return _run(ascend_engine_dir, EngineSpec(target=dense.target, speculative=_dflash(dense)))


def test_installed_but_off_is_vllm_ascend_alone(dflash_off: tuple[EngineRun, dict], plain: EngineRun) -> None:
    run, probe = dflash_off
    assert run.tokens == plain.tokens
    assert probe["drafter"] == "vllm_ascend.spec_decode.dflash_proposer.AscendDflashProposer"
    assert probe["dynamic_spec"] is None and not probe["ascend_spec"]
    assert not any(m["instance_wrapped"] for m in probe["methods"].values())
    assert probe["steps"] == [] and probe["block_slot_calls"] == 0


def test_dflash_k3_with_the_plugin_is_lossless(
    ascend_engine_dir: Path, dense: TinyModels, plain: EngineRun, dflash_off: tuple[EngineRun, dict]
) -> None:
    off, _ = dflash_off
    spec = EngineSpec(target=dense.target, speculative=_dflash(dense), plugin={})
    run, probe = _run(ascend_engine_dir, spec)
    assert run.tokens == plain.tokens
    assert probe["drafter"] == "ascend_spec.vllm.ascend.proposers.AscendSpecNPUDflashProposer"
    assert "vllm_ascend.spec_decode.dflash_proposer.AscendDflashProposer" in probe["drafter_mro"]
    # Same drafts and acceptance as vllm-ascend's own proposer: the subclass changes no draft.
    assert (run.num_drafts, run.num_draft_tokens, run.num_accepted) == (
        off.num_drafts,
        off.num_draft_tokens,
        off.num_accepted,
    )
    assert run.kv_cache_layout == off.kv_cache_layout
    assert probe["block_slot_calls"] > 0  # the block inputs came from prepare_block_slots
    # The V1 hooks on NPUModelRunner's own methods: only _update_states (the GDN flush) is wrapped, around
    # NPUModelRunner's override; execute_model, _sample and the drafter calls are vllm-ascend's, untouched.
    methods = probe["methods"]
    assert methods["_update_states"] == {
        "instance_wrapped": True,
        "calls": f"{NPU_RUNNER}._update_states",
    }
    for name in (
        "execute_model",
        "_sample",
        "propose_draft_token_ids",
        "take_draft_token_ids",
        "sample_tokens",
    ):
        assert methods[name] == {"instance_wrapped": False, "calls": f"{NPU_RUNNER}.{name}"}, name


def _profile(path: Path) -> Path:
    """Target step costs that rise past 6 tokens, a cheap drafter: the controller cuts low-survival drafts."""
    target = CostProfile({3: 10.0, 6: 10.5, 9: 16.0, 12: 24.0}, part="target")
    draft = CostProfile({4: 1.0, 16: 1.2}, part="draft")
    path.write_text(
        json.dumps(
            {
                "format": "ascend-spec/plan-profile/v1",
                "label": "adapter engine test",
                "target": target.to_dict(),
                "drafters": {"dflash": {"query": "K+1", "profile": draft.to_dict()}},
            }
        )
    )
    return path


def test_dynamic_verify_on_ascendc_is_lossless_with_one_host_copy_per_step(
    ascend_engine_dir: Path, dense: TinyModels, plain: EngineRun, tmp_path: Path
) -> None:
    """The default controller mode (async): the lengths leave the device once per step, with the controller's best
    total for its history as one more element of that copy (no 1-element copy of its own:
    ``BudgetController._push_pending`` never runs); the total is read from host memory once the lengths have landed
    (``_wait_copy``). The survivals are never read on the host."""
    adapter = {"dynamic_verify": True, "profile": str(_profile(tmp_path / "p.json"))}
    spec = EngineSpec(
        target=dense.target, speculative=_dflash(dense), plugin={"backend": "ascendc", "vllm_ascend": adapter}
    )
    run, probe = _run(ascend_engine_dir, spec)
    assert run.tokens == plain.tokens
    assert probe["dynamic_spec"] == "ascend_spec.vllm.ascend.verify_scheduler.AscendSpecDynamicSpec"
    assert probe["backend"] == "ascendc"
    steps = probe["steps"]
    assert steps, "the adapter's scheduler planned no step"
    assert all(s["host_copies"] == 1 for s in steps), steps
    assert all(set(s["host_reads"]) <= {"_wait_copy"} and len(s["host_reads"]) <= 1 for s in steps), steps
    lengths = [s["lengths"] for s in steps]
    assert all(0 <= n <= K for row in lengths for n in row)
    # The engine verified at most what was planned (a finishing request's last drafts are not scheduled).
    assert 0 < run.num_draft_tokens <= sum(sum(row) for row in lengths)
    assert sum(sum(row) for row in lengths) < K * sum(len(row) for row in lengths)  # budgets cut drafts
    assert any(len(set(row)) > 1 for row in lengths), lengths  # ragged within a step


def test_dynamic_verify_sync_mode_reads_the_survivals_back(
    ascend_engine_dir: Path, dense: TinyModels, plain: EngineRun, tmp_path: Path
) -> None:
    """``controller_mode: sync`` searches the step's total on the host: one read of the survivals per step (by
    design, documented), plus the lengths' copy; still lossless."""
    adapter = {
        "dynamic_verify": True,
        "controller_mode": "sync",
        "profile": str(_profile(tmp_path / "p.json")),
    }
    spec = EngineSpec(
        target=dense.target, speculative=_dflash(dense), plugin={"backend": "ascendc", "vllm_ascend": adapter}
    )
    run, probe = _run(ascend_engine_dir, spec)
    assert run.tokens == plain.tokens
    steps = probe["steps"]
    assert steps and all(s["host_copies"] == 1 for s in steps), steps
    assert all(set(s["host_reads"]) == {"_plan_sync"} for s in steps if s["num_drafts"]), steps
    assert any(len(set(s["lengths"])) > 1 for s in steps), steps


def _engine_profile(path: Path) -> Path:
    """The one profile format (``dynamic.profile``, what engines measure, what ``ascend-spec plan`` reads): a
    target step that rises steeply past 4 tokens, a cheap drafter."""
    target = CostProfile({1: 10.0, 4: 10.5, 8: 30.0, 16: 60.0, 32: 120.0, 64: 240.0}, part="target")
    draft = CostProfile({1: 1.0, 64: 1.2}, part="draft")
    path.write_text(
        json.dumps(
            {
                "format": ENGINE_PROFILE_FORMAT,
                "key": None,
                "startup_s": 0.0,
                "target": target.to_dict(),
                "draft": draft.to_dict(),
            }
        )
    )
    return path


K7 = 7


def test_dynamic_under_vllms_default_async_scheduling_verifies_below_k_by_vllms_counters(
    ascend_engine_dir: Path, dense: TinyModels, plain: EngineRun, tmp_path: Path
) -> None:
    """The one switch (``dynamic``) with vLLM's default scheduling on the NPU platform (async): the engine core
    never asks the runner for its drafts there, so the lengths ride on the step's output to the scheduler
    (``npu_dynamic_async_output``). vLLM's own counters (``vllm:spec_decode_num_draft_tokens`` /
    ``num_drafts``) show fewer than K drafts verified per draft on average, and the tokens are plain decoding's.
    Without the hand-over every draft was verified at K (drafts x 7)."""
    speculative = {"method": "dflash", "model": str(dense.dflash), "num_speculative_tokens": K7}
    plugin = {"dynamic": {"profile": str(_engine_profile(tmp_path / "engine.json"))}}
    spec = EngineSpec(
        target=dense.target, speculative=speculative, plugin=plugin, extra={"async_scheduling": None}
    )
    run, probe = _run(ascend_engine_dir, spec)
    assert run.tokens == plain.tokens
    assert probe["dynamic_spec"] == "ascend_spec.vllm.ascend.verify_scheduler.AscendSpecDynamicSpec"
    assert probe["methods"]["sample_tokens"]["instance_wrapped"]  # the async hand-over
    assert probe["steps"], "the adapter's scheduler planned no step"
    assert 0 < run.num_draft_tokens < K7 * run.num_drafts, (run.num_draft_tokens, run.num_drafts)


def test_ngram_planned_on_the_host_estimate_is_lossless_and_verifies_below_k(
    ascend_engine_dir: Path, dense: TinyModels, plain: EngineRun, tmp_path: Path
) -> None:
    """ngram (vllm-ascend's host drafter) on the acceptance estimate, kept on the host beside it: vLLM's counters
    show fewer than K per draft and no more drafts verified than planned; tokens are plain decoding's."""
    speculative = {
        "method": "ngram",
        "num_speculative_tokens": K7,
        "prompt_lookup_min": 1,
        "prompt_lookup_max": 3,
    }
    plugin = {"dynamic": {"profile": str(_engine_profile(tmp_path / "engine.json"))}}
    run, probe = _run(
        ascend_engine_dir, EngineSpec(target=dense.target, speculative=speculative, plugin=plugin)
    )
    assert run.tokens == plain.tokens
    stats = probe["dynamic_stats"]
    assert stats is not None and stats["steps"] > 0 and stats["score_kinds"] == {"estimate": stats["steps"]}
    assert 0 < run.num_draft_tokens < K7 * run.num_drafts, (run.num_draft_tokens, run.num_drafts)
    planned = sum(int(n) * c for n, c in stats["lengths"].items())
    assert run.num_draft_tokens <= planned  # the scheduler verified what was planned, no more


def test_dspark_k7_with_the_plugin_is_lossless_and_verifies_below_k(
    ascend_engine_dir: Path, dense: TinyModels, plain: EngineRun, tmp_path: Path
) -> None:
    """vLLM's Qwen3 DSpark drafter (Markov and confidence heads) on vllm-ascend's V1 DSpark path, the plugin's
    DSpark proposer subclass drafting and its confidence head scoring (``dynamic``, ascendc, sync scheduling:
    vllm-ascend's ``take_draft_token_ids`` cuts the drafts); vLLM's counters show fewer than K per draft."""
    speculative = {"method": "dspark", "model": str(dense.dspark), "num_speculative_tokens": K7}
    plugin = {"backend": "ascendc", "dynamic": {"profile": str(_engine_profile(tmp_path / "engine.json"))}}
    run, probe = _run(
        ascend_engine_dir, EngineSpec(target=dense.target, speculative=speculative, plugin=plugin)
    )
    assert run.tokens == plain.tokens
    assert probe["drafter"] == "ascend_spec.vllm.ascend.proposers.AscendSpecNPUDSparkProposer"
    assert "vllm_ascend.spec_decode.dspark_proposer.AscendDSparkProposer" in probe["drafter_mro"]
    assert probe["dynamic_spec"] == "ascend_spec.vllm.ascend.verify_scheduler.AscendSpecDynamicSpec"
    steps = probe["steps"]
    assert steps and all(s["host_copies"] == 1 for s in steps), steps
    assert 0 < run.num_draft_tokens < K7 * run.num_drafts, (run.num_draft_tokens, run.num_drafts)
