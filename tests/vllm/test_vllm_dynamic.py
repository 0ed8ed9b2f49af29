"""Dynamic verification inside vLLM's CPU engine, for DFlash (max-softmax of its draft logits) and DSpark (its
confidence head): lossless against plain decoding of the same engine, ragged and zero-draft requests in one
batch, accepted drafts, preemption, one host copy per step, and a controller that follows the drafter.

Cost profiles are given as files where a test needs a known decision (the measured costs of a shared 2-core
machine are noise at these model sizes); the useless-drafter test measures them at engine start and reuses the
cache on a second engine.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from engine_helpers import (
    LENGTHS,
    ONE_OMP_THREAD,
    PREEMPTION_KV_CACHE_BYTES,
    PREEMPTION_LENGTHS,
    PROMPTS,
    K,
    assert_matches_plain,
    run,
    speculative,
)

from ascend_spec.backend import host_compiler
from ascend_spec.e2e.tiny_models import (
    CONSTANT_CONFIDENCE_LOGIT,
    CONSTANT_TOKEN,
    make_tiny_models,
    with_dspark_confidence,
)
from ascend_spec.graph import CostProfile
from ascend_spec.vllm.cost_profiles import ENGINE_PROFILE_FORMAT

pytestmark = pytest.mark.slow

# B = 5 requests with K = 3: the 8-token target graph costs what 1 token costs, the next one (16) 3x: the
# controller fills 8 - 5 = 3 drafts across 5 requests (ragged, some with none) unless survivals are very high.
STEP_TARGET = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 3.0, 24: 4.0, 32: 5.0}
# The preemption cache holds two requests at a time: the 4-token graph costs what 1 token costs, the next one (8)
# 3x, so two requests share 2 drafts ([1, 1], or [2, 0] where one is surer) and one request alone gets K = 3.
PAIR_TARGET = {1: 1.0, 2: 1.0, 4: 1.0, 8: 3.0, 16: 5.0, 24: 6.0, 32: 7.0}
FLAT_TARGET = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 1.0, 24: 1.0, 32: 1.0}
DRAFT = {4: 0.2, 8: 0.2, 16: 0.2, 24: 0.2, 32: 0.2}
ENV = ONE_OMP_THREAD


def _profile(path: Path, target: dict, draft: dict) -> str:
    data = {
        "format": ENGINE_PROFILE_FORMAT,
        "target": CostProfile(target).to_dict(),
        "draft": CostProfile(draft).to_dict(),
    }
    path.write_text(json.dumps(data))
    return str(path)


def _dynamic(profile: str, calibrate: bool = False) -> dict:
    """Dynamic verification on a given profile; the survival calibration off unless asked for and the measured
    step corrections off (the given profiles are in made-up units), so the decisions follow the drafter's
    confidences and the profile alone."""
    return {"dynamic": {"mode": "sync", "profile": profile, "calibrate": calibrate, "measure_steps": False}}


# The verify stats line (verify_stats_log) every 4 steps with decode requests, read from the engine's log file.
LOG_EVERY = 4
STATS_LINE = re.compile(
    r"ascend-spec dynamic verification: steps (\d+)-(\d+): mean verify length "
    r"((?:(?:high|mid|low|new) \d+\.\d\d \(\d+(?: request-steps)?\)(?:, )?)+); "
    rf"plain-decoding steps (\d+)/{LOG_EVERY}; acceptance (?:\d+\.\d%|-); K={K}$"
)


def _log_to(path: Path) -> dict[str, str]:
    """The child engine's ``vllm`` logger also written to ``path`` (VLLM_LOGGING_CONFIG_PATH): run_isolated
    returns no log of an engine that ran."""
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(levelname)s %(name)s %(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(path), "formatter": "plain"}},
        "loggers": {"vllm": {"handlers": ["file"], "level": "INFO", "propagate": False}},
    }
    config_path = path.with_suffix(".json")
    config_path.write_text(json.dumps(config))
    return {"VLLM_LOGGING_CONFIG_PATH": str(config_path)}


def _check_stats_lines(log: Path) -> None:
    """One line per LOG_EVERY steps with decode requests, numbered on from step 1, means within 0..K."""
    lines = [
        line for line in log.read_text().splitlines() if "ascend-spec dynamic verification: steps" in line
    ]
    assert lines, log.read_text()[-2000:]
    for i, line in enumerate(lines):
        match = STATS_LINE.search(line)
        assert match is not None, line
        assert (int(match[1]), int(match[2])) == (i * LOG_EVERY + 1, (i + 1) * LOG_EVERY), line
        means = [float(m) for m in re.findall(r"(?:high|mid|low|new) (\d+\.\d\d)", match[3])]
        assert means and all(0.0 <= m <= K for m in means), line


def _check_step_counters(stats: dict, max_batch: int) -> None:
    """One host copy per step (none per request), every step recorded, batch sizes within the run's."""
    assert stats["steps"] > 0
    assert stats["max_host_copies_per_step"] == 1
    assert stats["host_copies"] == stats["steps"]
    assert sum(stats["totals"].values()) == stats["steps"]
    assert max(int(b) for b in stats["batch_sizes"]) <= max_batch


