"""The GDN wiring every runner shares: the layer registration, the engine checks, the layers of a runner, the
mamba group and the flush of leaving requests' records.

Model Runner V1 (:mod:`ascend_spec.vllm.v1.runner`) and V2 (:mod:`ascend_spec.vllm.v2.runner`) build the same
layer (:mod:`ascend_spec.vllm.gdn_layer`) and differ only in where a leaving request's state slot and accepted
count are read: V1 from its persistent batch on the host, V2 from its request states on the device.
"""

from __future__ import annotations

import torch

from ascend_spec.vllm.config import AscendSpecConfig

_gdn_registered = False


def register_gdn_layer(*, npu: bool = False) -> None:
    """Make vLLM build the plugin's GDN layer (once per process; before the first model is built)."""
    global _gdn_registered
    if _gdn_registered:
        return
    from vllm.model_executor.custom_op import PluggableLayer, op_registry_oot

    if npu:
        from ascend_spec.vllm.ascend.gdn import AscendSpecNPUGDNAttention as layer_cls
    else:
        from ascend_spec.vllm.gdn_layer import AscendSpecGDNAttention as layer_cls

    if "QwenGatedDeltaNetAttention" not in op_registry_oot:
        PluggableLayer.register_oot(layer_cls, name="QwenGatedDeltaNetAttention")
    _gdn_registered = True


def check_gdn_engine(vllm_config, settings: AscendSpecConfig) -> None:  # noqa: ANN001
    """Engine settings ragged GDN verification needs, refused with the setting to change. Async scheduling is
    served on Model Runner V1 and V2 and on vllm-ascend's runners (the flush gathers the accepted counts on the
    device, in stream order). Prefix caching (``mamba_cache_mode='align'``) is served on
    every runner: the plugin moves the state between cache blocks (:mod:`ascend_spec.vllm.gdn_align_moves`)."""
    if not settings.gdn_verify or not vllm_config.model_config.is_hybrid:
        return
    if vllm_config.speculative_config is None:
        return
    mode = vllm_config.cache_config.mamba_cache_mode
    if mode not in ("none", "align"):
        raise ValueError(
            f"additional_config['ascend_spec']['gdn_verify'] with mamba_cache_mode={mode!r}: the plugin serves "
            "'none' and 'align' ('all' keeps a state per token, which one-slot verification does not produce); "
            "use prefix caching's default mode, turn it off (enable_prefix_caching=False) or set 'gdn_verify': false"
        )


def gdn_layers(runner) -> list:  # noqa: ANN001
    """The runner's GDN layers that verify with the plugin (found once the model is loaded, then kept)."""
    from ascend_spec.vllm.gdn_layer import AscendSpecGDNAttention

    cached = runner.__dict__.get("_ascend_spec_gdn_layers")
    if cached is not None:
        return cached
    layers = [
        layer
        for layer in runner.compilation_config.static_forward_context.values()
        if isinstance(layer, AscendSpecGDNAttention) and layer.ascend_spec is not None
    ]
    if layers:  # before load_model the context is empty: look again next time
        runner._ascend_spec_gdn_layers = layers
    return layers


def mamba_groups(runner, layers: list) -> list[tuple[int, list]]:  # noqa: ANN001
    """``(group index, its layers)`` for every KV-cache group of mamba (GDN) state that holds some of ``layers``
    (:func:`layer_groups`), found once per runner, then kept."""
    cached = runner.__dict__.get("_ascend_spec_gdn_groups")
    if cached is None:
        cached = runner._ascend_spec_gdn_groups = layer_groups(runner.kv_cache_config, layers)
    return cached


def layer_groups(kv_cache_config, layers: list) -> list[tuple[int, list]]:  # noqa: ANN001
    """``(group index, its layers)`` for every KV-cache group of mamba (GDN) state that holds some of ``layers``.

    Each group has its own block table, so one request's state slot differs from group to group (vLLM splits a
    model's GDN layers into groups of the attention groups' size: a 3:1 Qwen3.5 has three of them): a layer's
    slot must be read from its own group's table.
    """
    from vllm.v1.kv_cache_interface import MambaSpec

    by_name = {layer.prefix: layer for layer in layers}
    groups = []
    for i, group in enumerate(kv_cache_config.kv_cache_groups):
        if isinstance(group.kv_cache_spec, MambaSpec):
            members = [by_name.pop(name) for name in group.layer_names if name in by_name]
            if members:
                groups.append((i, members))
    if by_name:
        raise RuntimeError(
            f"ascend-spec: GDN layers {sorted(by_name)} are in no KV-cache group of mamba state; their pending "
            "records could not be committed to their state slots"
        )
    return groups


def flush_slots(layers: list, slots: torch.Tensor, accepted: torch.Tensor) -> None:
    """Commit the pending records of ``slots`` (one state slot per leaving request, with its last accepted
    count) in every GDN layer."""
    if not layers or slots.numel() == 0:
        return
    device = layers[0].kv_cache[1].device
    slots = slots.to(device=device, dtype=torch.int32)
    accepted = accepted.to(device=device, dtype=torch.int32)
    for layer in layers:
        layer.flush(slots, accepted)


def package_version() -> str:
    from ascend_spec import __version__

    return __version__
