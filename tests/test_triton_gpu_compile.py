"""Compile every Triton kernel of the package for real GPUs (sm_90 cubin, gfx942 hsaco), without a GPU.

Why: the other tests run the kernels under ``TRITON_INTERPRET=1``, which accepts code the real compiler rejects
(it once hid a loop-carried type clash). The interpreter is chosen when ``@triton.jit`` decorates, so all of this
runs in ONE subprocess without it (``python tests/test_triton_gpu_compile.py OUT.json``), which:

1. imports every ``ascend_spec/**/triton.py`` and lists its ``@triton.jit`` functions (autotuned and
   heuristics-wrapped ones unwrapped); those no other jit function uses are kernels, the rest device helpers
   (compiled inside the kernels that call them);
2. replaces ``JITFunction.run`` (what ``kernel[grid](...)`` calls) by a recorder and drives the PUBLIC ops through
   :func:`launch_cases` on CPU tensors, so the launch arguments are exactly what the launchers pass (their dtype
   normalisation, strides, block sizes, constexprs, ``num_warps``); an autotuned kernel is recorded once per config;
3. specialises each distinct launch with Triton's own binder (argument dtypes, ints equal to 1 as constexpr,
   16-byte divisibility) and compiles it with ``triton.compile`` for ``GPUTarget("cuda", 90, 32)``; the first
   launch of each kernel also for ``GPUTarget("hip", "gfx942", 64)`` when a probe kernel compiles for it offline.

:data:`SPECIALISATIONS` lists, per kernel, the argument dtypes its launcher can pass; the launches must compile each
of them, and a kernel without an entry fails the test with a message saying to add one. Needs Triton's bundled
ptxas (and, for AMD, its bundled lld), no GPU. Uses two private Triton helpers (the binder and ``_pack_args``),
pinned by the installed Triton (3.9): if they move, this test fails loudly rather than passing.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"cuda": ("cuda", 90, 32), "hip": ("hip", "gfx942", 64)}
BINARY = {"cuda": "cubin", "hip": "hsaco"}

F32, BF16, F16, I32, I64 = "*fp32", "*bf16", "*fp16", "*i32", "*i64"
FLOATS, INDICES = {F32, BF16, F16}, {I32, I64}

# Kernel ("module:name") -> argument -> pointer dtypes its launcher can pass (read the launcher and the public op's
# checks). The launch cases below must produce every one of them.
SPECIALISATIONS: dict[str, dict[str, set[str]]] = {
    "ascend_spec.ops.max_softmax_confidence.triton:_max_softmax_partials_kernel": {"x_ptr": FLOATS},
    # The public op normalises positions, rope positions and context lengths to int64; ids keep their dtype.
    "ascend_spec.ops.prepare_block_slots.triton:_prepare_block_slots_kernel": {
        "ids_ptr": INDICES,
        "out_ids_ptr": INDICES,
        "pos_ptr": {I64},
        "rope_ptr": {I64},
        "ctx_len_ptr": {I64},
        "table_ptr": {I32},
    },
    # Unused pointers (no capacities, an int budget) are the int32 num_drafts output.
    "ascend_spec.ops.allocate_verify_budget.triton:_allocate_kernel": {
        "surv_ptr": FLOATS,
        "cap_ptr": INDICES,
        "budget_ptr": INDICES,
    },
    # weight, bias, pool and records dtypes are independent of x's (records must hold x exactly).
    "ascend_spec.gdn.verify_causal_conv1d.triton:_verify_kernel": {
        "x_ptr": FLOATS,
        "w_ptr": FLOATS,
        "b_ptr": FLOATS,
        "y_ptr": FLOATS,
        "pool_ptr": FLOATS,
        "rec_ptr": FLOATS,
        "cu_ptr": INDICES,
        "idx_ptr": INDICES,
    },
    "ascend_spec.gdn.verify_causal_conv1d.triton:_flush_kernel": {
        "pool_ptr": FLOATS,
        "rec_ptr": FLOATS,
        "idx_ptr": INDICES,
    },
    "ascend_spec.gdn.verify_causal_conv1d.triton:_counts_kernel": {"cu_ptr": INDICES, "idx_ptr": INDICES},
    # q, k, v share one float dtype, g and beta are free; the pool and records are fp32. Flush passes the pool
    # as every token pointer (HAS_TOKENS=False).
    "ascend_spec.gdn.verify_gated_delta_rule.triton:_verify_kernel": {
        "q": FLOATS,
        "v": FLOATS,
        "o": FLOATS,
        "g": FLOATS,
        "beta": FLOATS,
        "pool": {F32},
        "cu_seqlens": INDICES,
        "state_indices": INDICES,
    },
    "ascend_spec.gdn.verify_gated_delta_rule.triton:_meta_kernel": {
        "cu_seqlens": INDICES,
        "state_indices": INDICES,
    },
    # Zeroes the GDN (o, v's dtype) and conv (y, x's dtype) output rows no request covers.
    "ascend_spec.gdn.triton:_zero_uncovered_kernel": {"out_ptr": FLOATS, "cu_ptr": INDICES},
}


# ---------------------------------------------------------------------------------------------- launch cases
# Each case calls a public op with backend="triton" on CPU tensors (value checks off). Values do not matter (the
# kernels only record their launch); shapes, dtypes, strides and ints do: an int equal to 1 becomes a constexpr,
# one divisible by 16 gets a divisibility hint, so the cases mix both.


def _confidence_cases() -> list[tuple[str, Callable[[], object]]]:
    import torch

    from ascend_spec.ops import max_softmax_confidence, max_softmax_partials

    def col_major(n: int, v: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros(v, n, dtype=dtype).t()

    return [
        (
            "confidence fp32 [4, 131072]",
            lambda: max_softmax_confidence(torch.zeros(4, 131072), backend="triton"),
        ),
        (
            "confidence partials bf16 [3, 1000] T=0.7",
            lambda: max_softmax_partials(
                torch.zeros(3, 1000, dtype=torch.bfloat16), temperature=0.7, backend="triton"
            ),
        ),
        (
            "confidence fp16 column-major [5, 50]",
            lambda: max_softmax_confidence(col_major(5, 50, torch.float16), backend="triton"),
        ),
        (
            "confidence fp32 one row [1, 33]",
            lambda: max_softmax_confidence(torch.zeros(1, 33), backend="triton"),
        ),
    ]


def _block_slots_cases() -> list[tuple[str, Callable[[], object]]]:
    import torch

    from ascend_spec.ops import prepare_block_slots

    i32, i64 = torch.int32, torch.int64
    table = torch.arange(16, dtype=i32).reshape(2, 8)
    return [
        (
            "block_slots int32 ids/positions, mrope int32, context, DFlash Q=16, padded",
            lambda: prepare_block_slots(
                torch.tensor([5, 6], dtype=i32),
                torch.tensor([40, 100], dtype=i32),
                table,
                block_size=16,
                num_query_tokens=16,
                mask_token_id=151669,
                rope_positions=torch.zeros(3, 2, dtype=i32),
                context_lens=torch.tensor([3, 5], dtype=i32),
                num_padded_reqs=4,
                backend="triton",
            ),
        ),
        (
            "block_slots int64 ids, DSpark Q=8 sample_from_anchor, no rope, no context",
            lambda: prepare_block_slots(
                torch.tensor([5, 6], dtype=i64),
                torch.tensor([40, 100], dtype=i64),
                table,
                block_size=128,
                num_query_tokens=8,
                mask_token_id=7,
                sample_from_anchor=True,
                backend="triton",
            ),
        ),
        (
            "block_slots one request, int64 mask id 2**33, rope [B], context",
            lambda: prepare_block_slots(
                torch.tensor([5], dtype=i64),
                torch.tensor([40], dtype=i64),
                table[:1],
                block_size=16,
                num_query_tokens=4,
                mask_token_id=2**33,
                rope_positions=torch.tensor([40], dtype=i64),
                context_lens=torch.tensor([7], dtype=i64),
                backend="triton",
            ),
        ),
    ]


def _verify_budget_cases() -> list[tuple[str, Callable[[], object]]]:
    import torch

    from ascend_spec.ops import allocate_verify_budget

    return [
        (
            "verify_budget fp32 [256, 16], int budget",
            lambda: allocate_verify_budget(torch.zeros(256, 16), 100, backend="triton"),
        ),
        (
            "verify_budget bf16 column-major [7, 5], int32 capacities, int64 budget tensor",
            lambda: allocate_verify_budget(
                torch.zeros(5, 7, dtype=torch.bfloat16).t(),
                torch.tensor(10),
                max_budget=20,
                capacities=torch.full((7,), 3, dtype=torch.int32),
                backend="triton",
            ),
        ),
        (
            "verify_budget fp16 [1, 1], int64 capacities, int32 budget tensor",
            lambda: allocate_verify_budget(
                torch.zeros(1, 1, dtype=torch.float16),
                torch.tensor(1, dtype=torch.int32),
                capacities=torch.ones(1, dtype=torch.int64),
                backend="triton",
            ),
        ),
        (
            "verify_budget fp32 [3, 4], budget 1",
            lambda: allocate_verify_budget(torch.zeros(3, 4), 1, backend="triton"),
        ),
    ]


def _conv1d_cases() -> list[tuple[str, Callable[[], object]]]:
    import torch

    from ascend_spec.gdn import allocate_conv_records, flush_conv_pending, flush_pending, verify_causal_conv1d

    def verify(dtypes, *, channels, width, cap, lens, act, vllm_pool=False, w_col_major=False):
        """``dtypes``: x, weight, bias (None: no bias), pool, records, cu_seqlens, state_indices."""

        def run() -> None:
            x_dt, w_dt, b_dt, pool_dt, rec_dt, cu_dt, idx_dt = dtypes
            slots = 4
            x = torch.zeros(sum(lens), channels, dtype=x_dt)
            w = (
                torch.zeros(width, channels, dtype=w_dt).t()
                if w_col_major
                else torch.zeros(channels, width, dtype=w_dt)
            )
            bias = None if b_dt is None else torch.zeros(channels, dtype=b_dt)
            if vllm_pool:  # vLLM keeps the conv state as [S, W-1, C] and passes a transposed view
                pool = torch.zeros(slots, width - 1, channels, dtype=pool_dt).transpose(1, 2)
            else:
                pool = torch.zeros(slots, channels, width - 1, dtype=pool_dt)
            rec = allocate_conv_records(slots, cap, channels, width, dtype=rec_dt)
            cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=cu_dt)
            idx = torch.tensor([2, -1, 0][: len(lens)], dtype=idx_dt)
            pending = torch.zeros(len(lens), dtype=torch.int32)
            verify_causal_conv1d(
                x, w, bias, cu_seqlens=cu, conv_state_pool=pool, state_indices=idx, records=rec,
                pending=pending, activation=act, backend="triton",
            )  # fmt: skip

        return run

    def flush(pool_dt, rec_dt, idx_dt, *, channels, width, reset, vllm_pool, via_gdn=False):
        def run() -> None:
            if vllm_pool:
                pool = torch.zeros(4, width - 1, channels, dtype=pool_dt).transpose(1, 2)
            else:
                pool = torch.zeros(4, channels, width - 1, dtype=pool_dt)
            rec = allocate_conv_records(4, 8, channels, width, dtype=rec_dt)
            idx = torch.tensor([3, -1, 1], dtype=idx_dt)
            pending = torch.zeros(3, dtype=torch.int32)
            op = flush_pending if via_gdn else flush_conv_pending
            op(pool, idx, rec, pending, reset_pending=reset, backend="triton")

        return run

    f32, bf16, f16, i32, i64 = torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64
    return [
        (
            "conv1d verify bf16, int32 indices, silu, W=4 C=256",
            verify(
                (bf16, bf16, bf16, bf16, bf16, i32, i32),
                channels=256,
                width=4,
                cap=8,
                lens=[3, 0, 5],
                act="silu",
            ),
        ),
        (
            "conv1d verify fp32 x/records, fp16 weight, no bias (fp16 dummy), fp16 vLLM pool view, int64 indices, W=2",
            verify(
                (f32, f16, None, f16, f32, i64, i64),
                channels=64,
                width=2,
                cap=5,
                lens=[5, 2],
                act=None,
                vllm_pool=True,
            ),
        ),
        (
            "conv1d verify fp16 x/records, fp32 column-major weight, fp32 bias and pool, one token/step",
            verify(
                (f16, f32, f32, f32, f16, i32, i64),
                channels=200,
                width=4,
                cap=1,
                lens=[1, 1, 1],
                act="silu",
                w_col_major=True,
            ),
        ),
        (
            "conv1d flush bf16 pool/records, int32 indices, reset pending",
            flush(bf16, bf16, i32, channels=256, width=4, reset=True, vllm_pool=False),
        ),
        (
            "conv1d flush fp16 vLLM pool view and records, int64 indices, keep pending",
            flush(f16, f16, i64, channels=96, width=4, reset=False, vllm_pool=True),
        ),
        (
            "conv1d flush fp32 via gdn.flush_pending, int32 indices, W=2",
            flush(f32, f32, i32, channels=64, width=2, reset=True, vllm_pool=False, via_gdn=True),
        ),
    ]


def _delta_rule_cases() -> list[tuple[str, Callable[[], object]]]:
    import torch

    from ascend_spec.gdn import allocate_records, flush_pending, verify_gated_delta_rule

    def verify(qkv_dt, g_dt, beta_dt, cu_dt, idx_dt, *, h, hv, dk, dv, cap, lens, l2norm, scale=None, value_major=False):  # fmt: skip
        def run() -> None:
            t = sum(lens)
            rec = allocate_records(4, cap, hv, dk, dv, num_k_heads=h)
            # value_major: vLLM's GPU layout, [S, HV, Dv, Dk] passed transposed (the k stride is the 1).
            pool = torch.zeros(4, hv, dv, dk).transpose(-1, -2) if value_major else torch.zeros(4, hv, dk, dv)
            verify_gated_delta_rule(
                torch.zeros(t, h, dk, dtype=qkv_dt), torch.zeros(t, h, dk, dtype=qkv_dt),
                torch.zeros(t, hv, dv, dtype=qkv_dt), torch.zeros(t, hv, dtype=g_dt),
                torch.zeros(t, hv, dtype=beta_dt),
                cu_seqlens=torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=cu_dt),
                state_pool=pool, state_indices=torch.tensor([1, -1, 3][: len(lens)], dtype=idx_dt),
                records=rec, pending=torch.zeros(len(lens), dtype=torch.int32), scale=scale,
                use_qk_l2norm=l2norm, backend="triton",
            )  # fmt: skip

        return run

    def flush(idx_dt):
        def run() -> None:
            rec = allocate_records(4, 8, 4, 128, 128, num_k_heads=2)
            pool = torch.zeros(4, 4, 128, 128)
            idx = torch.tensor([3, -1, 0], dtype=idx_dt)
            flush_pending(pool, idx, rec, torch.zeros(3, dtype=torch.int32), backend="triton")

        return run

    f32, bf16, f16, i32, i64 = torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64
    gqa_128 = dict(h=2, hv=4, dk=128, dv=128, cap=8, lens=[3, 0, 5], l2norm=True)
    return [
        (
            "delta_rule verify bf16 qkv, fp32 g, bf16 beta, int32 indices, GQA H=2 HV=4 Dk=Dv=128, l2norm",
            verify(bf16, f32, bf16, i32, i32, h=2, hv=4, dk=128, dv=128, cap=8, lens=[3, 0, 5], l2norm=True),
        ),
        (
            "delta_rule verify fp16 qkv/g, fp32 beta, int64 indices, H=HV=1 Dk=64 Dv=16, scale 0.3",
            verify(
                f16, f16, f32, i64, i64, h=1, hv=1, dk=64, dv=16, cap=4, lens=[4, 2], l2norm=False, scale=0.3
            ),
        ),
        (
            "delta_rule verify fp32 qkv, bf16 g, fp16 beta, int64 cu, int32 indices, one token/step",
            verify(f32, bf16, f16, i64, i32, h=1, hv=2, dk=32, dv=64, cap=1, lens=[1, 1, 1], l2norm=True),
        ),
        (
            "delta_rule verify bf16 qkv, value-major pool (vLLM's GPU layout), GQA H=2 HV=4 Dk=Dv=128",
            verify(bf16, f32, bf16, i32, i64, **gqa_128, value_major=True),
        ),
        ("delta_rule flush int64 indices", flush(i64)),
        ("delta_rule flush int32 indices", flush(i32)),
    ]


#: Launch cases for GPUs only, not compiled for Ascend (test_triton_ascend_compile): the value-major state pool is
#: vLLM's GPU layout; bishengir plans its strided [Dk, tileV] state tile past the Unified Buffer, and the triton
#: backend refuses that layout on NPU devices instead (the NPU path keeps [HV, Dk, Dv] slots).
GPU_ONLY_CASES = frozenset(
    {"delta_rule verify bf16 qkv, value-major pool (vLLM's GPU layout), GQA H=2 HV=4 Dk=Dv=128"}
)


def launch_cases() -> list[tuple[str, Callable[[], object]]]:
    """Every case; a new kernel needs one here (and a SPECIALISATIONS entry)."""
    return [
        *_confidence_cases(),
        *_block_slots_cases(),
        *_verify_budget_cases(),
        *_conv1d_cases(),
        *_delta_rule_cases(),
    ]


# ------------------------------------------------------------------------------------------------ checking


def coverage_errors(kernels: list[str], compiled: dict[str, list[dict[str, str]]]) -> list[str]:
    """Why the compiled launches do not cover every kernel and every listed dtype specialisation."""
    errors = []
    where = "tests/test_triton_gpu_compile.py"
    for name in kernels:
        if name not in SPECIALISATIONS:
            errors.append(
                f"{name} has no SPECIALISATIONS entry in {where}: add one listing the argument dtypes its launcher "
                "can pass, and cases in launch_cases() that drive its launcher with each of them"
            )
            continue
        sigs = compiled.get(name, [])
        if not sigs:
            errors.append(
                f"{name} was never launched by launch_cases() in {where}: add a case that drives it"
            )
            continue
        for arg, want in SPECIALISATIONS[name].items():
            seen = {sig.get(arg) for sig in sigs}
            if missing := sorted(want - seen):
                errors.append(
                    f"{name}: no launch case compiled {arg} as {', '.join(missing)} (compiled: "
                    f"{', '.join(sorted(map(str, seen)))}); add a case to launch_cases() in {where}"
                )
    errors += [f"SPECIALISATIONS names {name}, which is not a kernel any more" for name in SPECIALISATIONS
               if name not in kernels]  # fmt: skip
    return errors


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    import triton

    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("this triton wheel has no bundled ptxas")
    out = tmp_path_factory.mktemp("gpu_compile") / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(ASCEND_SPEC_CHECKS="0", TRITON_DEFAULT_FP_FUSION="1")  # 1 = Triton 3.9's default, no warning
    done = subprocess.run(
        [sys.executable, __file__, str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(out.read_text())


def test_every_kernel_and_dtype_is_covered(report: dict) -> None:
    """Every kernel discovered in the package is launched, in each dtype specialisation its launcher can pass."""
    assert report["kernels"], "no @triton.jit kernel was discovered"
    errors = coverage_errors(report["kernels"], report["signatures"])
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("target", list(TARGETS))
def test_every_launch_compiles(report: dict, target: str) -> None:
    """Each distinct launch compiles to a device binary (cubin for sm_90, hsaco for gfx942)."""
    if target not in report["targets"]:
        pytest.skip(
            f"{target}: the probe kernel does not compile offline here: {report['unavailable'][target]}"
        )
    runs = [r for r in report["compiles"] if r["target"] == target]
    assert runs, f"nothing was compiled for {target}"
    failed = [f"{r['kernel']} [{r['case']}] {r['signature']}:\n{r['error']}" for r in runs if not r["ok"]]
    assert not failed, f"{len(failed)} of {len(runs)} launches failed to compile:\n\n" + "\n\n".join(failed)


def test_missing_entry_names_the_kernel_and_says_to_add_one() -> None:
    """A new kernel without an entry fails the coverage test with a message saying what to add."""
    sig = {"x_ptr": F32}
    kernels = [*SPECIALISATIONS, "ascend_spec.ops.new_op.triton:_new_kernel"]
    compiled = {
        name: [{arg: min(want) for arg, want in args.items()}] for name, args in SPECIALISATIONS.items()
    }
    errors = coverage_errors(kernels, {**compiled, "ascend_spec.ops.new_op.triton:_new_kernel": [sig]})
    assert any(
        e.startswith("ascend_spec.ops.new_op.triton:_new_kernel has no SPECIALISATIONS entry") for e in errors
    )
    assert any("add one" in e for e in errors)
    # A listed dtype that no case compiles is reported too.
    name = "ascend_spec.ops.max_softmax_confidence.triton:_max_softmax_partials_kernel"
    errors = coverage_errors(list(SPECIALISATIONS), {**compiled, name: [{"x_ptr": F32}]})
    assert any(e.startswith(f"{name}: no launch case compiled x_ptr as *bf16, *fp16") for e in errors)
    # Every listed dtype compiled: no error; an entry whose kernel is gone is stale.
    full = {k: [{arg: t} for arg, want in args.items() for t in want] for k, args in SPECIALISATIONS.items()}
    assert coverage_errors(list(SPECIALISATIONS), full) == []
    errors = coverage_errors([k for k in SPECIALISATIONS if k != name], full)
    assert errors == [f"SPECIALISATIONS names {name}, which is not a kernel any more"]


# ------------------------------------------------------------------------------------- subprocess (no interpreter)


def _discover() -> tuple[dict[str, object], list[str]]:
    """(kernel name -> JITFunction, helper names) of every ``triton`` module (one per op folder) of the package."""
    import importlib
    import pkgutil

    from triton.runtime.jit import JITFunction, KernelInterface

    import ascend_spec

    found: dict[str, JITFunction] = {}
    for info in pkgutil.walk_packages(ascend_spec.__path__, "ascend_spec."):
        if info.name.rsplit(".", 1)[-1] != "triton":
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            while (
                isinstance(obj, KernelInterface) and not isinstance(obj, JITFunction) and hasattr(obj, "fn")
            ):
                obj = obj.fn  # Autotuner / Heuristics wrappers
            if isinstance(obj, JITFunction) and obj.fn.__module__ == info.name:
                found[f"{info.name}:{obj.fn.__name__}"] = obj
    # Names the code of each jit function uses (not its comments or docstrings): a jit function another one
    # uses (a call, or a combine function handed to tl.associative_scan) is a helper.
    used = {
        id(fn): {
            node.id for node in ast.walk(ast.parse(textwrap.dedent(fn.src))) if isinstance(node, ast.Name)
        }
        for fn in found.values()
    }
    helpers = [
        name
        for name, fn in found.items()
        if any(fn.fn.__name__ in used[id(other)] for other in found.values() if other is not fn)
    ]
    return {k: v for k, v in found.items() if k not in helpers}, helpers


def _record_launches(
    kernels: dict[str, object], skip: frozenset[str] = frozenset()
) -> list[tuple[str, str, object, tuple, dict]]:
    """Run every launch case (but those named in ``skip``) with ``kernel[grid](...)`` recording instead of
    launching."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    import ascend_spec.backend as backend

    names = {id(fn): name for name, fn in kernels.items()}
    launches: list[tuple[str, str, object, tuple, dict]] = []
    case = ""

    def record(self, *args, grid, warmup, **kwargs):
        launches.append(
            (names.get(id(self), f"{self.fn.__module__}:{self.fn.__name__}"), case, self, args, kwargs)
        )

    def every_config(self, *args, **kwargs):
        for config in self.configs:  # compile each config; nothing is benchmarked
            extra = {k: v for k, v in config.all_kwargs().items() if v is not None}
            self.fn.run(*args, **{**kwargs, **extra})

    require = backend._require_runnable

    def allow_triton_on_cpu(which: str, device, *, op: str) -> None:
        if which != "triton":
            require(which, device, op=op)

    JITFunction.run = record
    Autotuner.run = every_config
    backend._require_runnable = allow_triton_on_cpu
    for case, fn in launch_cases():  # noqa: B007  (record reads `case`)
        if case not in skip:
            fn()
    return launches


