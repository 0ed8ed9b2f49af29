"""Reference (vectorised PyTorch, the oracle) of :func:`ascend_spec.ops.max_softmax_partials`.

Row chunks go through one fp32 workspace of ``max(REFERENCE_CHUNK_ELEMS, V)`` elements: max, subtract, exp and
sum of a chunk run while it sits in cache; nothing of size N x V is allocated.
"""

from __future__ import annotations

import torch

from ascend_spec.ops.max_softmax_confidence import REFERENCE_CHUNK_ELEMS, MaxSoftmaxArgs, MaxSoftmaxPartials


def max_softmax_partials(args: MaxSoftmaxArgs, out: MaxSoftmaxPartials) -> None:
    """(row max logit, sum exp((z - max) / T)) in fp32 into ``out``, row chunk by row chunk."""
    logits = args.logits
    n, v = logits.shape
    row_max, row_sum = out
    rows = max(1, min(n, REFERENCE_CHUNK_ELEMS // v))
    work = torch.empty(rows, v, dtype=torch.float32, device=logits.device)
    inv_t = 1.0 / args.temperature
    for start in range(0, n, rows):  # one iteration per chunk of rows, never per token
        x = logits[start : start + rows]
        w = work[: x.shape[0]]
        m = row_max[start : start + rows]
        if x.dtype == torch.float32:
            torch.amax(x, dim=-1, out=m)
            torch.sub(x, m.unsqueeze(-1), out=w)
        else:  # upcast into the workspace first (a mixed-dtype sub would allocate its own fp32 temporary)
            w.copy_(x)
            torch.amax(w, dim=-1, out=m)
            w.sub_(m.unsqueeze(-1))
        if inv_t != 1.0:
            w.mul_(inv_t)
        w.exp_()
        torch.sum(w, dim=-1, out=row_sum[start : start + rows])
    # An all -inf row computed exp(-inf - -inf) = NaN; it holds no probability mass: (-inf, 0).
    row_sum.masked_fill_(row_max == float("-inf"), 0.0)
