"""Helpers the test modules share: one closeness check, the profiler's count of bytes that outlive a call, the
acceptance estimate's float64 reference and a guard against host reads."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode


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
    events). Temporaries freed inside count 0, and so does garbage in reference cycles (collected before the end)."""
    from torch.profiler import ProfilerActivity, profile

    gc.collect()  # garbage from before is not freed inside, where it would count negative
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
        gc.collect()  # garbage in reference cycles (Triton's interpreter leaves some) is not retained
    return int(sum(event.self_cpu_memory_usage for event in prof.events()))


class EstimateReference:
    """The acceptance estimate's rule in float64 with explicit loops (the formulas of
    ascend_spec/vllm/acceptance_estimate.py's docstring, one entry at a time): the oracle of its V1 and V2 wirings."""

    def __init__(
        self,
        s: int,
        k: int,
        decay: float,
        population_decay: float,
        n0: float,
        r0: float,
        *,
        trial_decay: float = 1.0,
    ) -> None:
        self.k, self.decay, self.population_decay, self.n0, self.r0 = k, decay, population_decay, n0, r0
        self.trial_decay = trial_decay
        self.h = np.zeros((s, k))
        self.n = np.zeros((s, k))
        self.pred = np.ones((s, k))
        self.hh = np.zeros(k)
        self.nn = np.zeros(k)

    def reset(self, slots: list[int]) -> None:
        for s in slots:
            self.h[s] = 0.0
            self.n[s] = 0.0
            self.pred[s] = 1.0

    def observe(self, rows: list[tuple[int, int, int]] | None) -> None:
        self.h *= self.decay
        self.n *= self.decay
        self.hh *= self.population_decay
        self.nn *= self.population_decay
        for s, v, a in rows or []:
            a = min(a, v)
            if v > 0:  # a row that verified drafts ages by trial too
                self.h[s] *= self.trial_decay
                self.n[s] *= self.trial_decay
            for i in range(self.k):
                if i <= a and i < v:  # tried: accepted, or the first rejected
                    self.n[s, i] += self.pred[s, i]
                    self.nn[i] += self.pred[s, i]
                    if i < a:
                        self.h[s, i] += 1.0
                        self.hh[i] += 1.0

    def estimate(self, slots: list[int], conf: np.ndarray | None, available: list[int] | None) -> np.ndarray:
        g = (self.hh + self.n0 * self.r0) / (self.nn + self.n0)
        out = np.zeros((len(slots), self.k))
        for b, s in enumerate(slots):
            for i in range(self.k):
                r = (self.h[s, i] + self.n0 * g[i]) / (self.n[s, i] + self.n0)
                if conf is not None:
                    self.pred[s, i] = conf[b, i]
                    r *= conf[b, i]
                r = min(max(r, 0.0), 1.0)
                out[b, i] = r if available is None or i < available[b] else 0.0
        return out


class NoHostRead(TorchFunctionMode):
    """Fails on every tensor method that hands a value to the host (on a device each one is a sync): the guard
    of the tests that say a step reads nothing on the host."""

    READS = {"item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__", "nonzero"}

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        name = getattr(func, "__name__", "")
        if name in self.READS:
            raise AssertionError(f"host read in the step: Tensor.{name}")
        return func(*args, **(kwargs or {}))


def stand_in_budget_manager(
    verifier, max_num_reqs: int, k: int, score_kind: str, backend: str = "reference", **extra
):  # noqa: ANN001, ANN003, ANN201
    """The plugin's Model Runner V2 manager with a runner's buffers stood in (no engine): the unit tests' one
    way to build it."""
    from ascend_spec.vllm.v2.budget_manager import DeviceBudgetManager

    return DeviceBudgetManager(
        verifier,
        max_num_reqs=max_num_reqs,
        num_speculative_steps=k,
        query_start_loc=torch.zeros(max_num_reqs + 1, dtype=torch.int32),
        num_bonus_tokens=1,
        max_total_logits=10_000,
        score_kind=score_kind,
        backend=backend,
        **extra,
    )
