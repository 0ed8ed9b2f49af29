"""AscendC kernels: the compiled extension on NPU, the host model of the AscendC API on CPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def npu_op(name: str, kernel: str) -> Callable[..., Any]:  # pragma: no cover - needs CANN and an NPU
    """``torch.ops._C_ascend_spec.<name>``, or BackendUnavailableError naming the kernel source to rebuild with."""
    import torch

    from ascend_spec.backend import BackendUnavailableError

    op = getattr(torch.ops._C_ascend_spec, name, None)
    if op is None:
        raise BackendUnavailableError(
            f"the loaded ascend_spec._C_ascend_spec has no {name}; rebuild the extension with csrc/kernels/{kernel}.cpp"
        )
    return op
