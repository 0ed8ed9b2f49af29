"""Dynamic verification's async mode without an engine (the engine test is in test_vllm_dynamic.py): the worker
side on a stand-in runner that follows V1's async protocol, against the sync mode's planner on the same drafts; the
scheduler side on vLLM's own ``AsyncScheduler`` driven as its engine core drives it (two batches in flight)."""

from __future__ import annotations

import time
from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ascend_spec.graph import BudgetController, CostProfile
from ascend_spec.vllm.dynamic import DraftScores, DynamicVerifier, SurvivalStager
from ascend_spec.vllm.v1.dynamic_async import (
    LENGTHS_ATTRIBUTE,
    AsyncStep,
    finish_step,
    hand_over_later,
    install_async_hooks,
    install_async_scheduler,
)

K = 3


def _controller() -> BudgetController:
    target, draft = {1: 1.0, 8: 1.0, 16: 2.5, 24: 4.0}, {4: 0.2, 32: 0.3}  # ragged, plain and full plans
    return BudgetController(
        CostProfile(draft), CostProfile(target), max_drafts=K, draft_tokens_per_request=K + 1
    )


class _AsyncOutput:
    """V1's AsyncModelRunnerOutput protocol: the ModelRunnerOutput comes from get_output(), when the core asks."""

    def __init__(self, output) -> None:  # noqa: ANN001
        self._output = output
        self.taken = False

    def get_output(self):  # noqa: ANN201
        self.taken = True
        return self._output


def _logits(step: int, b: int, gen: torch.Generator) -> torch.Tensor:
    scale = torch.linspace(0.5, 8.0, b).roll(step).repeat_interleave(K).unsqueeze(1)
    logits = torch.randn(b * K, 64, generator=gen) * scale
    if step % 5 == 4:  # every draft certain: a full plan
        logits[:, 5] = 100.0
    if step % 7 == 6:  # every draft flat: a plain plan
        logits = torch.zeros_like(logits)
    return logits


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_async_runner_hooks_plan_what_sync_mode_plans_one_hand_over_later(backend: str) -> None:
    """install_async_hooks on a stand-in runner driven as V1's async worker is (execute_model, the drafter-fit
    check, the proposer, sample_tokens returning an async output read later): each step's lengths, attached to its
    ModelRunnerOutput only when get_output() runs, equal the sync verifier's on the same drafts and acceptance, and
    the calibration's sums match; nothing is planned or read to the host inside a step."""
    from vllm.v1.outputs import ModelRunnerOutput

    from ascend_spec.backend import host_compiler

    if backend == "cpu" and host_compiler() is None:
        pytest.skip("the cpu backend needs a C++ compiler")
    b = 5
    ids = [f"r{i}" for i in range(b)]
    gen = torch.Generator().manual_seed(7)
    rng = np.random.default_rng(7)
    sync = DynamicVerifier(_controller(), None, backend=backend, calibrate=True, probe_interval=1)
    step_data: dict = {}

    class Drafter:
        def take_draft_scores(self) -> DraftScores:
            return DraftScores("logits", step_data["logits"], b, K)

    drafter_s = 0.02

    def propose() -> torch.Tensor:
        time.sleep(drafter_s)  # the drafter's forward: not the plugin's overhead
        return torch.zeros(b, K, dtype=torch.int64)

    runner = SimpleNamespace(
        execute_model=lambda scheduler_output: None,
        propose_draft_token_ids=propose,
        _input_fits_in_drafter=lambda: True,
        _sample=lambda logits, metadata: None,  # wrapped for the acceptance estimate (inert without one)
        sample_tokens=lambda: _AsyncOutput(step_data["output"]),
        drafter=Drafter(),
        input_batch=SimpleNamespace(req_ids=ids),
    )
    built: list[DynamicVerifier] = []

    def build(r) -> DynamicVerifier:  # noqa: ANN001
        built.append(DynamicVerifier(_controller(), None, backend=backend, calibrate=True, probe_interval=1))
        return built[-1]

    install_async_hooks(runner, build)
    pending: deque = deque()
    planned_sync: list[list[int]] = []
    planned_async: list[list[int]] = []
    verified: dict[str, list[int]] = {}
    for step in range(14):
        logits = _logits(step, b, gen)
        sampled = [[1] * (1 + int(rng.integers(0, len(verified.get(r, ())) + 1))) for r in ids]
        step_data["logits"] = logits
        step_data["output"] = ModelRunnerOutput(
            req_ids=list(ids), req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled
        )
        # the sync oracle: this step's observation, then its plan
        sync.begin_step(verified)
        sync.end_step(ids, sampled)
        planned_sync.append(sync.lengths(DraftScores("logits", logits, b, K), ids))
        # the async runner: V1's calls of one step, the output read one step later (two batches in flight)
        runner.execute_model(SimpleNamespace(scheduled_spec_decode_tokens=dict(verified)))
        assert runner._input_fits_in_drafter()
        runner.propose_draft_token_ids()
        out = runner.sample_tokens()
        assert isinstance(out, _AsyncOutput) and not out.taken
        assert built[0].stats.steps == step - len(pending)  # nothing planned inside the step
        pending.append(out)
        if len(pending) == 2:
            planned_async.append(getattr(pending.popleft().get_output(), LENGTHS_ATTRIBUTE))
        # the drafts of this step are verified at the next one with the sync plan's lengths (same as async's
        # plan of the same drafts: asserted below)
        verified = {r: [0] * n for r, n in zip(ids, planned_sync[-1]) if n}
    planned_async.append(getattr(pending.popleft().get_output(), LENGTHS_ATTRIBUTE))
    verifier = built[0]
    assert [[d[r] for r in ids] for d in planned_async] == planned_sync
    np.testing.assert_allclose(verifier.calibration.predicted, sync.calibration.predicted, rtol=1e-6)
    np.testing.assert_allclose(verifier.calibration.observed, sync.calibration.observed)
    assert verifier.calibration.observed.sum() > 0
    assert verifier.stats.totals == sync.stats.totals and verifier.stats.totals[0] > 0  # plain plans too
    assert verifier.stats.ragged_steps == sync.stats.ragged_steps > 0
    assert verifier.reader.copies == 0 and verifier.stats.host_copies == 0  # no read in a step
    assert verifier.stats.staged_copies == verifier.stager.copies == 14
    assert (
        0 < verifier.stats.overhead_s < 14 * drafter_s
    )  # scoring, staging and planning; the drafter excluded


