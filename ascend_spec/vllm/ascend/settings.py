"""The adapter's settings: ``additional_config["ascend_spec"]["vllm_ascend"]``, checked like every other key.

They matter only on vllm-ascend's NPU runner; elsewhere the sub-dict is still checked (a typo is an error on any
engine) but nothing reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

CONTROLLER_MODES = ("sync", "async")


def _where(key: str) -> str:
    return f"additional_config['ascend_spec']['vllm_ascend']['{key}']"


@dataclass(frozen=True)
class VllmAscendSettings:
    """What the adapter switches on in vllm-ascend's V1 runner.

    * ``dynamic_verify``: the DFlash / DSpark proposers' ``dynamic_spec`` is ascend-spec's verify scheduler
      (confidence op -> survival_probs -> BudgetController -> allocate_verify_budget) instead of vllm-ascend's
      ``DynamicSpecScheduler``.
    * ``profile``: the plan profile (JSON path or a shipped name in configs/profiles/) the controller reads the
      target's and the drafter's step costs from.
    * ``controller_mode``: the BudgetController mode; ``async`` fixes the total from recent steps and splits on
      the device (no host read of the survivals), ``sync`` reads the survivals back to search this step's total.
    * ``draft_graphs``: the drafter's ACL graphs are keyed on its own B x Q (``DraftGraphDispatcher``) instead
      of the target's dispatcher.
    * ``draft_capture_sizes``: the drafter's graph sizes in tokens (multiples of Q); default: one per request
      count the target captures.
    """

    dynamic_verify: bool = False
    profile: str = "talk_ascend910b"
    controller_mode: str = "async"
    draft_graphs: bool = True
    draft_capture_sizes: tuple[int, ...] | None = None


def parse_vllm_ascend(raw: object) -> VllmAscendSettings:
    if raw is None:
        return VllmAscendSettings()
    if not isinstance(raw, Mapping):
        raise ValueError(f"additional_config['ascend_spec']['vllm_ascend'] must be a dict; got {raw!r}")
    known = {f.name for f in fields(VllmAscendSettings)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"unknown key {_where(unknown[0])}; known keys: {', '.join(sorted(known))}")
    for key in ("dynamic_verify", "draft_graphs"):
        if key in raw and not isinstance(raw[key], bool):
            raise ValueError(f"{_where(key)} must be true or false; got {raw[key]!r}")
    if "profile" in raw and (not isinstance(raw["profile"], str) or not raw["profile"]):
        raise ValueError(
            f"{_where('profile')} must be a non-empty path or profile name; got {raw['profile']!r}"
        )
    if "controller_mode" in raw and raw["controller_mode"] not in CONTROLLER_MODES:
        raise ValueError(
            f"{_where('controller_mode')} must be one of {', '.join(CONTROLLER_MODES)}; got {raw['controller_mode']!r}"
        )
    values = dict(raw)
    sizes = raw.get("draft_capture_sizes")
    if sizes is not None:
        ok = (
            isinstance(sizes, (list, tuple))
            and sizes
            and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes)
        )
        if not ok or list(sizes) != sorted(set(sizes)):
            raise ValueError(
                f"{_where('draft_capture_sizes')} must be a non-empty ascending list of distinct positive ints; "
                f"got {sizes!r}"
            )
        values["draft_capture_sizes"] = tuple(sizes)
    return VllmAscendSettings(**values)
