"""An emulated Ascend NPU: vllm-ascend 0.30.0rc2's real runner on the CPU, for tests only (never in the wheel).

:func:`install` makes ``import torch_npu`` and ``torch.npu`` resolve to stand-ins (:mod:`.stubs`, after vllm-ascend's
own CPU unit-test setup), binds the compute ops vllm-ascend's runner calls to CPU implementations (:mod:`.ops`,
each checked against a PyTorch reference in tests/vllm_ascend_emu/test_npu_ops.py; the Qwen3.5 hybrid's Gated
DeltaNet ops in :mod:`.gdn_ops`, checked in test_npu_gdn_ops.py) and adapts vllm-ascend's platform to a CPU device
(:mod:`.glue`). With it, ``vllm_ascend.platform.NPUPlatform``, ``NPUWorker``, ``NPUModelRunner``, its attention
backend, its GDN layer, custom ops and proposers run unchanged.

It is loaded in every Python process of ``.venv-vllm-ascend`` whose environment has ``ASCEND_SPEC_EMULATED_NPU=1``
(scripts/setup_vllm_ascend_env.sh writes a ``.pth`` file that calls :func:`install`): vLLM inspects models in a
child process, which must see the same NPU.

What it cannot show: ACL graphs (the runner runs eager; graph capture, replay and their parameter updates are
mocked), the real Ascend kernels and their numerics (tiling, fp16/bf16 accumulation order, NZ layouts), HCCL
(a single rank on gloo), triton-ascend (the mocked ``triton.runtime`` turns vLLM's ``HAS_TRITON`` off, so
vllm-ascend takes its torch_npu / PyTorch paths, and the few Triton kernels the runner still launches run as CPU
functions), memory limits and timing of a device.
"""

from __future__ import annotations

import os

ENV_FLAG = "ASCEND_SPEC_EMULATED_NPU"
_INSTALLED = False


def enabled() -> bool:
    """Whether this process asked for the emulated NPU (``ASCEND_SPEC_EMULATED_NPU=1``)."""
    return os.environ.get(ENV_FLAG) == "1"


def install() -> None:
    """Install the stand-ins, the CPU ops and the platform glue (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return
    from . import glue, stubs

    torch_npu = stubs.install_module_stubs()
    stubs.install_torch_npu_namespace(torch_npu)
    glue.mirror_privateuse1_kernels()
    glue.bind_ops(torch_npu)
    glue.adapt_vllm_ascend()
    _INSTALLED = True


def install_if_enabled() -> None:
    """The ``.pth`` hook: install only in processes that asked for the emulated NPU."""
    if enabled():
        install()
