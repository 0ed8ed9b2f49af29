"""AscendC path of allocate_verify_budget: the compiled NPU op, or the same kernel source under the host model.

Kernel: ``csrc/kernels/allocate_verify_budget.cpp`` (one vector core: keys in UB, 32-step threshold bisection
with CompareScalar/Select/ReduceSum, scalar admission pass). Arguments: ``AllocateVerifyBudgetArgs`` (``allocate_verify_budget_tiling.h``, mirrored by :data:`KernelArgs`). NPU
binding: ``torch.ops._C_ascend_spec.npu_allocate_verify_budget`` (see docs/allocate_verify_budget.md), whose
outputs are copied into ``out``. The whole batch
must fit one core's Unified Buffer (about 8K slots, e.g. B = 512 at K = 16); a larger batch raises ValueError
naming survival.
"""

from __future__ import annotations

import torch

from ascend_spec.ascendc import host_model, npu_op
from ascend_spec.ascendc.cost_model import Minimum, instructions_of, repeats_of
from ascend_spec.ops.allocate_verify_budget import VerifyAllocation, VerifyBudgetArgs

KERNEL = "allocate_verify_budget"
KernelArgs = host_model.arguments_struct(
    "AllocateVerifyBudgetArgs",
    pointers=("survival", "capacities", "budget", "numDrafts", "queryLens", "queryStartLoc", "draftIndex"),
    ints=("numReqs", "numPos", "maxBudget", "budgetValue", "budgetInMemory", "hasCap"),
)


def _align(v: int, a: int) -> int:
    return (v + a - 1) // a * a


def ub_bytes_needed(b: int, k: int, max_budget: int) -> int:
    """Unified Buffer bytes of the kernel's tiling (mirrors ComputeAllocateBudgetTiling; a test pins the two)."""
    slots_pad = _align(max(b * k, 1), 64)
    index_pad = _align(max(min(max_budget, b * k), 1), 8)
    req_pad = _align(b + 1, 8)
    tmp_len = _align(slots_pad // 4, 64)
    return (2 * slots_pad + tmp_len + 8) * 4 + slots_pad // 8 + 4 * req_pad * 4 + index_pad * 4 + 32 * 8


# Select in tensor-scalar mode writes a scratch block at UB offset 184 KiB on A2/A3 (TMP_UB_OFFSET in asc-devkit's
# kernel_utils_constants.h): the kernel calls it every bisection step, so its buffers must end below that.
SELECT_SCRATCH_OFFSET = 184 * 1024


def ub_limit(device: torch.device) -> int:
    """UB bytes the kernel may carve: the SoC's GetCoreMemSize(UB), capped below Select's scratch."""
    usable = host_model.USABLE_UB_BYTES if device.type == "npu" else host_model.soc_spec().ub_bytes
    return min(usable, SELECT_SCRATCH_OFFSET)


def _check_fits(b: int, k: int, max_budget: int, device: torch.device) -> None:
    need = ub_bytes_needed(b, k, max_budget)
    have = ub_limit(device)
    if need > have:
        raise ValueError(
            f"survival: {b} x {k} slots need {need} bytes of Unified Buffer on one AscendC core, more than the "
            f"{have} it may use (Select's scratch starts at 184 KiB); use backend='triton' or 'reference' for "
            "batches this large"
        )


def allocate_verify_budget(args: VerifyBudgetArgs, out: VerifyAllocation) -> None:
    b, k = args.survival.shape
    device, max_budget = args.survival.device, args.max_budget
    budget_t, budget_value = args.budget_tensor, args.budget_value
    surv = args.survival.to(torch.float32).contiguous()
    # Clamped to [0, K] before narrowing (an int64 capacity past int32 must not wrap), contiguous for the kernel.
    caps = None if args.capacities is None else args.capacities.clamp(0, k).to(torch.int32).contiguous()
    _check_fits(b, k, max_budget, device)
    outputs = (out.num_drafts, out.query_lens, out.query_start_loc, out.draft_index)
    if device.type == "npu":  # pragma: no cover - needs CANN and an NPU
        op = npu_op("npu_allocate_verify_budget", KERNEL)
        for dst, src in zip(outputs, op(surv, caps, budget_t, budget_value, max_budget)):
            dst.copy_(src)
        return
    ptr = host_model.tensor_ptr
    kernel_args = KernelArgs(
        ptr(surv), ptr(caps), ptr(budget_t), *(ptr(t) for t in outputs), b, k, max_budget, budget_value,
        budget_t is not None, caps is not None,
    )  # fmt: skip
    tensors = [t for t in (surv, caps, budget_t, *outputs) if t is not None]
    host_model.launch(KERNEL, "allocate_verify_budget_host", kernel_args, tensors=tensors)


# A selection by an fp32 threshold found by bisection: 32 halvings to pin every bit of the threshold plus the final
# count, each comparing every slot and counting the hits (compare, select to 0/1, sum).
BISECTION_STEPS = 33
PASSES_PER_STEP = 3


def instruction_minimum(num_reqs: int, num_pos: int, max_budget: int) -> Minimum:
    """Read survival (and capacities) once, write the four outputs; the bisection's passes over the B*K slots.
    One core: the selection is global."""
    slots = num_reqs * num_pos
    repeats = repeats_of(slots)
    passes = BISECTION_STEPS * PASSES_PER_STEP
    index = min(max_budget, slots)
    return Minimum(
        gm_read_bytes=slots * 4 + num_reqs * 4 + 8, gm_write_bytes=(3 * num_reqs + 1 + index) * 4,
        vector_repeats=passes * repeats, vector_instructions=passes * instructions_of(repeats), parallel_units=1,
    )  # fmt: skip


# docs/host_model.md, "Cost model": measured ratios to instruction_minimum this kernel must stay within
# (tests/test_kernel_cost_bounds.py).
VECTOR_INSTRUCTION_RATIO_BOUND = 2
TIME_RATIO_BOUND = 8
