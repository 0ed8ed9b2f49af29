"""Dynamic verification's parts without an engine: config, engine checks, graph descriptors, one planned step,
the draft-list cut, engine profile files and the start-up bound."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ascend_spec.graph import BudgetController, CostProfile, GraphBuckets
from ascend_spec.ops import max_softmax_confidence, survival_probs
from ascend_spec.vllm.config import DynamicConfig, parse_config
from ascend_spec.vllm.cost_profiles import (
    ENGINE_PROFILE_FORMAT,
    engine_profiles,
    load_engine_profiles,
    measure_engine_profiles,
)
from ascend_spec.vllm.dynamic import DraftScores, DynamicVerifier, trim_draft_token_ids
from ascend_spec.vllm.graphs import build_engine_graphs
from ascend_spec.vllm.v1.dynamic_hooks import check_dynamic_engine


def _err(text: str) -> str:
    return re.escape(text)


# ----------------------------------------------------------------------------------------------- config


def test_dynamic_is_off_unless_given() -> None:
    assert parse_config({"ascend_spec": {}}).dynamic.enabled is False
    assert parse_config({"ascend_spec": {"dynamic": False}}).dynamic.enabled is False
    assert parse_config({"ascend_spec": {"dynamic": {"mode": "off"}}}).dynamic.enabled is False
    on = parse_config({"ascend_spec": {"dynamic": True}}).dynamic
    assert on == DynamicConfig() and on.enabled and on.mode == "auto" and on.profile == "measure"
    assert on.for_engine(async_scheduling=False).mode == "sync" and on.for_engine(True).mode == "async"
    explicit = parse_config({"ascend_spec": {"dynamic": {"mode": "sync"}}}).dynamic
    assert explicit.for_engine(True) is explicit  # an explicit mode is kept (and refused by the engine check)
    got = parse_config({"ascend_spec": {"dynamic": {"profile": "/p.json", "max_startup_s": 5, "repeats": 3}}})
    assert got.dynamic == DynamicConfig(profile="/p.json", max_startup_s=5, repeats=3)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"mode": "eager"}, "['dynamic']['mode'] must be one of auto, sync, async, off; got 'eager'"),
        ({"mdoe": "sync"}, "unknown key additional_config['ascend_spec']['dynamic']['mdoe']"),
        ({"profile": 3}, "['dynamic']['profile'] must be 'measure' or a profile file path; got 3"),
        ({"profile": ""}, "['dynamic']['profile'] must be 'measure' or a profile file path; got ''"),
        ({"max_startup_s": 0}, "['dynamic']['max_startup_s'] must be a positive number of seconds; got 0"),
        (
            {"max_startup_s": True},
            "['dynamic']['max_startup_s'] must be a positive number of seconds; got True",
        ),
        ({"repeats": 0}, "['dynamic']['repeats'] must be an int >= 1; got 0"),
        ({"warmup": -1}, "['dynamic']['warmup'] must be an int >= 0; got -1"),
        ({"statistic": "mean"}, "['dynamic']['statistic'] must be one of min, median; got 'mean'"),
        ({"calibrate": 1}, "['dynamic']['calibrate'] must be true or false; got 1"),
        ({"measure_steps": "yes"}, "['dynamic']['measure_steps'] must be true or false; got 'yes'"),
        ({"measure_every": 0}, "['dynamic']['measure_every'] must be an int >= 1; got 0"),
        ({"estimate": "on"}, "['dynamic']['estimate'] must be one of auto, combine; got 'on'"),
        ("sync", "additional_config['ascend_spec']['dynamic'] must be a dict of settings (or true/false)"),
    ],
)
def test_bad_dynamic_settings_name_the_key(raw: object, message: str) -> None:
    with pytest.raises(ValueError, match=_err(message)):
        parse_config({"ascend_spec": {"dynamic": raw}})


def _engine(
    method: str | None = "dflash", async_scheduling: bool = False, device: str = "cuda"
) -> SimpleNamespace:
    spec = None if method is None else SimpleNamespace(method=method, num_speculative_tokens=3)
    return SimpleNamespace(
        speculative_config=spec,
        scheduler_config=SimpleNamespace(async_scheduling=async_scheduling),
        device_config=SimpleNamespace(device_type=device),
    )


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        (_engine(None), "['dynamic'] needs speculative decoding"),
        (
            _engine("suffix"),
            "plans the drafters dflash, dspark, ngram, mtp, eagle, eagle3, draft_model (their own scores or "
            "the acceptance estimate); got speculative method 'suffix'",
        ),
        (_engine("ngram_gpu"), "got speculative method 'ngram_gpu'"),  # V1's device proposer: not hooked
        (_engine("medusa"), "got speculative method 'medusa'"),
        (_engine(async_scheduling=True), "start the engine with async_scheduling=False"),
    ],
)
def test_engines_dynamic_verification_cannot_run_on_are_refused(engine, message: str) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=_err(message)):
        check_dynamic_engine(engine)
    for method in ("dflash", "dspark", "ngram", "mtp", "eagle", "eagle3", "draft_model"):  # every V1 drafter
        check_dynamic_engine(_engine(method))
        check_dynamic_engine(_engine(method, async_scheduling=True), "async")


def test_async_mode_needs_async_scheduling_and_says_why_a_cpu_engine_has_none() -> None:
    check_dynamic_engine(_engine("dflash", async_scheduling=True), "async")
    check_dynamic_engine(_engine("dspark", async_scheduling=True), "async")
    with pytest.raises(
        ValueError, match=_err("mode 'async' hands the draft lengths to vLLM's async scheduler")
    ):
        check_dynamic_engine(_engine("dflash", async_scheduling=False), "async")
    with pytest.raises(ValueError, match=_err("(vLLM's CPU platform always turns async scheduling off)")):
        check_dynamic_engine(_engine("dflash", async_scheduling=False, device="cpu"), "async")
    with pytest.raises(ValueError, match=_err("or use mode 'async'")):
        check_dynamic_engine(_engine("dflash", async_scheduling=True), "sync")
    assert parse_config({"ascend_spec": {"dynamic": {"mode": "async"}}}).dynamic.mode == "async"


# ------------------------------------------------------------------------------------ graph descriptors


@pytest.mark.parametrize(("method", "q"), [("dflash", 4), ("dspark", 3)])
def test_draft_graph_is_keyed_on_its_own_b_times_q_never_on_the_ragged_target(method: str, q: int) -> None:
    graphs = build_engine_graphs(method=method, num_spec_tokens=3, max_num_seqs=8, capture_sizes=None)
    assert graphs.draft_tokens_per_request == q
    assert graphs.target.buckets == GraphBuckets.for_engine(32)  # the controller's boundaries: eager engine
    for b in range(1, 9):
        keys = set()
        for target_tokens in range(b, 4 * b + 1):  # every ragged total of b requests with 0..3 drafts
            draft, target = graphs.step(b, target_tokens)
            keys.add(draft.key)
            assert draft.actual_tokens == b * q and draft.num_tokens % q == 0
            assert draft.context_tokens == draft.num_reqs * 4
            assert target.actual_tokens == target_tokens
            assert target.num_tokens == (graphs.target.buckets.pad(target_tokens) or target_tokens)
        assert keys == {("draft", "uniform", graphs.draft.buckets.pad(b * q))}


def test_target_graphs_are_the_engines_capture_sizes_where_graphs_exist() -> None:
    graphs = build_engine_graphs(
        method="dflash", num_spec_tokens=7, max_num_seqs=16, capture_sizes=[1, 2, 4, 8, 16, 32, 64, 128]
    )
    assert graphs.graphs and graphs.target.buckets.to_list() == [1, 2, 4, 8, 16, 32, 64, 128]
    # seed example: B = 16, K = 7 -> the target's uniform step runs 128 tokens; the DFlash drafter 16 x 8 = 128
    # in its own graph; a ragged 16 + 40 = 56-token target step runs the 64 graph, the drafter is unchanged.
    draft, target = graphs.step(16, 56)
    assert (draft.key, draft.num_tokens) == (("draft", "uniform", 128), 128)
    assert (target.key, target.num_tokens) == (("target", "ragged", 64, 16), 64)


# ----------------------------------------------------------------------------------------- one step


def _controller(k: int, target: dict, draft: dict, q: int) -> BudgetController:
    return BudgetController(
        CostProfile(draft), CostProfile(target), max_drafts=k, draft_tokens_per_request=q, mode="sync"
    )


def _brute_force_total(surv: torch.Tensor, ctl: BudgetController) -> int:
    b, k = surv.shape
    vals = torch.sort(surv.double().reshape(-1), descending=True).values
    best_t, best = 0, ctl.step_cost(b, 0) / b
    for t in range(1, b * k + 1):
        obj = ctl.step_cost(b, t) / (b + float(vals[:t].sum()))
        if obj < best - 1e-12:
            best_t, best = t, obj
    return best_t


def test_one_step_gives_ragged_lengths_with_one_host_copy() -> None:
    torch.manual_seed(0)
    b, k, v = 6, 3, 64
    logits = torch.randn(b * k, v) * torch.linspace(0.5, 8.0, b).repeat_interleave(k).unsqueeze(1)
    ctl = _controller(k, {1: 1.0, 8: 1.0, 16: 2.5, 24: 4.0}, {4: 0.2, 32: 0.3}, q=k + 1)
    graphs = build_engine_graphs(method="dflash", num_spec_tokens=k, max_num_seqs=8, capture_sizes=None)
    verifier = DynamicVerifier(ctl, graphs)
    lengths = verifier.lengths(DraftScores("logits", logits, b, k))
    assert verifier.reader.copies == 1 and verifier.stats.max_host_copies_per_step == 1
    surv = survival_probs(max_softmax_confidence(logits).reshape(b, k))
    total = _brute_force_total(surv, ctl)
    assert sum(lengths) == total
    # the admitted drafts are the `total` greatest survivals (ties to the lower request, then position)
    order = torch.sort(surv.reshape(-1), descending=True, stable=True).indices[:total]
    want = torch.bincount(order // k, minlength=b).tolist()
    assert lengths == want
    assert len(set(lengths)) > 1 and 0 in lengths  # this profile and these confidences give a ragged split
    assert verifier.stats.ragged_steps == 1 and verifier.stats.totals == {total: 1}


@pytest.mark.parametrize(
    "target",
    [{1: 1.0, 8: 1.0, 16: 2.5, 24: 4.0}, {1: 1.0, 12: 1.0, 24: 1.3}],
    ids=["ragged_and_plain", "full_blocks"],
)
def test_cpu_engine_step_plans_in_one_native_call_as_the_two_ops(target: dict[int, float]) -> None:
    """On CPU logits the cpu backend's verifier plans each step in one native call (DraftSurvival run by the
    compiled StepPlan, which also applies the calibration's deferred bookkeeping and decays its factors; or,
    after the drafter's greedy tokens came from the scoring pass, the plan alone); the
    reference backend's runs the two ops and the separate host calls: same lengths, same predictions kept for
    the calibration, same factors, every step, through usual steps, a request leaving and a zero-draft step."""
    from ascend_spec.backend import host_compiler
    from ascend_spec.vllm.dynamic import _CompiledStep

    if host_compiler() is None:
        pytest.skip("the cpu backend needs a C++ compiler")
    b, k, v = 6, 3, 64
    ctl = {name: _controller(k, target, {4: 0.2, 32: 0.3}, q=k + 1) for name in "ab"}
    native = DynamicVerifier(ctl["a"], None, backend="cpu", calibrate=True)
    ops = DynamicVerifier(ctl["b"], None, backend="reference", calibrate=True)
    ids = [f"r{i}" for i in range(b)]
    gen = torch.Generator().manual_seed(4)
    rng = np.random.default_rng(4)
    for step in range(12):
        scale = torch.linspace(0.5, 8.0, b).roll(step).repeat_interleave(k).unsqueeze(1)
        logits = (torch.randn(b * k, v, generator=gen) * scale).bfloat16()
        if step % 4 == 3:  # every draft certain
            logits[:, 5] = 100.0
        if step % 2:  # the drafter's greedy tokens from the scoring pass, then the plan without rescoring
            assert native.greedy_draft_tokens(logits, b, k).tolist() == logits.argmax(dim=-1).tolist()
            assert ops.greedy_draft_tokens(logits, b, k) is None  # no compiled step: the drafter's own argmax
        lengths = native.lengths(DraftScores("logits", logits, b, k), ids)
        assert lengths == ops.lengths(DraftScores("logits", logits, b, k), ids)
        np_native, np_ops = native._next_predictions[1], ops._next_predictions[1]
        torch.testing.assert_close(
            torch.from_numpy(np_native), torch.from_numpy(np_ops), rtol=2e-5, atol=1e-9
        )
        np.testing.assert_allclose(native.calibration.factors, ops.calibration.factors, rtol=1e-5)
        # the target verifies the planned drafts and accepts a random prefix of each (step 5: r2 left; step 8:
        # nothing verified)
        rows = [i for i in range(b) if step != 5 or i != 2]
        verified = {ids[i]: [1] * (0 if step == 8 else lengths[i]) for i in rows}
        sampled = [[1] * (1 + int(rng.integers(0, len(verified[ids[i]]) + 1))) for i in rows]
        for verifier in (native, ops):
            verifier.begin_step(verified)
            verifier.end_step([ids[i] for i in rows], sampled)
    np.testing.assert_allclose(native.calibration.predicted, ops.calibration.predicted, rtol=1e-5)
    np.testing.assert_allclose(native.calibration.observed, ops.calibration.observed)
    assert native.calibration.observed.sum() > 0  # the bookkeeping ran
    totals = native.stats.totals
    if 16 in target:  # every kind of decision but full blocks: plain, ragged
        assert totals[0] and native.stats.ragged_steps
    else:  # full blocks (settled by the bounds) and searched totals
        assert totals[b * k] and len(totals) > 1
    assert [type(s) for s in native._scorers.values()] == [_CompiledStep]
    assert not any(isinstance(s, _CompiledStep) for s in ops._scorers.values())
    assert native.reader.copies == ops.reader.copies == 12
    assert native.stats.fused_draft_tokens == 6 and ops.stats.fused_draft_tokens == 0


def test_dspark_head_scores_give_ragged_lengths_through_head_confidence() -> None:
    """DraftScores("head", [B, K] confidence-head logits): sigmoid (float64 oracle) -> survival -> the controller's
    total -> the split, the kind counted in the stats."""
    torch.manual_seed(1)
    b, k = 6, 3
    head = torch.randn(b, k) + torch.linspace(-4.0, 6.0, b).unsqueeze(1)  # unsure .. sure requests
    ctl = _controller(k, {1: 1.0, 8: 1.0, 16: 2.5, 24: 4.0}, {4: 0.2, 32: 0.3}, q=k)
    graphs = build_engine_graphs(method="dspark", num_spec_tokens=k, max_num_seqs=8, capture_sizes=None)
    verifier = DynamicVerifier(ctl, graphs)
    lengths = verifier.lengths(DraftScores("head", head, b, k))
    surv = torch.cumprod(torch.sigmoid(head.double()), dim=1).float()
    total = _brute_force_total(surv, ctl)
    order = torch.sort(surv.reshape(-1), descending=True, stable=True).indices[:total]
    assert lengths == torch.bincount(order // k, minlength=b).tolist()
    assert len(set(lengths)) > 1 and 0 in lengths
    assert verifier.stats.score_kinds == {"head": 1} and verifier.reader.copies == 1
    assert verifier.stats.as_dict()["score_kinds"] == {"head": 1}


def test_dynamic_dspark_needs_a_confidence_head() -> None:
    from ascend_spec.vllm.v1.dspark_proposer import check_confidence_head

    headless = SimpleNamespace(model=SimpleNamespace(confidence_head=None))
    with pytest.raises(ValueError, match=_err("the speculative model '/ckpt' has none")):
        check_confidence_head(headless, True, "/ckpt")
    check_confidence_head(headless, False, "/ckpt")  # without dynamic verification the head is optional
    check_confidence_head(SimpleNamespace(model=SimpleNamespace(confidence_head=object())), True, "/ckpt")


def test_useless_and_perfect_confidences() -> None:
    b, k = 4, 3
    ctl = _controller(k, {1: 1.0, 32: 1.0}, {4: 0.5, 32: 0.5}, q=k + 1)
    verifier = DynamicVerifier(ctl, None)
    flat = torch.zeros(b * k, 512)  # uniform draft distribution: confidence 1/512
    assert verifier.lengths(DraftScores("logits", flat, b, k)) == [0] * b
    sure = torch.full((b, k), 30.0)  # a confidence head certain of every draft
    assert verifier.lengths(DraftScores("head", sure, b, k)) == [k] * b
    assert verifier.stats.plain_steps == 1 and verifier.stats.host_copies == 2
    assert verifier.stats.score_kinds == {"logits": 1, "head": 1}


def test_a_plain_plan_skips_the_drafter_until_the_next_probe() -> None:
    b, k = 2, 3
    ctl = _controller(k, {1: 1.0, 32: 1.0}, {4: 0.5, 32: 0.5}, q=k + 1)
    verifier = DynamicVerifier(ctl, None, probe_interval=3)
    assert verifier.skip_drafter() is False  # nothing planned yet
    verifier.lengths(DraftScores("logits", torch.zeros(b * k, 512), b, k))  # useless: plain
    assert [verifier.skip_drafter() for _ in range(3)] == [True, True, False]
    assert verifier.stats.skipped_steps == 2
    verifier.lengths(DraftScores("logits", torch.zeros(b * k, 512), b, k))  # plain again: the stretch doubles
    assert [verifier.skip_drafter() for _ in range(6)] == [True] * 5 + [False]
    verifier.lengths(DraftScores("head", torch.full((b, k), 30.0), b, k))  # sure drafts: no skip after
    assert verifier.skip_drafter() is False
    with pytest.raises(ValueError, match=_err("['dynamic']['probe_interval'] must be an int >= 1; got 0")):
        parse_config({"ascend_spec": {"dynamic": {"probe_interval": 0}}})


def test_draft_lists_are_cut_per_request_in_order() -> None:
    from vllm.v1.outputs import DraftTokenIds

    draft = DraftTokenIds(["a", "b", "c"], [[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    cut = trim_draft_token_ids(draft, [2, 0, 3])
    assert cut.req_ids == ["a", "b", "c"] and cut.draft_token_ids == [[1, 2], [], [7, 8, 9]]
    assert trim_draft_token_ids(draft, None) is draft
    with pytest.raises(RuntimeError, match="lengths for 2 requests but the drafter's lists are for 3"):
        trim_draft_token_ids(draft, [1, 1])


def test_full_blocks_pass_through_uncut() -> None:
    from vllm.v1.outputs import DraftTokenIds

    draft = DraftTokenIds(["a", "b"], [[1, 2, 3], [4, 5, 6]])
    assert trim_draft_token_ids(draft, [3, 3]) is draft


def test_calibration_sees_only_the_verified_drafts_of_planned_requests() -> None:
    """lengths() keeps the raw survivals per request id; begin_step() takes the scheduler's verified drafts;
    end_step() reads V1's host lists: request "a" verified 2 drafts and accepted 1, "b" verified none, "c" was
    not planned in this step (it joined later)."""
    b, k = 2, 3
    ctl = _controller(k, {1: 1.0, 32: 1.0}, {4: 0.5, 32: 0.5}, q=k + 1)
    verifier = DynamicVerifier(ctl, None, calibrate=True)
    head = torch.tensor([[2.0, 1.0, 0.0], [3.0, 3.0, 3.0]])
    verifier.lengths(DraftScores("head", head, b, k), ["a", "b"])
    raw = survival_probs(torch.sigmoid(head)).double().numpy()
    verifier.begin_step({"a": [5, 6], "c": [1, 2, 3]})
    verifier.end_step(["a", "b", "c"], [[5, 9], [4], [1, 2, 3, 4]])
    cal = verifier.calibration
    assert cal.predicted == pytest.approx([raw[0, 0], raw[0, 1], 0.0], rel=1e-6)
    assert cal.observed.tolist() == [1.0, 0.0, 0.0]
    assert verifier.stats.as_dict()["calibration"] == [round(float(f), 4) for f in cal.factors]
    verifier.end_step(["a"], [[5, 9]])  # a step is observed once
    assert cal.observed.tolist() == [1.0, 0.0, 0.0]


def test_zero_draft_steps_sample_plainly_and_reuse_their_metadata() -> None:
    """The runner hooks of dynamic_plain_sample and dynamic_zero_draft_metadata on a stand-in runner: V1's plain
    sampler (metadata None) only when no request verifies a draft; the metadata of B one-token requests without
    drafts built once per B by V1's own function, every other step passed through."""
    import numpy as np

    from ascend_spec.vllm.v1.dynamic_hooks import install_dynamic

    calls: dict[str, list] = {"sample": [], "metadata": []}

    def metadata(num_draft_tokens, cu):  # noqa: ANN001, ANN202
        calls["metadata"].append(num_draft_tokens.tolist())
        return SimpleNamespace(max_spec_len=int(num_draft_tokens.max()))

    runner = SimpleNamespace(
        execute_model=lambda *a: None,
        propose_draft_token_ids=lambda *a: None,
        take_draft_token_ids=lambda: None,
        _input_fits_in_drafter=lambda *a: True,
        _sample=lambda logits, meta: calls["sample"].append(meta) or "sampled",
        sample_tokens=lambda *a: None,
        _calc_spec_decode_metadata=metadata,
        _copy_draft_token_ids_to_cpu=lambda *a: None,
        speculative_config=object(),
        model_config=SimpleNamespace(is_hybrid=False),
    )
    install_dynamic(runner)
    zero = runner._calc_spec_decode_metadata(np.zeros(3, np.int32), np.array([1, 2, 3]))
    assert runner._calc_spec_decode_metadata(np.zeros(3, np.int32), np.array([1, 2, 3])) is zero
    drafted = runner._calc_spec_decode_metadata(np.array([0, 2, 1], np.int32), np.array([1, 4, 6]))
    prefill = runner._calc_spec_decode_metadata(np.zeros(3, np.int32), np.array([1, 9, 10]))
    assert calls["metadata"] == [[0, 0, 0], [0, 2, 1], [0, 0, 0]]  # the prefill step is not cached
    assert runner._sample("logits", zero) == "sampled" and runner._sample("logits", drafted) == "sampled"
    runner._sample("logits", prefill)
    assert calls["sample"] == [None, drafted, None]