@pytest.fixture(scope="module")
def plain_dense(engine_dir, dense_low_entropy):
    return run(engine_dir, dense_low_entropy, env=ENV)  # compared exactly: no margins needed


@pytest.fixture(scope="module")
def plain_hybrid(engine_dir, hybrid_low_entropy):
    return run(engine_dir, hybrid_low_entropy, logprobs=True, env=ENV)


def _drafter(method: str, models) -> dict:  # noqa: ANN001
    if method == "dspark":
        return {"method": "dspark", "model": str(models.dspark), "num_speculative_tokens": K}
    return speculative(method, models)


SCORE_KIND = {"dflash": "logits", "dspark": "head"}


def _check_score_kind(stats: dict, method: str) -> None:
    """Every planned step scored its drafts one way: DSpark with head_confidence on its confidence head, DFlash
    with max_softmax_confidence on its draft logits."""
    assert stats["score_kinds"] == {SCORE_KIND[method]: stats["steps"]}
    if method == "dflash" and host_compiler() is not None:  # greedy DFlash drafts from the scoring pass
        assert stats["fused_draft_tokens"] == stats["steps"]
    else:
        assert stats["fused_draft_tokens"] == 0


@pytest.mark.parametrize("method", ["dflash", "dspark"])
@pytest.mark.matrix
def test_dynamic_on_qwen3_matches_plain_with_ragged_and_zero_draft_requests(
    engine_dir, tmp_path, dense_low_entropy, plain_dense, method
):
    _check_lossless_ragged(engine_dir, tmp_path, dense_low_entropy, plain_dense, "dense", method)


@pytest.mark.parametrize("method", ["dflash", "dspark"])
def test_dynamic_on_qwen35_hybrid_matches_plain_with_ragged_and_zero_draft_requests(
    engine_dir, tmp_path, hybrid_low_entropy, plain_hybrid, method
):
    _check_lossless_ragged(engine_dir, tmp_path, hybrid_low_entropy, plain_hybrid, "hybrid", method)


