"""The plugin's settings: one object read from ``additional_config["ascend_spec"]`` of a vLLM engine.

Absent key (or ``{"enabled": false}``): the plugin is inert. Every key is checked; an unknown key or a bad value
is a ``ValueError`` naming ``additional_config['ascend_spec'][key]`` and the value. Later features (dynamic
verification, measured cost profiles, the vllm-ascend adapter) add their keys here, so one object configures
everything the plugin switches on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from ascend_spec.vllm.ascend.settings import VllmAscendSettings, parse_vllm_ascend

CONFIG_KEY = "ascend_spec"
BACKENDS = ("auto", "reference", "triton", "ascendc")


def _where(key: str) -> str:
    return f"additional_config['{CONFIG_KEY}']['{key}']"


@dataclass(frozen=True)
class AscendSpecConfig:
    """What the plugin switches on in one engine.

    * ``gdn_verify``: Gated DeltaNet layers of hybrid targets verify drafts with ``verify_causal_conv1d`` +
      ``verify_gated_delta_rule`` (ragged lengths, one state slot per request) instead of vLLM's 1+K slots.
    * ``block_slots``: the DFlash proposer prepares its block inputs with ``prepare_block_slots``.
    * ``dspark``: ``speculative_config={"method": "dspark"}`` runs on Model Runner V1 (vLLM refuses it there):
      vLLM's DSpark model class drafts Q = K positions from the anchor, with its Markov and confidence heads;
      block inputs always come from ``prepare_block_slots`` (docs/vllm.md, DSpark).
    * ``backend``: backend of every op the plugin calls (``auto``: reference on CPU, triton on CUDA, ascendc on
      NPU; ``ASCEND_SPEC_BACKEND`` overrides ``auto`` as for the ops themselves).
    * ``vllm_ascend``: the vllm-ascend adapter's settings (:mod:`ascend_spec.vllm.ascend.settings`).
    """

    enabled: bool = True
    gdn_verify: bool = True
    block_slots: bool = True
    dspark: bool = True
    backend: str = "auto"
    vllm_ascend: VllmAscendSettings = field(default_factory=VllmAscendSettings)

    def describe(self) -> str:
        parts = [f"backend={self.backend}"]
        parts.append("ragged GDN verification" if self.gdn_verify else "GDN verification off")
        parts.append("DFlash block slots" if self.block_slots else "DFlash block slots off")
        parts.append("DSpark on V1" if self.dspark else "DSpark off")
        return ", ".join(parts)


def parse_config(additional_config: object) -> AscendSpecConfig | None:
    """The plugin's settings from an engine's ``additional_config``, or None when the plugin is not enabled."""
    if additional_config is None:
        return None
    if not isinstance(additional_config, Mapping):
        # vLLM also accepts a hashable object here; the plugin is configured only through a dict.
        return None
    if CONFIG_KEY not in additional_config:
        return None
    raw = additional_config[CONFIG_KEY]
    if raw is True:
        raw = {}
    if raw is False or raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"additional_config['{CONFIG_KEY}'] must be a dict of settings (or true); got {raw!r}"
        )
    known = {f.name for f in fields(AscendSpecConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"unknown key {_where(unknown[0])!s}; known keys: {', '.join(sorted(known))}")
    for key in ("enabled", "gdn_verify", "block_slots", "dspark"):
        if key in raw and not isinstance(raw[key], bool):
            raise ValueError(f"{_where(key)} must be true or false; got {raw[key]!r}")
    if "backend" in raw and raw["backend"] not in BACKENDS:
        raise ValueError(f"{_where('backend')} must be one of {', '.join(BACKENDS)}; got {raw['backend']!r}")
    values = dict(raw)
    values["vllm_ascend"] = parse_vllm_ascend(raw.get("vllm_ascend"))
    config = AscendSpecConfig(**values)
    return config if config.enabled else None
