"""Part 1's ragged GDN verification on vllm-ascend's GDN path, with the AscendC kernels.

vllm-ascend does not subclass vLLM's ``QwenGatedDeltaNetAttention``: its worker patch installs
``AscendGatedDeltaNetAttention``'s ``forward`` / ``_forward_core`` / ``get_state_shape`` / ``get_attn_backend`` on
the in-tree class (``vllm_ascend/patch/worker/patch_qwen3_5.py``), and its ``forward`` calls the custom op
``torch.ops.vllm.qwen_gdn_attention_core``, which calls ``layer._forward_core``. The plugin's GDN layer is an OOT
subclass of the in-tree class (part 1), so on NPU it inherits vllm-ascend's methods; this subclass overrides
``_forward_core`` only:

* steps without drafts (prefills, plain decodes): vllm-ascend's ``_forward_core``; the rows' slots drop their
  records (a fresh committed state);
* speculative rows (0..K drafts each): part 1's ``verify_causal_conv1d`` + ``verify_gated_delta_rule`` on one
  state slot per request, backend ``ascendc`` unless the config forces another;
* a step mixing both: the speculative rows as above, the others through vllm-ascend's ``_forward_core`` with the
  layer's metadata narrowed to them (``spec_sequence_masks`` None, their tokens only).

vllm-ascend's ``_forward_core`` (0.30.0rc2, ``ops/gdn.py``) calls the layerwise KV-pool hooks around its work:
``wait_for_kv_layer_from_connector(prefix)`` and ``record_attention_compute_start()`` before it touches the state,
``maybe_save_kv_layer_to_connector("", [])`` after its output is written. The speculative path calls them in the
same places: before the first state access, and the save after the last write (on a mixed step that is
vllm-ascend's own call for the other rows, which runs last; its second wait finds the layer loaded).
"""

from __future__ import annotations

import copy
import dataclasses

import torch
from vllm.forward_context import get_forward_context

from ascend_spec.backend import ascendc_extension_loaded
from ascend_spec.vllm.gdn_layer import AscendSpecGDNAttention


def check_npu_gdn_engine(vllm_config, gdn_verify: bool) -> None:  # noqa: ANN001
    """On vllm-ascend's runners (V1 and V2), prefix caching with a KV transfer connector moves a cached block's
    GDN state per layer, after that layer's remote load (its layerwise KV pool's ``prepare_mamba_state_copy``);
    the plugin's block moves run before the forward, so they would read a state not loaded yet: refused in one
    line."""
    if (
        gdn_verify
        and vllm_config.speculative_config is not None
        and vllm_config.model_config.is_hybrid
        and vllm_config.cache_config.mamba_cache_mode == "align"
        and getattr(vllm_config, "kv_transfer_config", None) is not None
    ):
        raise ValueError(
            "additional_config['ascend_spec']['gdn_verify'] with prefix caching and kv_transfer_config on "
            "vllm-ascend: its KV pool loads cached GDN states layer by layer during the forward, after the "
            "plugin's block moves; start the engine without kv_transfer_config, with enable_prefix_caching=False, "
            "or set 'gdn_verify': false"
        )


def npu_layer_backend(device_type: str, extension_loaded: bool) -> str:
    """What ``"auto"`` means for the NPU layer's verify pair. vllm-ascend keeps the GDN state value-major
    (:meth:`AscendSpecNPUGDNAttention._ssm_pool`): on an NPU the AscendC kernels take that layout in place, the
    Triton ones (``auto`` without the built extension) do not compile for it, so there the layer runs the
    reference (correct, slow; build the extension). Elsewhere (the emulated NPU's CPU tensors) ``auto`` picks the
    native CPU kernels, which take either layout."""
    if device_type == "npu" and not extension_loaded:
        return "reference"
    return "auto"


