"""ascend_spec.e2e.interpreter_speed against Triton's interpreter as shipped: a patch sets the same attributes to
wrappers of the same builtins and restores them alike, and kernels (nested @jit calls, triton.language's own
library functions, tensor methods) give the same results. Each side runs in a fresh process: the cache must be
set up before a kernel runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")

PROGRAM = """
import json, sys
import torch
import triton
import triton.language as tl
from triton.language import core
from triton.runtime import interpreter

if sys.argv[1] == "cached":
    from ascend_spec.e2e.interpreter_speed import cache_language_patches

    cache_language_patches()
    cache_language_patches()  # idempotent


@triton.jit
def scale(x, factor):
    return x * factor


@triton.jit
def kernel(x_ptr, out_ptr, sums_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = scale(x, 3.0)
    y = tl.where(y > 0, y, core.full([BLOCK], -1.0, tl.float32))
    tl.store(out_ptr + offs, y.to(tl.float32), mask=mask)
    tl.store(sums_ptr + pid, tl.sum(tl.abs(x), axis=0) + tl.max(x, axis=0))


def patched_state():
    # What one kernel launch's patch sets: each changed attribute and the builtin its wrapper calls.
    # An attribute set twice (a builtin, then _patch_reduce_scan's own) counts as its last value.
    scope = interpreter._patch_lang(kernel.fn)
    changed = {}
    for obj, name, original in scope._changes:
        key = f"{getattr(obj, '__name__', type(obj).__name__)}.{name}"
        if key in changed:
            continue
        value = getattr(obj, name)
        inner = (getattr(value, "__kwdefaults__", None) or {}).get("member")
        changed[key] = [getattr(value, "__qualname__", type(value).__name__), inner is original]
    scope.restore()
    return changed


x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
out = torch.empty_like(x)
sums = torch.empty(8)
kernel[(8,)](x, out, sums, 1000, BLOCK=128)
changed = patched_state()
kernel[(8,)](x, out, sums, 1000, BLOCK=128)  # once more after an explicit patch and restore
print(json.dumps({
    "out": out.tolist(),
    "sums": sums.tolist(),
    "changed": changed,
    "load_unpatched": tl.load is core.load and tl.core.is_builtin(tl.load),
}))
"""


def _run(tmp_path: Path, how: str) -> dict:
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(PROGRAM))
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, str(script), how], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cached_patches_equal_the_interpreters_own(tmp_path: Path) -> None:
    shipped = _run(tmp_path, "shipped")
    cached = _run(tmp_path, "cached")
    # The same attributes patched to the same kind of value, each wrapper calling the attribute's own builtin.
    assert cached["changed"] == shipped["changed"]
    wrappers = [name for name, (_, own_builtin) in shipped["changed"].items() if own_builtin]
    assert len(wrappers) > 100 and "triton.language.load" in wrappers, sorted(shipped["changed"])[:20]
    assert cached["out"] == shipped["out"] and cached["sums"] == shipped["sums"]
    assert cached["load_unpatched"] and shipped["load_unpatched"]  # restored after every launch
    x = [float(v) for v in shipped["out"]]
    assert any(v == -1.0 for v in x) and any(v > 0 for v in x)  # both branches of the kernel ran


def test_refused_after_a_patch_or_on_another_interpreter(tmp_path: Path) -> None:
    code = """
    import triton.language as tl
    from triton.runtime import interpreter
    import ascend_spec.e2e.interpreter_speed as speed

    saved = interpreter._patch_attr
    del interpreter._patch_attr
    try:
        speed.cache_language_patches()
    except RuntimeError as exc:
        print("missing:", exc)
    interpreter._patch_attr = saved
    scope = interpreter._LangPatchScope()
    interpreter._patch_builtin(tl.math, interpreter.interpreter_builder, scope)
    try:
        speed.cache_language_patches()
    except RuntimeError as exc:
        print("patched:", exc)
    """
    script = tmp_path / "refusals.py"
    script.write_text(textwrap.dedent(code))
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TRITON_INTERPRET": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "missing: this Triton's interpreter has no ['_patch_attr']" in proc.stdout
    assert "patched:" in proc.stdout and "patched already" in proc.stdout
