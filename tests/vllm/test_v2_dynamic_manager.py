"""The plugin's replacement of Model Runner V2's adaptive-verification manager, driven without an engine in V2's
call order (``record_confidences`` after the drafter; ``get_num_tokens``, ``compact_batch``,
``reallocate_drafts`` in the next step's input preparation).

Oracle: Model Runner V1's sync-mode planner (``BudgetController.plan_lengths``) on the same survivals and costs:
the device split must give each request the length V1 would have handed its scheduler. Plus: no device value is
read on the host inside a step (a torch function mode fails on every host read of a tensor), the no-draft
option's skipped drafter, and the choice of the newest survivals that have landed.

Under sync scheduling (``scheduled_plan``) the plan goes to vLLM's scheduler instead: ``take_planned`` (the
runner's ``take_draft_token_ids``, after the step, where the one wait for the staged survivals happens, as in V1's
sync mode) cuts each request's list to V1's length, and the next step verifies exactly what was scheduled.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import NoHostRead, stand_in_budget_manager
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_spec.graph import BudgetController, CostProfile
from ascend_spec.ops import survival_probs
from ascend_spec.vllm.dynamic import DynamicVerifier, StagedSurvivals
from ascend_spec.vllm.v2.budget_manager import DeviceBudgetManager
from ascend_spec.vllm.v2.dynamic_hooks import _wrap_take

K = 3
MAX_REQS = 8
TARGET = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.6, 16: 3.0, 32: 5.0}
DRAFT = {3: 0.3, 6: 0.3, 12: 0.4, 24: 0.6}


def _controller(target: dict = TARGET, draft: dict = DRAFT) -> BudgetController:
    return BudgetController(
        CostProfile(draft), CostProfile(target), max_drafts=K, draft_tokens_per_request=K, backend="reference"
    )


def _manager(
    probe_interval: int = 1, backend: str = "reference", scheduled_plan: bool = False, **costs
) -> DeviceBudgetManager:  # noqa: ANN003
    verifier = DynamicVerifier(_controller(**costs), None, backend=backend, probe_interval=probe_interval)
    return stand_in_budget_manager(verifier, MAX_REQS, K, "logits", backend, scheduled_plan=scheduled_plan)


def _placeholders(req_ids: list[str], k: int = K):  # noqa: ANN202
    """What V2's DraftTokensHandler hands the engine core under sync scheduling: k placeholders per request."""
    from vllm.v1.outputs import DraftTokenIds

    return DraftTokenIds(list(req_ids), [[-1] * k for _ in req_ids])


def _batch(req_ids: list[str], slots: list[int]) -> SimpleNamespace:
    return SimpleNamespace(
        num_reqs=len(req_ids), req_ids=req_ids, idx_mapping=torch.tensor(slots, dtype=torch.int64)
    )


