"""Split a verify budget across requests on the device: the best ``T`` (request, position) draft slots win.

Dynamic verification scores every drafted slot by its survival ``p_{b,i} = c_{b,1} ... c_{b,i}`` (the probability
that the target accepts drafts 1..i of request b) and verifies the ``T`` best slots of the whole batch. In the
async (V2) scheme ``T`` is fixed before the drafter finishes and the split runs on the device with no host read,
so the step can sit inside a captured graph. :func:`allocate_verify_budget` therefore:

* never reads device values on the host (``total_budget`` may be a 0-dim device tensor), except the optional
  value checks of :func:`~ascend_spec.backend.value_checks_enabled`;
* returns tensors whose shapes depend only on B, K and the budget's static upper bound ``max_budget``.

Order (identical on every backend, deterministic): greater survival first; equal survival -> lower request index,
then lower position. Survival is non-increasing along K (a cumulative product of factors in [0, 1], also in
floating point), so with this order a request's admitted slots are always a prefix, even when confidences are
exactly equal or exactly 1.0. Slots at positions ``>= capacities[b]`` are never admitted and take no budget.

Inputs outside the contract, when value checks are off (they raise ValueError when on): survival is clamped
to [0, 1] with NaN counted as 0, each slot is ranked by the running minimum of survival along its row (so the
admitted set is still a prefix), capacities are clamped to [0, K] (in their own width: an int64 capacity past
int32 never wraps) and the budget to [0, max_budget]. An empty batch (B = 0) gives empty outputs.

Backends: ``reference`` sorts the B*K keys once (stable, so ties keep the flat b-major order) and scatters the
admitted flags back; ``triton`` and ``ascendc`` avoid the sort with a threshold search: the T-th best key is
found by a 32-step bisection over the bit patterns of the fp32 keys (non-negative floats order like their bits;
each step one count over the slots), then every slot above the threshold is admitted, and slots equal to it are
admitted in flat order until T is reached.

This package holds the contract, the checks and the dispatch; ``reference.py``, ``triton.py`` and ``ascendc.py``
implement it, each as ``allocate_verify_budget(args, out)``. Worked examples and measurements:
docs/allocate_verify_budget.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ascend_spec.backend import dispatch, value_checks_enabled
from ascend_spec.checks import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    Layout,
    check_int,
    check_outputs,
    check_tensor,
    empty_outputs,
)

OP = "allocate_verify_budget"
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class VerifyAllocation:
    """The split of a verify budget; B requests, K draft positions, L = min(max_budget, B*K) index slots.

    ``draft_index`` lists, request by request, the flat index ``b*K + i`` of each admitted draft in the [B, K]
    draft buffer (so the target's draft tokens are ``drafts.view(-1)[draft_index[:total]]``); its tail past
    the ``query_start_loc[-1] - B`` admitted drafts is -1.
    """

    num_drafts: torch.Tensor  # [B] int32, admitted drafts per request (a prefix of its K positions)
    query_lens: torch.Tensor  # [B] int32, num_drafts + 1 (the bonus token)
    query_start_loc: torch.Tensor  # [B+1] int32, exclusive prefix sum of query_lens
    draft_index: torch.Tensor  # [L] int32, flat draft indices request by request, then -1


@dataclass(frozen=True)
class VerifyBudgetArgs:
    """The op's arguments after checks: what every backend takes (csrc mirror: ``AllocateVerifyBudgetArgs`` in
    csrc/kernels/allocate_verify_budget_tiling.h)."""

    survival: torch.Tensor  # [B, K] fp32/fp16/bf16, any strides
    total_budget: int | torch.Tensor  # a host int, or a 0-dim int32/int64 tensor never read on the host
    capacities: torch.Tensor | None  # [B] int32/int64 or None (= K)
    max_budget: int  # static bound of the budget: sizes draft_index

    @property
    def index_length(self) -> int:
        return index_length(*self.survival.shape, self.max_budget)

    @property
    def budget_tensor(self) -> torch.Tensor | None:
        """The budget as a 0-dim int64 device tensor when it is one (kernels read it there), else None."""
        if isinstance(self.total_budget, torch.Tensor):
            return self.total_budget.to(torch.int64).reshape(())
        return None

    @property
    def budget_value(self) -> int:
        """The host-int budget clamped to ``max_budget`` (0 when the budget is a tensor)."""
        return 0 if isinstance(self.total_budget, torch.Tensor) else min(self.total_budget, self.max_budget)


def index_length(num_reqs: int, k: int, max_budget: int) -> int:
    """Length of ``draft_index``: never more slots than exist, never more than the budget's bound."""
    return min(max_budget, num_reqs * k)