def test_a_skipped_drafter_hands_over_zero_lengths_and_probes_end_the_stretch() -> None:
    """After a plain plan the drafter is skipped (probe_interval - 1 steps); the output of a skipped step tells
    the scheduler to verify none of its requests' drafts; a plan from a probe replaces it."""
    from vllm.v1.outputs import ModelRunnerOutput

    ids = ["a", "b"]
    verifier = DynamicVerifier(_controller(), None, backend="reference", probe_interval=3)
    flat = DraftScores("logits", torch.zeros(2 * K, 64), 2, K)
    staged = verifier.stage(flat, ids)
    out = ModelRunnerOutput(req_ids=ids, req_id_to_index={"a": 0, "b": 1}, sampled_token_ids=[[1], [1]])
    assert getattr(finish_step(verifier, AsyncStep({}, None, staged, True), out), LENGTHS_ATTRIBUTE) == {
        "a": 0,
        "b": 0,
    }
    assert verifier.skip_drafter() and verifier.skip_drafter() and not verifier.skip_drafter()
    skipped = ModelRunnerOutput(req_ids=ids, req_id_to_index={"a": 0, "b": 1}, sampled_token_ids=[[1], [1]])
    got = finish_step(verifier, AsyncStep({}, None, None, drafted=False), skipped)
    assert getattr(got, LENGTHS_ATTRIBUTE) == {"a": 0, "b": 0}
    certain = torch.zeros(2 * K, 64)
    certain[:, 3] = 100.0
    probe = verifier.stage(DraftScores("logits", certain, 2, K), ids)
    out = ModelRunnerOutput(req_ids=ids, req_id_to_index={"a": 0, "b": 1}, sampled_token_ids=[[1], [1]])
    assert getattr(finish_step(verifier, AsyncStep({}, None, probe, True), out), LENGTHS_ATTRIBUTE) == {
        "a": K,
        "b": K,
    }
    assert not verifier.skip_drafter()  # a speculative plan ends the stretch


