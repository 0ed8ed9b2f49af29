"""Stand-ins for the NPU-only modules vllm-ascend imports (torch_npu, torch.npu, acl, triton-ascend's runtime).

Modelled on vllm-ascend 0.30.0rc2's CPU unit-test setup (sdist ``tests/ut/conftest.py``): module objects for the
import graph, ``MagicMock`` for what only configures hardware (profiler, ATB, streams, graphs). The device queries
the runner acts on answer like one Ascend 910B1 (A2, SoC 220) with CPU memory behind it, and the compute ops are
bound to the CPU implementations in :mod:`emulated_npu.ops` by :func:`emulated_npu.install`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import sys
import types
from unittest.mock import MagicMock

SOC_VERSION = 220  # what torch_npu reports on an Ascend 910B1 (A2; vllm_ascend/device/hardware.py:65)
PINNABLE_FACTORIES = (
    "tensor", "empty", "zeros", "ones", "full", "arange", "empty_strided",
    "empty_like", "zeros_like", "ones_like", "full_like", "randn", "rand",
)  # fmt: skip
DEVICE_MEMORY_BYTES = 16 << 30  # what mem_get_info reports: vLLM sizes nothing by it (kv_cache_memory_bytes)


def _unemulated_attr(module: str):  # noqa: ANN202
    def getattr_(name: str) -> Unemulated:
        if name.startswith("__"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return Unemulated(f"{module}.{name}")

    return getattr_


def _module(name: str, package: bool = False) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.util.spec_from_loader(name, loader=None)
    if package:
        mod.__path__ = []
    sys.modules[name] = mod
    return mod


class _Stream:
    """An NPU stream on a synchronous device: every wait and record is already satisfied."""

    npu_stream = 0

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def record_event(self, *args: object, **kwargs: object) -> MagicMock:
        return MagicMock(name="npu_event")

    def wait_event(self, *args: object, **kwargs: object) -> None:
        return None

    def wait_stream(self, *args: object, **kwargs: object) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True


class _Event:
    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def record(self, *args: object, **kwargs: object) -> None:
        return None

    def wait(self, *args: object, **kwargs: object) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True


class Unemulated:
    """A torch_npu op the emulation has no CPU implementation of: importable, fails loudly when called."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise NotImplementedError(f"{self.name} is not emulated (tests/vllm_ascend_emu/emulated_npu/ops.py)")

    def __getattr__(self, attr: str) -> Unemulated:  # e.g. ``op.out`` / ``op.default``
        return Unemulated(f"{self.name}.{attr}")


def install_module_stubs(*, mock_triton: bool = True) -> types.ModuleType:
    """Register torch_npu, acl, triton.runtime, fla_npu and mooncake stand-ins; returns the torch_npu module.

    Must run before ``torch`` and ``vllm_ascend`` are imported (vllm-ascend's conftest note: importing torch first
    leads to a circular import through accelerate). The mocked ``triton.runtime`` makes vLLM's ``HAS_TRITON``
    False, so vllm-ascend takes its torch_npu / PyTorch paths instead of triton-ascend kernels.
    """
    if mock_triton:  # mode "v2" runs Triton's interpreter instead (triton_interpreter.py)
        runtime = MagicMock()
        runtime.driver.active.utils.get_device_properties.return_value = {"num_aic": 8, "num_vectorcore": 8}
        sys.modules["triton.runtime"] = runtime

    torch_npu = _module("torch_npu", package=True)
    torch_npu.npu = MagicMock()
    torch_npu.__getattr__ = _unemulated_attr("torch_npu")
    torch_npu._C = MagicMock()
    torch_npu._C._NPUTaskGroupHandle = MagicMock
    sys.modules["torch_npu._C"] = torch_npu._C
    sys.modules["torch_npu._C._distributed_c10d"] = torch_npu._C._distributed_c10d
    torch_npu.float4_e2m1fn_x2 = 296  # dtype enums vllm-ascend reads at import (values of a real torch_npu)
    torch_npu.hifloat8 = 290
    torch_npu.float8_e8m0fnu = 293
    torch_npu.npu_format_cast = lambda weight, fmt, **kwargs: weight  # ND only: no NZ layout on the CPU
    op_plugin = _module("torch_npu.op_plugin", package=True)
    atb = _module("torch_npu.op_plugin.atb", package=True)
    atb_ops = _module("torch_npu.op_plugin.atb._atb_ops")
    atb_ops._register_atb_extensions = MagicMock()
    atb._atb_ops = atb_ops
    op_plugin.atb = atb
    torch_npu.op_plugin = op_plugin
    profiler = _module("torch_npu.profiler")
    profiler.dynamic_profile = MagicMock()
    for name in (
        "_ExperimentalConfig",
        "profile",
        "tensorboard_trace_handler",
        "ExportType",
        "ProfilerLevel",
    ):
        setattr(profiler, name, MagicMock())
    for name in ("AiCMetrics", "ProfilerActivity"):
        setattr(profiler, name, MagicMock())
    torch_npu.profiler = profiler
    sys.modules["torch_npu._inductor"] = MagicMock()

    acl = _module("acl", package=True)
    acl.rt = _module("acl.rt")
    acl.rt.memcpy = MagicMock()
    for name in ("fla_npu", "fla_npu.ops", "fla_npu.ops.ascendc"):
        _module(name, package=True)
    # Ascend-only FLA kernels (GDN conv and recurrence) the worker patches import by name.
    sys.modules["fla_npu.ops.ascendc"].__getattr__ = _unemulated_attr("fla_npu.ops.ascendc")
    mooncake = _module("mooncake.engine")
    mooncake.TransferEngine = MagicMock()
    return torch_npu


