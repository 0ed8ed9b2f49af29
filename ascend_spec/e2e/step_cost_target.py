"""vLLM's model class for the mixed workload's target (:mod:`ascend_spec.e2e.mixed`): Qwen3 plus a fixed
per-step cost.

Every forward reads one ``[hidden, step_cost_columns]`` weight once, as a matrix-vector product with a fixed
vector, and adds the constant result to the hidden states: a cost independent of the step's tokens (an
accelerator reading its weights once per decode step), on top of the layers' per-token cost. Registered with
vLLM's ``ModelRegistry`` by the e2e harness (:func:`register`) in the engine's process; nothing else uses it.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from ascend_spec.e2e.mixed import STEP_COST_ARCH


def _model_class() -> type:
    from vllm.model_executor.model_loader.weight_utils import default_weight_loader
    from vllm.model_executor.models.qwen3 import Qwen3ForCausalLM

    class StepCost(nn.Module):
        """The fixed part: ``weight [hidden, columns]`` and ``probe [columns]``; ``bias()`` reads both."""

        def __init__(self, hidden: int, columns: int, dtype: torch.dtype) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.empty(hidden, columns, dtype=dtype), requires_grad=False)
            self.probe = nn.Parameter(torch.empty(columns, dtype=dtype), requires_grad=False)

        def bias(self) -> torch.Tensor:
            return nn.functional.linear(self.probe[None], self.weight)  # [1, hidden]

    class AscendSpecStepCostQwen3ForCausalLM(Qwen3ForCausalLM):
        def __init__(self, *, vllm_config, prefix: str = "") -> None:  # noqa: ANN001
            super().__init__(vllm_config=vllm_config, prefix=prefix)
            config = vllm_config.model_config.hf_config
            self.step_cost = StepCost(
                config.hidden_size, int(config.step_cost_columns), vllm_config.model_config.dtype
            )

        def forward(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
            out = super().forward(*args, **kwargs)
            bias = self.step_cost.bias()
            if isinstance(out, tuple):  # (hidden states, aux hidden states) for DFlash/EAGLE-3 drafters
                return (out[0] + bias, *out[1:])
            return out + bias

        def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
            rest, loaded = [], set()
            for name, tensor in weights:
                if name.startswith("step_cost."):
                    param = getattr(self.step_cost, name.split(".", 1)[1])
                    default_weight_loader(param, tensor)
                    loaded.add(name)
                else:
                    rest.append((name, tensor))
            return loaded | super().load_weights(rest)

    AscendSpecStepCostQwen3ForCausalLM.__name__ = STEP_COST_ARCH
    AscendSpecStepCostQwen3ForCausalLM.__qualname__ = STEP_COST_ARCH
    return AscendSpecStepCostQwen3ForCausalLM


def register() -> None:
    """Make ``STEP_COST_ARCH`` loadable by this process's vLLM (idempotent)."""
    from vllm import ModelRegistry

    if STEP_COST_ARCH not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(STEP_COST_ARCH, _model_class())
