"""The emulated NPU's GDN ops (emulated_npu/gdn_ops.py) against independent references, in the layouts vllm-ascend
0.30.0rc2's ``AscendGatedDeltaNetAttention`` calls them with (varlen token-major rows, padding slots, requests with
and without an initial state, value-major recurrent state pools, BNSD prefill inputs, GQA heads).

References: transformers' Qwen3.5 torch fallbacks (``Qwen3_5RMSNorm``, ``Qwen3_5RMSNormGated``, ``l2norm``,
``torch_recurrent_gated_delta_rule`` and the chunked ``torch_chunk_gated_delta_rule``: another algorithm than the
emulation's token recurrence) and float64 formulas (``F.conv1d`` for the convolutions)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from emulated_npu import gdn_ops

qwen35 = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")
# transformers routes these to fla's Triton kernels where fla is installed: the torch fallbacks are the oracles.
RECURRENT = getattr(
    qwen35.torch_recurrent_gated_delta_rule, "__wrapped__", qwen35.torch_recurrent_gated_delta_rule
)
CHUNKED = getattr(qwen35.torch_chunk_gated_delta_rule, "__wrapped__", qwen35.torch_chunk_gated_delta_rule)
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}


def _close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, tol: float | None = None) -> None:
    t = TOL[dtype] if tol is None else tol
    torch.testing.assert_close(got.double(), want.double(), atol=t, rtol=t)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_npu_gemma_rms_norm_is_qwen35_rms_norm(dtype: torch.dtype) -> None:
    g = _gen(0)
    x = (torch.randn(7, 64, generator=g) * 3).to(dtype)
    norm = qwen35.Qwen3_5RMSNorm(64, eps=1e-6)
    norm.weight.data = torch.randn(64, generator=g) * 0.1
    y, rstd = gdn_ops.npu_gemma_rms_norm(x, norm.weight.data.to(dtype), 1e-6)
    assert y.dtype == dtype and rstd.shape == (7, 1)
    with torch.no_grad():
        _close(y, norm(x), dtype)
    # through the dispatcher, as device/device_op.py:850 calls it
    from emulated_npu import glue

    glue._define_c_ascend_ops()
    y2, _ = torch.ops._C_ascend.npu_gemma_rms_norm(x, norm.weight.data.to(dtype), 1e-6)
    assert torch.equal(y2, y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gated_rms_norm_per_head_is_qwen35_rms_norm_gated(dtype: torch.dtype) -> None:
    """The GDN output norm: [tokens * heads, head_dim] rows, norm before gate (ops/gdn.py:370)."""
    g = _gen(1)
    x, z = (torch.randn(12, 32, generator=g).to(dtype) for _ in range(2))
    norm = qwen35.Qwen3_5RMSNormGated(32, eps=1e-6)
    norm.weight.data = (1 + 0.1 * torch.randn(32, generator=g)).to(dtype)
    y, mean, rstd = gdn_ops.layer_norm_fwd_npu(x, norm.weight.data, None, 1e-6, z=z, is_rms_norm=True)
    assert mean is None and rstd.shape == (12,)
    with torch.no_grad():
        _close(y, norm(x, z), dtype)


def test_gated_rms_norm_groups_and_gate_before_norm_against_float64() -> None:
    g = _gen(2)
    x, z = torch.randn(5, 48, generator=g), torch.randn(5, 48, generator=g)
    w, bias = torch.randn(48, generator=g), torch.randn(48, generator=g)
    y, _, rstd = gdn_ops.layer_norm_fwd_npu(
        x, w, bias, 1e-5, z=z, group_size=16, norm_before_gate=False, is_rms_norm=True
    )
    gated = (x.double() * F.silu(z.double())).view(5, 3, 16)
    ms = gated.pow(2).mean(-1, keepdim=True)
    want = (gated / torch.sqrt(ms + 1e-5)).view(5, 48) * w.double() + bias.double()
    _close(y, want, torch.float32)
    _close(rstd, (1 / torch.sqrt(ms + 1e-5)).view(5, 3).t().reshape(-1), torch.float32)  # group-major
    with pytest.raises(NotImplementedError, match="is_rms_norm=False"):
        gdn_ops.layer_norm_fwd_npu(x, w, None, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_l2norm_fwd_is_transformers_l2norm(dtype: torch.dtype) -> None:
    x = torch.randn(1, 9, 2, 128, generator=_gen(3)).to(dtype)
    y = gdn_ops.l2norm_fwd(x)
    assert y.dtype == dtype and y.shape == x.shape
    _close(y, qwen35.l2norm(x.double()), dtype)
    assert gdn_ops.l2norm_fwd(x, output_dtype=torch.float32).dtype == torch.float32


def test_fused_gdn_gating_against_float64() -> None:
    """As transformers' Qwen3.5 GDN computes its gates: g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b);
    large arguments take softplus(x) = x (threshold 20)."""
    g = _gen(4)
    a, b = (
        torch.randn(6, 4, generator=g).to(torch.bfloat16),
        torch.randn(6, 4, generator=g).to(torch.bfloat16),
    )
    a[0, 0] = 30.0  # past the threshold
    a_log, dt_bias = torch.randn(4, generator=g), torch.randn(4, generator=g)
    gate, beta = gdn_ops.fused_gdn_gating(a_log, a, b, dt_bias)
    assert (
        gate.shape == beta.shape == (1, 6, 4) and gate.dtype == torch.float32 and beta.dtype == torch.bfloat16
    )
    _close(gate[0], -a_log.double().exp() * F.softplus(a.double() + dt_bias.double()), torch.float32)
    _close(beta[0], torch.sigmoid(b.double()), torch.bfloat16)


def _conv64(history: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> tuple:
    """float64 causal depthwise conv (F.conv1d over history + x, [L, D] rows) and the last W - 1 inputs."""
    seq = torch.cat((history, x)).double().t().unsqueeze(0)  # [1, D, W - 1 + L]
    y = F.conv1d(seq, weight.double().t().unsqueeze(1), bias.double(), groups=seq.shape[1])
    return F.silu(y[0].t()), seq[0, :, -(weight.shape[0] - 1) :].t()


def _conv_case(seed: int, dtype: torch.dtype):  # noqa: ANN202
    g = _gen(seed)
    d, w, slots = 24, 4, 6
    weight = (torch.randn(w, d, generator=g) * 0.5).to(dtype)  # the packed [W, D] layout (ops/gdn.py:79)
    bias = torch.randn(d, generator=g).to(dtype)
    pool = torch.randn(slots, w - 1, d, generator=g).to(dtype)  # token-major [slots, W - 1, D]
    return d, w, weight, bias, pool


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_causal_conv1d_fn_varlen_prefill_against_transformers(dtype: torch.dtype) -> None:
    """Three prefills (one with an initial state, one without, one padding row) of ragged lengths (1 < W - 1, 5)."""
    d, w, weight, bias, pool = _conv_case(5, dtype)
    lengths, slots, has_init = [5, 1, 3, 4], [2, 4, -1, 0], [True, False, True, True]  # 0: the null block
    x = torch.randn(sum(lengths), d, generator=_gen(6)).to(dtype)
    qsl = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    before = pool.clone()
    out = gdn_ops.causal_conv1d_fn(
        x, weight, bias, conv_states=pool, query_start_loc=qsl, cache_indices=torch.tensor(slots, dtype=torch.int32),
        has_initial_state=torch.tensor(has_init), activation="silu", pad_slot_id=-1, null_block_id=0,
    )  # fmt: skip
    for i in range(2):
        s, e = int(qsl[i]), int(qsl[i + 1])
        history = before[slots[i]] if has_init[i] else torch.zeros(w - 1, d, dtype=dtype)
        want, state = _conv64(history, x[s:e], weight, bias)
        _close(out[s:e], want, dtype)
        _close(pool[slots[i]], state, dtype)  # the slot keeps the last W - 1 inputs (history included)
    assert torch.equal(pool[[1, 3, 5, 0]], before[[1, 3, 5, 0]])  # untouched: others, padding, the null block
    assert not out[6:].any()  # padding and null-block rows stay zero


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_causal_conv1d_update_decode_against_transformers(dtype: torch.dtype) -> None:
    d, w, weight, bias, pool = _conv_case(7, dtype)
    slots = torch.tensor([3, -1, 1], dtype=torch.int32)
    x = torch.randn(3, d, generator=_gen(8)).to(dtype)
    before = pool.clone()
    out = torch.empty_like(x)
    got = gdn_ops.causal_conv1d_update(
        x, pool, weight, bias=bias, activation="silu", conv_state_indices=slots,
        query_start_loc=torch.arange(4, dtype=torch.int32), max_query_len=1, null_block_id=0, out=out,
    )  # fmt: skip
    assert got is out
    for i, slot in ((0, 3), (2, 1)):
        want, state = _conv64(before[slot], x[i : i + 1], weight, bias)
        _close(out[i], want[0], dtype)
        _close(pool[slot], state, dtype)
    assert torch.equal(pool[[0, 2, 4, 5]], before[[0, 2, 4, 5]])
    with pytest.raises(NotImplementedError, match="speculative form"):
        gdn_ops.causal_conv1d_update(
            x, pool, weight, conv_state_indices=slots, query_start_loc=torch.arange(4), max_query_len=4,
            num_accepted_tokens=torch.ones(3, dtype=torch.int32),
        )  # fmt: skip


def _gdn_inputs(seed: int, tokens: int, h: int = 2, hv: int = 4, dk: int = 16, dv: int = 8):  # noqa: ANN202
    g = _gen(seed)
    q = gdn_ops.l2norm_fwd(torch.randn(tokens, h, dk, generator=g))
    k = gdn_ops.l2norm_fwd(torch.randn(tokens, h, dk, generator=g))
    v = torch.randn(tokens, hv, dv, generator=g)
    gate = -torch.rand(tokens, hv, generator=g)  # log decay <= 0
    beta = torch.rand(tokens, hv, generator=g)
    return q, k, v, gate, beta


def _transformers_recurrence(q, k, v, gate, beta, state_kv):  # noqa: ANN001, ANN202 - one sequence, GQA expanded
    hv = v.shape[1]
    rep = hv // q.shape[1]
    out, final = RECURRENT(
        q.repeat_interleave(rep, 1)[None].double(), k.repeat_interleave(rep, 1)[None].double(), v[None].double(),
        gate[None].double(), beta[None].double(), initial_state=state_kv[None].double(), output_final_state=True,
    )  # fmt: skip
    return out[0], final[0]


def test_recurrent_gated_delta_rule_decode_on_value_major_slots() -> None:
    """Three decode rows (one padding slot), GQA 2 -> 4 heads, the pool [slots, HV, V, K] read and written in place."""
    q, k, v, gate, beta = _gdn_inputs(9, tokens=3)
    pool = torch.randn(5, 4, 8, 16, generator=_gen(10)) * 0.3
    before = pool.clone()
    idx = torch.tensor([4, -1, 0], dtype=torch.int32)
    out = gdn_ops.recurrent_gated_delta_rule(
        q, k, v, pool, g=gate, beta=beta, scale=16**-0.5,
        actual_seq_lengths=torch.tensor([0, 1, 1, 1], dtype=torch.int32), ssm_state_indices=idx,
    )  # fmt: skip
    for t, slot in ((0, 4), (2, 0)):
        want, final = _transformers_recurrence(
            q[t : t + 1],
            k[t : t + 1],
            v[t : t + 1],
            gate[t : t + 1],
            beta[t : t + 1],
            before[slot].transpose(-1, -2),
        )
        _close(out[t], want[0], torch.float32)
        _close(pool[slot], final.transpose(-1, -2), torch.float32)
    assert not out[1].any() and torch.equal(pool[1:4], before[1:4])


def test_chunk_gated_delta_rule_fwd_prefill_against_the_chunked_form() -> None:
    """Two ragged prefills (70 tokens: past one 64-token chunk; 5 tokens) in the BNSD layout DeviceOperator hands
    the kernel, key-major initial states; against transformers' chunked algorithm (chunk 64)."""
    lengths = [70, 5]
    q, k, v, gate, beta = _gdn_inputs(11, tokens=sum(lengths))
    init = torch.randn(2, 4, 16, 8, generator=_gen(12)) * 0.3  # [N, HV, K, V]
    cu = (0, 70, 75)
    out, final = gdn_ops.chunk_gated_delta_rule_fwd(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], gate[None], beta[None],
        initial_state=init, output_final_state=True, cu_seqlens=cu, scale=16**-0.5, layout="BNSD",
    )  # fmt: skip
    assert out.shape == (1, 75, 4, 8) and final.shape == init.shape
    for i, (s, e) in enumerate(zip(cu[:-1], cu[1:])):
        want, want_final = CHUNKED(
            q[s:e].repeat_interleave(2, 1)[None].double(), k[s:e].repeat_interleave(2, 1)[None].double(),
            v[s:e][None].double(), gate[s:e][None].double(), beta[s:e][None].double(),
            initial_state=init[i : i + 1].double(), output_final_state=True,
        )  # fmt: skip
        _close(out[0, s:e], want[0], torch.float32, tol=1e-4)
        _close(final[i], want_final[0], torch.float32, tol=1e-4)


def test_ssm_state_gather_and_scatter() -> None:
    pool = torch.randn(6, 2, 3, 4, generator=_gen(13))
    idx = torch.tensor([5, 1, 3], dtype=torch.int32)
    got = gdn_ops.gather_ssm_states(pool, idx, torch.tensor([True, False, True]), output_dtype=torch.bfloat16)
    assert got.dtype == torch.bfloat16
    assert (
        torch.equal(got[0], pool[5].bfloat16())
        and not got[1].any()
        and torch.equal(got[2], pool[3].bfloat16())
    )
    src = torch.randn(3, 2, 3, 4, generator=_gen(14))
    before = pool.clone()
    gdn_ops.scatter_ssm_states_(pool, idx, src)
    assert torch.equal(pool[[5, 1, 3]], src) and torch.equal(pool[[0, 2, 4]], before[[0, 2, 4]])
    with pytest.raises(ValueError, match="source must be"):
        gdn_ops.scatter_ssm_states_(pool, idx, src[:2])