def _step(manager, req_ids, slots, scheduled, non_draft):  # noqa: ANN001, ANN202
    """V2's input preparation for one step; returns (tokens, per-request drafts, query_start_loc, cu_num_logits)."""
    tokens_per_req = {r: n + d for r, n, d in zip(req_ids, non_draft, scheduled)}
    drafts = {r: [-1] * d for r, d in zip(req_ids, scheduled) if d}
    tokens = manager.get_num_tokens(tokens_per_req, drafts)
    host_lens, _ = manager.compact_batch(
        np.array(scheduled, np.int32), np.array(non_draft, np.int32) + scheduled, np.zeros(len(req_ids) + 1)
    )
    assert int(host_lens.sum()) == tokens  # the host view holds the step's token count
    cu_logits, qsl, total = manager.reallocate_drafts(req_ids, torch.tensor(slots, dtype=torch.int64))
    b = len(req_ids)
    counts = (qsl[1 : b + 1] - qsl[:b]).numpy() - np.array(non_draft)
    assert int(qsl[b]) == tokens and int(qsl[-1]) == tokens and total == tokens - sum(non_draft)
    assert cu_logits.tolist() == [0, *np.cumsum(counts + 1).tolist()]
    return tokens, counts.tolist(), qsl


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda b: st.tuples(
            st.lists(
                st.lists(st.floats(0.0625, 1.0, width=32), min_size=K, max_size=K), min_size=b, max_size=b
            ),
            st.permutations(range(MAX_REQS)),
        )
    )
)
def test_device_split_gives_v1_planners_lengths(case) -> None:  # noqa: ANN001
    conf_rows, perm = case
    b = len(conf_rows)
    req_ids = [f"r{i}" for i in range(b)]
    slots = list(perm[:b])
    conf = torch.tensor(conf_rows, dtype=torch.float32)
    manager = _manager()
    for s in slots:
        manager.add_request(s)
    manager.record_confidences(conf, _batch(req_ids, slots))
    tokens, counts, _ = _step(manager, req_ids, slots, [K] * b, [1] * b)
    total, lengths = _controller().plan_lengths(survival_probs(conf).numpy())
    assert counts == lengths and tokens == b + total
    assert manager.verifier.stats.host_copies == 0 and manager.verifier.stats.staged_copies == 1


def test_capped_requests_and_prefill_rows_keep_their_tokens() -> None:
    """A request scheduled fewer than K drafts (near max_model_len) is capped there; a prefill chunk (no drafts)
    keeps its tokens; the sure drafts win the budget as V1 would rank them."""
    manager = _manager()
    req_ids, slots = ["a", "b", "c", "p"], [5, 1, 7, 2]
    conf = torch.tensor([[0.99, 0.99, 0.99], [0.9, 0.5, 0.5], [0.99, 0.99, 0.99], [0.5, 0.5, 0.5]])
    manager.record_confidences(conf, _batch(req_ids, slots))
    tokens, counts, _ = _step(manager, req_ids, slots, [K, K, 1, 0], [1, 1, 1, 6])
    host = survival_probs(conf[:3]).numpy().copy()
    host[2, 1:] = 0.0  # request c: one scheduled draft
    total, lengths = _controller().plan_lengths(host)
    assert 0 < total < 2 * K + 1  # a budget below the scheduled drafts
    assert counts == [*lengths, 0] and tokens == 9 + total
    assert counts[2] <= 1


