"""Arbitrary strided layouts of test inputs, inside guard canaries.

:func:`draw_layout` draws, for one tensor, a dimension order, a step per dimension (a column view such as
``block_table[:, 0]`` is a step of the table's width) and a margin before and after; :func:`place` copies the
values into such a view of a larger buffer whose every other element holds a canary. :meth:`Placed.check`
fails when the op under test wrote any element outside the view: the canaries catch a kernel that addresses
an input as if it were contiguous, or writes past its own region.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st


@dataclass(frozen=True)
class Layout:
    """How one tensor is laid out: ``perm`` orders its dimensions in memory (outermost first), ``steps`` skips
    elements per dimension, ``front`` / ``back`` are canary elements around the strided region."""

    perm: tuple[int, ...]
    steps: tuple[int, ...]
    front: int
    back: int


def draw_layout(draw: st.DrawFn, ndim: int, *, contiguous: bool = False, max_step: int = 3) -> Layout:
    """A random layout for an ``ndim``-dimensional tensor (dense when ``contiguous``: only the canaries)."""
    front = draw(st.integers(0, 5))
    back = draw(st.integers(1, 5))
    if contiguous or ndim == 0:
        return Layout(tuple(range(ndim)), (1,) * ndim, front, back)
    perm = tuple(draw(st.permutations(range(ndim))))
    steps = tuple(draw(st.integers(1, max_step)) for _ in range(ndim))
    return Layout(perm, steps, front, back)


def draw_state_pool_layout(draw: st.DrawFn, *, value_major: bool) -> Layout:
    """A ``[S, HV, Dk, Dv]`` state pool's layout: slots dense, or (``value_major``: drawn half the time) stored
    ``[HV, Dv, Dk]`` dense and viewed transposed, as vLLM's GPU engine keeps GDN states (``perm`` swaps Dk, Dv)."""
    dense = draw_layout(draw, 4, contiguous=True)
    if value_major and draw(st.booleans()):
        return Layout((0, 1, 3, 2), dense.steps, dense.front, dense.back)
    return dense


def _canary(dtype: torch.dtype) -> float | int:
    if dtype.is_floating_point:
        return float("nan")
    if dtype == torch.bool:
        return True
    return -7777 if dtype != torch.uint8 else 77


@dataclass
class Placed:
    """A view holding a tensor's values at its layout inside a canary-filled buffer."""

    view: torch.Tensor
    buffer: torch.Tensor
    owned: torch.Tensor  # bool over the buffer: the elements the view covers
    snapshot: torch.Tensor
    name: str

    def check(self) -> None:
        """No element outside the view changed (bitwise, so NaN canaries compare)."""
        before, after = _bits(self.snapshot), _bits(self.buffer)
        changed = (before != after) & ~self.owned
        if bool(changed.any()):
            i = int(changed.nonzero()[0, 0])
            raise AssertionError(
                f"{self.name}: element {i} of its buffer, outside the tensor's view (strides {self.view.stride()}, "
                f"offset {self.view.storage_offset()}), was overwritten"
            )


def _bits(t: torch.Tensor) -> torch.Tensor:
    if t.dtype.is_floating_point:
        view = {8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()]
        return t.view(view)
    return t


def place(values: torch.Tensor, layout: Layout | None, name: str) -> Placed:
    """``values`` copied into a view with ``layout`` (None: dense) of a canary-filled buffer."""
    ndim = values.dim()
    if layout is None:
        layout = Layout(tuple(range(ndim)), (1,) * ndim, 0, 1)
    mem_shape = [values.shape[p] * s for p, s in zip(layout.perm, layout.steps)]
    inner = 1
    for n in mem_shape:
        inner *= n
    total = layout.front + inner + layout.back
    buffer = torch.full((total,), _canary(values.dtype), dtype=values.dtype)
    region = (
        buffer[layout.front : layout.front + inner].view(mem_shape) if inner else buffer[:0].view(mem_shape)
    )
    region = region[tuple(slice(None, None, s) for s in layout.steps)]
    inverse = [0] * ndim
    for i, p in enumerate(layout.perm):
        inverse[p] = i
    view = region.permute(*inverse) if ndim else region
    assert tuple(view.shape) == tuple(values.shape)
    view.copy_(values)
    index = torch.arange(total).as_strided(view.shape, view.stride(), view.storage_offset())
    owned = torch.zeros(total, dtype=torch.bool)
    owned[index.reshape(-1)] = True
    return Placed(view, buffer, owned, buffer.clone(), name)


def check_all(*placed: Placed) -> None:
    for p in placed:
        p.check()