def install_torch_npu_namespace(torch_npu: types.ModuleType, *, npu_device_on_cpu: bool = False) -> None:
    """``torch.npu``: one available device whose memory is the CPU's; streams and graphs are no-ops. With
    ``npu_device_on_cpu`` (mode "v2") tensors created or moved with ``device="npu"`` land on the CPU: vllm-ascend's
    V2 patches name the device (``patch/worker/patch_v2/patch_uva.py:143, 172``)."""
    import torch

    with contextlib.suppress(RuntimeError):  # already renamed in this process
        torch.utils.rename_privateuse1_backend("npu")
    npu = MagicMock()
    npu.NPUGraph = MagicMock
    npu.Stream = _Stream
    npu.Event = _Event
    default_stream = _Stream()
    npu.current_stream = lambda *a, **k: default_stream
    npu.default_stream = lambda *a, **k: default_stream
    npu.is_available = lambda: True
    npu.is_initialized = lambda: True
    npu.device_count = lambda: 1
    npu.current_device = lambda: "cpu"  # an int would read as an accelerator ordinal when allocating
    npu.set_device = lambda *a, **k: None
    npu.synchronize = lambda *a, **k: None
    npu.empty_cache = lambda: None
    npu.mem_get_info = lambda *a, **k: (DEVICE_MEMORY_BYTES, DEVICE_MEMORY_BYTES)
    npu.memory_stats = lambda *a, **k: {"allocated_bytes.all.peak": 0}
    npu.max_memory_allocated = lambda *a, **k: 0
    npu.memory_allocated = lambda *a, **k: 0
    npu.memory_reserved = lambda *a, **k: 0
    npu.reset_peak_memory_stats = lambda *a, **k: None
    npu.get_device_name = lambda *a, **k: "Ascend910B1"
    npu.get_device_properties.return_value = MagicMock(
        uuid="00000000-0000-0000-0000-000000000000", total_memory=DEVICE_MEMORY_BYTES, name="Ascend910B1"
    )
    torch.npu = npu
    sys.modules["torch.npu"] = npu
    torch_npu.npu.Stream = _Stream
    torch_npu.npu.Event = _Event
    torch_npu.npu.current_stream = npu.current_stream
    torch_npu.npu.current_device = npu.current_device
    torch_npu.npu.set_device = npu.set_device
    torch_npu.npu.is_available = npu.is_available
    torch_npu.npu.device_count = npu.device_count
    torch_npu.npu.get_soc_version = lambda: SOC_VERSION
    torch_npu.npu.mem_get_info = npu.mem_get_info
    torch.version.cann = None
    torch.distributed.is_hccl_available = lambda: True
    torch.Tensor.npu = lambda self, *args, **kwargs: self  # "npu" memory is the CPU's
    torch.accelerator.synchronize = lambda *args, **kwargs: None  # a synchronous device (vLLM's shutdown)
    record_stream = torch.Tensor.record_stream

    def record_stream_(self: torch.Tensor, stream: object) -> None:  # the sampler's q.record_stream(stream)
        if not isinstance(stream, _Stream):
            record_stream(self, stream)

    torch.Tensor.record_stream = record_stream_
    _no_pinned_memory(torch, npu_device_on_cpu)


def _no_pinned_memory(torch: types.ModuleType, npu_device_on_cpu: bool) -> None:
    """Host memory is never pinned: pinning needs an accelerator allocator the CPU torch has none of, and vLLM and
    vllm-ascend ask for it in many places (``PIN_MEMORY`` read at import, ``pin_memory=True`` written out)."""

    def unpinned(factory):  # noqa: ANN001, ANN202
        @functools.wraps(factory)
        def call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            if kwargs.get("pin_memory"):
                kwargs["pin_memory"] = False
            if npu_device_on_cpu and _is_npu(kwargs.get("device")):
                kwargs["device"] = "cpu"
            return factory(*args, **kwargs)

        return call

    for name in PINNABLE_FACTORIES:
        setattr(torch, name, unpinned(getattr(torch, name)))
    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self
    if not npu_device_on_cpu:
        return
    to = torch.Tensor.to

    def to_cpu(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if _is_npu(kwargs.get("device")):
            kwargs["device"] = "cpu"
        if args and _is_npu(args[0]):
            args = ("cpu", *args[1:])
        return to(self, *args, **kwargs)

    torch.Tensor.to = to_cpu


def _is_npu(device: object) -> bool:
    if isinstance(device, str):
        return device.split(":")[0] == "npu"
    return getattr(device, "type", None) == "npu"
