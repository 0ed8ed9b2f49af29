"""Splitting a verify budget of T drafts across requests (the controller's own reference).

The rule: the T greatest survivals in the whole [B, K] matrix win (ties go to the lower request, then the lower
position), and each request verifies as many drafts as it won. Survivals are cumulative products of confidences,
so they never rise along a row and every request's winners are a prefix of its drafts.

``ascend_spec.ops.allocate_verify_budget`` (the ops package) implements the same rule on every backend without
reading device values; :func:`split_budget` uses it when it is importable and falls back to the vectorised
reference here otherwise. The reference also never reads device values when ``total_budget`` is a host int.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class BudgetSplit:
    """Per-request verify lengths and the offsets that delimit them in the target's input."""

    num_drafts: torch.Tensor  # [B] int32, admitted drafts per request (a prefix)
    query_lens: torch.Tensor  # [B] int32, num_drafts + 1 (the bonus token)
    query_start_loc: torch.Tensor  # [B + 1] int32, exclusive cumsum of query_lens
    draft_index: torch.Tensor  # [T] int32, flat b*K + i of each admitted draft, request by request
    allocator: str  # "ops" (ascend_spec.ops.allocate_verify_budget) or "reference"


def reference_split(survival: torch.Tensor, total_budget: int) -> BudgetSplit:
    """Take the ``total_budget`` best survivals (stable sort: ties -> lower request, lower position); count."""
    b, k = survival.shape
    t = max(0, min(int(total_budget), b * k))
    flat = survival.reshape(-1).float()
    order = torch.sort(flat, descending=True, stable=True).indices[:t]
    return finish_split(order, b, k, "reference")


def finish_split(admitted: torch.Tensor, b: int, k: int, allocator: str) -> BudgetSplit:
    """Counts, lengths, offsets and the request-major draft index from the flat indices of the admitted slots."""
    num = torch.bincount(torch.div(admitted, k, rounding_mode="floor"), minlength=b).to(torch.int32)
    lens = num + 1
    loc = torch.zeros(b + 1, dtype=torch.int32, device=num.device)
    loc[1:] = torch.cumsum(lens, 0)
    index = torch.sort(admitted).values.to(torch.int32)  # b*K + i ascending: request by request, prefixes
    return BudgetSplit(num, lens, loc, index, allocator)


def ops_allocator():
    """``ascend_spec.ops.allocate_verify_budget`` when the ops package provides it, else None."""
    try:
        from ascend_spec import ops
    except ImportError:
        return None
    return getattr(ops, "allocate_verify_budget", None)


def split_budget(survival: torch.Tensor, total_budget: int, *, backend: str = "auto") -> BudgetSplit:
    """The on-device split (async mode): the ops implementation when available, else the reference."""
    alloc = ops_allocator()
    if alloc is None:
        return reference_split(survival, total_budget)
    if survival.dtype == torch.float64:  # the ops take the drafter's dtypes (fp32/fp16/bf16)
        survival = survival.float()
    t = int(total_budget)
    out = alloc(survival, t, backend=backend)
    return BudgetSplit(out.num_drafts, out.query_lens, out.query_start_loc, out.draft_index[:t], "ops")
