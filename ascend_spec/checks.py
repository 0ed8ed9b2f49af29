"""Argument checks shared by the ops. Every error names the argument and the bad value.

Shape, dtype and device checks never touch device memory and always run. Checks that read values are done by
the ops themselves under :func:`ascend_spec.backend.value_checks_enabled`.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping

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


def check_int(name: str, value: object, *, minimum: int | None = None) -> int:
    """An integer argument as a Python int: anything ``operator.index`` takes (int, numpy integers), never a bool,
    a float or a tensor (reading a device tensor would synchronise); at least ``minimum`` when given."""
    if isinstance(value, (bool, torch.Tensor)):
        raise ValueError(f"{name} must be an int; got {value!r}")
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{name} must be an int; got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {number}")
    return number


# The outputs of an op: field -> (shape, dtype). One definition serves the allocation and the check of `out=`.
Layout = Mapping[str, tuple[tuple[int, ...], torch.dtype]]


def empty_outputs(cls: type, layout: Layout, device: torch.device | str | None) -> object:
    """Uninitialised outputs of ``layout`` in the dataclass (or NamedTuple) ``cls``."""
    return cls(**{f: torch.empty(shape, dtype=dtype, device=device) for f, (shape, dtype) in layout.items()})


def check_outputs(out: object, cls: type, layout: Layout, device: torch.device) -> None:
    """``out=`` must be a ``cls`` whose every field is a contiguous tensor of its layout's shape and dtype on
    ``device`` (the kernels write dense buffers; nothing is resized or reallocated)."""
    if not isinstance(out, cls):
        raise ValueError(f"out must be a {cls.__name__}; got {type(out).__name__}")
    for field, (shape, dtype) in layout.items():
        t = getattr(out, field)
        check_tensor(f"out.{field}", t, dtypes=(dtype,), device=device, shape=shape)
        if not t.is_contiguous():
            raise ValueError(f"out.{field} must be contiguous; got strides {t.stride()}")


def check_out_tensor(
    out: object, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """``out=`` of an op with one output tensor: contiguous, of ``shape`` and ``dtype`` on ``device``."""
    t = check_tensor("out", out, dtypes=(dtype,), device=device, shape=shape)
    if not t.is_contiguous():
        raise ValueError(f"out must be contiguous; got strides {t.stride()}")
    return t


def check_choice(name: str, value: object, choices: Iterable[object]) -> object:
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}; got {value!r}")
    return value
