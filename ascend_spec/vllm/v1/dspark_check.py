"""Lifts V1's refusal of DSpark for an engine that drafts with the plugin's V1 DSpark proposer (``v1_dspark_check``).

vLLM implements DSpark only in Model Runner V2 and refuses it on V1 while building the config, before any runner
exists; the plugin supplies the V1 drafter (:mod:`ascend_spec.vllm.v1.dspark_proposer`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ascend_spec.vllm.config import parse_config

V1_DSPARK_REFUSAL = "dspark speculative decoding"


def wrap_v1_check(original: Callable[..., list[str]]) -> Callable[..., list[str]]:
    @functools.wraps(original)
    def _get_v1_model_runner_unsupported_features(self) -> list[str]:  # noqa: ANN001
        unsupported = original(self)
        spec = self.speculative_config
        if spec is None or spec.method != "dspark" or V1_DSPARK_REFUSAL not in unsupported:
            return unsupported
        settings = parse_config(self.additional_config)
        if settings is None or not settings.dspark:
            return unsupported
        return [item for item in unsupported if item != V1_DSPARK_REFUSAL]

    return _get_v1_model_runner_unsupported_features
