"""Every tensor-parallel rank plans the same step: the values a plan reads that one rank measures on its own.

Under tensor parallelism each rank runs the whole runner, its own controller included; the draft lengths decide
the shape of the next step's collectives, so ranks that plan differently desynchronise (one rank skips the
drafter while the other waits in a collective: a hang). The drafters' scores and the accepted counts are the
same on every rank (vLLM gathers the logits to all of them), but what is *timed* is not: the cost profiles
measured at start-up and the measured step corrections differ by a few percent per rank, enough to flip a plan.
Those values are therefore rank 0's on every rank: :func:`from_rank_zero` broadcasts them over the group's CPU
group, once at start-up and once per correction refresh (a few bytes, at a point every rank reaches in the
same order).
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def from_rank_zero(value: T) -> T:
    """Rank 0's ``value`` on every rank of the tensor-parallel group (``value`` itself with one rank, or outside
    an initialised vLLM distributed environment)."""
    try:
        from vllm.distributed.parallel_state import get_tp_group, model_parallel_is_initialized
    except ImportError:  # pragma: no cover - vLLM without the distributed package
        return value
    if not model_parallel_is_initialized():
        return value
    group = get_tp_group()
    if group.world_size == 1:
        return value
    return group.broadcast_object(value, src=0)
