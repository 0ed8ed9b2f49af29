"""Per-position drafter confidence: max-softmax of the drafter's logits, a confidence head, survival products.

Dynamic verification needs, for every drafted position i, a confidence c_i that the target accepts it. DFlash has
no confidence head, so c_i is the top probability of its own distribution,
``c_i = max_v softmax(z_i / T)_v = 1 / sum_v exp((z_iv - max_u z_iu) / T)``. Materialising the softmax costs an
N x V fp32 temporary (N = 1024, V = 131072: 512 MiB for a 4 KiB answer), so every backend here reads the logits
from memory once, accumulates in fp32 and never allocates anything of size N x V:

* ``reference`` (vectorised PyTorch, the CPU path and the oracle) walks row chunks through one fp32 workspace of
  ``max(REFERENCE_CHUNK_ELEMS, V)`` elements (4 MiB, or one row when V > 2^20): max, subtract, exp and sum of a
  chunk run while it sits in cache. Its temporary memory is ``4 * max(REFERENCE_CHUNK_ELEMS, V)`` bytes plus
  O(N) outputs, whatever N is;
* ``triton`` keeps an online (max, sum) per row in registers over BLOCK_V tiles, rescaling the sum by
  ``exp((m_old - m_new) / T)`` when the max grows;
* ``ascendc`` reduces each Unified Buffer tile to (max, sum) and combines a row's tiles at its end
  (``csrc/kernels/max_softmax_confidence.cpp``).

Non-finite logits (documented, tested, identical on every backend):

* ``-inf`` entries are masked tokens and contribute nothing; a row that is entirely ``-inf`` gets confidence 0;
* a row holding any NaN or ``+inf`` is numerically broken; its confidence is 0, so it never wins verify
  budget. Rows are independent: a broken row never changes another row's value.

For tensor parallelism the vocabulary is sharded; :func:`max_softmax_partials` gives each rank
``(row_max, row_sumexp)`` (the max logit of its shard and ``sum exp((z - row_max) / T)``), and
:func:`merge_max_softmax_partials` combines S shards; :func:`vocab_parallel_max_softmax_confidence` exchanges only
those two floats per row with one ``all_gather``. A shard whose row is entirely ``-inf`` reports
``(-inf, 0)``, so a padded vocabulary tail is harmless; a shard holding NaN or ``+inf`` reports a NaN sum, which
the merge turns into confidence 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ascend_spec.backend import dispatch, resolve_backend
from ascend_spec.checks import FLOAT_DTYPES, check_out_tensor, check_outputs, check_tensor, empty_outputs

OP = "max_softmax_confidence"
PARTIALS_OP = "max_softmax_partials"
# Reference workspace: 2^20 fp32 elements = 4 MiB (1/128 of the 512 MiB softmax at N = 1024, V = 131072). Chunks
# this big keep the per-chunk op count (4-5 torch ops) low, which matters on CPU, and still sit in a 32 MiB L3.
REFERENCE_CHUNK_ELEMS = 1 << 20


class MaxSoftmaxPartials(NamedTuple):
    """Per-row partials of one vocabulary shard, both float32 [N] (a tuple: ``m, s = max_softmax_partials(x)``)."""

    row_max: torch.Tensor
    row_sumexp: torch.Tensor


@dataclass(frozen=True)
class MaxSoftmaxArgs:
    """The partials' arguments after checks: what every backend takes (csrc mirror: ``MaxSoftmaxConfidenceArgs``
    in csrc/kernels/max_softmax_confidence_tiling.h)."""

    logits: torch.Tensor  # [N, V] fp32/bf16/fp16, any strides, V >= 1
    temperature: float  # in [MIN_TEMPERATURE, MAX_TEMPERATURE]: 1/T is a normal float32


def empty_max_softmax_partials(
    num_rows: int, *, device: torch.device | str | None = None
) -> MaxSoftmaxPartials:
    """Uninitialised outputs for ``max_softmax_partials(..., out=)``, allocated once and reused by the caller."""
    return empty_outputs(MaxSoftmaxPartials, _layout(num_rows), device)  # type: ignore[return-value]


def _layout(num_rows: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    return {"row_max": ((num_rows,), torch.float32), "row_sumexp": ((num_rows,), torch.float32)}


# Temperatures every backend computes correctly: 1/T is a normal float32 (the kernels scale by it in fp32; past
# these bounds it overflows to inf or flushes to 0). Powers of two, so 1/T is exact at both ends.
MIN_TEMPERATURE = 2.0**-100
MAX_TEMPERATURE = 2.0**100


def _check_temperature(temperature: object) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise ValueError(f"temperature must be a float; got {temperature!r}")
    t = float(temperature)
    if not (math.isfinite(t) and t > 0.0):
        raise ValueError(f"temperature must be finite and > 0; got {temperature!r}")
    if not MIN_TEMPERATURE <= t <= MAX_TEMPERATURE:
        raise ValueError(
            f"temperature must be in [2**-100, 2**100] (1/temperature must be a normal float32); got {temperature!r}"
        )
    return t


def _check_logits(name: str, logits: object) -> torch.Tensor:
    check_tensor(name, logits, ndim=2, dtypes=FLOAT_DTYPES)
    assert isinstance(logits, torch.Tensor)
    if logits.shape[1] == 0:
        raise ValueError(f"{name} must have a non-empty vocabulary dimension; got shape {list(logits.shape)}")
    return logits


def finalize_confidence(row_sumexp: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``1 / sum`` where the sum is valid, else 0 (into ``out`` when given).

    A valid row's sum is >= 1 (its max term is exp(0) = 1 exactly); NaN (NaN or +inf logits) and 0 (all -inf)
    are the broken cases and map to 0.
    """
    ok = row_sumexp >= 1.0
    inverse = 1.0 / torch.where(ok, row_sumexp, 1.0)  # 1 on broken rows, so the product below is exactly 0
    if out is None:
        return inverse.mul_(ok)
    return torch.mul(inverse, ok, out=out)


