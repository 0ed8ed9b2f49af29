"""The plugin's settings: one object read from ``additional_config["ascend_spec"]`` of a vLLM engine.

Absent key (or ``{"enabled": false}``): the plugin is inert. Every key is checked; an unknown key or a bad value
is a ``ValueError`` naming ``additional_config['ascend_spec'][key]`` and the value. Later features (dynamic
verification, measured cost profiles, the vllm-ascend adapter) add their keys here, so one object configures
everything the plugin switches on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

from ascend_spec.vllm.ascend.settings import VllmAscendSettings, parse_vllm_ascend

CONFIG_KEY = "ascend_spec"
BACKENDS = ("auto", "reference", "triton", "ascendc", "cpu")
DYNAMIC_MODES = ("auto", "sync", "async", "off")
PROFILE_STATISTICS = ("min", "median")
ESTIMATE_MODES = ("auto", "combine")


def _where(key: str) -> str:
    return f"additional_config['{CONFIG_KEY}']['{key}']"


@dataclass(frozen=True)
class DynamicConfig:
    """Dynamic verification (``additional_config["ascend_spec"]["dynamic"]``, docs/vllm.md).

    * ``mode``: ``auto`` (the default: ``async`` where the engine runs vLLM's async scheduling, else ``sync``),
      ``sync`` (after each drafter run: confidence -> survival -> controller -> per-request draft
      lengths, one device-to-host copy per step), ``async`` (with vLLM's async scheduling: the survivals staged
      without a wait in the step, planned where V1 hands the output over, the lengths handed to the scheduler
      with it and applied one step later: :mod:`ascend_spec.vllm.v1.dynamic_async`) or ``off`` (every request
      verifies all K drafts).
    * ``profile``: ``"measure"`` (time the target and the drafter at engine start, cached as JSON under
      ``VLLM_CACHE_ROOT``) or the path of a profile file (read when it exists, else measured and written there).
    * ``max_startup_s``: bound on the seconds measuring may add to engine start (exceeded: a clear error).
    * ``warmup`` / ``repeats``: calls per measured token count before / while timing.
    * ``statistic``: ``min`` (default: the uncontended cost on a shared machine) or ``median`` of the repeats.
    * ``probe_interval``: after a step planned as plain decoding, the drafter is skipped for
      ``probe_interval - 1`` steps (plain decodes that cost V(B) only), then runs once to probe again; 1 drafts at
      every step.
    * ``calibrate``: scale the drafter's survivals by the acceptance the target showed per draft position
      (:mod:`ascend_spec.graph.calibration`), so a confident but wrong drafter stops being over-verified.
    * ``measure_steps``: correct the profiles' costs by the engine's measured step parts (the proposer's whole
      step, the target step with and without drafts; :mod:`ascend_spec.vllm.step_costs`); ``false`` plans on
      the profiles alone.
    * ``measure_every``: once a batch size has a full window of measured steps, time one decode step in this
      many (default 4; 1 times every step).
    * ``log_every``: every this many engine steps with decode requests, one stats line in vLLM's log (mean verify
      length per request class, plain-decoding steps; :mod:`ascend_spec.vllm.verify_log`); 0: none.
    * ``estimate``: the online acceptance estimate per request (:mod:`ascend_spec.vllm.acceptance_estimate`).
      ``auto`` (default): drafters without scores of their own (ngram, MTP, EAGLE-3, draft_model) are planned
      on it, DFlash and DSpark on their own scores (with ``calibrate``); ``combine``: DFlash and DSpark too,
      their confidences times each request's observed / predicted acceptance (``calibrate`` then has no
      effect: the estimate is its per-request form).
    """

    mode: str = "auto"
    profile: str = "measure"
    max_startup_s: float = 120.0
    warmup: int = 2
    repeats: int = 7
    statistic: str = "min"
    probe_interval: int = 8
    calibrate: bool = True
    measure_steps: bool = True
    measure_every: int = 4
    estimate: str = "auto"
    log_every: int = 100

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def for_engine(self, async_scheduling: bool) -> DynamicConfig:
        """``auto`` resolved for an engine: ``async`` with vLLM's async scheduling, else ``sync``."""
        if self.mode != "auto":
            return self
        return replace(self, mode="async" if async_scheduling else "sync")


