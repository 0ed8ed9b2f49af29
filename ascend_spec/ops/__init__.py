"""Block-drafter ops: slot preparation, confidence scoring, verify-budget allocation.

One package per op (``prepare_block_slots/``, ``max_softmax_confidence/``, ``allocate_verify_budget/``), each with
its contract, checks and dispatch in ``__init__.py`` and its ``reference.py``, ``triton.py`` and ``ascendc.py``;
``survival.py`` holds the two elementwise ops. The ``empty_*`` helpers allocate outputs for ``out=``.
"""

from ascend_spec.ops.allocate_verify_budget import (
    VerifyAllocation,
    allocate_verify_budget,
    empty_verify_allocation,
)
from ascend_spec.ops.max_softmax_confidence import (
    MaxSoftmaxPartials,
    empty_max_softmax_partials,
    max_softmax_confidence,
    max_softmax_partials,
    merge_max_softmax_partials,
    vocab_parallel_max_softmax_confidence,
)
from ascend_spec.ops.prepare_block_slots import BlockSlots, empty_block_slots, prepare_block_slots
from ascend_spec.ops.survival import head_confidence, survival_probs

__all__ = [
    "BlockSlots",
    "prepare_block_slots",
    "empty_block_slots",
    "VerifyAllocation",
    "allocate_verify_budget",
    "empty_verify_allocation",
    "MaxSoftmaxPartials",
    "empty_max_softmax_partials",
    "head_confidence",
    "max_softmax_confidence",
    "max_softmax_partials",
    "merge_max_softmax_partials",
    "survival_probs",
    "vocab_parallel_max_softmax_confidence",
]