def verify_allocation_layout(num_reqs: int, k: int, max_budget: int) -> Layout:
    """Shape and dtype of every :class:`VerifyAllocation` field (one definition for allocation and checks)."""
    i32 = torch.int32
    return {
        "num_drafts": ((num_reqs,), i32),
        "query_lens": ((num_reqs,), i32),
        "query_start_loc": ((num_reqs + 1,), i32),
        "draft_index": ((index_length(num_reqs, k, max_budget),), i32),
    }


def empty_verify_allocation(
    num_reqs: int, k: int, max_budget: int, *, device: torch.device | str | None = None
) -> VerifyAllocation:
    """Uninitialised outputs for ``allocate_verify_budget(..., out=)``, allocated once and reused by the caller."""
    return empty_outputs(VerifyAllocation, verify_allocation_layout(num_reqs, k, max_budget), device)  # type: ignore[return-value]


def allocate_verify_budget(
    survival: torch.Tensor,
    total_budget: int | torch.Tensor,
    *,
    capacities: torch.Tensor | None = None,
    max_budget: int | None = None,
    backend: str = "auto",
    out: VerifyAllocation | None = None,
) -> VerifyAllocation:
    """Admit the ``total_budget`` best draft slots of ``survival [B, K]`` (semantics: module docstring).

    ``total_budget``: a non-negative int, or a 0-dim int32/int64 tensor on the survival's device (never read on
    the host). ``capacities [B]`` int32/int64 in [0, K] caps request b to its first ``capacities[b]`` positions
    (e.g. the drafts actually proposed); None means K. ``max_budget`` is the static upper bound of the budget
    that sizes ``draft_index``: it defaults to ``total_budget`` when that is an int, else to B*K. ``out`` (from
    :func:`empty_verify_allocation`) receives the split and is returned.
    """
    check_tensor("survival", survival, ndim=2, dtypes=FLOAT_DTYPES)
    device = survival.device
    b, k = survival.shape
    if k == 0:
        raise ValueError(f"survival must have K >= 1 draft positions; got shape {list(survival.shape)}")
    if b * k > INT32_MAX:
        raise ValueError(f"survival has {b * k} slots; flat int32 draft indices allow at most {INT32_MAX}")
    if isinstance(total_budget, torch.Tensor):
        check_tensor("total_budget", total_budget, ndim=0, dtypes=INDEX_DTYPES, device=device)
    else:
        total_budget = check_int("total_budget", total_budget, minimum=0)
    if max_budget is None:
        max_budget = b * k if isinstance(total_budget, torch.Tensor) else total_budget
    else:
        max_budget = check_int("max_budget", max_budget, minimum=0)
        if isinstance(total_budget, int) and total_budget > max_budget:
            raise ValueError(f"total_budget {total_budget} exceeds max_budget {max_budget}")
    if capacities is not None:
        check_tensor("capacities", capacities, dtypes=INDEX_DTYPES, device=device, shape=(b,))

    run = dispatch(OP, backend, device)
    if value_checks_enabled(device):
        _check_values(survival, total_budget, capacities, max_budget)
    layout = verify_allocation_layout(b, k, max_budget)
    if out is None:
        out = empty_outputs(VerifyAllocation, layout, device)  # type: ignore[assignment]
    else:
        check_outputs(out, VerifyAllocation, layout, device)
    assert out is not None
    if b == 0:  # an empty batch: no drafts, query_start_loc = [0], an empty draft_index
        out.query_start_loc.zero_()
        return out
    run(VerifyBudgetArgs(survival, total_budget, capacities, max_budget), out)
    return out


def _check_values(
    survival: torch.Tensor,
    total_budget: int | torch.Tensor,
    capacities: torch.Tensor | None,
    max_budget: int,
) -> None:
    """Value checks (host reads): only under value_checks_enabled."""
    s = survival.float()
    bad = ~((s >= 0.0) & (s <= 1.0))
    if bool(bad.any()):
        i, j = (int(x) for x in bad.nonzero()[0])
        raise ValueError(
            f"survival must hold probabilities in [0, 1]; got survival[{i}, {j}] = {float(s[i, j])}"
        )
    rising = s[:, 1:] > s[:, :-1]
    if bool(rising.any()):
        i, j = (int(x) for x in rising.nonzero()[0])
        raise ValueError(
            f"survival must be non-increasing along K (a cumulative product; see survival_probs); got "
            f"survival[{i}, {j}] = {float(s[i, j])} < survival[{i}, {j + 1}] = {float(s[i, j + 1])}"
        )
    if isinstance(total_budget, torch.Tensor):
        t = int(total_budget)
        if not 0 <= t <= max_budget:
            raise ValueError(f"total_budget must be in [0, max_budget={max_budget}]; got {t}")
    if capacities is not None:
        k = survival.shape[1]
        out = (capacities < 0) | (capacities > k)
        if bool(out.any()):
            i = int(out.nonzero()[0, 0])
            raise ValueError(f"capacities must be in [0, K={k}]; got capacities[{i}] = {int(capacities[i])}")