def test_plans_without_drafts_hand_the_scheduler_nothing_and_skip_the_host_copy() -> None:
    """dynamic_take_drafts / dynamic_zero_draft_copy on a stand-in runner: after an all-zero plan (or a skipped
    drafter) take_draft_token_ids gives None (the scheduler already cleared the requests' drafts) and V1's copy of
    the drafts to the host buffer does not run, its bookkeeping does; any other step goes through V1's own."""
    from vllm.v1.outputs import DraftTokenIds

    from ascend_spec.vllm.v1.dynamic_hooks import install_dynamic

    copies: list[bool] = []
    runner = SimpleNamespace(
        execute_model=lambda *a: None,
        propose_draft_token_ids=lambda *a: None,
        take_draft_token_ids=lambda: DraftTokenIds(["a", "b"], [[1, 2, 3], [4, 5, 6]]),
        _input_fits_in_drafter=lambda *a: True,
        _sample=lambda *a: None,
        sample_tokens=lambda *a: None,
        _calc_spec_decode_metadata=lambda *a: None,
        _copy_draft_token_ids_to_cpu=lambda scheduler_output, zeros_only=False: copies.append(zeros_only),
        input_batch=SimpleNamespace(req_ids=["a", "b"]),
        _draft_token_ids=torch.zeros(2, 3, dtype=torch.int32),
        prev_num_spec_tokens=0,
        _draft_token_req_ids=None,
        speculative_config=object(),
        model_config=SimpleNamespace(is_hybrid=False),
    )
    install_dynamic(runner)
    runner._ascend_spec_lengths = [0, 0]
    runner._copy_draft_token_ids_to_cpu(None, zeros_only=True)
    assert copies == [] and runner._draft_token_req_ids == ["a", "b"] and runner.prev_num_spec_tokens == 3
    assert runner.take_draft_token_ids() is None and runner._ascend_spec_lengths is None
    runner._ascend_spec_lengths = [2, 0]  # a ragged plan: V1's copy, then the lists cut
    runner._copy_draft_token_ids_to_cpu(None)
    assert copies == [False]
    assert runner.take_draft_token_ids().draft_token_ids == [[1, 2], []]
    runner._copy_draft_token_ids_to_cpu(None, zeros_only=True)  # no plan (V1's own zero step): V1's path
    assert copies == [False, True]