@pytest.mark.parametrize("scheduled_plan", [False, True], ids=["async-split", "sync-take"])
@pytest.mark.parametrize("backend", ["reference", "auto"])
def test_no_host_read_inside_the_step(monkeypatch, backend: str, scheduled_plan: bool) -> None:
    """The device part of a step (the split, the offsets, the survivals and their staging) reads no tensor value
    on the host; value checks off, as in an engine step. Under sync scheduling the one wait is at the engine
    core's take of the drafts, between steps (outside the guard, as V1's sync mode)."""
    monkeypatch.setenv("ASCEND_SPEC_CHECKS", "0")
    manager = _manager(backend=backend, scheduled_plan=scheduled_plan)
    req_ids, slots = ["a", "b", "c"], [0, 3, 4]
    conf = torch.tensor([[0.9, 0.8, 0.7], [0.6, 0.3, 0.2], [0.99, 0.9, 0.1]])
    with NoHostRead():
        manager.record_confidences(conf, _batch(req_ids, slots))
    scheduled = [K] * 3
    if scheduled_plan:  # off the step: wait, plan, cut
        scheduled = list(map(len, manager.take_planned(_placeholders(req_ids)).draft_token_ids))
    tokens_per_req = {r: 1 + d for r, d in zip(req_ids, scheduled)}
    manager.get_num_tokens(tokens_per_req, {r: [-1] * d for r, d in zip(req_ids, scheduled) if d})
    with NoHostRead():
        manager.compact_batch(np.array(scheduled, np.int32), np.array(scheduled, np.int32) + 1, np.zeros(4))
        _, qsl, total = manager.reallocate_drafts(req_ids, torch.tensor(slots))
    assert 0 < total < 3 * K  # a ragged budget (split on the device, or scheduled) really ran
    assert manager.verifier.stats.host_copies == 0
    if scheduled_plan:
        assert total == sum(scheduled) and min(scheduled) != max(scheduled)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda b: st.tuples(
            st.lists(
                st.lists(st.floats(0.0625, 1.0, width=32), min_size=K, max_size=K), min_size=b, max_size=b
            ),
            st.permutations(range(MAX_REQS)),
            st.randoms(use_true_random=False),
        )
    )
)
def test_sync_scheduling_hands_the_scheduler_v1s_lengths(case) -> None:  # noqa: ANN001
    """take_planned cuts request b's placeholders to V1's sync-mode length (rows matched by request id, in
    whatever order the drafts come); the next step verifies exactly those, with no second plan in the stats."""
    conf_rows, perm, rnd = case
    b = len(conf_rows)
    req_ids = [f"r{i}" for i in range(b)]
    slots = list(perm[:b])
    conf = torch.tensor(conf_rows, dtype=torch.float32)
    manager = _manager(scheduled_plan=True)
    manager.record_confidences(conf, _batch(req_ids, slots))
    order = rnd.sample(range(b), b)
    taken = manager.take_planned(_placeholders([req_ids[i] for i in order]))
    total, lengths = _controller().plan_lengths(survival_probs(conf).numpy())
    assert taken.req_ids == [req_ids[i] for i in order]
    assert list(map(len, taken.draft_token_ids)) == [lengths[i] for i in order]
    assert all(row == [-1] * len(row) for row in taken.draft_token_ids)
    stats = manager.verifier.stats
    assert stats.steps == 1 and stats.staged_copies == 1 and stats.host_copies == 0
    assert sum(n * c for n, c in stats.lengths.items()) == total
    if total == 0:  # a plain plan: nothing scheduled, the next drafter run is the probe (probe_interval 1)
        return
    tokens, counts, _ = _step(manager, req_ids, slots, lengths, [1] * b)
    assert counts == lengths and tokens == b + total
    assert stats.steps == 1 and stats.staged_copies == 1 and not manager._counts  # no split staged


def test_sync_scheduling_verifies_what_was_scheduled_without_a_second_plan() -> None:
    """The scheduled drafts are the plan: a step whose newest survivals would plan fewer (or none) still
    verifies every scheduled draft (the async path's re-plan on the host would cut them)."""
    manager = _manager(scheduled_plan=True, draft={3: 50.0, 6: 50.0, 12: 50.0, 24: 50.0})
    req_ids, slots = ["a", "b"], [0, 1]
    manager.record_confidences(torch.full((2, K), 0.9), _batch(req_ids, slots))  # not taken: never planned
    tokens, counts, _ = _step(manager, req_ids, slots, [K, 1], [1, 1])
    assert counts == [K, 1] and tokens == 2 + K + 1
    assert manager.verifier.stats.steps == 0  # nothing planned in the step


