"""The emulated NPU's CPU ops (emulated_npu/ops.py) against plain PyTorch / float64 references, in the layouts,
masks and dtypes vllm-ascend 0.30.0rc2's runner calls them with. Pure torch: runs in every test environment."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from emulated_npu import ops

TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def _close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    tol = TOL[dtype]
    torch.testing.assert_close(got.double(), want.double(), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape, norm_dims", [((7, 64), 1), ((5, 4, 32), 1), ((3, 2, 16), 2)])
def test_npu_rms_norm(dtype: torch.dtype, shape: tuple[int, ...], norm_dims: int) -> None:
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(shape, generator=g) * 3).to(dtype)
    gamma = torch.randn(shape[-norm_dims:], generator=g).to(dtype)
    y, rstd = ops.npu_rms_norm(x, gamma, 1e-6)
    x64 = x.double()
    axes = tuple(range(len(shape) - norm_dims, len(shape)))
    ms = (x64 * x64).mean(dim=axes, keepdim=True)
    assert y.dtype == dtype and rstd.dtype == torch.float32
    assert rstd.shape == ms.shape
    _close(rstd, 1 / torch.sqrt(ms + 1e-6), torch.float32)
    _close(y, x64 / torch.sqrt(ms + 1e-6) * gamma.double(), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_beta", [False, True])
def test_npu_add_rms_norm_bias(dtype: torch.dtype, with_beta: bool) -> None:
    g = torch.Generator().manual_seed(1)
    x, residual = (torch.randn(6, 48, generator=g).to(dtype) for _ in range(2))
    gamma = torch.randn(48, generator=g).to(dtype)
    beta = torch.randn(48, generator=g).to(dtype) if with_beta else None
    y, rstd, total = ops.npu_add_rms_norm_bias(x, residual, gamma, beta, 1e-5)
    want_total = (x.double() + residual.double()).to(dtype)
    assert torch.equal(total, want_total)  # the next residual: the sum in the activation dtype
    s = want_total.double()
    want = s / torch.sqrt((s * s).mean(-1, keepdim=True) + 1e-5) * gamma.double()
    if with_beta:
        want = want + beta.double()
    _close(y, want, dtype)
    assert rstd.shape == (6, 1)
    # through the dispatcher, as ops/layernorm.py:94 calls it
    from emulated_npu import glue

    glue._define_c_ascend_ops()
    y2, _, total2 = torch.ops._C_ascend.npu_add_rms_norm_bias(x, residual, gamma, beta, 1e-5)
    assert torch.equal(y2, y) and torch.equal(total2, total)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_npu_swiglu(dtype: torch.dtype) -> None:
    x = torch.randn(5, 2 * 40, generator=torch.Generator().manual_seed(2)).to(dtype)
    x64 = x.double()
    _close(ops.npu_swiglu(x), F.silu(x64[:, :40]) * x64[:, 40:], dtype)
    with pytest.raises(ValueError, match="must be even"):
        ops.npu_swiglu(torch.zeros(2, 5))


def _cos_sin_cache(max_pos: int, rot: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's RotaryEmbedding cache [max_pos, rot] = [cos | sin] and the float64 angles it was made from."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).float(), angles


def _rope_reference(x: torch.Tensor, angles: torch.Tensor, rot: int, neox: bool) -> torch.Tensor:
    """Rotation as complex multiplication: z = (a + ib) * e^(i angle) for each rotated pair."""
    x = x.double()
    r, rest = x[..., :rot], x[..., rot:]
    a, b = (r[..., : rot // 2], r[..., rot // 2 :]) if neox else (r[..., 0::2], r[..., 1::2])
    z = torch.complex(a, b) * torch.polar(torch.ones_like(angles), angles)[:, None, :]
    out = torch.cat((z.real, z.imag), -1) if neox else torch.stack((z.real, z.imag), -1).flatten(-2)
    return torch.cat((out, rest), dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rotary_mode", ["half", "interleaved"])
@pytest.mark.parametrize("rot", [32, 16])  # full and partial rotary
def test_npu_mrope(dtype: torch.dtype, rotary_mode: str, rot: int) -> None:
    head, q_heads, k_heads, t = 32, 4, 2, 6
    g = torch.Generator().manual_seed(3)
    cache, angles = _cos_sin_cache(64, rot)
    positions = torch.tensor([0, 1, 5, 17, 63, 40])
    q = torch.randn(t, q_heads * head, generator=g).to(dtype)
    k = torch.randn(t, k_heads * head, generator=g).to(dtype)
    q_out, k_out = ops.npu_mrope(
        positions, q, k, cache, head, mrope_section=[0, 0, 0], rotary_mode=rotary_mode, cache_mode="default"
    )
    neox = rotary_mode == "half"
    for x, out, heads in ((q, q_out, q_heads), (k, k_out, k_heads)):
        want = _rope_reference(x.view(t, heads, head), angles[positions], rot, neox)
        assert out.shape == x.shape and out.dtype == dtype
        _close(out.view(t, heads, head), want, dtype)
    with pytest.raises(NotImplementedError, match="mrope_section"):
        ops.npu_mrope(positions, q, k, cache, head, mrope_section=[8, 4, 4])


def _paged_cache(num_blocks: int, block_size: int, kv_heads: int, d: int, dtype: torch.dtype):
    """K and V caches as vllm-ascend allocates them: two strided views of one buffer."""
    both = torch.zeros(num_blocks, 2, block_size, kv_heads, d, dtype=dtype)
    return both[:, 0], both[:, 1]


def test_npu_scatter_pa_kv_cache_writes_slots_and_skips_padding() -> None:
    block_size, kv_heads, d = 4, 2, 8
    key_cache, value_cache = _paged_cache(5, block_size, kv_heads, d, torch.bfloat16)
    assert not key_cache.is_contiguous()
    g = torch.Generator().manual_seed(4)
    slots = torch.tensor([9, 0, -1, 19, 3, -1], dtype=torch.int32)
    key = torch.randn(6, kv_heads, d, generator=g).to(torch.bfloat16)
    value = torch.randn(6, kv_heads, d, generator=g).to(torch.bfloat16)
    ops.npu_scatter_pa_kv_cache(
        key=key,
        value=value,
        key_cache=key_cache,
        value_cache=value_cache,
        slot_mapping=slots,
        cache_mode="Norm",
    )
    want_k = torch.zeros(5 * block_size, kv_heads, d, dtype=torch.bfloat16)
    want_v = torch.zeros_like(want_k)
    for i, s in enumerate(slots.tolist()):
        if s >= 0:
            want_k[s], want_v[s] = key[i], value[i]
    assert torch.equal(key_cache.reshape(-1, kv_heads, d), want_k)
    assert torch.equal(value_cache.reshape(-1, kv_heads, d), want_v)
    with pytest.raises(NotImplementedError, match="cache_mode"):
        ops.npu_scatter_pa_kv_cache(key, value, key_cache, value_cache, slots, cache_mode="PA_NZ")


def _attention_reference(q, k, v, scale: float, causal: bool) -> torch.Tensor:  # noqa: ANN001
    """One request through PyTorch's SDPA (float64), the causal mask aligned to the last key."""
    n_q, n_k = q.shape[0], k.shape[0]
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    mask = None
    if causal:
        mask = torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=n_k - n_q)
    out = F.scaled_dot_product_attention(
        q.double().transpose(0, 1),
        k.double().transpose(0, 1),
        v.double().transpose(0, 1),
        attn_mask=mask,
        scale=scale,
    )
    return out.transpose(0, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("sparse_mode", [3, 0])
def test_npu_fused_infer_attention_score_tnd_paged(dtype: torch.dtype, sparse_mode: int) -> None:
    """Decode (q=1), speculative verify (q=4) and chunked prefill (q=kv=7) rows in one paged TND call."""
    heads, kv_heads, d, block_size = 4, 2, 16, 4
    q_lens, kv_lens = [1, 4, 7], [9, 6, 7]
    g = torch.Generator().manual_seed(5)
    key_cache, value_cache = _paged_cache(12, block_size, kv_heads, d, dtype)
    block_table = torch.tensor([[7, 2, 10, 0], [1, 11, 0, 0], [4, 3, 0, 0]], dtype=torch.int32)
    qs = [torch.randn(n, heads, d, generator=g).to(dtype) for n in q_lens]
    ks = [torch.randn(n, kv_heads, d, generator=g).to(dtype) for n in kv_lens]
    vs = [torch.randn(n, kv_heads, d, generator=g).to(dtype) for n in kv_lens]
    for r, n in enumerate(kv_lens):
        for p in range(n):
            blk, off = block_table[r, p // block_size], p % block_size
            key_cache[blk, off], value_cache[blk, off] = ks[r][p], vs[r][p]
    scale = 1 / math.sqrt(d)
    out, lse = ops.npu_fused_infer_attention_score(
        query=torch.cat(qs),
        key=key_cache.reshape(12, block_size, -1),  # attention_v1.py:_get_kv_cache_view
        value=value_cache.reshape(12, block_size, -1),
        atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),
        block_table=block_table,
        input_layout="TND",
        block_size=block_size,
        actual_seq_lengths=[1, 5, 12],
        actual_seq_lengths_kv=kv_lens,
        num_key_value_heads=kv_heads,
        num_heads=heads,
        scale=scale,
        sparse_mode=sparse_mode,
    )
    want = torch.cat([_attention_reference(q, k, v, scale, sparse_mode == 3) for q, k, v in zip(qs, ks, vs)])
    assert out.shape == (12, heads, d) and out.dtype == dtype and lse.shape == (12, heads, 1)
    _close(out, want, dtype)


def test_npu_fused_infer_attention_score_prefill_without_cache() -> None:
    """PrefillNoCache: contiguous K/V [T, kv_heads, D] and cumulative KV ends (attention_v1.py:853)."""
    heads, kv_heads, d = 2, 1, 8
    g = torch.Generator().manual_seed(6)
    q = torch.randn(8, heads, d, generator=g)
    k = torch.randn(8, kv_heads, d, generator=g)
    v = torch.randn(8, kv_heads, d, generator=g)
    out, lse = ops.npu_fused_infer_attention_score(
        q, k, v, num_heads=heads, num_key_value_heads=kv_heads, scale=0.3, input_layout="TND",
        actual_seq_lengths=[3, 8], actual_seq_lengths_kv=[3, 8], block_table=None, sparse_mode=3,
    )  # fmt: skip
    want = torch.cat([_attention_reference(q[a:b], k[a:b], v[a:b], 0.3, True) for a, b in ((0, 3), (3, 8))])
    _close(out, want, torch.float32)
    scores = torch.einsum("hd,kd->hk", q[0].double(), k[0:1, 0].double()) * 0.3  # row 0 sees key 0 only
    _close(lse[0, :, 0], torch.logsumexp(scores, -1), torch.float32)
    with pytest.raises(NotImplementedError, match="sparse_mode=4"):
        ops.npu_fused_infer_attention_score(
            q, k, v, num_heads=heads, num_key_value_heads=kv_heads, scale=0.3, input_layout="TND",
            actual_seq_lengths=[8], actual_seq_lengths_kv=[8], sparse_mode=4,
        )  # fmt: skip
    with pytest.raises(NotImplementedError, match="BSND"):
        ops.npu_fused_infer_attention_score(
            q, k, v, num_heads=heads, num_key_value_heads=kv_heads, scale=0.3, input_layout="BSND"
        )


def test_npu_matmul_add_fp32() -> None:
    g = torch.Generator().manual_seed(7)
    x = torch.rand(2, 4, generator=g).half()
    w = torch.rand(2, 4, generator=g).half()
    c = torch.rand(4, 4, generator=g)
    want = c.double() + x.double().T @ w.double()
    ops.npu_matmul_add_fp32(x, w, c)
    _close(c, want, torch.float32)


@pytest.mark.parametrize(
    "blocks_per_kv_block", [1, 2]
)  # 2: the hybrid's physical blocks split for the kernel
def test_compute_slot_mapping_matches_a_per_token_loop(blocks_per_kv_block: int) -> None:
    """The table holds logical (kernel) block ids; the physical split only enters the context-parallel branch."""
    block_size = 4
    block_table = torch.tensor([[3, 8, 1, 0], [5, 2, 0, 0], [9, 6, 7, 4]], dtype=torch.int32)
    query_start_loc = torch.tensor([0, 3, 4, 9], dtype=torch.int32)
    positions = torch.tensor([5, 6, 7, 0, 8, 9, 10, 11, 12, 99, 99], dtype=torch.int64)
    slot_mapping = torch.full((12,), 123, dtype=torch.int64)
    launch = ops.KernelLauncher(ops.compute_slot_mapping)[(4,)]
    launch(9, 12, query_start_loc, positions, block_table, block_table.stride(0), block_size, slot_mapping,
           PAD_ID=-1, TOTAL_CP_WORLD_SIZE=1, IS_CIRCULAR=False, BLOCKS_PER_KV_BLOCK=blocks_per_kv_block)  # fmt: skip
    want = []
    for r in range(3):
        for i in range(int(query_start_loc[r]), int(query_start_loc[r + 1])):
            p = int(positions[i])
            want.append(int(block_table[r, p // block_size]) * block_size + p % block_size)
    assert slot_mapping.tolist() == want + [-1, -1, -1]


@pytest.mark.parametrize("rejected", [None, [1, 0, 3]])  # request 2: every context token rejected
def test_copy_and_expand_dflash_inputs_matches_a_per_request_loop(rejected: list[int] | None) -> None:
    k, block_size, pad_id = 3, 4, 77
    nq = k + 1
    query_start_loc = torch.tensor([0, 2, 3, 6], dtype=torch.int32)
    seq_lens = torch.tensor([10, 5, 12], dtype=torch.int32)
    target_positions = torch.tensor([8, 9, 4, 9, 10, 11], dtype=torch.int64)
    context_slots = torch.arange(100, 106, dtype=torch.int64)
    block_table = torch.tensor([[4, 7, 2, 9], [1, 3, 0, 0], [6, 5, 8, 11]], dtype=torch.int32)
    next_ids = torch.tensor([41, 42, 43], dtype=torch.int32)
    out = {
        "out_input_ids_ptr": torch.zeros(16, dtype=torch.int32),
        "out_context_positions_ptr": torch.zeros(8, dtype=torch.int64),
        "out_query_positions_ptr": torch.zeros(16, dtype=torch.int64),
        "out_context_slot_mapping_ptr": torch.zeros(8, dtype=torch.int64),
        "out_query_slot_mapping_ptr": torch.zeros(16, dtype=torch.int64),
        "out_token_indices_ptr": torch.zeros(9, dtype=torch.int32),
    }
    rej = torch.tensor(rejected, dtype=torch.int32) if rejected else 0
    ops.KernelLauncher(ops.copy_and_expand_dflash_inputs)[(1,)](
        next_token_ids_ptr=next_ids, target_positions_ptr=target_positions, context_slot_mapping_ptr=context_slots,
        block_table_ptr=block_table, block_table_stride=4, query_start_loc_ptr=query_start_loc,
        seq_lens_ptr=seq_lens, num_rejected_tokens_ptr=rej, parallel_drafting_token_id=pad_id,
        block_size=block_size, num_query_per_req=nq, num_speculative_tokens=k, total_input_tokens=6, batch_size=3,
        HAS_NUM_REJECTED=rejected is not None, **out,
    )  # fmt: skip
    assert out["out_context_positions_ptr"][:6].tolist() == target_positions.tolist()
    assert out["out_context_slot_mapping_ptr"][:6].tolist() == context_slots.tolist()
    ids, positions, slots, sample = [], [], [], []
    for r in range(3):
        n_rej = rejected[r] if rejected else 0
        start, end = int(query_start_loc[r]), int(query_start_loc[r + 1]) - n_rej
        last = int(target_positions[end - 1]) if end > start else int(target_positions[start]) - 1
        for q in range(nq):
            ids.append(int(next_ids[r]) if q == 0 else pad_id)
            positions.append(last + 1 + q)
            kv = int(seq_lens[r]) - n_rej + q
            slots.append(int(block_table[r, kv // block_size]) * block_size + kv % block_size)
            if q > 0:
                sample.append(r * nq + q)
    assert out["out_input_ids_ptr"][:12].tolist() == ids
    assert out["out_query_positions_ptr"][:12].tolist() == positions
    assert out["out_query_slot_mapping_ptr"][:12].tolist() == slots
    assert out["out_token_indices_ptr"].tolist() == sample
