"""AscendC path of allocate_verify_budget: the compiled NPU op, or the same kernel source under the host model.

Kernel: ``csrc/kernels/allocate_verify_budget.cpp`` (one vector core: keys in UB, 32-step threshold bisection
with CompareScalar/Select/ReduceSum, scalar admission pass). NPU binding:
``torch.ops._C_ascend_spec.npu_allocate_verify_budget`` (see docs/confidence.md for its text). The whole batch
must fit one core's Unified Buffer (about 8K slots, e.g. B = 512 at K = 16); a larger batch raises ValueError
naming survival.
"""

from __future__ import annotations

import ctypes

import torch

from ascend_spec.ascendc import host_model
from ascend_spec.backend import BackendUnavailableError
from ascend_spec.ops.verify_budget import VerifyAllocation, index_length

KERNEL = "allocate_verify_budget"


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


def allocate_verify_budget_ascendc(
    survival: torch.Tensor,
    total_budget: int | torch.Tensor,
    capacities: torch.Tensor | None,
    max_budget: int,
) -> VerifyAllocation:
    b, k = survival.shape
    device = survival.device
    surv = survival.to(torch.float32).contiguous()
    caps = None if capacities is None else capacities.to(torch.int32).contiguous()
    in_memory = isinstance(total_budget, torch.Tensor)
    budget_t = total_budget.to(torch.int64).reshape(()) if in_memory else None
    budget_value = 0 if in_memory else min(int(total_budget), max_budget)
    _check_fits(b, k, max_budget, device)
    if device.type == "npu":  # pragma: no cover - needs CANN and an NPU
        op = getattr(torch.ops._C_ascend_spec, "npu_allocate_verify_budget", None)
        if op is None:
            raise BackendUnavailableError(
                "allocate_verify_budget: the loaded ascend_spec._C_ascend_spec has no npu_allocate_verify_budget"
            )
        return VerifyAllocation(*op(surv, caps, budget_t, budget_value, max_budget))
    length = index_length(b, k, max_budget)
    num_drafts = torch.empty(b, dtype=torch.int32, device=device)
    query_lens = torch.empty(b, dtype=torch.int32, device=device)
    qsl = torch.empty(b + 1, dtype=torch.int32, device=device)
    index = torch.empty(length, dtype=torch.int32, device=device)
    ptr = host_model.tensor_ptr
    args = [
        ptr(surv), ptr(caps), ptr(budget_t), ptr(num_drafts), ptr(query_lens), ptr(qsl), ptr(index),
        ctypes.c_int64(b), ctypes.c_int64(k), ctypes.c_int64(max_budget), ctypes.c_int64(budget_value),
        ctypes.c_bool(in_memory), ctypes.c_bool(caps is not None),
    ]  # fmt: skip
    tensors = [t for t in (surv, caps, budget_t, num_drafts, query_lens, qsl, index) if t is not None]
    host_model.launch(KERNEL, "allocate_verify_budget_host", args, tensors=tensors)
    return VerifyAllocation(num_drafts, query_lens, qsl, index)