def _partials(
    logits: torch.Tensor, temperature: float, backend: str, caller: str, out: MaxSoftmaxPartials | None
) -> MaxSoftmaxPartials:
    run = dispatch(PARTIALS_OP, backend, logits.device, caller=caller)
    layout = _layout(logits.shape[0])
    if out is None:
        out = empty_outputs(MaxSoftmaxPartials, layout, logits.device)  # type: ignore[assignment]
    else:
        check_outputs(out, MaxSoftmaxPartials, layout, logits.device)
    assert out is not None
    if logits.shape[0]:
        run(MaxSoftmaxArgs(logits, temperature), out)
    return out


def max_softmax_confidence(
    logits: torch.Tensor, *, temperature: float = 1.0, backend: str = "auto", out: torch.Tensor | None = None
) -> torch.Tensor:
    """Top probability of ``softmax(logits / temperature)`` per row, float32 [N], without an N x V temporary.

    ``logits [N, V]`` fp32/bf16/fp16, any strides. Accumulation is fp32. Non-finite logits: module docstring.
    ``out`` (float32 [N], contiguous) receives the result and is returned. Reference temporary memory:
    ``4 * max(REFERENCE_CHUNK_ELEMS, V)`` bytes + O(N).
    """
    _check_logits("logits", logits)
    t = _check_temperature(temperature)
    if out is not None:
        check_out_tensor(out, (logits.shape[0],), torch.float32, logits.device)
    n, v = logits.shape
    resolved = resolve_backend(backend, logits.device, op=OP)
    if 0 < n * v <= REFERENCE_CHUNK_ELEMS and resolved == "reference":
        return _one_chunk_confidence(logits, t, out)
    if resolved == "cpu":  # the native kernel finalizes in the same call
        from ascend_spec.ops.max_softmax_confidence import cpu

        if out is None:
            out = torch.empty(n, dtype=torch.float32, device=logits.device)
        return cpu.max_softmax_confidence(logits, t, out)
    _, row_sum = _partials(logits, t, backend, OP, None)
    return finalize_confidence(row_sum, out)