def test_hand_over_runs_where_v1_reads_the_output() -> None:
    seen: list = []
    plain = SimpleNamespace(req_ids=["a"])
    assert hand_over_later(plain, lambda o: seen.append(o) or o) is plain and seen == [plain]
    inner = SimpleNamespace(req_ids=["b"])
    wrapped = hand_over_later(_AsyncOutput(inner), lambda o: seen.append(o) or o)
    assert seen == [plain]  # not before V1 asks
    assert wrapped.get_output() is inner and seen == [plain, inner]
    assert hand_over_later(None, lambda o: seen.append(o)) is None and len(seen) == 2


def test_stager_ring_keeps_each_step_until_it_is_planned_and_checks_its_rows() -> None:
    stager = SurvivalStager(slots=3)
    values = [torch.full((2, K), float(i)) for i in range(4)]
    staged = [stager.stage(v, ["a", "b"], "logits") for v in values[:3]]
    assert [float(s.wait()[0, 0]) for s in staged] == [0.0, 1.0, 2.0]
    values[0].fill_(9.0)  # the device buffer is reused: the staged copy is not
    assert float(staged[0].wait()[1, 2]) == 0.0
    stager.stage(values[3], ["a", "b"], "logits")  # the fourth step reuses the first slot
    assert float(staged[0].wait()[0, 0]) == 3.0 and stager.copies == 4
    with pytest.raises(RuntimeError, match=r"survivals are for 2 requests, the step has 3 request ids"):
        stager.stage(values[0], ["a", "b", "c"], "logits")
    with pytest.raises(ValueError, match=r"slots must be an int >= 2; got 1"):
        SurvivalStager(slots=1)


# ----------------------------------------------------------------------------------- the scheduler side


def _async_scheduler(target, mode: str):  # noqa: ANN001, ANN202
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, SpeculativeConfig, VllmConfig
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    install_async_scheduler()
    model = ModelConfig(model=str(target), skip_tokenizer_init=True, dtype="bfloat16", max_model_len=512)
    vllm_config = VllmConfig(
        model_config=model,
        # async_scheduling is vLLM's engine switch (the CPU platform resets it); the scheduler class is what counts
        scheduler_config=SchedulerConfig(
            max_num_seqs=8, max_num_batched_tokens=512, max_model_len=512, is_encoder_decoder=False
        ),
        cache_config=CacheConfig(block_size=16, enable_prefix_caching=False),
        speculative_config=SpeculativeConfig(
            method="ngram", num_speculative_tokens=K, prompt_lookup_min=1, prompt_lookup_max=3
        ),
        additional_config={"ascend_spec": {"dynamic": {"mode": mode}}},
    )
    vllm_config.cache_config.num_gpu_blocks = 256
    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=16, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=256, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["l0"], spec)])
    return AsyncScheduler(vllm_config, kv, StructuredOutputManager(vllm_config), block_size=16)


def _drive(scheduler, plans: dict[int, dict[str, int]], steps: int, rng: np.random.Generator):  # noqa: ANN001
    """V1's engine core with two batches in flight: schedule s, schedule s+1, then read output s. Output s carries
    ``plans[s]`` (the worker's lengths from drafts(s)) and accepts a random prefix of each request's drafts."""
    from vllm.v1.outputs import ModelRunnerOutput

    scheduled, in_flight = [], deque()
    for s in range(steps):
        so = scheduler.schedule()
        scheduled.append(so)
        in_flight.append((s, so))
        if len(in_flight) == 2:
            t, done = in_flight.popleft()
            ids = list(done.num_scheduled_tokens)
            drafts = done.scheduled_spec_decode_tokens
            out = ModelRunnerOutput(
                req_ids=ids,
                req_id_to_index={r: i for i, r in enumerate(ids)},
                sampled_token_ids=[[5] * (1 + int(rng.integers(0, len(drafts.get(r, ())) + 1))) for r in ids],
            )
            if t in plans:
                setattr(out, LENGTHS_ATTRIBUTE, plans[t])
            scheduler.update_from_output(done, out)
    return scheduled


