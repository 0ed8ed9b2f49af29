"""What binds the CPU ops and adapts vllm-ascend's platform to a CPU device (the emulation's glue)."""

from __future__ import annotations

import contextlib
import sys
import types

import torch

from . import gdn_ops, ops

_LIB: torch.library.Library | None = None


def _define_c_ascend_ops() -> None:
    """``torch.ops._C_ascend``: the schemas vllm-ascend's extension (vllm_ascend_C) would register, on the CPU."""
    global _LIB
    if _LIB is not None:
        return
    _LIB = torch.library.Library("_C_ascend", "FRAGMENT")
    _LIB.define(
        "npu_add_rms_norm_bias(Tensor x, Tensor residual, Tensor gamma, Tensor? beta, float epsilon)"
        " -> (Tensor, Tensor, Tensor)"
    )
    _LIB.impl("npu_add_rms_norm_bias", ops.npu_add_rms_norm_bias, "CompositeExplicitAutograd")
    _LIB.define("npu_gemma_rms_norm(Tensor x, Tensor gamma, float epsilon) -> (Tensor, Tensor)")
    _LIB.impl("npu_gemma_rms_norm", gdn_ops.npu_gemma_rms_norm, "CompositeExplicitAutograd")


def mirror_privateuse1_kernels() -> None:
    """Every kernel registered for PrivateUse1 (the NPU key) is registered for CPU too.

    vLLM registers its ``torch.ops.vllm.*`` wrappers for ``current_platform.dispatch_key``, which is vllm-ascend's
    "PrivateUse1" when vLLM's first modules load (before this package can change the platform class); the tensors
    are CPU tensors, so the dispatcher looks for a CPU kernel. Installed before vLLM is imported.
    """
    real = torch.library.Library.impl
    if getattr(real, "_mirrors_privateuse1", False):
        return

    def impl(self, op_name, fn=None, dispatch_key="", *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        out = real(self, op_name, fn, dispatch_key, *args, **kwargs)
        if dispatch_key == "PrivateUse1":
            with contextlib.suppress(RuntimeError):  # an op that has its own CPU kernel keeps it
                real(self, op_name, fn, "CPU", *args, **kwargs)
        return out

    impl._mirrors_privateuse1 = True
    torch.library.Library.impl = impl


def bind_ops(torch_npu: types.ModuleType) -> None:
    """Point torch_npu's compute ops at :mod:`.ops`; an empty ``vllm_ascend.vllm_ascend_C`` stands for the
    extension (``AscendRMSNorm`` imports it before calling ``_C_ascend`` ops)."""
    torch_npu.npu_rms_norm = ops.npu_rms_norm
    torch_npu.npu_swiglu = ops.npu_swiglu
    torch_npu.npu_mrope = ops.npu_mrope
    torch_npu.npu_scatter_pa_kv_cache = ops.npu_scatter_pa_kv_cache
    torch_npu.npu_fused_infer_attention_score = ops.npu_fused_infer_attention_score
    torch_npu._npu_matmul_add_fp32 = ops.npu_matmul_add_fp32
    _define_c_ascend_ops()
    fla = sys.modules["fla_npu.ops.ascendc"]  # the GDN kernels ops/gdn.py imports by name
    for name in (
        "causal_conv1d_fn",
        "causal_conv1d_update",
        "recurrent_gated_delta_rule",
        "chunk_gated_delta_rule_fwd",
    ):
        setattr(fla, name, getattr(gdn_ops, name))
    ext = types.ModuleType("vllm_ascend.vllm_ascend_C")
    sys.modules["vllm_ascend.vllm_ascend_C"] = ext


def adapt_vllm_ascend() -> None:
    """vllm-ascend's platform on a CPU device: CPU tensors and dispatch key, gloo, no pinned memory; the Triton
    kernels the runner still launches with ``HAS_TRITON`` off run as the CPU functions of :mod:`.ops`."""
    import vllm_ascend.ops.triton.triton_utils as triton_utils
    import vllm_ascend.spec_decode.dflash_proposer as dflash_proposer
    import vllm_ascend.spec_decode.dspark_proposer as dspark_proposer
    import vllm_ascend.utils as ascend_utils
    import vllm_ascend.worker.block_table as block_table
    from vllm_ascend.platform import NPUPlatform

    NPUPlatform.device_type = "cpu"  # tensors the runner allocates on "the NPU" live in CPU memory
    NPUPlatform.dispatch_key = "CPU"  # vllm-ascend's torch.ops.vllm.* kernels register for this key
    NPUPlatform.dist_backend = "gloo"  # one rank, no HCCL
    # No pinned host memory (stubs._no_pinned_memory turns every pin_memory=True request into an ordinary one).
    NPUPlatform.is_pin_memory_available = classmethod(lambda cls: False)
    ascend_utils.register_device_print = lambda: None  # a debugging op of the extension
    _gloo_for_hccl()
    # The vector-core count sizes Triton grids (910B1: 24 cube, 48 vector cores); the CPU launchers ignore grids.
    triton_utils._NUM_AICORE, triton_utils._NUM_VECTORCORE = 24, 48
    triton_utils._UB_SIZE_BYTES = (
        triton_utils.DEFAULT_UB_SIZE_BYTES
    )  # mode "v2": Triton paths read it (rope.py:143)
    block_table._compute_slot_mapping_kernel = ops.KernelLauncher(ops.compute_slot_mapping)
    _gdn_launchers()
    launcher = ops.KernelLauncher(ops.copy_and_expand_dflash_inputs)
    dflash_proposer.copy_and_expand_dflash_and_dspark_inputs_kernel = launcher
    dspark_proposer.copy_and_expand_dflash_and_dspark_inputs_kernel = launcher


def _gdn_launchers() -> None:
    """The Python launchers of the Triton kernels the Qwen3.5 GDN layers call, rebound where they are looked up."""
    import vllm_ascend.device.device_op as device_op
    import vllm_ascend.ops.gdn as gdn
    import vllm_ascend.ops.layernorm as layernorm

    gdn.l2norm_fwd = device_op.l2norm_fwd = gdn_ops.l2norm_fwd
    device_op.fused_gdn_gating_patch = gdn_ops.fused_gdn_gating
    layernorm.layer_norm_fwd_npu = gdn_ops.layer_norm_fwd_npu
    gdn.gather_ssm_states = gdn_ops.gather_ssm_states
    gdn.scatter_ssm_states_ = gdn_ops.scatter_ssm_states_


def _gloo_for_hccl() -> None:
    """``NPUWorker`` asks for "hccl" by name (worker/worker.py:1276); one CPU rank runs on gloo."""
    import vllm_ascend.worker.worker as worker

    real = worker.init_distributed_environment

    def init_distributed_environment(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        args = tuple("gloo" if a == "hccl" else a for a in args)
        if kwargs.get("backend") == "hccl":
            kwargs["backend"] = "gloo"
        return real(*args, **kwargs)

    worker.init_distributed_environment = init_distributed_environment