def _one_chunk_confidence(logits: torch.Tensor, temperature: float, out: torch.Tensor | None) -> torch.Tensor:
    """The reference when every row fits one workspace chunk (a decode step's draft block): the chunk loop's
    arithmetic (fp32 copy, row max, subtract, scale, exp, sum) without the loop, the partials' bookkeeping and the
    finalize masks, which is what a CPU engine step pays for. ``1 / sum`` is the loop's value on every valid row
    (its sum is >= 1); every broken row lands on NaN (an all ``-inf`` row: ``exp(-inf - -inf)``; ``+inf`` or NaN:
    NaN), which becomes 0 as the module docstring says."""
    work = logits.float()
    work = work - work.amax(dim=-1, keepdim=True)  # never in place: fp32 logits are the caller's tensor
    if temperature != 1.0:
        work.mul_(1.0 / temperature)
    work.exp_()
    total = torch.sum(work, dim=-1) if out is None else torch.sum(work, dim=-1, out=out)
    return total.reciprocal_().nan_to_num_(nan=0.0)


def max_softmax_partials(
    logits_shard: torch.Tensor,
    *,
    temperature: float = 1.0,
    backend: str = "auto",
    out: MaxSoftmaxPartials | None = None,
) -> MaxSoftmaxPartials:
    """Per-row ``(row_max, row_sumexp)`` of one vocabulary shard, both float32 [N].

    ``row_max`` is the largest logit of the shard, ``row_sumexp = sum_v exp((z_v - row_max) / T)``. An all
    ``-inf`` row gives ``(-inf, 0)``; a row with NaN or ``+inf`` gives a NaN sum (its ``row_max`` is then
    unspecified). Combine shards with :func:`merge_max_softmax_partials`. ``out`` (from
    :func:`empty_max_softmax_partials`) receives both and is returned.
    """
    _check_logits("logits_shard", logits_shard)
    t = _check_temperature(temperature)
    return _partials(logits_shard, t, backend, PARTIALS_OP, out)


def merge_max_softmax_partials(
    row_max: torch.Tensor,
    row_sumexp: torch.Tensor,
    *,
    temperature: float = 1.0,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Confidence [N] from S shards' partials ``row_max [S, N]``, ``row_sumexp [S, N]`` (fp32).

    ``M = max_s m_s``, ``S = sum_s s_s * exp((m_s - M) / T)``, ``c = 1 / S`` (0 for broken rows). O(S * N)
    elementwise tensor ops: the same code on every device, no kernel and no host sync. ``out`` (float32 [N])
    receives the result.
    """
    check_tensor("row_max", row_max, ndim=2, dtypes=(torch.float32,))
    check_tensor(
        "row_sumexp", row_sumexp, dtypes=(torch.float32,), device=row_max.device, shape=row_max.shape
    )
    if row_max.shape[0] == 0:
        raise ValueError(f"row_max must hold at least one shard; got shape {list(row_max.shape)}")
    t = _check_temperature(temperature)
    if out is not None:
        check_out_tensor(out, (row_max.shape[1],), torch.float32, row_max.device)
    big_m = row_max.amax(dim=0)
    safe_m = torch.where(big_m == float("-inf"), 0.0, big_m)  # all shards -inf: exp(-inf - 0) = 0, not NaN
    scale = torch.exp((row_max - safe_m) * (1.0 / t))
    return finalize_confidence((row_sumexp * scale).sum(dim=0), out)


def vocab_parallel_max_softmax_confidence(
    logits_shard: torch.Tensor,
    group: object | None = None,
    *,
    temperature: float = 1.0,
    backend: str = "auto",
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Max-softmax confidence [N] of vocabulary-sharded logits; every rank of ``group`` gets the full answer.

    Each rank passes its ``[N, V_rank]`` shard (shards may differ in width). One ``all_gather`` moves 2 floats
    per row per rank (8 bytes x N), never logits. No host sync beyond the collective itself. ``out`` (float32
    [N]) receives the result.
    """
    import torch.distributed as dist

    _check_logits("logits_shard", logits_shard)
    t = _check_temperature(temperature)
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("group: torch.distributed is not initialised (call init_process_group first)")
    if out is not None:
        check_out_tensor(out, (logits_shard.shape[0],), torch.float32, logits_shard.device)
    m, s = _partials(logits_shard, t, backend, "vocab_parallel_max_softmax_confidence", None)
    world = dist.get_world_size(group)
    mine = torch.stack((m, s))
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine, group=group)
    both = torch.stack(gathered)  # [S, 2, N]
    return merge_max_softmax_partials(
        both[:, 0].contiguous(), both[:, 1].contiguous(), temperature=t, out=out
    )
