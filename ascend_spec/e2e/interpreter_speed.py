"""Triton's interpreter (``TRITON_INTERPRET=1``) without re-reading ``triton.language`` on every call.

Each kernel launch and each call of a ``@triton.jit`` function inside a kernel patches ``triton.language``'s
builtins to their interpreted forms (``triton/runtime/interpreter.py``: ``_patch_lang`` -> ``_patch_builtin``),
and each patch lists every member of ``tl``, ``tl.core``, ``tl.tensor`` and ``tl.math`` with
``inspect.getmembers`` to find the builtins, then wraps each in a new lambda. On Model Runner V2's CPU harness
that listing was a fifth of an engine's time (profiled: 7,646 patches, 39,643 listings, 34 s of 167 s). The
builtins of those modules do not change while a process runs, so :func:`cache_language_patches` lists them and
builds their wrappers once (with the interpreter's own ``_patch_attr``) and every patch sets those same wrappers:
what each patch sets, and what its scope restores, is unchanged.

Used where kernels run interpreted for correctness: the V2 CPU harness (cpu_v2.py), the emulated NPU's V2
mode, and the test suite's Triton backend. Checked in tests/test_interpreter_speed.py against the interpreter
as shipped: the same attributes set to wrappers of the same builtins, the same restore, the same kernel results.
"""

from __future__ import annotations

import inspect
from typing import Any

_installed = False


class _Recorder:
    """A stand-in patch scope that keeps what ``_patch_attr`` would set."""

    def __init__(self) -> None:
        self.values: list[tuple[str, Any]] = []

    def set_attr(self, obj: object, name: str, value: object) -> None:
        self.values.append((name, value))


def _language_objects() -> list[object]:
    """What ``_patch_lang`` hands ``_patch_builtin``: triton.language, its core, tensor, math and the tensor
    descriptor base."""
    import triton.language as tl

    return [tl, tl.core, tl.tensor, tl.math, tl.core.tensor_descriptor_base]


def cache_language_patches() -> None:
    """Make the interpreter's ``_patch_builtin`` set wrappers built once per language object (idempotent).

    Call it before any kernel runs in the process: the builtins are read from the unpatched modules. Raises
    where this Triton's interpreter lacks the functions this replaces (another Triton release: read it first)."""
    global _installed
    if _installed:
        return
    from triton.runtime import interpreter

    missing = [
        n
        for n in ("_patch_builtin", "_patch_attr", "_patch_lang", "interpreter_builder")
        if not hasattr(interpreter, n)
    ]
    if missing:
        raise RuntimeError(
            f"this Triton's interpreter has no {missing}: cache_language_patches does not fit it"
        )
    import triton.language as tl

    original = interpreter._patch_builtin
    wrappers: dict[object, list[tuple[str, Any]]] = {}  # modules and classes hash by identity
    for obj in _language_objects():
        builtins = [(name, member) for name, member in inspect.getmembers(obj) if tl.core.is_builtin(member)]
        if not builtins:
            raise RuntimeError(f"{obj!r} shows no Triton builtins: it is patched already (call this first)")
        recorder = _Recorder()
        for name, member in builtins:
            interpreter._patch_attr(obj, name, member, interpreter.interpreter_builder, recorder)
        wrappers[obj] = recorder.values

    def _patch_builtin(pkg: object, builder: Any, scope: Any) -> None:
        entry = wrappers.get(pkg)
        if entry is None:  # an object the interpreter did not patch when this was set up
            original(pkg, builder, scope)
            return
        for name, wrapper in entry:
            scope.set_attr(pkg, name, wrapper)

    interpreter._patch_builtin = _patch_builtin
    _installed = True
