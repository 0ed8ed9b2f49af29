"""Qwen3.5 / Qwen3-Next Gated DeltaNet layer whose speculative path verifies ragged drafts on one state slot.

Replaces vLLM's ``QwenGatedDeltaNetAttention`` (``PluggableLayer.register_oot``). Without the plugin enabled
(or without speculative decoding) the subclass is the in-tree layer, unchanged. Enabled:

* the layer's mamba state is one slot per request: ``MambaSpec.num_speculative_blocks = 0`` and a conv state of
  ``W-1`` columns (vLLM: ``1+K`` slots and ``W-1+K`` columns);
* speculative rows (``0..K`` drafts each, any mix, per the scheduler) run ``verify_causal_conv1d`` then
  ``verify_gated_delta_rule``; their per-token records live outside the KV cache, keyed by state slot
  (``allocate_conv_records`` / ``allocate_records``, ``1+K`` tokens per slot);
* ``pending`` is the rejection sampler's accepted count of the row's previous verify call (vLLM's
  ``num_accepted_tokens``) where the slot holds records of such a call, else 0;
* prefill rows run vLLM's own CPU kernels; their slot's records are dropped (a fresh committed state);
  :meth:`AscendSpecGDNAttention.flush` commits pending records when a request leaves the batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from vllm.forward_context import get_forward_context
from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import QwenGatedDeltaNetAttention
from vllm.platforms import current_platform
from vllm.utils.torch_utils import (
    LayerNameType,
    _encode_layer_name,
    _resolve_layer_name,
    direct_register_custom_op,
)

from ascend_spec.gdn import (
    allocate_conv_records,
    allocate_records,
    flush_pending,
    verify_causal_conv1d,
    verify_gated_delta_rule,
)
from ascend_spec.vllm.config import AscendSpecConfig, parse_config

_OP_NAME = "ascend_spec_gdn_verify_core"
_op_registered = False
#: The speculative rows' (metadata, state slots, cu_seqlens, pending) of the current step: every GDN layer of a
#: step reads the same metadata object and, having seen the same verify calls, flushes and prefills, holds the
#: same recorded counts, so the first layer of a step computes them and the others reuse them.
_step_rows: tuple | None = None


def new_step() -> None:
    """Forget the last step's rows (the runner calls it before each step's states are updated): the cache must
    never outlive a step, even if an engine reused a metadata object."""
    global _step_rows
    _step_rows = None


def _register_op() -> None:
    """The core runs as a vLLM custom op (opaque to torch.compile), like the in-tree ``cpu_gdn_attention_core``."""
    global _op_registered
    if not _op_registered:
        direct_register_custom_op(op_name=_OP_NAME, op_func=_verify_core_op, mutates_args=["core_attn_out"])
        _op_registered = True


def _verify_core_op(
    mixed_qkv: torch.Tensor,
    b: torch.Tensor,
    a: torch.Tensor,
    core_attn_out: torch.Tensor,
    layer_name: LayerNameType,
) -> None:
    layer = get_forward_context().no_compile_layers[_resolve_layer_name(layer_name)]
    layer._verify_core(mixed_qkv, b, a, core_attn_out)


def _release_shims():  # noqa: ANN202 - V1Shims
    """The installed release's per-release differences (0.32.0's where the release is not a supported one)."""
    from ascend_spec.vllm.releases import V1Shims, v1_release

    release = v1_release()
    return release.shims if release is not None else V1Shims()


def _index(t: torch.Tensor) -> torch.Tensor:
    """A contiguous int32 copy: the Triton conv / budget kernels misread strided index views (vLLM hands
    ``block_table[:, 0]`` column views)."""
    return t.to(torch.int32).contiguous()


class AscendSpecGDNAttention(QwenGatedDeltaNetAttention):
    """In-tree GDN layer plus the plugin's ragged verification (module docstring)."""

    def __init__(self, config, vllm_config, prefix: str = "", *args, **kwargs) -> None:  # noqa: ANN001
        super().__init__(config, vllm_config, prefix, *args, **kwargs)
        settings = parse_config(vllm_config.additional_config)
        self.ascend_spec: AscendSpecConfig | None = (
            settings
            if settings is not None and settings.gdn_verify and vllm_config.speculative_config is not None
            else None
        )
        if self.ascend_spec is None:
            return
        if not self._platform_supported():
            raise ValueError(
                f"additional_config['ascend_spec']['gdn_verify'] runs on vLLM's CPU engine in this release; "
                f"platform {current_platform.device_name!r} keeps its GDN state in another layout. Set "
                "'gdn_verify': false to use the rest of the plugin there"
            )
        if getattr(self, "in_proj_qkv", None) is not None:
            raise ValueError(
                "additional_config['ascend_spec']['gdn_verify'] does not support LoRA GDN layers"
            )
        self.max_tokens_per_step = self.num_spec + 1
        self.num_spec = 0  # get_state_shape(): a conv state of W-1 columns, no per-draft columns
        self.records = None
        self.conv_records = None
        self._gate_weights: tuple | None = None  # (weight versions, -exp(A_log) fp32, dt_bias fp32)
        self._release_shims = _release_shims()
        _register_op()
        self._forward_method = self._forward_verify

    def _platform_supported(self) -> bool:
        """Where this layer's state layout is known (vllm-ascend's NPU layer: ascend_spec.vllm.ascend.gdn)."""
        return current_platform.is_cpu()

    # ------------------------------------------------------------------------------------------ state layout

    def get_kv_cache_spec(self, vllm_config):  # noqa: ANN001, ANN201 - vLLM signature
        spec = super().get_kv_cache_spec(vllm_config)
        if self.ascend_spec is None or spec is None:
            return spec
        from dataclasses import replace

        return replace(spec, num_speculative_blocks=0)

    def _conv_pool(self) -> torch.Tensor:
        """``[S, C, W-1]`` view of the conv state (vLLM keeps it dim-first or state-first)."""
        from vllm.model_executor.layers.mamba.mamba_utils import is_conv_state_dim_first

        conv = self.kv_cache[0]
        return conv if is_conv_state_dim_first() else conv.transpose(-1, -2)

    def _ssm_pool(self) -> torch.Tensor:
        """``[S, HV, Dk, Dv]`` fp32 view of the recurrent state, as vLLM's CPU GDN kernels read it."""
        ssm = self.kv_cache[1]
        if ssm.dtype != torch.float32:
            raise ValueError(
                "additional_config['ascend_spec']['gdn_verify'] keeps the GDN recurrent state in fp32 (exact "
                f"replay); the engine allocated {ssm.dtype}. Start it with mamba_ssm_cache_dtype='float32' "
                "(--mamba-ssm-cache-dtype float32)"
            )
        slots, heads, dv, dk = ssm.shape
        return ssm.view(slots, heads, dk, dv)

    def _conv_weight(self) -> torch.Tensor:
        """The plain ``[C, W]`` conv weight (vLLM packs the parameter in place on AVX512-BF16 / ARM-BF16)."""
        w = getattr(self.conv1d, "_cpu_unpacked_conv_weight", None)
        if w is not None:
            return w
        w = self.conv1d.weight
        return w.view(w.size(0), w.size(-1)) if w.dim() == 3 else w

    def _ensure_records(self) -> None:
        if self.records is not None:
            return
        ssm = self._ssm_pool()
        conv = self._conv_pool()
        num_slots = ssm.shape[0]
        self.records = allocate_records(
            num_slots,
            self.max_tokens_per_step,
            ssm.shape[1],
            self.head_k_dim,
            self.head_v_dim,
            num_k_heads=self.num_k_heads // self.tp_size,
            device=ssm.device,
        )
        self.conv_records = allocate_conv_records(
            num_slots,
            self.max_tokens_per_step,
            conv.shape[1],
            conv.shape[2] + 1,
            device=conv.device,
            dtype=conv.dtype,
        )

    @property
    def record_nbytes(self) -> int:
        """Bytes of this layer's verify records (both kinds), 0 before the first speculative step."""
        if self.records is None:
            return 0
        return self.records.nbytes + self.conv_records.nbytes

    # ------------------------------------------------------------------------------------------- protocol

    def _pending(self, slots: torch.Tensor, accepted: torch.Tensor) -> torch.Tensor:
        """Accepted tokens of each slot's last verify call where the slot holds its records, else 0 (and for
        padding slots, -1)."""
        slots = slots.long()
        recorded = self.records.num_recorded.index_select(0, slots.clamp(min=0))
        return torch.where((slots >= 0) & (recorded > 0), accepted.to(torch.int32), 0).to(torch.int32)

    def _drop_records(self, slots: torch.Tensor | None) -> None:
        """A prefill wrote a fresh committed state into these slots: nothing of an older call may replay."""
        if self.records is None or slots is None or slots.numel() == 0:
            return
        slots = slots.long()
        slots = slots[slots >= 0]
        self.records.num_recorded.index_fill_(0, slots, 0)
        self.conv_records.num_recorded.index_fill_(0, slots, 0)

    def clear_records(self) -> None:
        """Drop every slot's records (only while no request holds a slot): what a batch of dummy rows recorded
        (the cost measurement's steps) must never replay into the request that takes the slot next."""
        if self.records is None:
            return
        self.records.num_recorded.zero_()
        self.conv_records.num_recorded.zero_()

    def copy_slots(self, src: torch.Tensor, dst: torch.Tensor, *, records: bool) -> None:
        """Copy the committed recurrent and conv states of slots ``src`` into ``dst`` (one each a row) and, with
        ``records``, their verify records; without, ``dst`` holds no records (nothing of an older call replays).
        Prefix caching moves a request's state between cache blocks so (:mod:`ascend_spec.vllm.gdn_align_moves`)."""
        src, dst = src.long(), dst.long()
        for pool in (self._ssm_pool(), self._conv_pool()):
            pool.index_copy_(0, dst, pool.index_select(0, src))
        if self.records is None:
            return
        if records:
            for t in (*self.records.tensors(), *self.conv_records.tensors()):
                t.index_copy_(0, dst, t.index_select(0, src))
        else:
            self._drop_records(dst)

    def flush(self, slots: torch.Tensor, accepted: torch.Tensor) -> None:
        """Commit the pending records of requests leaving the batch (finished, preempted, unscheduled)."""
        if self.ascend_spec is None or self.records is None or slots.numel() == 0:
            return
        slots = _index(slots)
        pending = self._pending(slots, accepted)
        backend = self.ascend_spec.backend
        flush_pending(self._ssm_pool(), slots, self.records, pending, reset_pending=False, backend=backend)
        flush_pending(
            self._conv_pool(), slots, self.conv_records, pending, reset_pending=False, backend=backend
        )

    # -------------------------------------------------------------------------------------------- forward

    def _forward_verify(self, hidden_states: torch.Tensor) -> torch.Tensor:
        mixed_qkvz, _ = self.in_proj_qkvz(hidden_states)
        ba, _ = self.in_proj_ba(hidden_states)
        if self.gqa_interleaved_layout:  # Qwen3-Next
            query, key, value, z, b, a = self.fix_query_key_value_ordering(mixed_qkvz, ba)
            mixed_qkv = torch.cat([t.reshape(t.size(0), -1) for t in (query, key, value)], dim=-1)
        else:  # Qwen3.5: [q, k, v, z] and [b, a]
            qkv_size = (self.key_dim * 2 + self.value_dim) // self.tp_size
            mixed_qkv, z = mixed_qkvz.split([qkv_size, self.value_dim // self.tp_size], dim=-1)
            z = z.reshape(z.size(0), -1, self.head_v_dim)
            b, a = ba.chunk(2, dim=-1)
        num_tokens = hidden_states.size(0)
        core_attn_out = torch.zeros(
            (num_tokens, self.num_v_heads // self.tp_size, self.head_v_dim),
            dtype=hidden_states.dtype,
            device=hidden_states.device,
        )
        torch.ops.vllm.ascend_spec_gdn_verify_core(
            mixed_qkv, b, a, core_attn_out, _encode_layer_name(self.prefix)
        )
        return self._project_output(core_attn_out, z)

    def _project_output(self, core_attn_out: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Gated RMSNorm, then ``out_proj``: vLLM's ``_output_projection`` where the release has it, else the
        same on the ``[tokens * heads, head_dim]`` views the release's own forwards use."""
        if self._release_shims.gdn_output_projection:
            return self._output_projection(core_attn_out, z)
        shape = z.shape
        normed = self.norm(core_attn_out.reshape(-1, core_attn_out.shape[-1]), z.reshape(-1, shape[-1]))
        output, _ = self.out_proj(normed.reshape(shape).flatten(-2))
        return output

    def _verify_core(
        self, mixed_qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor, core_attn_out: torch.Tensor
    ) -> None:
        from vllm.model_executor.layers.mamba.ops.cpu import gdn_attention as cpu_gdn

        metadata = get_forward_context().attn_metadata
        if metadata is None:  # profiling run
            return
        m = metadata[self.prefix]
        if m.num_actual_tokens == 0:
            return
        self._ensure_records()
        if m.spec_sequence_masks is None:  # prefills (and plain decodes) only: vLLM's own kernels
            cpu_gdn._cpu_gdn_attention_nonspec(self, m, mixed_qkv, b, a, core_attn_out)
            rows = m.num_decodes + m.num_prefills
            self._drop_records(m.non_spec_state_indices_tensor[:rows])
            return

        mixed = m.num_prefills > 0 or m.num_decodes > 0
        if mixed:
            spec_qkv = mixed_qkv.index_select(0, m.spec_token_indx)
            spec_b = b.index_select(0, m.spec_token_indx)
            spec_a = a.index_select(0, m.spec_token_indx)
        else:
            n_tok = m.num_spec_decode_tokens
            spec_qkv, spec_b, spec_a = mixed_qkv[:n_tok], b[:n_tok], a[:n_tok]
            self._verify_spec_rows(m, spec_qkv, spec_b, spec_a, out=core_attn_out[:n_tok])
            return
        out = self._verify_spec_rows(m, spec_qkv, spec_b, spec_a)
        core_attn_out.index_copy_(0, m.spec_token_indx, out)
        ns = m.non_spec_token_indx
        width = self._conv_weight().size(-1)
        ns_out = cpu_gdn._spec_aware_nonspec_subset(
            self,
            m,
            mixed_qkv.index_select(0, ns),
            b.index_select(0, ns),
            a.index_select(0, ns),
            cpu_gdn._conv_buffer_view(self),
            cpu_gdn._ssm_state_view(self),
            width,
        )
        core_attn_out.index_copy_(0, ns, ns_out)
        self._drop_records(m.prefill_state_indices)

    def _rows(self, m) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # noqa: ANN001
        """``(slots, cu_seqlens, pending)`` of the speculative rows, computed once per step (``_step_rows``)."""
        global _step_rows
        if _step_rows is None or _step_rows[0] is not m:
            n = m.num_spec_decodes
            slots = _index(m.spec_state_indices_tensor[:n, 0])
            cu = _index(m.spec_query_start_loc[: n + 1])
            _step_rows = (m, slots, cu, self._pending(slots, m.num_accepted_tokens[:n]))
        return _step_rows[1], _step_rows[2], _step_rows[3]

    def _gates(self, b: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``g = -exp(A_log) softplus(a + dt_bias)`` and ``beta = sigmoid(b)`` in fp32."""
        versions = (self.A_log._version, self.dt_bias._version)  # bumped by every in-place (re)load
        if self._gate_weights is None or self._gate_weights[0] != versions:
            self._gate_weights = (versions, -self.A_log.float().exp(), self.dt_bias.float())
        _, neg_a, dt_bias = self._gate_weights
        return neg_a * F.softplus(a.float() + dt_bias), b.float().sigmoid()

    def _verify_spec_rows(
        self,
        m,  # noqa: ANN001
        x: torch.Tensor,
        b: torch.Tensor,
        a: torch.Tensor,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Conv + recurrence of the speculative rows (tokens in ``spec_query_start_loc`` order)."""
        slots, cu, pending = self._rows(m)
        backend = self.ascend_spec.backend
        y = verify_causal_conv1d(
            x,
            self._conv_weight(),
            self.conv1d.bias,
            cu_seqlens=cu,
            conv_state_pool=self._conv_pool(),
            state_indices=slots,
            records=self.conv_records,
            pending=pending,
            activation=self.activation if self.activation in ("silu", "swish") else None,
            backend=backend,
        )
        tokens = y.size(0)
        kd, vd = self.key_dim // self.tp_size, self.value_dim // self.tp_size
        q, k, v = y.split([kd, kd, vd], dim=-1)  # strided views: the op reads them in place
        g, beta = self._gates(b, a)
        return verify_gated_delta_rule(
            q.view(tokens, -1, self.head_k_dim),
            k.view(tokens, -1, self.head_k_dim),
            v.view(tokens, -1, self.head_v_dim),
            g,
            beta,
            cu_seqlens=cu,
            state_pool=self._ssm_pool(),
            state_indices=slots,
            records=self.records,
            pending=pending,
            scale=self.head_k_dim**-0.5,
            use_qk_l2norm=True,
            backend=backend,
            out=out,
        )
