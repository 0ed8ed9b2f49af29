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


def _check_fits(b: int, k: int, max_budget: int) -> None:
    lib = host_model.load_kernel(KERNEL)
    fn = lib.allocate_verify_budget_ub_bytes
    fn.restype = ctypes.c_int64
    need = fn(ctypes.c_int64(b), ctypes.c_int64(k), ctypes.c_int64(max_budget))
    have = host_model.soc_spec().ub_bytes
    if need > have:
        raise ValueError(
            f"survival: {b} x {k} slots need {need} bytes of Unified Buffer on one AscendC core, more than its "
            f"{have}; use backend='triton' or 'reference' for batches this large"
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
    if device.type == "npu":  # pragma: no cover - needs CANN and an NPU
        op = getattr(torch.ops._C_ascend_spec, "npu_allocate_verify_budget", None)
        if op is None:
            raise BackendUnavailableError(
                "allocate_verify_budget: the loaded ascend_spec._C_ascend_spec has no npu_allocate_verify_budget"
            )
        return VerifyAllocation(*op(surv, caps, budget_t, budget_value, max_budget))
    _check_fits(b, k, max_budget)
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