@pytest.mark.parametrize(("method", "mode"), [("dflash", "async"), ("dspark", "auto")])
def test_async_mode_under_v1_async_scheduling_matches_plain_with_ragged_lengths_and_no_host_read(
    engine_dir, tmp_path, dense_low_entropy, plain_dense, method, mode
):
    """Dynamic verification's async mode in V1's async scheduling (AsyncScheduler, two batches in flight, the
    runner's device-side draft scatter; on this CPU machine through ascend_spec.e2e.cpu_async): the lengths
    reach the scheduler on the outputs and it verifies them (mean verify length below 1 + K, where V1's
    placeholders alone give every request K), output equals plain decoding, and no step reads the host. Mode
    auto picks async in such an engine."""
    profile = _profile(tmp_path / "step.json", STEP_TARGET, DRAFT)
    plugin = {"dynamic": {"mode": mode, "profile": profile, "calibrate": False}}
    spec = _drafter(method, dense_low_entropy)
    ours = run(engine_dir, dense_low_entropy, speculative=spec, plugin=plugin, async_scheduling=True, env=ENV)
    assert_matches_plain(plain_dense, ours, allow_ties=False)
    stats = ours.dynamic
    assert stats["steps"] > 0 and stats["staged_copies"] == stats["steps"]
    assert stats["host_copies"] == 0 and stats["max_host_copies_per_step"] == 0  # nothing read in a step
    assert stats["score_kinds"] == {SCORE_KIND[method]: stats["steps"]} and stats["fused_draft_tokens"] == 0
    assert stats["ragged_steps"] > 0 and stats["lengths"].get("0", 0) > 0  # ragged plans with zero-draft rows
    assert ours.num_drafts > 0 and 1.0 < ours.mean_verify_length < 1 + K  # the scheduler took the lengths


@pytest.mark.parametrize("preempt", [False, True], ids=["batch", "preemption"])
def test_gdn_verification_under_v1_async_scheduling_matches_plain(
    engine_dir, tmp_path, hybrid_low_entropy, plain_hybrid, plain_hybrid_long, preempt
):
    """Ragged GDN verification on one state slot per request with V1's async scheduling (vLLM's default;
    ascend_spec.e2e.cpu_async here) and dynamic verification's async mode: the flush of leaving requests (finished,
    and with a small KV cache preempted and recomputed) commits their records with the accepted counts gathered
    on the device, the lengths reach the scheduler on the outputs; the output is plain decoding's."""
    target = PAIR_TARGET if preempt else STEP_TARGET
    profile = _profile(tmp_path / "step.json", target, DRAFT)
    plugin = {"dynamic": {"mode": "async", "profile": profile, "calibrate": False}}
    extra = dict(kv_cache_bytes=PREEMPTION_KV_CACHE_BYTES, max_tokens=PREEMPTION_LENGTHS) if preempt else {}
    ours = run(
        engine_dir,
        hybrid_low_entropy,
        speculative=_drafter("dflash", hybrid_low_entropy),
        plugin=plugin,
        async_scheduling=True,
        env=ENV,
        **extra,
    )
    plain = plain_hybrid_long if preempt else plain_hybrid
    if preempt:
        assert ours.num_preemptions > 0 and plain.num_preemptions == 0
    assert_matches_plain(plain, ours, allow_ties=True)
    stats = ours.dynamic
    assert stats["steps"] > 0 and stats["staged_copies"] == stats["steps"] and stats["host_copies"] == 0
    assert stats["ragged_steps"] > 0
    assert 0 < ours.num_accepted <= ours.num_draft_tokens < K * ours.num_drafts
    assert ours.gdn_slots_per_request == 1


def test_the_gdn_flush_under_async_scheduling_reads_no_host_count() -> None:
    """Under async scheduling V1's host copy of the accepted counts may still be in flight: the flush takes them
    from V1's device buffer (rows of the last step), and never touches the host array."""
    from types import SimpleNamespace

    import torch

    from ascend_spec.vllm.v1.runner import _accepted_counts

    class Untouchable:
        def __getitem__(self, item):  # noqa: ANN001, ANN204
            raise AssertionError("the host copy of the accepted counts was read")

    device_counts = torch.tensor([1, 4, 2, 3, 1], dtype=torch.int32)
    runner = SimpleNamespace(
        use_async_scheduling=True,
        num_accepted_tokens=SimpleNamespace(gpu=device_counts),
        input_batch=SimpleNamespace(num_accepted_tokens_cpu=Untouchable()),
    )
    assert _accepted_counts(runner, [3, 1]).tolist() == [3, 4]
    runner.use_async_scheduling = False
    runner.input_batch.num_accepted_tokens_cpu = np.array([1, 4, 2, 3, 1], dtype=np.int32)
    assert _accepted_counts(runner, [4, 2]).tolist() == [1, 2]


