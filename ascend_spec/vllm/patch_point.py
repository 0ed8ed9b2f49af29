"""One entry of the register (:mod:`ascend_spec.vllm.patch_register`): the record, the runners, the release sets."""

from __future__ import annotations

from dataclasses import dataclass

from ascend_spec.vllm.releases import V1_RELEASES, V2_RELEASES

ANY_RUNNER = "any (vLLM's config)"
V1_RUNNER = "vLLM Model Runner V1"
V2_RUNNER = "vLLM Model Runner V2"
NPU_V1_RUNNER = "vllm-ascend NPUModelRunner (V1)"

V1 = tuple(f"vLLM {v}" for v in V1_RELEASES)
V2 = tuple(f"vLLM {v}" for v in V2_RELEASES)
V2_BLOCK_SLOTS = tuple(
    f"vLLM {v}" for v, r in V2_RELEASES.items() if r.v2_shims.dflash_inputs_from_block_slots
)
V2_DYNAMIC = tuple(f"vLLM {v}" for v, r in V2_RELEASES.items() if r.v2_shims.dynamic_verification)
VLLM_ASCEND = ("vllm-ascend 0.30.0rc2 with vLLM 0.30.0",)
EVERY_SUPPORTED = tuple(f"vLLM {v}" for v in dict.fromkeys([*V1_RELEASES, *V2_RELEASES])) + VLLM_ASCEND


@dataclass(frozen=True)
class PatchPoint:
    name: str
    target: str
    what: str
    why: str
    how: str
    remove_when: str
    runner: str = V1_RUNNER
    releases: tuple[str, ...] = V1
