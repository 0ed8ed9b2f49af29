"""allocate_verify_budget against a brute-force oracle (sort all slots, take T, count per request)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_spec.backend import own_backends
from ascend_spec.ops import VerifyAllocation, allocate_verify_budget, survival_probs


def brute_force(survival: torch.Tensor, budget: int, capacities: list[int] | None) -> list[int]:
    """Python oracle: every eligible slot keyed by (-survival, request, position); the first ``budget`` win."""
    b, k = survival.shape
    caps = capacities if capacities is not None else [k] * b
    slots = sorted((-float(survival[i, j]), i, j) for i in range(b) for j in range(caps[i]))
    counts = [0] * b
    for _, i, _ in slots[:budget]:
        counts[i] += 1
    return counts


def check_layout(alloc: VerifyAllocation, counts: list[int], k: int, length: int) -> None:
    """Every output is consistent with per-request counts ``counts``, and each admitted set is a prefix."""
    b = len(counts)
    assert alloc.num_drafts.dtype == torch.int32 and alloc.num_drafts.shape == (b,)
    assert alloc.num_drafts.tolist() == counts
    assert alloc.query_lens.tolist() == [c + 1 for c in counts]
    qsl = [0]
    for c in counts:
        qsl.append(qsl[-1] + c + 1)
    assert alloc.query_start_loc.tolist() == qsl
    want_index = [i * k + j for i in range(b) for j in range(counts[i])]
    assert alloc.draft_index.shape == (length,)
    assert alloc.draft_index.tolist() == want_index + [-1] * (length - len(want_index))


# The op has no native cpu kernel (its cpu entry is the reference): the backends with their own implementation.
BACKENDS = own_backends("allocate_verify_budget")


@pytest.fixture(params=BACKENDS, scope="session")
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


def run(survival, budget, backend, **kw) -> VerifyAllocation:
    return allocate_verify_budget(survival, budget, backend=backend, **kw)


def test_talk_example(backend: str) -> None:
    # Three requests, budget 8: drafts [4, 3, 1] -> query_lens [5, 4, 2] -> query_start_loc [0, 5, 9, 11].
    conf = torch.tensor(
        [[0.95, 0.90, 0.90, 0.85, 0.30], [0.90, 0.85, 0.80, 0.30, 0.20], [0.70, 0.40, 0.30, 0.20, 0.10]]
    )
    alloc = run(survival_probs(conf), 8, backend)
    assert alloc.num_drafts.tolist() == [4, 3, 1]
    assert alloc.query_lens.tolist() == [5, 4, 2]
    assert alloc.query_start_loc.tolist() == [0, 5, 9, 11]
    assert alloc.draft_index.tolist() == [0, 1, 2, 3, 5, 6, 7, 10]
    # The same budget handed over as a 0-dim tensor (the async scheme) with a static bound of 15.
    alloc = run(survival_probs(conf), torch.tensor(8, dtype=torch.int32), backend, max_budget=15)
    check_layout(alloc, [4, 3, 1], 5, 15)


def test_ties_and_ones_keep_prefixes(backend: str) -> None:
    # Every slot ties at 1.0: lower request first, then lower position.
    check_layout(run(torch.ones(3, 4), 6, backend), [4, 2, 0], 4, 6)
    # Equal confidences everywhere: survival differs only along K; equal keys across requests go to the lower one.
    p = survival_probs(torch.full((4, 5), 0.5))
    check_layout(run(p, 7, backend), [2, 2, 2, 1], 5, 7)
    # Exact ties inside a row (factors of 1.0) and across rows.
    p = survival_probs(torch.tensor([[1.0, 1.0, 0.5, 1.0], [0.5, 1.0, 1.0, 1.0], [1.0, 0.5, 1.0, 1.0]]))
    # -> [1, 1, .5, .5], [.5, .5, .5, .5], [1, .5, .5, .5]: the three 1.0 slots, then 0.5s by request, position.
    check_layout(run(p, 5, backend), [4, 0, 1], 4, 5)
    check_layout(run(p, 7, backend), [4, 2, 1], 4, 7)
    check_layout(run(p, 11, backend), [4, 4, 3], 4, 11)


def test_budget_zero_full_and_single_request(backend: str) -> None:
    p = survival_probs(torch.rand(5, 6, generator=torch.Generator().manual_seed(0)))
    check_layout(run(p, 0, backend), [0] * 5, 6, 0)
    check_layout(run(p, torch.tensor(0), backend), [0] * 5, 6, 30)
    caps = torch.tensor([6, 0, 3, 1, 5])
    check_layout(run(p, 30, backend, capacities=caps), [6, 0, 3, 1, 5], 6, 30)
    check_layout(run(p, 100, backend, capacities=caps), [6, 0, 3, 1, 5], 6, 30)
    check_layout(run(p, torch.tensor(30), backend, capacities=caps), [6, 0, 3, 1, 5], 6, 30)
    one = p[:1]
    check_layout(run(one, 4, backend), [4], 6, 4)
    check_layout(run(one, 10, backend), [6], 6, 6)
    check_layout(run(one, 1, backend, capacities=torch.tensor([0], dtype=torch.int32)), [0], 6, 1)
    check_layout(run(torch.ones(1, 1), 1, backend), [1], 1, 1)


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    b=st.integers(1, 6),
    k=st.integers(1, 6),
    backend=st.sampled_from(BACKENDS),
)
def test_matches_brute_force(data, b: int, k: int, backend: str) -> None:
    # Confidences from a small grid force exact ties (0, 0.5, 1.0 are exact in fp32) as well as distinct values.
    values = st.sampled_from([0.0, 0.25, 0.5, 0.5, 0.75, 1.0, 1.0]) | st.floats(0.0, 1.0, width=32)
    conf = torch.tensor(data.draw(st.lists(st.lists(values, min_size=k, max_size=k), min_size=b, max_size=b)))
    surv = survival_probs(conf)
    caps = data.draw(st.none() | st.lists(st.integers(0, k), min_size=b, max_size=b))
    budget = data.draw(st.integers(0, b * k + 2))
    as_tensor = data.draw(st.booleans())
    cap_t = (
        None
        if caps is None
        else torch.tensor(caps, dtype=data.draw(st.sampled_from([torch.int32, torch.int64])))
    )
    if as_tensor:
        bound = data.draw(st.integers(budget, b * k + 3))
        alloc = run(surv, torch.tensor(budget), backend, capacities=cap_t, max_budget=bound)
        length = min(bound, b * k)
    else:
        alloc = run(surv, budget, backend, capacities=cap_t)
        length = min(budget, b * k)
    check_layout(alloc, brute_force(surv, budget, caps), k, length)


@pytest.mark.parametrize("backend", ["triton", "ascendc"])
def test_large_batch_matches_reference(backend: str) -> None:
    """Triton walks several [BLOCK_B, K] tiles; the AscendC core holds 8320 keys in its UB."""
    g = torch.Generator().manual_seed(4)
    conf = torch.rand(520, 16, generator=g)
    conf[::7] = 1.0  # whole rows of ties
    conf[::5, 3:] = 0.5
    surv = survival_probs(conf)
    caps = torch.randint(0, 17, (520,), generator=g)
    for budget in (1, 2500, 520 * 16):
        want = run(surv, budget, "reference", capacities=caps)
        got = run(surv, torch.tensor(budget), backend, capacities=caps, max_budget=520 * 16)
        assert got.num_drafts.tolist() == want.num_drafts.tolist()
        assert got.query_start_loc.tolist() == want.query_start_loc.tolist()
        n = int(want.query_start_loc[-1]) - 520
        assert got.draft_index[:n].tolist() == want.draft_index[:n].tolist()
        assert bool((got.draft_index[n:] == -1).all())
    counts = want.num_drafts.tolist()
    assert counts == brute_force(surv, 520 * 16, caps.tolist())


def test_out_of_contract_values_without_checks(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checks off: clamp to [0, 1], NaN as 0, running minimum along K, capacities and budget clamped - prefixes."""
    monkeypatch.setenv("ASCEND_SPEC_CHECKS", "0")
    s = torch.tensor([[0.5, 0.9, 0.8], [float("nan"), 0.7, 0.6], [0.6, 0.55, float("nan")]])
    # Effective keys: [0.5, 0.5, 0.5], [0, 0, 0], [0.6, 0.55, 0].
    check_layout(run(s, 4, backend), [2, 0, 2], 3, 4)
    check_layout(run(s, 7, backend), [3, 2, 2], 3, 7)  # ties at 0: flat order
    caps = torch.tensor([-2, 9, 2])
    check_layout(run(s, torch.tensor(50), backend, capacities=caps, max_budget=4), [0, 2, 2], 3, 4)
    check_layout(run(s, torch.tensor(-3), backend), [0, 0, 0], 3, 9)
    # Out of [0, 1]: 1.5 and inf count as 1.0, negatives and -inf as 0.
    s = torch.tensor([[1.5, 0.2, -1.0], [float("inf"), 1.0, 0.9], [float("-inf"), 0.8, 0.7]])
    # Keys: [1, 0.2, 0], [1, 1, 0.9], [0, 0, 0].
    check_layout(run(s, 3, backend), [1, 2, 0], 3, 3)
    check_layout(run(s, 6, backend), [3, 3, 0], 3, 6)  # 1, 1, 1, 0.9, 0.2, then the first 0 (flat order)