def _check_lossless_ragged(engine_dir, tmp_path, models, plain, target: str, method: str) -> None:  # noqa: ANN001
    profile = _profile(tmp_path / "step.json", STEP_TARGET, DRAFT)
    plugin = _dynamic(profile)
    plugin["dynamic"]["log_every"] = LOG_EVERY
    log = tmp_path / "vllm.log"
    ours = run(
        engine_dir, models, speculative=_drafter(method, models), plugin=plugin, env={**ENV, **_log_to(log)}
    )
    _check_stats_lines(log)
    # Qwen3 low-entropy: exact; the hybrid in bf16 under part 1's tie rule (each stop is reported)
    assert_matches_plain(plain, ours, allow_ties=target == "hybrid")
    stats = ours.dynamic
    _check_step_counters(stats, len(PROMPTS))
    _check_score_kind(stats, method)
    assert stats["profile_source"] == f"file {profile}"
    lengths = {int(n): c for n, c in stats["lengths"].items()}
    assert stats["ragged_steps"] > 0  # requests of one step verify different numbers of drafts
    assert lengths.get(0, 0) > 0 and any(n > 0 for n in lengths)  # zero-draft requests next to drafting ones
    assert max(lengths) <= K
    # the scheduler verified only chosen drafts (the counters also hold the warm-up request, and drafts of a
    # request's last step that it never verifies)
    assert 0 < ours.num_draft_tokens <= sum(n * c for n, c in lengths.items())
    assert ours.mean_verify_length < 1 + K
    if (method, target) != ("dflash", "dense"):  # accepted drafts: the lossless check covers accepted tokens
        assert ours.num_accepted > 0
    # (DFlash's random drafter on this Qwen3 is confident where it is wrong: 0 of its chosen drafts accepted,
    # 11 of 207 with every draft verified; the controller trusts max-softmax, and the output is still exact)
    if target == "hybrid":
        assert ours.gdn_slots_per_request == 1


@pytest.mark.parametrize("method", ["dflash", "dspark"])
def test_dynamic_with_preemption_on_the_hybrid_matches_plain(
    engine_dir, tmp_path, hybrid_low_entropy, plain_hybrid_long, method
):
    """Ragged budgets in a KV cache small enough to preempt (the part-1 scenario of test_vllm_engine.py):
    requests leave and re-enter the batch (recompute) while the controller keeps planning, and the output stays
    that of plain decoding (bf16 tie rule: 250-token runs meet near ties)."""
    profile = _profile(tmp_path / "pair.json", PAIR_TARGET, DRAFT)
    ours = run(
        engine_dir,
        hybrid_low_entropy,
        speculative=_drafter(method, hybrid_low_entropy),
        plugin=_dynamic(profile),
        kv_cache_bytes=PREEMPTION_KV_CACHE_BYTES,
        max_tokens=PREEMPTION_LENGTHS,
        env=ENV,
    )
    assert ours.num_preemptions > 0 and plain_hybrid_long.num_preemptions == 0
    assert_matches_plain(plain_hybrid_long, ours, allow_ties=True)
    stats = ours.dynamic
    _check_step_counters(stats, len(PROMPTS))
    _check_score_kind(stats, method)
    assert stats["ragged_steps"] > 0 and int(stats["lengths"].get("0", 0)) > 0
    assert 0 < ours.num_accepted <= ours.num_draft_tokens < K * ours.num_drafts
    assert ours.gdn_slots_per_request == 1


