"""CPU implementations of the ops vllm-ascend 0.30.0rc2 runs for the Qwen3.5 hybrid's Gated DeltaNet layers.

Each function stands for one NPU op or one Triton launcher of vllm-ascend, written from its semantics: the caller's
code and the docstring or PyTorch fallback vllm-ascend ships next to it (``file:line`` per op, paths under
``vllm_ascend/`` or ``vllm/`` in the 0.30.0rc2 / 0.30.0 wheels). fla_npu (the ``fla_npu.ops.ascendc`` kernels) is
not on PyPI: its semantics are read from the call sites in ``ops/gdn.py`` and from vllm-ascend's own PyTorch
versions of the same kernels (``ops/causal_conv1d.py``, ``_310p/ops/fla/fused_recurrent_gated_delta_rule.py``).
Arithmetic is float32, results are cast to the caller's dtype; layouts and modes the runner never uses raise
``NotImplementedError`` naming the argument. The oracles are in tests/vllm_ascend_emu/test_npu_gdn_ops.py.

Layouts: the conv state pool is ``[slots, W - 1, D]`` (token-major, vLLM's default orientation), the recurrent
state pool ``[slots, HV, V, K]`` (value-major, what vllm-ascend's GDN keeps), conv weights ``[W, D]`` (vllm-ascend
packs vLLM's ``[D, 1, W]`` into that: ops/gdn.py:79).
"""

from __future__ import annotations

import torch

PAD_SLOT_ID = -1  # vllm/v1/attention/backends/utils.py


def npu_gemma_rms_norm(
    x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """``_C_ascend.npu_gemma_rms_norm``: (x / sqrt(mean(x^2) + eps) * (1 + gamma), rstd) over the last axis.

    Gemma's norm (the weight is stored as an offset from 1). Caller: device/device_op.py:850 (A2/A3;
    ``AscendGemmaRMSNorm`` without residual, ops/layernorm.py:123); the A5 variant (device_op.py:1854) says the
    same with ``npu_rms_norm(x, 1 + weight)``.
    """
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + epsilon)
    return (xf * rstd * (1.0 + gamma.float())).to(x.dtype), rstd


def l2norm_fwd(x: torch.Tensor, eps: float = 1e-6, output_dtype: torch.dtype | None = None) -> torch.Tensor:
    """vLLM's FLA ``l2norm_fwd`` (third_party/flash_linear_attention/ops/l2norm.py:95): x / sqrt(sum(x^2) + eps)
    over the last axis, in float32, stored in ``output_dtype`` (default x's). Callers: ops/gdn.py:562, 587, 708."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).sum(dim=-1, keepdim=True) + eps)
    return y.to(output_dtype or x.dtype)


def fused_gdn_gating(
    A_log: torch.Tensor,  # noqa: N803 - vllm-ascend's argument name
    a: torch.Tensor,
    b: torch.Tensor,
    dt_bias: torch.Tensor,
    beta: float = 1.0,
    threshold: float = 20.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``fused_gdn_gating_patch`` (ops/triton/fused_gdn_gating.py:59, kernel :15): a, b ``[T, HV]`` ->
    g = -exp(A_log) * softplus(a + dt_bias) (float32) and sigmoid(b) (b's dtype), both ``[1, T, HV]``.

    softplus is ``log(1 + exp(beta x)) / beta`` where ``beta x <= threshold``, else x. Caller: device/device_op.py:917
    via ops/gdn.py:536.
    """
    if a.dim() != 2 or a.shape != b.shape:
        raise NotImplementedError(
            f"fused_gdn_gating: a and b must be [T, HV]; got {list(a.shape)}, {list(b.shape)}"
        )
    x = a.float() + dt_bias.float()
    softplus = torch.where(beta * x <= threshold, torch.log1p(torch.exp(beta * x)) / beta, x)
    g = -torch.exp(A_log.float()) * softplus
    return g.unsqueeze(0), torch.sigmoid(b.float()).to(b.dtype).unsqueeze(0)