def test_reference_runs_on_meta_without_reading_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """No host read: the reference runs on meta tensors (which hold no values) and yields the static shapes."""
    monkeypatch.setenv("ASCEND_SPEC_CHECKS", "0")
    surv = torch.empty(256, 16, device="meta")
    alloc = allocate_verify_budget(
        surv, torch.empty((), dtype=torch.int64, device="meta"), capacities=torch.empty(256, device="meta",
        dtype=torch.int32), max_budget=1000, backend="reference",
    )  # fmt: skip
    assert alloc.num_drafts.shape == (256,) and alloc.query_start_loc.shape == (257,)
    assert alloc.draft_index.shape == (1000,) and alloc.draft_index.device.type == "meta"


def test_ascendc_refuses_a_batch_beyond_one_core() -> None:
    with pytest.raises(ValueError, match="survival: 4096 x 16 slots need .* bytes of Unified Buffer"):
        allocate_verify_budget(torch.ones(4096, 16), 8, backend="ascendc")


def test_ascendc_ub_estimate_matches_the_kernel_tiling() -> None:
    """The Python UB estimate (used before an NPU launch) equals the tiling the kernel computes."""
    import ctypes

    from ascend_spec.ascendc import host_model
    from ascend_spec.ops.allocate_verify_budget.ascendc import KERNEL, ub_bytes_needed

    fn = host_model.load_kernel(KERNEL).allocate_verify_budget_ub_bytes
    fn.restype = ctypes.c_int64
    for b, k, bound in [
        (1, 1, 0),
        (3, 5, 8),
        (256, 16, 1024),
        (512, 16, 8192),
        (1000, 7, 10**9),
        (4096, 16, 8),
    ]:
        assert ub_bytes_needed(b, k, bound) == fn(ctypes.c_int64(b), ctypes.c_int64(k), ctypes.c_int64(bound))