def test_async_scheduler_schedules_each_request_the_drafts_of_the_latest_plan(dense_low_entropy) -> None:  # noqa: ANN001
    """vLLM's AsyncScheduler with async_scheduler_lengths: from the third step on, request r verifies exactly the
    length the output two steps back planned for it (ragged, zeros included), with its one sampled token; before
    any plan has arrived (the second step) nothing; a scheduler of an engine in sync mode keeps V1's K
    placeholders whatever the outputs carry."""
    rng = np.random.default_rng(3)
    ids = [f"q{i}" for i in range(4)]
    plans = {s: {r: int(rng.integers(0, K + 1)) for r in ids} for s in range(12)}
    plans[4] = dict.fromkeys(ids, 0)  # a plain plan: the step two later verifies nothing
    for mode in ("async", "sync"):
        from vllm import SamplingParams
        from vllm.v1.request import Request

        scheduler = _async_scheduler(dense_low_entropy.target, mode)
        for i, r in enumerate(ids):
            scheduler.add_request(
                Request(r, list(range(1, 7 + 3 * i)), SamplingParams(max_tokens=200, ignore_eos=True), None)
            )
        scheduled = _drive(scheduler, plans, 12, np.random.default_rng(5))
        assert all(
            scheduled[0].num_scheduled_tokens[r] == 7 + 3 * i - 1 for i, r in enumerate(ids)
        )  # prefill
        for s, so in enumerate(scheduled[1:], start=1):
            for r in ids:
                got = len(so.scheduled_spec_decode_tokens.get(r, ()))
                want = (plans[s - 2][r] if s >= 2 else 0) if mode == "async" else K
                assert (got, so.num_scheduled_tokens[r]) == (want, 1 + want), (mode, s, r)
    assert scheduler._ascend_spec_async is False and not scheduler._ascend_spec_lengths


def test_model_runner_v2s_async_scheduler_keeps_its_placeholders(dense_low_entropy, monkeypatch) -> None:  # noqa: ANN001
    """Model Runner V2 splits the drafts on the device under async scheduling and hands no lengths: its
    scheduler must keep V1's K placeholders (a request without a plan would otherwise verify nothing, ever)."""
    from vllm import SamplingParams
    from vllm.v1.request import Request

    from ascend_spec.vllm import releases

    scheduler = _async_scheduler(dense_low_entropy.target, "async")
    # vLLM's config refuses V2 without Triton here: the engine's runner choice as vLLM would report it
    monkeypatch.setattr(releases, "runs_model_runner_v2", lambda vllm_config, version=None: True)
    scheduler.add_request(
        Request("q0", list(range(1, 9)), SamplingParams(max_tokens=50, ignore_eos=True), None)
    )
    scheduled = _drive(scheduler, {}, 5, np.random.default_rng(1))
    assert scheduler._ascend_spec_async is False
    assert [len(so.scheduled_spec_decode_tokens.get("q0", ())) for so in scheduled[1:]] == [K] * 4


def test_scores_that_describe_other_drafts_are_refused() -> None:
    from ascend_spec.vllm.dynamic import take_checked_scores

    drafts = torch.zeros(2, K, dtype=torch.int64)
    scores = DraftScores("head", torch.zeros(2, K), 2, K)
    assert take_checked_scores(lambda: scores, drafts) is scores
    assert take_checked_scores(lambda: None, drafts) is None
    with pytest.raises(
        RuntimeError, match=r"draft scores are for \[3, 3\] drafts, the drafter proposed \[2, 3\]"
    ):
        take_checked_scores(lambda: DraftScores("head", torch.zeros(3, K), 3, K), drafts)
