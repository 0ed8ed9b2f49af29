"""Confidence to survival: DSpark's confidence head and the cumulative product that ranks draft slots.

Both are one elementwise (or scan) tensor op: the same code on every device, no kernel and no backend choice.
The survivals feed :func:`ascend_spec.ops.allocate_verify_budget` (docs/allocate_verify_budget.md).
"""

from __future__ import annotations

import torch

from ascend_spec.backend import value_checks_enabled
from ascend_spec.checks import FLOAT_DTYPES, check_out_tensor, check_tensor


def head_confidence(head_logits: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """DSpark's confidence head: ``sigmoid(h)`` in float32, any shape; NaN logits give 0 (never win budget).

    ``out`` (float32, the shape of ``head_logits``, contiguous) receives the result and is returned.
    """
    check_tensor("head_logits", head_logits, dtypes=FLOAT_DTYPES)
    if out is None:
        return torch.nan_to_num(torch.sigmoid(head_logits.float()), nan=0.0)
    check_out_tensor(out, tuple(head_logits.shape), torch.float32, head_logits.device)
    out.copy_(head_logits)  # upcast first: the same fp32 sigmoid as without out
    torch.sigmoid(out, out=out)
    return torch.nan_to_num(out, nan=0.0, out=out)


def survival_probs(conf: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """Survival ``p_{b,i} = c_{b,1} * ... * c_{b,i}`` (cumulative product along K), float32 [B, K].

    ``conf [B, K]`` holds probabilities in [0, 1]; with value checks on, anything else (NaN included) is a
    ValueError. The result is non-increasing along K even in floating point (rounding is monotone and each
    factor is <= 1), which is what makes a request's admitted verify slots a prefix. ``out`` (float32 [B, K],
    contiguous) receives the result and is returned.
    """
    check_tensor("conf", conf, ndim=2, dtypes=FLOAT_DTYPES)
    if conf.shape[1] == 0:
        raise ValueError(f"conf must have K >= 1 positions; got shape {list(conf.shape)}")
    c = conf.float()
    if value_checks_enabled(c.device) and c.numel():
        bad = ~((c >= 0.0) & (c <= 1.0))
        if bool(bad.any()):
            b, k = (int(i) for i in bad.nonzero()[0])
            raise ValueError(f"conf must hold probabilities in [0, 1]; got conf[{b}, {k}] = {float(c[b, k])}")
    if out is None:
        return torch.cumprod(c, dim=1)
    check_out_tensor(out, tuple(conf.shape), torch.float32, conf.device)
    return torch.cumprod(c, dim=1, out=out)
