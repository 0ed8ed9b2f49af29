"""CPU implementations of the torch_npu / ``torch.ops._C_ascend`` ops vllm-ascend 0.30.0rc2's runner calls.

Each op is written from its semantics, read from the torch_npu API text and from how vllm-ascend calls it (the
file:line of the caller is given per op; paths are under ``vllm_ascend/`` in the 0.30.0rc2 sdist). Arithmetic is in
float32 and the result is cast to the input dtype, as the Ascend kernels accumulate; the rounding of the real kernels
is not reproduced (see the package docstring). Layouts the runner never uses raise ``NotImplementedError`` naming
the argument, so a new call pattern fails loudly instead of computing something else.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _as_list(values: Sequence[int] | torch.Tensor | None, name: str) -> list[int]:
    if values is None:
        raise ValueError(f"{name} is required for the TND layout, got None")
    return [int(v) for v in (values.tolist() if isinstance(values, torch.Tensor) else values)]


def npu_rms_norm(
    x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch_npu.npu_rms_norm``: (x / sqrt(mean(x^2) + eps) * gamma, rstd).

    The mean runs over the trailing ``gamma.dim()`` axes; rstd (float32) keeps those axes as size 1. Callers:
    ops/layernorm.py:99 (``AscendRMSNorm`` without residual), the Qwen3 q/k norms (same class).
    """
    axes = tuple(range(x.dim() - gamma.dim(), x.dim()))
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=axes, keepdim=True) + epsilon)
    return (xf * rstd * gamma.float()).to(x.dtype), rstd


def npu_add_rms_norm_bias(
    x: torch.Tensor,
    residual: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor | None,
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_C_ascend.npu_add_rms_norm_bias``: s = x + residual; (rms_norm(s) * gamma + beta, rstd, s).

    The sum is rounded to the input dtype before it is normalised and returned as the next residual (the fused
    add-norm contract vLLM's ``RMSNorm(x, residual)`` has). Caller: ops/layernorm.py:94.
    """
    total = (x.float() + residual.float()).to(x.dtype)
    y, rstd = npu_rms_norm(total, gamma, epsilon)
    if beta is not None:
        y = (y.float() + beta.float()).to(x.dtype)
    return y, rstd, total


def npu_swiglu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``torch_npu.npu_swiglu``: a, b = x.chunk(2, dim); silu(a) * b (the gate is the first half).

    Caller: ops/activation.py:37 (``AscendSiluAndMul``, vLLM's merged gate_up projection).
    """
    if x.shape[dim] % 2:
        raise ValueError(f"npu_swiglu: x.shape[{dim}] must be even, got {x.shape[dim]}")
    a, b = x.float().chunk(2, dim=dim)
    return (torch.nn.functional.silu(a) * b).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, neox: bool) -> torch.Tensor:
    if neox:  # "half": pairs (i, i + rot/2)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # "interleaved": pairs (2i, 2i + 1)
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)


