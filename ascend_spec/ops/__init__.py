"""Block-drafter ops: slot preparation, confidence scoring, verify-budget allocation."""

from ascend_spec.ops.allocate_verify_budget import VerifyAllocation, allocate_verify_budget
from ascend_spec.ops.max_softmax_confidence import (
    head_confidence,
    max_softmax_confidence,
    max_softmax_partials,
    merge_max_softmax_partials,
    survival_probs,
    vocab_parallel_max_softmax_confidence,
)
from ascend_spec.ops.prepare_block_slots import BlockSlots, prepare_block_slots

__all__ = [
    "BlockSlots",
    "prepare_block_slots",
    "VerifyAllocation",
    "allocate_verify_budget",
    "head_confidence",
    "max_softmax_confidence",
    "max_softmax_partials",
    "merge_max_softmax_partials",
    "survival_probs",
    "vocab_parallel_max_softmax_confidence",
]