def _parse_dynamic(raw: object) -> DynamicConfig:
    where = _where("dynamic")
    if raw is True:
        raw = {}
    if raw is False or raw is None:
        raw = {"mode": "off"}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a dict of settings (or true/false); got {raw!r}")
    known = {f.name for f in fields(DynamicConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"unknown key {where}['{unknown[0]}']; known keys: {', '.join(sorted(known))}")
    if "mode" in raw and raw["mode"] not in DYNAMIC_MODES:
        raise ValueError(f"{where}['mode'] must be one of {', '.join(DYNAMIC_MODES)}; got {raw['mode']!r}")
    if "estimate" in raw and raw["estimate"] not in ESTIMATE_MODES:
        raise ValueError(
            f"{where}['estimate'] must be one of {', '.join(ESTIMATE_MODES)}; got {raw['estimate']!r}"
        )
    if "profile" in raw and (not isinstance(raw["profile"], str) or not raw["profile"]):
        raise ValueError(
            f"{where}['profile'] must be 'measure' or a profile file path; got {raw['profile']!r}"
        )
    if "statistic" in raw and raw["statistic"] not in PROFILE_STATISTICS:
        raise ValueError(
            f"{where}['statistic'] must be one of {', '.join(PROFILE_STATISTICS)}; got {raw['statistic']!r}"
        )
    if "max_startup_s" in raw:
        v = raw["max_startup_s"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
            raise ValueError(f"{where}['max_startup_s'] must be a positive number of seconds; got {v!r}")
    for key in ("calibrate", "measure_steps"):
        if key in raw and not isinstance(raw[key], bool):
            raise ValueError(f"{where}['{key}'] must be true or false; got {raw[key]!r}")
    for key, minimum in (
        ("warmup", 0),
        ("repeats", 1),
        ("probe_interval", 1),
        ("measure_every", 1),
        ("log_every", 0),
    ):
        if key in raw:
            v = raw[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                raise ValueError(f"{where}['{key}'] must be an int >= {minimum}; got {v!r}")
    return DynamicConfig(**dict(raw))


@dataclass(frozen=True)
class AscendSpecConfig:
    """What the plugin switches on in one engine.

    * ``gdn_verify``: Gated DeltaNet layers of hybrid targets verify drafts with ``verify_causal_conv1d`` +
      ``verify_gated_delta_rule`` (ragged lengths, one state slot per request) instead of vLLM's 1+K slots.
    * ``block_slots``: the DFlash proposer prepares its block inputs with ``prepare_block_slots``.
    * ``dspark``: ``speculative_config={"method": "dspark"}`` runs on Model Runner V1 (vLLM refuses it there):
      vLLM's DSpark model class drafts Q = K positions from the anchor, with its Markov and confidence heads;
      block inputs always come from ``prepare_block_slots`` (docs/vllm.md, DSpark).
    * ``backend``: backend of every op the plugin calls (``auto``: on CPU the native kernels of the GDN pair and
      the reference elsewhere, triton on CUDA, ascendc on NPU; ``ASCEND_SPEC_BACKEND`` overrides ``auto`` as for
      the ops themselves).
    * ``vllm_ascend``: the vllm-ascend adapter's settings (:mod:`ascend_spec.vllm.ascend.settings`).
    * ``dynamic``: dynamic verification (:class:`DynamicConfig`; off unless given).
    """

    enabled: bool = True
    gdn_verify: bool = True
    block_slots: bool = True
    dspark: bool = True
    backend: str = "auto"
    vllm_ascend: VllmAscendSettings = field(default_factory=VllmAscendSettings)
    dynamic: DynamicConfig = field(default_factory=lambda: DynamicConfig(mode="off"))

    def describe(self) -> str:
        parts = [f"backend={self.backend}"]
        parts.append("ragged GDN verification" if self.gdn_verify else "GDN verification off")
        parts.append("DFlash block slots" if self.block_slots else "DFlash block slots off")
        parts.append("DSpark on V1" if self.dspark else "DSpark off")
        if self.dynamic.enabled:
            parts.append(f"dynamic verification ({self.dynamic.mode}, profile {self.dynamic.profile})")
        return ", ".join(parts)


_deprecation_logged = False


def _deprecated_adapter_switch(adapter: VllmAscendSettings, dynamic: DynamicConfig | None) -> DynamicConfig:
    """``vllm_ascend.dynamic_verify`` (the adapter's own switch until 0.2) as ``dynamic``: same controller, its
    plan profile (``vllm_ascend.profile``, a shipped name or a file) as the profile; one deprecation line."""
    global _deprecation_logged
    old = f"{_where('vllm_ascend')}['dynamic_verify']"
    if dynamic is not None:
        raise ValueError(
            f"{old} and {_where('dynamic')} both switch on dynamic verification; keep {_where('dynamic')} only"
        )
    if not _deprecation_logged:
        from ascend_spec.vllm.log import plugin_logger

        plugin_logger().warning(
            "ascend-spec: %s is deprecated and will be removed in the next release; use %s (e.g. "
            '{"dynamic": {"profile": %r}})',
            old,
            _where("dynamic"),
            adapter.profile,
        )
        _deprecation_logged = True
    return DynamicConfig(profile=adapter.profile)


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
    values["vllm_ascend"] = adapter = parse_vllm_ascend(raw.get("vllm_ascend"))
    if "dynamic" in values:
        values["dynamic"] = _parse_dynamic(values["dynamic"])
    if adapter.dynamic_verify:
        values["dynamic"] = _deprecated_adapter_switch(adapter, values.get("dynamic"))
    config = AscendSpecConfig(**values)
    return config if config.enabled else None
