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
admitted set is still a prefix), capacities are clamped to [0, K] and the budget to [0, max_budget].

Backends: ``reference`` sorts the B*K keys once (stable, so ties keep the flat b-major order) and scatters the
admitted flags back; ``triton`` and ``ascendc`` avoid the sort with a threshold search: the T-th best key is
found by a 32-step bisection over the bit patterns of the fp32 keys (non-negative floats order like their bits;
each step one count over the slots), then every slot above the threshold is admitted, and slots equal to it are admitted in flat
order until T is reached.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ascend_spec.backend import resolve_backend, value_checks_enabled
from ascend_spec.checks import FLOAT_DTYPES, INDEX_DTYPES, check_tensor

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


def _check_int(name: str, value: object, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int; got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    return value


def allocate_verify_budget(
    survival: torch.Tensor,
    total_budget: int | torch.Tensor,
    *,
    capacities: torch.Tensor | None = None,
    max_budget: int | None = None,
    backend: str = "auto",
) -> VerifyAllocation:
    """Admit the ``total_budget`` best draft slots of ``survival [B, K]`` (semantics: module docstring).

    ``total_budget``: a non-negative int, or a 0-dim int32/int64 tensor on the survival's device (never read on
    the host). ``capacities [B]`` int32/int64 in [0, K] caps request b to its first ``capacities[b]`` positions
    (e.g. the drafts actually proposed); None means K. ``max_budget`` is the static upper bound of the budget
    that sizes ``draft_index``: it defaults to ``total_budget`` when that is an int, else to B*K.
    """
    check_tensor("survival", survival, ndim=2, dtypes=FLOAT_DTYPES)
    device = survival.device
    b, k = survival.shape
    if b == 0:
        raise ValueError(f"survival must hold at least one request; got shape {list(survival.shape)}")
    if k == 0:
        raise ValueError(f"survival must have K >= 1 draft positions; got shape {list(survival.shape)}")
    if b * k > INT32_MAX:
        raise ValueError(f"survival has {b * k} slots; flat int32 draft indices allow at most {INT32_MAX}")
    if isinstance(total_budget, torch.Tensor):
        check_tensor("total_budget", total_budget, ndim=0, dtypes=INDEX_DTYPES, device=device)
    else:
        total_budget = _check_int("total_budget", total_budget)
    if max_budget is None:
        max_budget = b * k if isinstance(total_budget, torch.Tensor) else total_budget
    else:
        max_budget = _check_int("max_budget", max_budget)
        if isinstance(total_budget, int) and total_budget > max_budget:
            raise ValueError(f"total_budget {total_budget} exceeds max_budget {max_budget}")
    if capacities is not None:
        check_tensor("capacities", capacities, dtypes=INDEX_DTYPES, device=device, shape=(b,))

    which = resolve_backend(backend, device, op=OP)
    if value_checks_enabled(device):
        _check_values(survival, total_budget, capacities, max_budget)
    if which == "reference":
        return allocate_verify_budget_reference(survival, total_budget, capacities, max_budget)
    if which == "triton":
        from ascend_spec.ops.allocate_verify_budget.triton import allocate_verify_budget_triton

        return allocate_verify_budget_triton(survival, total_budget, capacities, max_budget)
    from ascend_spec.ops.allocate_verify_budget.ascendc import allocate_verify_budget_ascendc

    return allocate_verify_budget_ascendc(survival, total_budget, capacities, max_budget)


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


def index_length(num_reqs: int, k: int, max_budget: int) -> int:
    """Length of ``draft_index``: never more slots than exist, never more than the budget's bound."""
    return min(max_budget, num_reqs * k)


def finish_allocation(num_drafts: torch.Tensor, admitted_dest: torch.Tensor, length: int) -> VerifyAllocation:
    """Offsets and gather indices from per-request counts, with no host read.

    ``admitted_dest [B, K]`` int64: the draft_index slot of each admitted (b, i), ``length`` for the others.
    """
    b, k = admitted_dest.shape
    device = num_drafts.device
    num_drafts = num_drafts.to(torch.int32)
    query_lens = num_drafts + 1
    query_start_loc = torch.zeros(b + 1, dtype=torch.int32, device=device)
    query_start_loc[1:] = torch.cumsum(query_lens, dim=0)
    flat = torch.arange(b * k, dtype=torch.int32, device=device)
    index = torch.full((length + 1,), -1, dtype=torch.int32, device=device)
    index.scatter_(0, admitted_dest.reshape(-1), flat)  # non-admitted slots all land on the spare last entry
    index = index[:length].clone()
    return VerifyAllocation(num_drafts, query_lens, query_start_loc, index)


def allocate_verify_budget_reference(
    survival: torch.Tensor,
    total_budget: int | torch.Tensor,
    capacities: torch.Tensor | None,
    max_budget: int,
) -> VerifyAllocation:
    """One stable sort of the B*K keys; no host read (the budget stays a tensor when it is one)."""
    b, k = survival.shape
    device = survival.device
    key = torch.nan_to_num(survival.float(), nan=0.0).clamp(0.0, 1.0)
    # Rank a slot no better than its predecessors: admitted sets are prefixes by construction.
    key = torch.cummin(key, dim=1).values
    pos = torch.arange(k, device=device)
    cap = torch.full((b,), k, device=device) if capacities is None else capacities.to(torch.int64).clamp(0, k)
    eligible = pos[None, :] < cap[:, None]
    key = torch.where(eligible, key, -1.0)
    # Stable descending sort: equal keys keep the flat order b*K + i, i.e. lower request, then lower position.
    order = torch.sort(key.reshape(-1), descending=True, stable=True).indices
    elig_sorted = eligible.reshape(-1)[order]
    rank = torch.cumsum(elig_sorted.to(torch.int64), dim=0)  # 1-based rank among eligible slots
    if isinstance(total_budget, torch.Tensor):
        budget = total_budget.to(device=device, dtype=torch.int64).clamp(0, max_budget)
    else:
        budget = min(total_budget, max_budget)
    admit_sorted = elig_sorted & (rank <= budget)
    admitted = torch.zeros(b * k, dtype=torch.bool, device=device)
    admitted.scatter_(0, order, admit_sorted)
    admitted = admitted.view(b, k)
    num_drafts = admitted.sum(dim=1)
    starts = torch.cumsum(num_drafts, dim=0) - num_drafts
    length = index_length(b, k, max_budget)
    dest = torch.where(admitted, starts[:, None] + pos[None, :], length)
    return finish_allocation(num_drafts, dest, length)