def test_sync_scheduling_plain_plan_and_skipped_drafter_schedule_no_drafts() -> None:
    """A plain plan cuts every list to 0 (a plain step follows); the drafter runs it skips then hand the
    scheduler 0 drafts for every request without a plan, and the probe after them is planned again."""
    manager = _manager(probe_interval=3, scheduled_plan=True, draft={3: 50.0, 6: 50.0, 12: 50.0, 24: 50.0})
    verifier, req_ids, slots = manager.verifier, ["a", "b"], [0, 1]
    manager.record_confidences(torch.full((2, K), 0.9), _batch(req_ids, slots))
    assert manager.take_planned(_placeholders(req_ids)).draft_token_ids == [[], []]
    assert verifier.stats.steps == 1 and verifier.stats.plain_steps == 1
    for _ in range(2):  # probe_interval - 1 skipped drafter runs
        manager.drafter_ran = not verifier.skip_drafter()
        assert not manager.drafter_ran
        manager.record_confidences(torch.zeros(2, K), _batch(req_ids, slots))
        assert manager.take_planned(_placeholders(req_ids)).draft_token_ids == [[], []]
    assert verifier.stats.steps == 1 and verifier.stats.skipped_steps == 2
    manager.drafter_ran = not verifier.skip_drafter()  # the probe
    assert manager.drafter_ran
    manager.record_confidences(torch.full((2, K), 0.9), _batch(req_ids, slots))
    manager.take_planned(_placeholders(req_ids))
    assert verifier.stats.steps == 2
    assert manager.take_planned(_placeholders(req_ids)).draft_token_ids == [[], []]  # a second take: no run


def test_the_runner_take_is_cut_only_once_the_manager_is_built() -> None:
    """v2_dynamic_take_drafts: the runner's take_draft_token_ids passes V2's drafts through until the first
    real step builds the manager, then hands the scheduler the plan; the async path's manager refuses it."""
    req_ids = ["a", "b"]
    runner = SimpleNamespace(adaptive_verification=None, take_draft_token_ids=lambda: _placeholders(req_ids))
    _wrap_take(runner)
    assert runner.take_draft_token_ids().draft_token_ids == [[-1] * K, [-1] * K]
    manager = _manager(scheduled_plan=True)
    runner.adaptive_verification = manager
    conf = torch.tensor([[0.99, 0.99, 0.99], [0.3, 0.2, 0.1]])
    manager.record_confidences(conf, _batch(req_ids, [0, 1]))
    _, lengths = _controller().plan_lengths(survival_probs(conf).numpy())
    assert list(map(len, runner.take_draft_token_ids().draft_token_ids)) == lengths
    assert lengths != [K, K]
    with pytest.raises(RuntimeError, match="scheduled_plan=False"):
        _manager().take_planned(_placeholders(req_ids))


def test_plain_plan_skips_the_drafter_and_its_drafts_are_never_verified() -> None:
    """With drafting dearer than it saves, T = 0: the step runs plain, the drafter is skipped for the back-off
    stretch (its zero drafts verify nothing and are not planned), then it runs again and is planned."""
    manager = _manager(probe_interval=3, draft={3: 50.0, 6: 50.0, 12: 50.0, 24: 50.0})
    verifier, req_ids, slots = manager.verifier, ["a", "b"], [0, 1]
    manager.record_confidences(torch.full((2, K), 0.9), _batch(req_ids, slots))
    assert _step(manager, req_ids, slots, [K, K], [1, 1])[:2] == (2, [0, 0])
    assert verifier.stats.steps == 1 and verifier.stats.plain_steps == 1
    for _ in range(2):  # probe_interval - 1 skipped drafter runs
        manager.drafter_ran = not verifier.skip_drafter()
        assert not manager.drafter_ran
        manager.record_confidences(torch.full((2, K), 0.9), _batch(req_ids, slots))
        assert _step(manager, req_ids, slots, [K, K], [1, 1])[:2] == (2, [0, 0])
    assert verifier.stats.steps == 1 and verifier.stats.skipped_steps == 2
    manager.drafter_ran = not verifier.skip_drafter()  # the probe
    assert manager.drafter_ran
    manager.record_confidences(torch.full((2, K), 0.9), _batch(req_ids, slots))
    _step(manager, req_ids, slots, [K, K], [1, 1])
    assert verifier.stats.steps == 2


class _Pending:
    """A device event whose copy has not completed yet (``query()`` False)."""

    def query(self) -> bool:
        return False

    def synchronize(self) -> None:
        raise AssertionError("the plan waited for a copy")


