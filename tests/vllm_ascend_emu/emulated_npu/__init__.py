"""An emulated Ascend NPU: vllm-ascend 0.30.0rc2's real runner on the CPU, for tests only (never in the wheel).

:func:`install` makes ``import torch_npu`` and ``torch.npu`` resolve to stand-ins (:mod:`.stubs`, after vllm-ascend's
own CPU unit-test setup), binds the compute ops vllm-ascend's runner calls to CPU implementations (:mod:`.ops`,
each checked against a PyTorch reference in tests/vllm_ascend_emu/test_npu_ops.py; the Qwen3.5 hybrid's Gated
DeltaNet ops in :mod:`.gdn_ops`, checked in test_npu_gdn_ops.py) and adapts vllm-ascend's platform to a CPU device
(:mod:`.glue`). With it, ``vllm_ascend.platform.NPUPlatform``, ``NPUWorker``, ``NPUModelRunner``, its attention
backend, its GDN layer, custom ops and proposers run unchanged.

It is loaded in every Python process of ``.venv-vllm-ascend`` whose environment has ``ASCEND_SPEC_EMULATED_NPU=1``
(or ``=v2``: Triton's interpreter instead of the mocked runtime, for vllm-ascend's Model Runner V2)
(scripts/setup_vllm_ascend_env.sh writes a ``.pth`` file that calls :func:`install`): vLLM inspects models in a
child process, which must see the same NPU.

What it cannot show: ACL graphs (the runner runs eager; graph capture, replay and their parameter updates are
mocked), the real Ascend kernels and their numerics (tiling, fp16/bf16 accumulation order, NZ layouts), HCCL
(a single rank on gloo), triton-ascend (mode "1": the mocked ``triton.runtime`` turns vLLM's ``HAS_TRITON`` off, so
vllm-ascend takes its torch_npu / PyTorch paths, and the few Triton kernels the runner still launches run as CPU
functions; mode "v2": upstream Triton's interpreter runs vllm-ascend's kernels, not triton-ascend's compiler or its
extension ops), memory limits and timing of a device.
"""

from __future__ import annotations

import os

ENV_FLAG = "ASCEND_SPEC_EMULATED_NPU"
_INSTALLED = False


#: The modes: "1" mocks triton-ascend's runtime (vLLM's HAS_TRITON is False: Model Runner V1 and vllm-ascend's
#: torch paths); "v2" runs Triton's interpreter on CPU tensors (:mod:`.triton_interpreter`), which vllm-ascend's
#: Model Runner V2 needs, with its Triton kernels interpreted.
MODES = ("1", "v2")


def enabled() -> bool:
    """Whether this process asked for the emulated NPU (``ASCEND_SPEC_EMULATED_NPU`` one of :data:`MODES`)."""
    return os.environ.get(ENV_FLAG) in MODES


def install() -> None:
    """Install the stand-ins, the CPU ops and the platform glue (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return
    interpreted = os.environ.get(ENV_FLAG) == "v2"
    if interpreted:
        from . import triton_interpreter

        triton_interpreter.install_interpreter()  # before torch, vLLM and Triton are imported
    from . import glue, stubs

    torch_npu = stubs.install_module_stubs(mock_triton=not interpreted)
    stubs.install_torch_npu_namespace(torch_npu, npu_device_on_cpu=interpreted)
    glue.mirror_privateuse1_kernels()
    if interpreted:
        _accept_interpreted_triton()
    glue.bind_ops(torch_npu)
    glue.adapt_vllm_ascend()
    _INSTALLED = True


def _accept_interpreted_triton() -> None:
    """vLLM decides ``HAS_TRITON`` once (it must be True for Model Runner V2); then the CPU V2 harness's own
    interpreter repairs (``ascend_spec.e2e.cpu_v2``) and the two that vllm-ascend's kernels need."""
    from . import triton_interpreter

    with triton_interpreter.vllm_reads_as_cpu_build():
        import vllm.triton_utils  # noqa: F401
    from ascend_spec.e2e.cpu_v2 import enable_cpu_model_runner_v2

    enable_cpu_model_runner_v2()
    triton_interpreter.comparisons_as_int1()
    triton_interpreter.bf16_casts_round_to_nearest_even()


def install_if_enabled() -> None:
    """The ``.pth`` hook: install only in processes that asked for the emulated NPU."""
    if enabled():
        install()