def _probe_error(target) -> str | None:
    """None when a trivial kernel compiles for ``target`` here, else why not (missing offline toolchain)."""
    import triton
    import triton.language as tl
    from triton.compiler import ASTSource

    @triton.jit
    def probe(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)

    try:
        triton.compile(
            ASTSource(probe, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 64}),
            target=target,
        )
    except Exception as err:  # noqa: BLE001  (any failure means the toolchain is missing)
        return f"{type(err).__name__}: {str(err)[-500:]}"
    return None


def main(out: Path) -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    assert os.environ.get("TRITON_INTERPRET", "0") != "1", "run without TRITON_INTERPRET"
    start = time.perf_counter()
    kernels, helpers = _discover()
    launches = _record_launches(kernels)
    targets, unavailable = {}, {}
    for key, spec in TARGETS.items():
        target = GPUTarget(*spec)
        if (why := _probe_error(target)) is None:
            targets[key] = (target, make_backend(target))
        else:
            unavailable[key] = why
    jobs, signatures, seen = [], {}, set()
    for key, (target, backend) in targets.items():
        binders: dict[int, Callable] = {}
        for name, case, fn, args, kwargs in launches:
            if key != "cuda" and any(job[1] == name for job in jobs if job[0] == key):
                continue  # AMD: the first launch of each kernel (frontend bugs show on sm_90 already)
            if id(fn) not in binders:
                binders[id(fn)] = create_function_from_signature(fn.signature, fn.params, backend)
            bound, specialization, options = binders[id(fn)](*args, **kwargs)
            options, sig, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
            ident = (key, name, repr(sorted(sig.items())), repr(sorted(constexprs.items())), repr(attrs),
                     repr(sorted(options.__dict__.items())))  # fmt: skip
            if ident in seen:
                continue
            seen.add(ident)
            if key == "cuda":
                signatures.setdefault(name, []).append({k: v for k, v in sig.items() if v != "constexpr"})
            jobs.append((key, name, case, target, fn, sig, constexprs, attrs, options))

    def compile_one(job: tuple) -> dict:
        key, name, case, target, fn, sig, constexprs, attrs, options = job
        row = {"kernel": name, "case": case, "target": key, "ok": False, "error": ""}
        row["signature"] = (
            ", ".join(
                f"{k}={constexprs[(fn.arg_names.index(k),)]!r}" if v == "constexpr" else f"{k}:{v}"
                for k, v in sig.items()
            )
            + f", num_warps={options.num_warps}"
        )
        t0 = time.perf_counter()
        try:
            binary = triton.compile(
                ASTSource(fn, sig, constexprs, attrs), target=target, options=options.__dict__
            )
            row["ok"] = BINARY[key] in binary.asm
            row["error"] = "" if row["ok"] else f"no {BINARY[key]} in {sorted(binary.asm)}"
        except Exception as err:  # noqa: BLE001  (reported per launch)
            row["error"] = f"{type(err).__name__}: {str(err)[-3000:]}"
        row["seconds"] = round(time.perf_counter() - t0, 2)
        return row

    # Triton compiles in threads itself (AsyncCompileMode); ptxas and the MLIR passes run outside the GIL.
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        compiles = list(pool.map(compile_one, jobs))
    result = {
        "kernels": sorted(kernels),
        "helpers": sorted(helpers),
        "targets": sorted(targets),
        "unavailable": unavailable,
        "signatures": signatures,
        "compiles": compiles,
        "seconds": round(time.perf_counter() - start, 1),
    }
    out.write_text(json.dumps(result, indent=1))
    for row in compiles:
        print(
            f"{'ok  ' if row['ok'] else 'FAIL'} {row['target']:4} {row['seconds']:5.2f}s {row['kernel']} [{row['case']}]"
        )
    print(
        f"{len(kernels)} kernels, {len(helpers)} helpers, {len(compiles)} compiles in {result['seconds']} s"
    )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main(Path(sys.argv[1]))