def layer_norm_fwd_npu(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    z: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    group_size: int | None = None,
    norm_before_gate: bool = True,
    is_rms_norm: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """The gated RMSNorm's Triton path (ops/triton/layernorm_gated.py:103): x, z ``[M, N]``, groups of
    ``group_size`` columns normalised separately; with z, ``norm(x) * silu(z)`` if ``norm_before_gate`` else
    ``norm(x * silu(z))``; returns (y, mean or None, rstd ``[groups * M]`` group-major).

    Caller: ``LayerNormFn`` (ops/layernorm.py:157), from ``AscendRMSNormGated.forward_oot`` (ops/layernorm.py:215),
    the GDN layer's output norm (ops/gdn.py:370). Only the RMS form is emulated (the only one the GDN calls).
    """
    if not is_rms_norm:
        raise NotImplementedError("layer_norm_fwd_npu: is_rms_norm=False (LayerNorm) is not emulated")
    m, n = x.shape
    group = n if group_size is None else group_size
    if n % group:
        raise ValueError(f"layer_norm_fwd_npu: group_size={group} must divide N={n}")
    xf = x.float()
    if z is not None and not norm_before_gate:
        xf = xf * torch.nn.functional.silu(z.float())
    grouped = xf.view(m, n // group, group)
    rstd = torch.rsqrt(grouped.pow(2).mean(dim=-1, keepdim=True) + eps)
    y = (grouped * rstd).view(m, n) * weight.float()
    if bias is not None:
        y = y + bias.float()
    if z is not None and norm_before_gate:
        y = y * torch.nn.functional.silu(z.float())
    out = torch.empty_like(x) if out is None else out
    out.copy_(y.to(out.dtype))
    return out, None, rstd.view(m, -1).transpose(0, 1).reshape(-1)


def _check_conv_state(conv_states: torch.Tensor, width: int, dim: int, name: str) -> None:
    if conv_states.dim() != 3 or conv_states.shape[2] != dim:
        raise NotImplementedError(
            f"{name}: conv_states must be [slots, W - 1, D={dim}] (token-major); got {list(conv_states.shape)}"
        )
    if conv_states.shape[1] != width - 1:
        raise NotImplementedError(
            f"{name}: conv_states with {conv_states.shape[1]} rows per slot (W - 1 = {width - 1}: no speculative "
            "rows) is not emulated"
        )


def _slot(index: int, pad_slot_id: int, null_block_id: int | None) -> int | None:
    """A request's state slot, None for padding rows (PAD_SLOT_ID or the null block: vLLM's kernels skip them)."""
    return None if index == pad_slot_id or (null_block_id is not None and index == null_block_id) else index


def _conv_rows(
    window: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, silu: bool
) -> torch.Tensor:
    """Causal depthwise conv of ``window [W - 1 + L, D]`` (history then L new rows) -> ``[L, D]`` float32."""
    w = weight.shape[0]
    length = window.shape[0] - (w - 1)
    y = sum(window[i : i + length] * weight[i].float() for i in range(w))
    if bias is not None:
        y = y + bias.float()
    return torch.nn.functional.silu(y) if silu else y


def _activation(activation: str | bool | None, name: str) -> bool:
    if activation in (None, False):
        return False
    if activation in ("silu", "swish", True):
        return True
    raise ValueError(f"{name}: activation must be None, 'silu' or 'swish'; got {activation!r}")


def causal_conv1d_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    conv_states: torch.Tensor,
    query_start_loc: torch.Tensor,
    cache_indices: torch.Tensor,
    has_initial_state: torch.Tensor,
    activation: str | None = "silu",
    pad_slot_id: int = PAD_SLOT_ID,
    null_block_id: int | None = 0,
) -> torch.Tensor:
    """``fla_npu.ops.ascendc.causal_conv1d_fn``, the prefill conv (ops/gdn.py:499): x ``[T, D]`` varlen by
    ``query_start_loc``; request i starts from ``conv_states[cache_indices[i]]`` if ``has_initial_state[i]`` (else
    zeros), its output rows are silu(conv + bias), and its slot keeps its last W - 1 inputs (history included when
    the request is shorter). Rows of padding requests are left zero. vllm-ascend's PyTorch version of the same
    contract: ops/causal_conv1d.py:55 (dim-major x there).
    """
    w, d = weight.shape
    if x.dim() != 2 or x.shape[1] != d:
        raise NotImplementedError(f"causal_conv1d_fn: x must be [T, D={d}]; got {list(x.shape)}")
    _check_conv_state(conv_states, w, d, "causal_conv1d_fn")
    silu = _activation(activation, "causal_conv1d_fn")
    out = torch.zeros_like(x)
    starts = query_start_loc.tolist()
    for i, (s, e) in enumerate(zip(starts[:-1], starts[1:])):
        slot = _slot(int(cache_indices[i]), pad_slot_id, null_block_id)
        if slot is None or e <= s:
            continue
        state = conv_states[slot]
        history = state.float() if bool(has_initial_state[i]) else torch.zeros(w - 1, d)
        window = torch.cat((history, x[s:e].float()))
        out[s:e] = _conv_rows(window, weight, bias, silu).to(x.dtype)
        state.copy_(window[-(w - 1) :].to(state.dtype))
    return out


def causal_conv1d_update(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    *,
    conv_state_indices: torch.Tensor,
    query_start_loc: torch.Tensor,
    max_query_len: int,
    num_accepted_tokens: torch.Tensor | None = None,
    null_block_id: int | None = 0,
    pad_slot_id: int = PAD_SLOT_ID,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``fla_npu.ops.ascendc.causal_conv1d_update``, the decode conv (ops/gdn.py:516): one token per request
    (``max_query_len=1``) against the W - 1 rows of its slot, which then shift by one. Written into ``out``.

    The speculative form (``num_accepted_tokens``, ``max_query_len = 1 + K``: ops/gdn.py:424) is vllm-ascend's own
    speculative GDN path, which the plugin replaces; it is not emulated.
    """
    if num_accepted_tokens is not None or max_query_len != 1:
        raise NotImplementedError(
            f"causal_conv1d_update: the speculative form (num_accepted_tokens, max_query_len={max_query_len}) "
            "is not emulated"
        )
    w, d = weight.shape
    _check_conv_state(conv_state, w, d, "causal_conv1d_update")
    silu = _activation(activation, "causal_conv1d_update")
    out = torch.zeros_like(x) if out is None else out
    starts = query_start_loc.tolist()
    for i in range(conv_state_indices.shape[0]):
        s, e = starts[i], starts[i + 1]
        slot = _slot(int(conv_state_indices[i]), pad_slot_id, null_block_id)
        if slot is None or e <= s:
            continue
        if e - s != 1:
            raise NotImplementedError(
                f"causal_conv1d_update: request {i} has {e - s} tokens; max_query_len is 1"
            )
        state = conv_state[slot]
        window = torch.cat((state.float(), x[s:e].float()))
        out[s:e] = _conv_rows(window, weight, bias, silu).to(out.dtype)
        state.copy_(window[1:].to(state.dtype))
    return out


def _per_v_head(x: torch.Tensor, num_v_heads: int) -> torch.Tensor:
    """q/k heads ``[.., H, K]`` repeated to the HV value heads (GQA: value head j reads key head j // (HV / H))."""
    return x.repeat_interleave(num_v_heads // x.shape[-2], dim=-2)


def _gated_delta_step(
    h: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the gated delta rule on a value-major state ``h [HV, V, K]`` (float32): decay, delta update,
    readout. q is already scaled; returns (new h, o [HV, V])."""
    h = h * torch.exp(g).view(-1, 1, 1)
    delta = (v - torch.einsum("hvk,hk->hv", h, k)) * beta.view(-1, 1)
    h = h + delta.unsqueeze(-1) * k.unsqueeze(-2)
    return h, torch.einsum("hvk,hk->hv", h, q)


def recurrent_gated_delta_rule(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    state: torch.Tensor,
    *,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
    actual_seq_lengths: torch.Tensor,
    ssm_state_indices: torch.Tensor,
    num_accepted_tokens: torch.Tensor | None = None,
) -> torch.Tensor:
    """``fla_npu.ops.ascendc.recurrent_gated_delta_rule``, the decode recurrence (ops/gdn.py:710): q, k ``[T, H, K]``
    (already L2-normalised by the caller), v ``[T, HV, V]``, g (log decay, float32) and beta ``[T, HV]``; request i
    owns ``actual_seq_lengths[1 + i]`` tokens (element 0 is the first query start, 0: gdn_attn_builder.py:166) and
    the state slot ``ssm_state_indices[i]`` of ``state [slots, HV, V, K]``, read, advanced token by token and
    written back. Returns o ``[T, HV, V]`` in v's dtype. The per-token math is vllm-ascend's PyTorch recurrence
    (_310p/ops/fla/fused_recurrent_gated_delta_rule.py:49): h = h exp(g); h += beta (v - h k) k^T; o = h q scale.

    The speculative form (``num_accepted_tokens``, a slot per draft position: ops/gdn.py:564) is vllm-ascend's own
    speculative GDN path, which the plugin replaces; it is not emulated.
    """
    if num_accepted_tokens is not None:
        raise NotImplementedError(
            "recurrent_gated_delta_rule: the speculative form (num_accepted_tokens) is not emulated"
        )
    lengths = [int(n) for n in actual_seq_lengths.tolist()]
    if lengths[0] != 0:
        raise NotImplementedError(
            f"recurrent_gated_delta_rule: actual_seq_lengths[0] must be 0; got {lengths[0]}"
        )
    lengths = lengths[1:]
    if ssm_state_indices.dim() != 1 or ssm_state_indices.shape[0] < len(lengths):
        raise NotImplementedError(
            f"recurrent_gated_delta_rule: ssm_state_indices must be [B >= {len(lengths)}] (one slot per request); "
            f"got {list(ssm_state_indices.shape)}"
        )
    hv = value.shape[1]
    q = _per_v_head(query.float(), hv) * scale
    k = _per_v_head(key.float(), hv)
    out = torch.zeros_like(value)
    start = 0
    for i, n in enumerate(lengths):
        slot = int(ssm_state_indices[i])
        if slot < 0 or n == 0:
            start += n
            continue
        h = state[slot].float()
        for t in range(start, start + n):
            h, o = _gated_delta_step(h, q[t], k[t], value[t].float(), g[t].float(), beta[t].float())
            out[t] = o.to(out.dtype)
        state[slot] = h.to(state.dtype)
        start += n
    return out


def chunk_gated_delta_rule_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    initial_state: torch.Tensor,
    output_final_state: bool,
    cu_seqlens: tuple[int, ...],
    scale: float,
    layout: str = "BNSD",
    use_qk_l2norm_in_kernel: bool = False,
    state_v_first: bool = False,
    use_exp2: bool = False,
    **unused: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``fla_npu.ops.ascendc.chunk_gated_delta_rule_fwd``, the A2/A3 GDN prefill (device/device_op.py:887, from
    ops/gdn.py:639): q, k ``[1, H, T, K]`` and v ``[1, HV, T, V]`` (head-major, "BNSD"; q and k already
    L2-normalised by the caller), g (log decay) and beta ``[1, T, HV]``, sequences by the host ``cu_seqlens``;
    sequence i starts from ``initial_state[i]`` ``[N, HV, K, V]`` (``state_v_first=False``: key-major). Returns
    (o ``[1, T, HV, V]`` sequence-major, final states ``[N, HV, K, V]``), per the caller's comments.

    The chunked kernel computes the gated delta rule's token recurrence regrouped into chunks of 64; the emulation
    runs the recurrence itself (the same values up to rounding, float32).
    """
    if layout != "BNSD" or state_v_first or use_exp2 or use_qk_l2norm_in_kernel or q.shape[0] != 1:
        raise NotImplementedError(
            f"chunk_gated_delta_rule_fwd: layout={layout!r}, state_v_first={state_v_first}, use_exp2={use_exp2}, "
            f"use_qk_l2norm_in_kernel={use_qk_l2norm_in_kernel}, batch {q.shape[0]} are not emulated"
        )
    if not output_final_state:
        raise NotImplementedError("chunk_gated_delta_rule_fwd: output_final_state=False is not emulated")
    hv, dv = v.shape[1], v.shape[3]
    qf = _per_v_head(q[0].float().transpose(0, 1), hv) * scale  # [T, HV, K]
    kf = _per_v_head(k[0].float().transpose(0, 1), hv)
    vf = v[0].float().transpose(0, 1)  # [T, HV, V]
    bounds = [int(c) for c in cu_seqlens]
    if len(bounds) - 1 != initial_state.shape[0]:
        raise ValueError(
            f"chunk_gated_delta_rule_fwd: {len(bounds) - 1} sequences but initial_state has "
            f"{initial_state.shape[0]} rows"
        )
    out = torch.zeros(1, vf.shape[0], hv, dv, dtype=v.dtype)
    finals = torch.empty(initial_state.shape, dtype=torch.float32)
    for i, (s, e) in enumerate(zip(bounds[:-1], bounds[1:])):
        h = initial_state[i].float().transpose(-1, -2)  # value-major for the step
        for t in range(s, e):
            h, o = _gated_delta_step(h, qf[t], kf[t], vf[t], g[0, t].float(), beta[0, t].float())
            out[0, t] = o.to(out.dtype)
        finals[i] = h.transpose(-1, -2)
    return out, finals.to(initial_state.dtype)


def gather_ssm_states(
    state: torch.Tensor,
    indices: torch.Tensor,
    has_initial_state: torch.Tensor,
    *,
    output_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """vllm-ascend's ``gather_ssm_states`` (ops/triton/mamba/state_index.py, called at ops/gdn.py:634): row i is
    ``state[indices[i]]`` where ``has_initial_state[i]``, else zeros (that row is never read), in ``output_dtype``."""
    if (
        indices.dim() != 1
        or has_initial_state.shape != indices.shape
        or has_initial_state.dtype != torch.bool
    ):
        raise ValueError(
            f"gather_ssm_states: indices [B] and a bool has_initial_state [B] are required; got "
            f"{list(indices.shape)}, {list(has_initial_state.shape)} {has_initial_state.dtype}"
        )
    out = torch.zeros((indices.numel(), *state.shape[1:]), dtype=output_dtype or state.dtype)
    keep = has_initial_state.nonzero().flatten()
    out[keep] = state[indices[keep].long()].to(out.dtype)
    return out


def scatter_ssm_states_(state: torch.Tensor, indices: torch.Tensor, source: torch.Tensor) -> None:
    """vllm-ascend's ``scatter_ssm_states_`` (ops/triton/mamba/state_index.py, called at ops/gdn.py:650):
    ``state[indices[i]] = source[i]`` in place (source already in the state's dtype)."""
    if source.shape != (indices.numel(), *state.shape[1:]):
        raise ValueError(
            f"scatter_ssm_states_: source must be {[indices.numel(), *state.shape[1:]]}; got {list(source.shape)}"
        )
    state[indices.long()] = source.to(state.dtype)