def test_useless_drafter_settles_on_plain_decoding_with_measured_profiles(engine_dir, models_dir):
    """A random target with a random drafter: confidences ~1/V, so every planned step is a plain decode and the
    drafter is skipped between probes (the no-draft option); the profiles are measured at the first engine's start and read from the cache by the second."""
    models = make_tiny_models(models_dir, hybrid=False)
    plugin = {"dynamic": {"profile": "measure", "repeats": 3, "max_startup_s": 120, "probe_interval": 4}}
    spec = speculative("dflash", models)
    env = dict(ENV, VLLM_CACHE_ROOT=str(engine_dir / "useless_cache"))
    first = run(engine_dir, models, speculative=spec, plugin=plugin, env=env)
    stats = first.dynamic
    _check_step_counters(stats, len(PROMPTS))
    assert stats["profile_source"] == "measured" and 0 < stats["profile_startup_s"] < 120
    assert set(stats["totals"]) == {"0"} and stats["plain_steps"] == stats["steps"]
    assert stats["skipped_steps"] > 0  # probe_interval 4: up to 3 drafter-less steps after each probe
    # the drafter-less decode steps ran as an engine without a drafter runs them (dynamic_plain_step) ...
    assert 0 < stats["plain_engine_steps"] <= stats["skipped_steps"]
    assert first.num_draft_tokens == 0  # the target never verified a draft
    # ... and the output is plain decoding's
    assert_matches_plain(run(engine_dir, models, env=ENV), first, allow_ties=False)
    second = run(engine_dir, models, speculative=spec, plugin=plugin, env=env, prompts=PROMPTS[:2])
    assert second.dynamic["profile_source"].startswith("cache ")
    assert second.dynamic["profile_startup_s"] == 0.0
    assert second.dynamic["target_costs"] == stats["target_costs"]
    assert set(second.dynamic["totals"]) == {"0"}


def test_perfect_drafter_verifies_full_blocks(engine_dir, tmp_path, models_dir):
    """A target that always emits one token and a drafter that drafts it with confidence ~1: every request of
    every step verifies all K drafts, and all are accepted."""
    models = make_tiny_models(models_dir, hybrid=False, constant=True)
    profile = _profile(tmp_path / "flat.json", FLAT_TARGET, DRAFT)
    ours = run(
        engine_dir, models, speculative=speculative("dflash", models), plugin=_dynamic(profile), env=ENV
    )
    assert ours.tokens == [[CONSTANT_TOKEN] * n for n in LENGTHS]  # plain decoding of this target, by design
    stats = ours.dynamic
    _check_step_counters(stats, len(PROMPTS))
    assert set(stats["lengths"]) == {str(K)}
    assert stats["plain_steps"] == 0
    assert ours.num_accepted == ours.num_draft_tokens > 0


@pytest.mark.parametrize("head_logit", [CONSTANT_CONFIDENCE_LOGIT, -CONSTANT_CONFIDENCE_LOGIT])
def test_dspark_budgets_follow_its_confidence_head(engine_dir, tmp_path, models_dir, head_logit):
    """The perfect DSpark drafter (the constant target's token, every draft right, max-softmax ~1): with its
    confidence head certain, every request of every step verifies all K drafts, all accepted; with the same
    drafts but a head that rates each one sigmoid(-10), every step is a plain decode and no draft is verified.
    The controller reads the head (head_confidence), not the draft logits."""
    models = with_dspark_confidence(
        make_tiny_models(models_dir, hybrid=False, constant=True), tmp_path, head_logit
    )
    profile = _profile(tmp_path / "flat.json", FLAT_TARGET, DRAFT)
    ours = run(engine_dir, models, speculative=_drafter("dspark", models), plugin=_dynamic(profile), env=ENV)
    assert ours.tokens == [[CONSTANT_TOKEN] * n for n in LENGTHS]  # plain decoding of this target, by design
    stats = ours.dynamic
    _check_step_counters(stats, len(PROMPTS))
    _check_score_kind(stats, "dspark")
    if head_logit > 0:
        assert set(stats["lengths"]) == {str(K)} and stats["plain_steps"] == 0
        assert ours.num_accepted == ours.num_draft_tokens > 0
    else:
        assert set(stats["totals"]) == {"0"} and stats["plain_steps"] == stats["steps"]
        assert stats["skipped_steps"] > 0  # the no-draft option skips the drafter between probes
        assert 0 < stats["plain_engine_steps"] <= stats["skipped_steps"]  # dense target: dynamic_plain_step
        assert ours.num_draft_tokens == 0


