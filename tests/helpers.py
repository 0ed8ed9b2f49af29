"""Helpers the test modules share: one closeness check and the profiler's count of bytes that outlive a call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def assert_close(
    got: torch.Tensor,
    want: torch.Tensor,
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
    dtype: torch.dtype | None = None,
) -> None:
    """``|got - want| <= atol + rtol * |want|`` elementwise, compared in float64 (``want`` is usually a float64
    oracle); shapes must match, NaN must face NaN and, when given, ``got`` must have ``dtype``. The message names
    the worst element."""
    if dtype is not None:
        assert got.dtype == dtype, f"dtype {got.dtype} != {dtype}"
    assert tuple(got.shape) == tuple(want.shape), f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    g, w = got.double(), want.double()
    nan = g.isnan() | w.isnan()
    assert torch.equal(g.isnan(), w.isnan()), "NaN positions differ"
    err = torch.where(nan, 0.0, (g - w).abs() - (atol + rtol * w.abs()))
    if err.numel() and float(err.max()) > 0:
        i = int(err.reshape(-1).argmax())
        raise AssertionError(
            f"element {i}: got {float(g.reshape(-1)[i])}, want {float(w.reshape(-1)[i])} (rtol {rtol}, atol {atol})"
        )


def retained_bytes(fn: Callable[[], Any]) -> int:
    """Bytes torch allocated while ``fn()`` ran and had not freed when it returned: the sum of every profiler
    event's own (self) memory change on CPU, allocations and frees, inside ops and outside them (``[memory]``
    events). Temporaries freed inside count 0."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return int(sum(event.self_cpu_memory_usage for event in prof.events()))
