"""Argument checks shared by the ops. Every error names the argument and the bad value.

Shape, dtype and device checks never touch device memory and always run. Checks that read values are done by
the ops themselves under :func:`ascend_spec.backend.value_checks_enabled`.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

INDEX_DTYPES = (torch.int32, torch.int64)
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _dtype_names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d).removeprefix("torch.") for d in dtypes)


def check_tensor(
    name: str,
    value: object,
    *,
    ndim: int | tuple[int, ...] | None = None,
    dtypes: Iterable[torch.dtype] | None = None,
    device: torch.device | None = None,
    shape: tuple[int | None, ...] | None = None,
) -> torch.Tensor:
    """Validate one tensor argument; ``shape`` entries of None are free."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor; got {type(value).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if value.dim() not in allowed:
            want = " or ".join(str(n) for n in allowed)
            raise ValueError(f"{name} must have {want} dimensions; got shape {tuple(value.shape)}")
    if dtypes is not None:
        dtypes = tuple(dtypes)
        if value.dtype not in dtypes:
            raise ValueError(f"{name} must have dtype in ({_dtype_names(dtypes)}); got {value.dtype}")
    if device is not None and value.device != device:
        raise ValueError(f"{name} is on {value.device} but the other inputs are on {device}")
    if shape is not None and (
        value.dim() != len(shape) or any(w is not None and w != s for w, s in zip(shape, value.shape))
    ):
        want = "[" + ", ".join("*" if w is None else str(w) for w in shape) + "]"
        raise ValueError(f"{name} must have shape {want}; got {list(value.shape)}")
    return value


def check_positive_int(name: str, value: object, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int; got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    return value


def check_choice(name: str, value: object, choices: Iterable[object]) -> object:
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}; got {value!r}")
    return value