def test_calibration_stops_over_verifying_a_confident_wrong_drafter(
    engine_dir, tmp_path, dense_low_entropy, plain_dense
):
    """The low-entropy drafter is confident (peaked logits) and mostly wrong: on its own confidences the
    controller verifies drafts that get rejected; calibrated by the acceptance it observes, it verifies fewer,
    and the output stays plain decoding's."""
    profile = _profile(tmp_path / "step.json", STEP_TARGET, DRAFT)
    spec = speculative("dflash", dense_low_entropy)
    raw = run(engine_dir, dense_low_entropy, speculative=spec, plugin=_dynamic(profile), env=ENV)
    calibrated = run(
        engine_dir, dense_low_entropy, speculative=spec, plugin=_dynamic(profile, calibrate=True), env=ENV
    )
    assert_matches_plain(plain_dense, calibrated, allow_ties=False)
    _check_step_counters(calibrated.dynamic, len(PROMPTS))
    assert raw.dynamic["calibration"] is None
    factors = calibrated.dynamic["calibration"]
    assert len(factors) == K and all(f < 1.0 for f in factors)  # observed acceptance below the prediction

    def drafts_per_step(stats: dict) -> float:
        return sum(int(n) * c for n, c in stats["lengths"].items()) / stats["steps"]

    assert drafts_per_step(calibrated.dynamic) < drafts_per_step(raw.dynamic)
    accepted_share = [r.num_accepted / r.num_draft_tokens for r in (raw, calibrated) if r.num_draft_tokens]
    assert accepted_share[0] < 0.5  # the premise: most verified drafts of the raw controller are rejected


def test_measured_step_costs_see_what_a_speculative_step_costs_beyond_its_forwards(
    engine_dir, dense_low_entropy, plain_dense
):
    """Measured profiles and measured step costs (the defaults) on the confident but wrong low-entropy drafter,
    the drafter run at every step: every decode step's parts are timed, speculative steps' corrections exceed
    plain decoding's over the batch sizes seen (V1's proposer does more than the drafter's forward), the
    controller plans plain decoding at many of its steps and the output is plain decoding's."""
    plugin = {"dynamic": {"profile": "measure", "repeats": 3, "probe_interval": 1, "measure_every": 1}}
    env = dict(ENV, VLLM_CACHE_ROOT=str(engine_dir / "step_costs_cache"))
    ours = run(
        engine_dir,
        dense_low_entropy,
        speculative=speculative("dflash", dense_low_entropy),
        plugin=plugin,
        env=env,
    )
    assert_matches_plain(plain_dense, ours, allow_ties=False)
    stats = ours.dynamic
    _check_step_counters(stats, len(PROMPTS))
    measured = stats["step_costs"]
    assert measured["samples"]["draft"] >= stats["steps"] - len(PROMPTS) - 1  # every decode step's proposer
    assert measured["samples"]["plain"] > 0
    assert measured["corrections_ms"]
    # Summed over the batch sizes seen: one batch size's few samples can fall either way on a loaded machine
    # (CI saw B = 5 at 0.32 ms against 0.82 ms once), the proposer's extra work shows in the sum.
    corrections = measured["corrections_ms"]
    assert sum(s - p for s, p in corrections.values()) > 0, corrections
    # The share of plain plans follows measured costs and the calibration's first steps: 7 or more of 13 steps on
    # an idle machine, 6 of 13 with other tests beside it; a controller that never learned the drafter is wrong
    # plans none (every step verifies its confident drafts).
    assert 3 * stats["plain_steps"] >= stats["steps"], (stats["plain_steps"], stats["steps"])


def test_plugin_without_the_dynamic_key_verifies_every_draft(engine_dir, dense_low_entropy, plain_dense):
    """Enabled plugin, no "dynamic": no controller, no counters, every request verifies all K drafts."""
    ours = run(
        engine_dir,
        dense_low_entropy,
        speculative=speculative("dflash", dense_low_entropy),
        plugin={},
        env=ENV,
    )
    assert ours.dynamic is None
    assert ours.mean_verify_length == 1 + K
    assert_matches_plain(plain_dense, ours, allow_ties=False)
