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

import torch

from ascend_spec.backend import resolve_backend, value_checks_enabled
from ascend_spec.checks import FLOAT_DTYPES, check_tensor

OP = "max_softmax_confidence"
# Reference workspace: 2^20 fp32 elements = 4 MiB (1/128 of the 512 MiB softmax of the seed shape). Chunks this
# big keep the per-chunk op count (4-5 torch ops) low, which matters on CPU, and still sit in a 32 MiB L3.
REFERENCE_CHUNK_ELEMS = 1 << 20


def _check_temperature(temperature: object) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise ValueError(f"temperature must be a float; got {temperature!r}")
    t = float(temperature)
    if not (math.isfinite(t) and t > 0.0):
        raise ValueError(f"temperature must be finite and > 0; got {temperature!r}")
    return t


def _check_logits(name: str, logits: object) -> torch.Tensor:
    check_tensor(name, logits, ndim=2, dtypes=FLOAT_DTYPES)
    assert isinstance(logits, torch.Tensor)
    if logits.shape[1] == 0:
        raise ValueError(f"{name} must have a non-empty vocabulary dimension; got shape {list(logits.shape)}")
    return logits


def finalize_confidence(row_sumexp: torch.Tensor) -> torch.Tensor:
    """``1 / sum`` where the sum is valid, else 0.

    A valid row's sum is >= 1 (its max term is exp(0) = 1 exactly); NaN (NaN or +inf logits) and 0 (all -inf)
    are the broken cases and map to 0.
    """
    ok = row_sumexp >= 1.0
    return torch.where(ok, 1.0 / torch.where(ok, row_sumexp, 1.0), 0.0)


def max_softmax_partials_reference(
    logits: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(row max logit, sum exp((z - max) / T)) in fp32, row chunk by row chunk through one bounded workspace."""
    n, v = logits.shape
    device = logits.device
    row_max = torch.empty(n, dtype=torch.float32, device=device)
    row_sum = torch.empty(n, dtype=torch.float32, device=device)
    if n == 0:
        return row_max, row_sum
    rows = max(1, min(n, REFERENCE_CHUNK_ELEMS // v))
    work = torch.empty(rows, v, dtype=torch.float32, device=device)
    inv_t = 1.0 / temperature
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
    return row_max, row_sum


def _partials(
    logits: torch.Tensor, temperature: float, backend: str, op: str
) -> tuple[torch.Tensor, torch.Tensor]:
    which = resolve_backend(backend, logits.device, op=op)
    if which == "reference":
        return max_softmax_partials_reference(logits, temperature)
    if which == "triton":
        from ascend_spec.ops.max_softmax_confidence.triton import max_softmax_partials_triton

        return max_softmax_partials_triton(logits, temperature)
    from ascend_spec.ops.max_softmax_confidence.ascendc import max_softmax_partials_ascendc

    return max_softmax_partials_ascendc(logits, temperature)


def max_softmax_confidence(
    logits: torch.Tensor, *, temperature: float = 1.0, backend: str = "auto"
) -> torch.Tensor:
    """Top probability of ``softmax(logits / temperature)`` per row, float32 [N], without an N x V temporary.

    ``logits [N, V]`` fp32/bf16/fp16, any strides. Accumulation is fp32. Non-finite logits: module docstring.
    Reference temporary memory: ``4 * max(REFERENCE_CHUNK_ELEMS, V)`` bytes + O(N).
    """
    _check_logits("logits", logits)
    t = _check_temperature(temperature)
    _, row_sum = _partials(logits, t, backend, OP)
    return finalize_confidence(row_sum)


def max_softmax_partials(
    logits_shard: torch.Tensor, *, temperature: float = 1.0, backend: str = "auto"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row ``(row_max, row_sumexp)`` of one vocabulary shard, both float32 [N].

    ``row_max`` is the largest logit of the shard, ``row_sumexp = sum_v exp((z_v - row_max) / T)``. An all
    ``-inf`` row gives ``(-inf, 0)``; a row with NaN or ``+inf`` gives a NaN sum (its ``row_max`` is then
    unspecified). Combine shards with :func:`merge_max_softmax_partials`.
    """
    _check_logits("logits_shard", logits_shard)
    t = _check_temperature(temperature)
    return _partials(logits_shard, t, backend, "max_softmax_partials")


def merge_max_softmax_partials(
    row_max: torch.Tensor, row_sumexp: torch.Tensor, *, temperature: float = 1.0
) -> torch.Tensor:
    """Confidence [N] from S shards' partials ``row_max [S, N]``, ``row_sumexp [S, N]`` (fp32).

    ``M = max_s m_s``, ``S = sum_s s_s * exp((m_s - M) / T)``, ``c = 1 / S`` (0 for broken rows). O(S * N)
    elementwise tensor ops: the same code on every device, no kernel and no host sync.
    """
    check_tensor("row_max", row_max, ndim=2, dtypes=(torch.float32,))
    check_tensor(
        "row_sumexp", row_sumexp, dtypes=(torch.float32,), device=row_max.device, shape=row_max.shape
    )
    if row_max.shape[0] == 0:
        raise ValueError(f"row_max must hold at least one shard; got shape {list(row_max.shape)}")
    t = _check_temperature(temperature)
    big_m = row_max.amax(dim=0)
    safe_m = torch.where(big_m == float("-inf"), 0.0, big_m)  # all shards -inf: exp(-inf - 0) = 0, not NaN
    scale = torch.exp((row_max - safe_m) * (1.0 / t))
    return finalize_confidence((row_sumexp * scale).sum(dim=0))


def vocab_parallel_max_softmax_confidence(
    logits_shard: torch.Tensor,
    group: object | None = None,
    *,
    temperature: float = 1.0,
    backend: str = "auto",
) -> torch.Tensor:
    """Max-softmax confidence [N] of vocabulary-sharded logits; every rank of ``group`` gets the full answer.

    Each rank passes its ``[N, V_rank]`` shard (shards may differ in width). One ``all_gather`` moves 2 floats
    per row per rank (8 bytes x N), never logits. No host sync beyond the collective itself.
    """
    import torch.distributed as dist

    _check_logits("logits_shard", logits_shard)
    t = _check_temperature(temperature)
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("group: torch.distributed is not initialised (call init_process_group first)")
    m, s = _partials(logits_shard, t, backend, "vocab_parallel_max_softmax_confidence")
    world = dist.get_world_size(group)
    mine = torch.stack((m, s))
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine, group=group)
    both = torch.stack(gathered)  # [S, 2, N]
    return merge_max_softmax_partials(both[:, 0].contiguous(), both[:, 1].contiguous(), temperature=t)


def head_confidence(head_logits: torch.Tensor) -> torch.Tensor:
    """DSpark's confidence head: ``sigmoid(h)`` in float32, any shape; NaN logits give 0 (never win budget).

    One elementwise tensor op: the same code on every device, no kernel needed.
    """
    check_tensor("head_logits", head_logits, dtypes=FLOAT_DTYPES)
    c = torch.sigmoid(head_logits.float())
    return torch.nan_to_num(c, nan=0.0)


def survival_probs(conf: torch.Tensor) -> torch.Tensor:
    """Survival ``p_{b,i} = c_{b,1} * ... * c_{b,i}`` (cumulative product along K), float32 [B, K].

    ``conf [B, K]`` holds probabilities in [0, 1]; with value checks on, anything else (NaN included) is a
    ValueError. The result is non-increasing along K even in floating point (rounding is monotone and each
    factor is <= 1), which is what makes a request's admitted verify slots a prefix.
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
    return torch.cumprod(c, dim=1)