def test_total_from_the_newest_landed_survivals_never_waits() -> None:
    """Survivals whose copy is still in flight are passed over for the newest landed ones (counted as stale)."""
    manager = _manager()
    req_ids, slots = ["a", "b"], [0, 1]
    sure = torch.full((2, K), 0.99)
    manager.record_confidences(sure, _batch(req_ids, slots))  # landed: a full block is worth it
    in_flight = np.full((2, K), 0.01, np.float32)
    manager._staged.append(StagedSurvivals(req_ids, torch.from_numpy(in_flight), _Pending(), "logits"))
    tokens, counts, _ = _step(manager, req_ids, slots, [K, K], [1, 1])
    total, lengths = _controller().plan_lengths(survival_probs(sure).numpy())
    assert tokens == 2 + total and counts == lengths and total > 0
    assert manager.verifier.stats.stale_plans == 1


@pytest.mark.parametrize("four", [False, True])
def test_reallocate_answers_in_the_releases_shape(four: bool) -> None:
    """vLLM 0.32.0's runner unpacks three items, 0.33.0's four (the admitted counts for a batch sharder: None)."""
    manager = _manager()
    manager.admitted_counts_item = four
    manager.record_confidences(torch.full((1, K), 0.9), _batch(["a"], [0]))
    manager.get_num_tokens({"a": 1 + K}, {"a": [-1] * K})
    out = manager.reallocate_drafts(["a"], torch.tensor([0]))
    assert len(out) == (4 if four else 3) and (not four or out[3] is None)


def test_measuring_dummy_runs_take_their_own_state_slots_and_leave_no_records() -> None:
    """V2's dummy batches put every request on GDN state slot 0; while the profiles are measured each dummy run
    asks V2 for distinct slots (valid_dummy_state_slots), afterwards no layer keeps a dummy row's records, and a
    runner that already holds requests is refused (their slots would be overwritten)."""
    from ascend_spec.gdn import allocate_conv_records, allocate_records
    from ascend_spec.vllm.gdn_layer import AscendSpecGDNAttention
    from ascend_spec.vllm.v2.dynamic_hooks import dummy_runs_on_free_slots

    layer = SimpleNamespace(
        records=allocate_records(4, 4, 1, 2, 2), conv_records=allocate_conv_records(4, 4, 3, 4)
    )
    layer.clear_records = lambda: AscendSpecGDNAttention.clear_records(layer)

    class Runner:
        def __init__(self) -> None:
            self.calls: list[tuple[int, dict]] = []
            self.req_states = SimpleNamespace(req_id_to_index={})
            self._ascend_spec_gdn_layers = [layer]

        def _dummy_run(self, num_tokens: int, **kwargs) -> None:  # noqa: ANN003
            self.calls.append((num_tokens, kwargs))
            layer.records.num_recorded[1 : num_tokens + 1] = 2  # what the dummy rows' verify recorded
            layer.conv_records.num_recorded[1 : num_tokens + 1] = 2

    runner = Runner()
    with dummy_runs_on_free_slots(runner):
        runner._dummy_run(3)
        assert int(layer.records.num_recorded.sum()) == 6
    assert int(layer.records.num_recorded.sum()) == int(layer.conv_records.num_recorded.sum()) == 0
    runner._dummy_run(2)  # after measuring: V2's own dummy runs again
    assert runner.calls == [(3, {"valid_dummy_state_slots": True}), (2, {})]
    assert "_dummy_run" not in runner.__dict__
    layer.records.num_recorded.zero_()
    layer.conv_records.num_recorded.zero_()

    runner.req_states.req_id_to_index["r0"] = 0
    with pytest.raises(RuntimeError, match="the runner holds 1 requests"), dummy_runs_on_free_slots(runner):
        pass

    dense = Runner()
    dense._ascend_spec_gdn_layers = []  # no GDN layer: V2's dummy runs as they are
    with dummy_runs_on_free_slots(dense):
        dense._dummy_run(4)
    assert dense.calls == [(4, {})]
