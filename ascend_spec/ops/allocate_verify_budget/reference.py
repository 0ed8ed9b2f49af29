"""Reference (vectorised PyTorch, the oracle) of :func:`ascend_spec.ops.allocate_verify_budget`.

One stable sort of the B*K keys (ties keep the flat b-major order) and a scatter of the admitted flags; no host
read (the budget stays a tensor when it is one).
"""

from __future__ import annotations

import torch

from ascend_spec.ops.allocate_verify_budget import VerifyAllocation, VerifyBudgetArgs


def allocate_verify_budget(args: VerifyBudgetArgs, out: VerifyAllocation) -> None:
    survival, capacities, max_budget = args.survival, args.capacities, args.max_budget
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
    if isinstance(args.total_budget, torch.Tensor):
        budget = args.total_budget.to(device=device, dtype=torch.int64).clamp(0, max_budget)
    else:
        budget = min(args.total_budget, max_budget)
    admit_sorted = elig_sorted & (rank <= budget)
    admitted = torch.zeros(b * k, dtype=torch.bool, device=device)
    admitted.scatter_(0, order, admit_sorted)
    admitted = admitted.view(b, k)
    num_drafts = admitted.sum(dim=1)
    starts = torch.cumsum(num_drafts, dim=0) - num_drafts
    length = args.index_length
    dest = torch.where(admitted, starts[:, None] + pos[None, :], length)
    _finish(num_drafts, dest, length, out)


def _finish(
    num_drafts: torch.Tensor, admitted_dest: torch.Tensor, length: int, out: VerifyAllocation
) -> None:
    """Offsets and gather indices from per-request counts, with no host read.

    ``admitted_dest [B, K]`` int64: the draft_index slot of each admitted (b, i), ``length`` for the others.
    """
    b, k = admitted_dest.shape
    out.num_drafts.copy_(num_drafts)
    torch.add(out.num_drafts, 1, out=out.query_lens)
    out.query_start_loc[0] = 0
    torch.cumsum(out.query_lens, dim=0, dtype=torch.int32, out=out.query_start_loc[1:])
    flat = torch.arange(b * k, dtype=torch.int32, device=num_drafts.device)
    index = torch.full((length + 1,), -1, dtype=torch.int32, device=num_drafts.device)
    index.scatter_(0, admitted_dest.reshape(-1), flat)  # non-admitted slots all land on the spare last entry
    out.draft_index.copy_(index[:length])
