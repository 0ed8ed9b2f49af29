"""Block-drafter ops: slot preparation, confidence scoring, verify-budget allocation."""

from ascend_spec.ops.block_slots import BlockSlots, prepare_block_slots

__all__ = ["BlockSlots", "prepare_block_slots"]