@pytest.mark.parametrize("hybrid", [False, True])
def test_drafter_less_decode_steps_run_as_an_engine_without_a_drafter(hybrid: bool) -> None:
    """dynamic_plain_step on a stand-in runner: a one-token-per-request step without drafts whose drafter is
    skipped sees speculative_config None from execute_model to the end of sample_tokens (restored after it,
    and when execute_model raises); steps with drafts, prefills and hybrid targets keep it."""
    from ascend_spec.vllm.v1.dynamic_hooks import install_dynamic

    spec = object()
    seen: list[object] = []

    def execute(scheduler_output):  # noqa: ANN001, ANN202
        seen.append(runner.speculative_config)
        if getattr(scheduler_output, "fail", False):
            raise RuntimeError("boom")

    runner = SimpleNamespace(
        execute_model=execute,
        propose_draft_token_ids=lambda *a: None,
        take_draft_token_ids=lambda: None,
        _input_fits_in_drafter=lambda *a: True,
        _sample=lambda *a: None,
        sample_tokens=lambda *a: seen.append(runner.speculative_config),
        _calc_spec_decode_metadata=lambda *a: None,
        _copy_draft_token_ids_to_cpu=lambda *a: None,
        speculative_config=spec,
        model_config=SimpleNamespace(is_hybrid=hybrid),
    )
    install_dynamic(runner)
    ctl = _controller(3, {1: 1.0, 32: 1.0}, {4: 0.5, 32: 0.5}, q=4)
    runner.ascend_spec_dynamic = verifier = DynamicVerifier(ctl, None)

    def step(tokens: int, drafts: dict[str, list[int]], skips: int) -> list[object]:
        seen.clear()
        verifier._skips_left = skips
        out = SimpleNamespace(
            scheduled_spec_decode_tokens=drafts,
            num_scheduled_tokens={"a": 1, "b": 1},
            total_num_scheduled_tokens=tokens,
        )
        runner.execute_model(out)
        runner.sample_tokens(None)
        assert runner.speculative_config is spec
        return list(seen)

    plain = None if not hybrid else spec
    assert step(2, {}, skips=2) == [plain, plain]  # drafter-less decode step
    assert verifier._skips_left == (1 if not hybrid else 2)  # hybrid: _input_fits_in_drafter skips it
    assert step(2, {}, skips=0) == [spec, spec]  # the drafter runs after this forward
    assert step(4, {"a": [7, 8]}, skips=1) == [spec, spec]  # drafts verified
    assert step(9, {}, skips=1) == [spec, spec]  # a prefill chunk
    assert verifier.stats.plain_engine_steps == (0 if hybrid else 1)
    verifier._skips_left, seen[:] = 1, []
    failing = SimpleNamespace(
        scheduled_spec_decode_tokens={},
        num_scheduled_tokens={"a": 1, "b": 1},
        total_num_scheduled_tokens=2,
        fail=True,
    )
    with pytest.raises(RuntimeError, match="boom"):
        runner.execute_model(failing)
    assert seen == [plain] and runner.speculative_config is spec