def npu_mrope(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    *,
    mrope_section: Sequence[int] = (0, 0, 0),
    rotary_mode: str = "half",
    cache_mode: str = "default",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch_npu.npu_mrope`` with ``mrope_section=[0, 0, 0]``: plain RoPE on [T, heads * head_size] q and k.

    ``cos_sin_cache[pos] = [cos(rot/2) | sin(rot/2)]``; the first ``rot = cos_sin_cache.shape[-1]`` features of
    every head rotate ("half" = NeoX pairs, "interleaved" = GPT-J pairs), the rest pass through (vllm-ascend's
    comment at ops/rotary_embedding.py:239; caller ops/rotary_embedding.py:244).
    """
    if any(int(s) for s in mrope_section):
        raise NotImplementedError(
            f"npu_mrope: multimodal mrope_section={list(mrope_section)} is not emulated"
        )
    if rotary_mode not in ("half", "interleaved"):
        raise ValueError(f"npu_mrope: rotary_mode must be 'half' or 'interleaved', got {rotary_mode!r}")
    rot = cos_sin_cache.shape[-1]
    cos, sin = cos_sin_cache[positions.long()].float().chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)

    def apply(x: torch.Tensor) -> torch.Tensor:
        heads = x.view(x.shape[0], -1, head_size).float()
        out = torch.cat(
            (_rotate(heads[..., :rot], cos, sin, rotary_mode == "half"), heads[..., rot:]), dim=-1
        )
        return out.to(x.dtype).view_as(x)

    return apply(query), apply(key)


def npu_scatter_pa_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    cache_mode: str = "Norm",
    scatter_mode: str | None = None,
    **unused: object,
) -> None:
    """``torch_npu.npu_scatter_pa_kv_cache``: key/value [T, kv_heads, D] written in place to their slots.

    Slot s is (block s // block_size, offset s % block_size) of the ND cache [blocks, block_size, kv_heads, D];
    negative slots (padding) are skipped. Caller: device/device_op.py:166 (``DeviceOperator.reshape_and_cache``).
    """
    if cache_mode != "Norm" or scatter_mode not in (None, "None"):
        raise NotImplementedError(
            f"npu_scatter_pa_kv_cache: cache_mode={cache_mode!r}, scatter_mode={scatter_mode!r} are not emulated"
        )
    slots = slot_mapping.long()
    keep = slots >= 0
    for src, cache in ((key, key_cache), (value, value_cache)):
        block_size = cache.shape[1]  # the caches may be strided views (K and V of one allocation)
        rows = src[: slots.numel()][keep]
        cache[slots[keep] // block_size, slots[keep] % block_size] = rows.reshape(-1, *cache.shape[2:]).to(
            cache.dtype
        )


def _gather_paged(cache: torch.Tensor, blocks: torch.Tensor, length: int, kv_heads: int) -> torch.Tensor:
    """The first ``length`` tokens of one request from a paged [blocks, block_size, kv_heads * D] cache."""
    rows = cache[blocks.long()].reshape(-1, cache.shape[-1])[:length]
    return rows.view(length, kv_heads, -1)


def npu_fused_infer_attention_score(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    num_heads: int,
    num_key_value_heads: int,
    scale: float,
    input_layout: str = "BSH",
    actual_seq_lengths: Sequence[int] | torch.Tensor | None = None,
    actual_seq_lengths_kv: Sequence[int] | torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    block_size: int = 0,
    sparse_mode: int = 0,
    atten_mask: torch.Tensor | None = None,
    **unused: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch_npu.npu_fused_infer_attention_score`` in the TND layout: (out [T, heads, D], lse [T, heads, 1]).

    ``actual_seq_lengths`` are the cumulative query ends per request. With ``block_table`` the key/value are the
    paged caches [blocks, block_size, kv_heads * D] and ``actual_seq_lengths_kv`` the per-request KV lengths; without
    it they are [T_kv, kv_heads, D] and the lengths are cumulative ends. ``sparse_mode=3`` is causal aligned to the
    bottom right (query i of a request with q queries and n keys sees keys j <= n - q + i; the compressed 2048 x
    2048 ``atten_mask`` vllm-ascend passes only encodes that), ``sparse_mode=0`` attends to all n keys (the DFlash
    drafter's non-causal block). GQA: query head h reads KV head h // (heads / kv_heads). Callers:
    attention/attention_v1.py:941 (sparse_mode 0) and :994 via device/device_op.py:217 (sparse_mode 3).
    """
    if input_layout != "TND":
        raise NotImplementedError(
            f"npu_fused_infer_attention_score: input_layout={input_layout!r} is not emulated"
        )
    if sparse_mode not in (0, 3):
        raise NotImplementedError(
            f"npu_fused_infer_attention_score: sparse_mode={sparse_mode} is not emulated"
        )
    if num_heads % num_key_value_heads:
        raise ValueError(
            f"num_heads={num_heads} is not a multiple of num_key_value_heads={num_key_value_heads}"
        )
    q_ends = _as_list(actual_seq_lengths, "actual_seq_lengths")
    kv_lens = _as_list(actual_seq_lengths_kv, "actual_seq_lengths_kv")
    if len(kv_lens) != len(q_ends):
        raise ValueError(f"{len(q_ends)} query lengths but {len(kv_lens)} KV lengths (actual_seq_lengths_kv)")
    group = num_heads // num_key_value_heads
    out = torch.zeros(query.shape[0], num_heads, query.shape[-1], dtype=query.dtype)
    lse = torch.full((query.shape[0], num_heads, 1), float("-inf"), dtype=torch.float32)
    q_start, kv_start = 0, 0
    for i, (q_end, kv_len) in enumerate(zip(q_ends, kv_lens)):
        if block_table is None:  # cumulative KV ends
            k = key[kv_start:kv_len]
            v = value[kv_start:kv_len]
            kv_len, kv_start = kv_len - kv_start, kv_len
        else:
            blocks = block_table[i, : -(-kv_len // block_size)]
            k = _gather_paged(key, blocks, kv_len, num_key_value_heads)
            v = _gather_paged(value, blocks, kv_len, num_key_value_heads)
        q = query[q_start:q_end].float()
        n_q = q.shape[0]
        k = k.float().repeat_interleave(group, dim=1)
        v = v.float().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale
        if sparse_mode == 3:
            visible = torch.arange(kv_len)[None, :] <= (kv_len - n_q + torch.arange(n_q))[:, None]
            scores = scores.masked_fill(~visible, float("-inf"))
        row_lse = torch.logsumexp(scores, dim=-1)
        probs = torch.exp(scores - row_lse[..., None])
        out[q_start:q_end] = torch.einsum("hqk,khd->qhd", probs, v).to(query.dtype)
        lse[q_start:q_end] = row_lse.transpose(0, 1)[..., None]
        q_start = q_end
    return out, lse


def npu_matmul_add_fp32(x: torch.Tensor, weight: torch.Tensor, c: torch.Tensor) -> None:
    """``torch_npu._npu_matmul_add_fp32``: c += x^T @ weight in float32, in place (worker/worker.py:974 warm-up)."""
    c.add_(x.float().transpose(0, 1) @ weight.float())


def compute_slot_mapping(
    num_tokens: int,
    max_num_tokens: int,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    block_table_stride: int,
    block_size: int,
    slot_mapping: torch.Tensor,
    *,
    PAD_ID: int = -1,  # noqa: N803 - the Triton kernel's keyword names
    TOTAL_CP_WORLD_SIZE: int = 1,  # noqa: N803
    IS_CIRCULAR: bool = False,  # noqa: N803
    BLOCKS_PER_KV_BLOCK: int = 1,  # noqa: N803
    **unused: object,
) -> None:
    """vllm-ascend's ``_compute_slot_mapping_kernel`` (ops/triton/compute_slot_mapping.py:12, launched by
    worker/block_table.py:184): slot = block_table[req, pos // block_size] * block_size + pos % block_size for
    each scheduled token, PAD_ID for the tail up to ``max_num_tokens``. ``block_size`` is the attention kernel's
    (logical) block size and the table holds logical block ids; ``BLOCKS_PER_KV_BLOCK`` (> 1 for the hybrid, whose
    physical blocks are split for the kernel) only enters the context-parallel branch (kernel :62)."""
    if TOTAL_CP_WORLD_SIZE != 1 or IS_CIRCULAR:
        raise NotImplementedError(
            f"compute_slot_mapping: TOTAL_CP_WORLD_SIZE={TOTAL_CP_WORLD_SIZE}, IS_CIRCULAR={IS_CIRCULAR}, "
            f"BLOCKS_PER_KV_BLOCK={BLOCKS_PER_KV_BLOCK} are not emulated"
        )
    starts = query_start_loc.long()
    num_reqs = starts.numel() - 1
    req = torch.repeat_interleave(torch.arange(num_reqs), starts[1:] - starts[:-1])
    pos = positions[:num_tokens].long()
    table = block_table.reshape(-1)
    blocks = table[req * block_table_stride + pos // block_size].long()
    slot_mapping[:num_tokens] = (blocks * block_size + pos % block_size).to(slot_mapping.dtype)
    slot_mapping[num_tokens:max_num_tokens] = PAD_ID


class KernelLauncher:
    """``kernel[grid](*args)`` for a CPU function: the grid is ignored (the function covers the whole launch)."""

    def __init__(self, fn) -> None:  # noqa: ANN001
        self.fn = fn

    def __getitem__(self, grid: object):  # noqa: ANN204
        return self.fn


def copy_and_expand_dflash_inputs(
    *,
    next_token_ids_ptr: torch.Tensor,
    target_positions_ptr: torch.Tensor,
    context_slot_mapping_ptr: torch.Tensor,
    out_input_ids_ptr: torch.Tensor,
    out_context_positions_ptr: torch.Tensor,
    out_query_positions_ptr: torch.Tensor,
    out_context_slot_mapping_ptr: torch.Tensor,
    out_query_slot_mapping_ptr: torch.Tensor,
    out_token_indices_ptr: torch.Tensor,
    block_table_ptr: torch.Tensor,
    block_table_stride: int,
    query_start_loc_ptr: torch.Tensor,
    seq_lens_ptr: torch.Tensor,
    num_rejected_tokens_ptr: torch.Tensor | int,
    parallel_drafting_token_id: int,
    block_size: int,
    num_query_per_req: int,
    num_speculative_tokens: int,
    total_input_tokens: int,
    batch_size: int,
    HAS_NUM_REJECTED: bool = False,  # noqa: N803 - the Triton kernel's keyword names
    SAMPLE_FROM_ANCHOR: bool = False,  # noqa: N803
    DCP_SIZE: int = 1,  # noqa: N803
    **unused: object,
) -> None:
    """vllm-ascend's ``copy_and_expand_dflash_and_dspark_inputs_kernel`` (ops/triton/spec_decode/utils.py:69,
    launched by spec_decode/dflash_proposer.py:132): the drafter's inputs for one step.

    Context rows copy the target's positions and slots. Each request gets ``num_query_per_req`` query rows: the
    bonus token then ``parallel_drafting_token_id``, positions following the last accepted context position, slots
    at KV index ``seq_len - rejected + q`` through the block table; the rows to sample are the non-bonus rows (all
    rows with ``SAMPLE_FROM_ANCHOR``).
    """
    if DCP_SIZE != 1:
        raise NotImplementedError(f"copy_and_expand_dflash_inputs: DCP_SIZE={DCP_SIZE} is not emulated")
    n = total_input_tokens
    out_context_positions_ptr[:n] = target_positions_ptr[:n].to(out_context_positions_ptr.dtype)
    out_context_slot_mapping_ptr[:n] = context_slot_mapping_ptr[:n].to(out_context_slot_mapping_ptr.dtype)
    total = batch_size * num_query_per_req
    offs = torch.arange(total)
    req, q = offs // num_query_per_req, offs % num_query_per_req
    starts = query_start_loc_ptr.long()
    rejected = num_rejected_tokens_ptr.long()[req] if HAS_NUM_REJECTED else torch.zeros_like(req)
    ctx_start, valid_end = starts[req], starts[req + 1] - rejected
    has_context = valid_end > ctx_start
    last_pos = target_positions_ptr.long()[torch.where(has_context, valid_end - 1, ctx_start)]
    last_pos = torch.where(has_context, last_pos, last_pos - 1)
    out_query_positions_ptr[:total] = (last_pos + 1 + q).to(out_query_positions_ptr.dtype)
    kv_pos = seq_lens_ptr.long()[req] - rejected + q
    blocks = block_table_ptr[req, kv_pos // block_size].long()
    out_query_slot_mapping_ptr[:total] = (blocks * block_size + kv_pos % block_size).to(
        out_query_slot_mapping_ptr.dtype
    )
    bonus = next_token_ids_ptr.long()[req]
    ids = torch.where(q == 0, bonus, torch.full_like(bonus, parallel_drafting_token_id))
    out_input_ids_ptr[:total] = ids.to(out_input_ids_ptr.dtype)
    dst = out_token_indices_ptr.dtype
    if SAMPLE_FROM_ANCHOR:
        out_token_indices_ptr[req * num_speculative_tokens + q] = offs.to(dst)
    else:
        keep = q > 0
        out_token_indices_ptr[req[keep] * num_speculative_tokens + q[keep] - 1] = offs[keep].to(dst)
