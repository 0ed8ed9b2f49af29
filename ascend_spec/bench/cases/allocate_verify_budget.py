"""Bench case for allocate_verify_budget at the batch of Huawei's talk on DFlash and DSpark
in vLLM (B = 256 requests, K = 16 drafts each).

The op gets the budget as a 0-dim device tensor (the async scheme) and reads nothing on the host. The baseline is
what a synchronous engine does: copy survival to the host, rank every slot there (numpy lexsort: survival desc,
request, position), count per request, build offsets and the gather index, copy them back. Both are checked equal
before timing. On CPU the op still runs its value checks (host reads) unless ASCEND_SPEC_CHECKS=0, so the ratio
is conservative.
"""

from __future__ import annotations

import numpy as np
import torch

from ascend_spec.backend import resolve_backend
from ascend_spec.bench.core import BenchContext, BenchRow
from ascend_spec.ops import VerifyAllocation, allocate_verify_budget, survival_probs
from ascend_spec.ops.allocate_verify_budget.ascendc import instruction_minimum


def host_baseline(survival: torch.Tensor, budget: int, capacities: torch.Tensor) -> VerifyAllocation:
    """Rank on the host (one device-to-host copy and sync), then copy the results back."""
    device = survival.device
    s = survival.float().cpu().numpy()
    caps = capacities.cpu().numpy()
    b, k = s.shape
    req, pos = np.divmod(np.arange(b * k), k)
    eligible = (pos < caps[req]).reshape(-1)
    order = np.lexsort((pos, req, -s.reshape(-1)))
    order = order[eligible[order]][:budget]
    counts = np.bincount(req[order], minlength=b).astype(np.int32)
    qsl = np.zeros(b + 1, dtype=np.int32)
    qsl[1:] = np.cumsum(counts + 1)
    index = np.full(min(budget, b * k), -1, dtype=np.int32)
    admitted = np.concatenate([r * k + np.arange(c) for r, c in enumerate(counts)]).astype(np.int32)
    index[: admitted.size] = admitted
    return VerifyAllocation(
        torch.from_numpy(counts).to(device),
        torch.from_numpy(counts + 1).to(device),
        torch.from_numpy(qsl).to(device),
        torch.from_numpy(index).to(device),
    )


def run(ctx: BenchContext) -> list[BenchRow]:
    impl = resolve_backend(ctx.backend, ctx.device, op="allocate_verify_budget")
    b, k = (8, 4) if ctx.quick else (256, 16)
    budget = b * k // 4  # about 4 verified drafts per request, as in the talk's V2 example
    gen = torch.Generator().manual_seed(0)
    conf = torch.rand(b, k, generator=gen) ** 0.3
    conf[::9] = 1.0  # exact ties
    survival = survival_probs(conf).to(ctx.device)
    caps = torch.randint(k // 2, k + 1, (b,), generator=gen).to(ctx.device)
    budget_t = torch.tensor(budget, device=ctx.device)

    def op() -> VerifyAllocation:
        return allocate_verify_budget(
            survival, budget_t, capacities=caps, max_budget=budget, backend=ctx.backend
        )

    def base() -> VerifyAllocation:
        return host_baseline(survival, budget, caps)

    got, want = op(), base()
    for name, value in vars(want).items():
        if not torch.equal(getattr(got, name), value):
            raise AssertionError(f"verify_budget bench: op and host baseline disagree on {name}")
    time_ms, base_ms = ctx.time(op), ctx.time(base)
    written = sum(t.numel() * t.element_size() for t in vars(got).values())
    return [
        BenchRow(
            op="allocate_verify_budget",
            case=f"B={b} K={k} T={budget}",
            impl=impl,
            baseline="host sort (sync)",
            time_ms=time_ms,
            baseline_ms=base_ms,
            metrics={
                **ctx.instruction_counts(op, instruction_minimum(b, k, budget)),
                "bytes_read": survival.numel() * 4 + b * caps.element_size() + 8,
                "bytes_written": written,
                "host_syncs": 0,
                "baseline_host_syncs": 1,
            },
        )
    ]