def test_bad_score_kind_is_refused() -> None:
    with pytest.raises(
        ValueError, match=_err("DraftScores.kind must be one of logits, head, estimate; got 'probs'")
    ):
        DraftScores("probs", torch.zeros(1, 1), 1, 1)


# ------------------------------------------------------------------------------------------- profiles


def test_engine_profile_file_round_trip_and_errors(tmp_path) -> None:  # noqa: ANN001
    settings = DynamicConfig(profile=str(tmp_path / "p.json"), warmup=0, repeats=2)
    calls: list[tuple[str, int]] = []

    def measure():  # noqa: ANN202
        return measure_engine_profiles(
            lambda n: calls.append(("target", n)),
            lambda n: calls.append(("draft", n)),
            GraphBuckets([1, 2, 4]),
            GraphBuckets([4, 8]),
            settings,
            torch.device("cpu"),
            {"model": "m"},
        )

    first = engine_profiles(settings, {"model": "m"}, measure)
    assert first.source == "measured" and first.startup_s > 0
    # two rounds over all buckets, round by round
    assert calls == [("target", 1), ("target", 2), ("target", 4)] * 2 + [("draft", 4), ("draft", 8)] * 2
    again = engine_profiles(settings, {"model": "m"}, lambda: pytest.fail("measured twice"))
    assert again.source == f"file {tmp_path / 'p.json'}" and again.target == first.target
    assert json.loads((tmp_path / "p.json").read_text())["format"] == ENGINE_PROFILE_FORMAT
    (tmp_path / "bad.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match=_err("['dynamic']['profile']: ") + ".*is not a profile file"):
        load_engine_profiles(tmp_path / "bad.json")


def test_a_plan_profile_or_shipped_name_gives_the_engines_drafter_at_its_k(tmp_path) -> None:  # noqa: ANN001
    """``dynamic.profile`` also reads plan profiles (a file, or a shipped name as ``ascend-spec plan`` takes it):
    the target, and the drafter named like the engine's method at the engine's K (sequential: K passes)."""
    from ascend_spec.graph.plan_report import load_plan_profile
    from ascend_spec.paths import CONFIGS_DIR

    key = {"method": "dspark", "num_speculative_tokens": 5}
    shipped = load_plan_profile(CONFIGS_DIR / "profiles" / "talk_ascend910b.json")
    by_name = engine_profiles(DynamicConfig(profile="talk_ascend910b"), key, lambda: pytest.fail("measured"))
    assert by_name.source.startswith("file ") and by_name.source.endswith("talk_ascend910b.json")
    assert by_name.target == shipped.target
    assert by_name.draft == shipped.drafters["dspark"].cost_profile(5)
    for method in shipped.drafters:  # a sequential drafter's profile is its K passes
        got = load_engine_profiles(
            CONFIGS_DIR / "profiles" / "talk_ascend910b.json", {"method": method, "num_speculative_tokens": 3}
        )
        assert got.draft == shipped.drafters[method].cost_profile(3)
    with pytest.raises(ValueError, match=r"has no costs for the drafter 'ngram'; it has "):
        load_engine_profiles(CONFIGS_DIR / "profiles" / "talk_ascend910b.json", {"method": "ngram"})
    # a path that is neither a file nor a shipped name is where the measured profile goes
    written = engine_profiles(
        DynamicConfig(profile=str(tmp_path / "new.json"), warmup=0, repeats=1),
        key,
        lambda: measure_engine_profiles(
            lambda n: None,
            lambda n: None,
            GraphBuckets([1, 2]),
            GraphBuckets([5]),
            DynamicConfig(warmup=0, repeats=1),
            torch.device("cpu"),
            key,
        ),
    )
    assert written.source == "measured" and (tmp_path / "new.json").exists()


def test_measuring_past_the_start_up_bound_is_an_error() -> None:
    import time

    settings = DynamicConfig(max_startup_s=0.05, warmup=0, repeats=3)
    with pytest.raises(
        RuntimeError, match=_err("more than additional_config['ascend_spec']['dynamic']['max_startup_s']")
    ):
        measure_engine_profiles(
            lambda n: time.sleep(0.02),
            lambda n: None,
            GraphBuckets([1, 2, 4, 8]),
            GraphBuckets([4]),
            settings,
            torch.device("cpu"),
        )