def test_shapes_do_not_depend_on_values() -> None:
    for backend in BACKENDS:
        shapes = set()
        for seed in range(3):
            p = survival_probs(torch.rand(8, 4, generator=torch.Generator().manual_seed(seed)))
            a = run(p, torch.tensor(seed * 5), backend, max_budget=20)
            shapes.add(
                tuple(tuple(t.shape) for t in (a.num_drafts, a.query_lens, a.query_start_loc, a.draft_index))
            )
        assert shapes == {((8,), (8,), (9,), (20,))}


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: allocate_verify_budget(torch.ones(3), 1), "survival must have 2 dimensions"),
        (lambda: allocate_verify_budget(torch.ones(3, 0), 1), "survival must have K >= 1"),
        (lambda: allocate_verify_budget(torch.ones(2, 3, dtype=torch.int32), 1), "survival must have dtype"),
        (lambda: allocate_verify_budget(torch.ones(2, 3), -1), "total_budget must be >= 0; got -1"),
        (lambda: allocate_verify_budget(torch.ones(2, 3), 2.0), "total_budget must be an int; got 2.0"),
        (lambda: allocate_verify_budget(torch.ones(2, 3), True), "total_budget must be an int"),
        (lambda: allocate_verify_budget(torch.ones(2, 3), torch.tensor([3])), "total_budget must have 0 dim"),
        (lambda: allocate_verify_budget(torch.ones(2, 3), torch.tensor(3.0)), "total_budget must have dtype"),
        (
            lambda: allocate_verify_budget(torch.ones(2, 3), torch.tensor(-2)),
            r"total_budget must be in \[0, ",
        ),
        (lambda: allocate_verify_budget(torch.ones(2, 3), torch.tensor(7)), "max_budget=6.*got 7"),
        (
            lambda: allocate_verify_budget(torch.ones(2, 3), torch.tensor(3, device="meta")),
            "total_budget is on meta",
        ),
        (
            lambda: allocate_verify_budget(torch.ones(2, 3), 5, max_budget=4),
            "total_budget 5 exceeds max_budget 4",
        ),
        (lambda: allocate_verify_budget(torch.ones(2, 3), 1, max_budget=-1), "max_budget must be >= 0"),
        (
            lambda: allocate_verify_budget(torch.ones(2, 3), 1, capacities=torch.tensor([1, 4])),
            r"capacities must be in \[0, K=3\]; got capacities\[1\] = 4",
        ),
        (
            lambda: allocate_verify_budget(torch.ones(2, 3), 1, capacities=torch.tensor([-1, 0])),
            r"capacities\[0\] = -1",
        ),
        (
            lambda: allocate_verify_budget(torch.ones(2, 3), 1, capacities=torch.tensor([1])),
            "capacities must have shape",
        ),
        (
            lambda: allocate_verify_budget(torch.ones(2, 3), 1, capacities=torch.tensor([1.0, 1.0])),
            "capacities must have dtype",
        ),
        (
            lambda: allocate_verify_budget(
                torch.ones(2, 3), 1, capacities=torch.ones(2, dtype=torch.int32, device="meta")
            ),
            "capacities is on meta",
        ),
        (
            lambda: allocate_verify_budget(torch.tensor([[0.5, 0.6]]), 1),
            r"non-increasing along K.*survival\[0, 0\] = 0.5 < survival\[0, 1\]",
        ),
        (lambda: allocate_verify_budget(torch.tensor([[1.5, 0.6]]), 1), r"survival\[0, 0\] = 1.5"),
        (lambda: allocate_verify_budget(torch.tensor([[0.5, float("nan")]]), 1), r"survival\[0, 1\] = nan"),
        (lambda: allocate_verify_budget(torch.ones(2, 3), 1, backend="npu"), "backend must be one of"),
    ],
)
def test_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_survival_agrees_across_backends(dtype: torch.dtype) -> None:
    """bf16/fp16 survival (e.g. straight from a confidence head) ranks by its own values on every backend."""
    g = torch.Generator().manual_seed(9)
    surv = survival_probs(torch.rand(6, 5, generator=g) ** 0.2).to(dtype)  # rounding makes exact ties likely
    want = brute_force(surv.float(), 13, None)
    for backend in BACKENDS:
        check_layout(run(surv, torch.tensor(13), backend, max_budget=20), want, 5, 20)
