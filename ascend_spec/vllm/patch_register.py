"""The register of every point where the plugin changes vLLM or vllm-ascend: what, why, how, and when it can go.

Data only: :mod:`ascend_spec.vllm.install` and each runner's package install the points; every point names the
runner it hooks and the releases it applies to (:mod:`ascend_spec.vllm.releases`). The points live by their
runner (``v1/patch_points.py``: vLLM's config, the scheduler and Model Runner V1; ``v2/patch_points.py``;
``ascend/patch_points.py``); this module is the one list. The tests check that every point names a real target
on each release CI runs and that the docs list every name.
"""

from __future__ import annotations

from ascend_spec.vllm.ascend.patch_points import NPU_POINTS
from ascend_spec.vllm.patch_point import ANY_RUNNER, NPU_V1_RUNNER, V1_RUNNER, V2_RUNNER, PatchPoint
from ascend_spec.vllm.v1.patch_points import V1_POINTS
from ascend_spec.vllm.v2.patch_points import V2_POINTS

PATCH_POINTS: tuple[PatchPoint, ...] = (*V1_POINTS, *V2_POINTS, *NPU_POINTS)

__all__ = ["ANY_RUNNER", "NPU_V1_RUNNER", "PATCH_POINTS", "V1_RUNNER", "V2_RUNNER", "PatchPoint"]
