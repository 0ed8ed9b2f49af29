"""The memory bandwidth a bench row is compared with: the device's nominal peak and a measured copy.

The nominal peak is what the device reports about its memory (CUDA: memory clock and bus width; double data
rate, so 2 transfers per clock); devices that do not report it (NPUs through torch_npu, CPUs) have none, and
no figure is invented for them. The measured copy (``dst.copy_(src)`` over a buffer far larger than any cache,
read + write bytes over its median time) is what a streaming kernel can reach on this machine, on any device.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from ascend_spec.bench.core import measure_ms

COPY_BYTES = {"cpu": 64 << 20, "cuda": 1 << 30, "npu": 1 << 30}


@dataclass(frozen=True)
class DeviceBandwidth:
    """GB/s (1e9 bytes per second) of one device: nominal peak (None when unreported) and a measured copy."""

    device: str
    copy_gbs: float
    nominal_gbs: float | None
    nominal_source: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def nominal_peak_gbs(memory_clock_khz: int, memory_bus_bits: int) -> float:
    """Peak GB/s of a double-data-rate memory from its clock (kHz) and bus width (bits)."""
    return 2 * memory_clock_khz * 1e3 * (memory_bus_bits / 8) / 1e9


def _nominal(device: torch.device) -> tuple[float | None, str | None]:
    if device.type != "cuda":
        return None, None
    props = torch.cuda.get_device_properties(device)
    clock = getattr(props, "memory_clock_rate", 0)
    bits = getattr(props, "memory_bus_width", 0)
    if not clock or not bits:
        return None, None
    return nominal_peak_gbs(clock, bits), f"{props.name}: {clock} kHz memory clock x {bits}-bit bus, DDR"


def measure_copy_gbs(device: torch.device, nbytes: int | None = None, repeats: int = 10) -> float:
    """Read + write GB/s of one large on-device copy (median of ``repeats``)."""
    nbytes = COPY_BYTES.get(device.type, 1 << 30) if nbytes is None else nbytes
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    ms = measure_ms(lambda: dst.copy_(src), device, warmup=2, repeats=repeats)
    return 2 * src.numel() * 4 / (ms * 1e6)


def device_bandwidth(device: torch.device) -> DeviceBandwidth:
    nominal, source = _nominal(device)
    return DeviceBandwidth(str(device), measure_copy_gbs(device), nominal, source)