class AscendSpecNPUGDNAttention(AscendSpecGDNAttention):
    """Part 1's GDN layer on vllm-ascend's ``_forward_core`` (module docstring)."""

    def __init__(self, config, vllm_config, prefix: str = "", *args, **kwargs) -> None:  # noqa: ANN001
        super().__init__(config, vllm_config, prefix, *args, **kwargs)
        if self.ascend_spec is not None and self.ascend_spec.backend == "auto":
            from vllm.platforms import current_platform

            backend = npu_layer_backend(current_platform.device_type, ascendc_extension_loaded())
            self.ascend_spec = dataclasses.replace(self.ascend_spec, backend=backend)

    def _platform_supported(self) -> bool:
        from vllm.platforms import current_platform

        # vllm-ascend's platform by name: its device_type is "npu" on an NPU (and "cpu" on the emulated NPU of
        # tests/vllm_ascend_emu, which keeps NPUPlatform's name).
        return current_platform.device_name == "npu" or super()._platform_supported()

    def _ssm_pool(self) -> torch.Tensor:
        """``[S, HV, Dk, Dv]`` fp32 view of vllm-ascend's value-major ``[S, HV, Dv, Dk]`` state (the transpose, not a
        reinterpretation): its kernels read the slots as ``[HV, V, K]`` (``recurrent_gated_delta_rule``; the
        prefill transposes them for the key-major FLA kernel: ops/gdn.py:683, device/device_op.py:883)."""
        ssm = self.kv_cache[1]
        if ssm.dtype != torch.float32:
            return super()._ssm_pool()  # its error: the plugin keeps fp32 states
        return ssm.transpose(-1, -2)

    def _forward_core(
        self, mixed_qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor, core_attn_out: torch.Tensor
    ) -> None:
        if self.ascend_spec is None:
            return super()._forward_core(mixed_qkv, b, a, core_attn_out)
        context = get_forward_context()
        if context.attn_metadata is None:  # profile run
            return None
        m = context.attn_metadata[self.prefix]
        if m.num_actual_tokens == 0:
            return None
        self._ensure_records()
        if m.spec_sequence_masks is None:
            super()._forward_core(mixed_qkv, b, a, core_attn_out)
            self._drop_records(m.non_spec_state_indices_tensor[: m.num_decodes + m.num_prefills])
            return None
        from vllm_ascend.ops import gdn as ascend_gdn

        ascend_gdn.wait_for_kv_layer_from_connector(self.prefix)
        ascend_gdn.record_attention_compute_start()
        mixed = m.num_prefills > 0 or m.num_decodes > 0
        if not mixed:
            n = m.num_spec_decode_tokens
            out = self._verify_spec_rows(
                m, mixed_qkv[:n].contiguous(), b[:n].contiguous(), a[:n].contiguous()
            )
            core_attn_out[:n] = out
            ascend_gdn.maybe_save_kv_layer_to_connector("", [])
            return None
        spec = m.spec_token_indx
        out = self._verify_spec_rows(
            m,
            mixed_qkv.index_select(0, spec).contiguous(),
            b.index_select(0, spec).contiguous(),
            a.index_select(0, spec).contiguous(),
        )
        core_attn_out.index_copy_(0, spec, out)
        self._non_spec_rows(context, m, mixed_qkv, b, a, core_attn_out)
        self._drop_records(m.prefill_state_indices if hasattr(m, "prefill_state_indices") else None)
        return None

    def _non_spec_rows(self, context, m, mixed_qkv, b, a, core_attn_out) -> None:  # noqa: ANN001
        """vllm-ascend's core on the rows without drafts, through metadata that holds only them."""
        ns = m.non_spec_token_indx
        # A shallow copy, not dataclasses.replace: vllm-ascend's builder attaches its kernels' metadata
        # (non_spec_prefill_metadata, non_spec_decode_metadata, spec_decode_metadata) as attributes outside the
        # dataclass fields (ops/gdn_attn_builder.py), and _forward_core reads them.
        narrowed = copy.copy(m)
        narrowed.spec_sequence_masks = None
        narrowed.num_spec_decodes = 0
        narrowed.num_spec_decode_tokens = 0
        narrowed.num_actual_tokens = int(ns.numel())
        narrowed.spec_decode_metadata = None
        out = torch.zeros(
            (ns.numel(), *core_attn_out.shape[1:]), dtype=core_attn_out.dtype, device=core_attn_out.device
        )
        saved = context.attn_metadata
        context.attn_metadata = {**saved, self.prefix: narrowed}
        try:
            super()._forward_core(
                mixed_qkv.index_select(0, ns), b.index_select(0, ns), a.index_select(0, ns), out
            )
        finally:
            context.attn_metadata = saved
        core_attn_out.index_copy_(0, ns, out)
