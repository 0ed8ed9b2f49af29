"""Compile every Triton kernel of the package for Ascend (910B3 = Atlas A2, 910_9382 = Atlas A3), without CANN.

Why: the interpreter and the sm_90/gfx942 compile check accept code that Ascend's compiler rejects (multi-operand
``tl.reduce``, int32 ``tl.sort``, fp8 were all seen rejected). triton-ascend's NPU pipeline runs on a CPU machine
from PyPI alone up to its last stage: Python -> TTIR -> linalg/HIVM (``triton-adapter-opt``) -> ``bishengir-compile
--target=<SoC>`` with its whole pipeline (tiling, UB planning, which reports overflow, sync insertion). Only the
final ``hivmc`` (HIVM -> device object) ships with CANN; a stand-in on ``PATH`` writes the HIVM module it is given
as the "object", so ``triton.compile`` returns and the test asserts on that module.

triton-ascend installs its own top-level ``triton`` (3.2), which conflicts with the upstream Triton of ``.venv``,
so this runs in ``.venv-triton-ascend`` (``scripts/setup_triton_ascend_env.sh`` creates it: triton-ascend,
ascendnpu-ir, pybind11 pinned, the CPU torch). The kernels, their launch cases and the dtype specialisations each
must compile are those of :mod:`test_triton_gpu_compile` (imported, not copied): the launches are recorded in the
Ascend venv and specialised with triton-ascend's own binder, exactly as ``kernel[grid](...)`` would on an NPU.
``NPUUtils`` is patched to name the SoC (it otherwise builds a CANN extension to ask the driver). Skips only
when the packages cannot be installed, and says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # sets up its own venv (pip)

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-triton-ascend"
SETUP = ROOT / "scripts" / "setup_triton_ascend_env.sh"
SOCS = ("Ascend910B3", "Ascend910_9382")
# hivmc lowers HIVM to the device object and exists only in CANN; this stand-in keeps the HIVM module instead.
HIVMC_STAND_IN = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "hivmc stand-in 0.0.0"; exit 0; fi
src=""; out=""
while [ $# -gt 0 ]; do
  case "$1" in -o) out="$2"; shift 2;; -*) shift;; *) src="$1"; shift;; esac
done
[ -n "$src" ] && [ -n "$out" ] || { echo "hivmc stand-in: no input or -o" >&2; exit 2; }
cp "$src" "$out.o"
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    setup = subprocess.run(["bash", str(SETUP)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    if setup.returncode != 0:
        pytest.skip(
            "triton-ascend==3.2.0 / ascendnpu-ir==1.2.0 could not be installed into .venv-triton-ascend, so "
            f"nothing was compiled for Ascend:\n{setup.stdout[-1500:]}{setup.stderr[-1500:]}"
        )
    work = tmp_path_factory.mktemp("ascend_compile")
    (work / "bin").mkdir()
    hivmc = work / "bin" / "hivmc"
    hivmc.write_text(HIVMC_STAND_IN)
    hivmc.chmod(0o755)
    out = work / "report.json"
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "ASCEND_HOME_PATH")}
    env.update(ASCEND_SPEC_CHECKS="0", TRITON_CACHE_DIR=str(work / "cache"), TRITON_DEBUG="0")
    env["PATH"] = os.pathsep.join([str(work / "bin"), env.get("PATH", "")])
    done = subprocess.run(
        [str(VENV / "bin" / "python"), __file__, str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(out.read_text())


def test_every_kernel_and_dtype_is_covered_on_ascend(report: dict) -> None:
    """The Ascend binder sees every kernel, in each dtype specialisation its launcher can pass."""
    from test_triton_gpu_compile import coverage_errors

    assert report["kernels"], "no @triton.jit kernel was discovered"
    errors = coverage_errors(report["kernels"], report["signatures"])
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("soc", SOCS)
def test_every_launch_compiles_for_ascend(report: dict, soc: str) -> None:
    """Each distinct launch goes through bishengir-compile for ``soc`` and yields an AIV HIVM module."""
    runs = [r for r in report["compiles"] if r["soc"] == soc]
    assert len(runs) == report["launches"], f"{soc}: {len(runs)} compiles for {report['launches']} launches"
    failed = [f"{r['kernel']} [{r['case']}] {r['signature']}:\n{r['error']}" for r in runs if not r["ok"]]
    assert not failed, f"{len(failed)} of {len(runs)} launches failed to compile:\n\n" + "\n\n".join(failed)


def test_the_stand_in_does_not_hide_a_compile_error(report: dict) -> None:
    """A kernel bishengir rejects (a multi-operand tl.reduce) fails here, so a pass above means something."""
    assert report["probe"]["accepted"]["ok"], report["probe"]["accepted"]["error"]
    rejected = report["probe"]["rejected"]
    assert not rejected["ok"], "a two-operand tl.reduce compiled for Ascend"
    # ConvertLinalgRToBinary is the stage that runs bishengir-compile (and through it the hivmc stand-in).
    assert "ConvertLinalgRToBinary" in rejected["error"], rejected["error"]


# ------------------------------------------------------------------ subprocess (.venv-triton-ascend, no interpreter)


def _use_pypi_toolchain() -> None:
    """Put ascendnpu-ir's bishengir-compile on PATH; name the SoC instead of asking the (absent) NPU driver."""
    import ascendnpuir
    from triton.backends.ascend import driver

    bishengir = Path(ascendnpuir.__file__).parent / "bin"
    assert (bishengir / "bishengir-compile").exists(), f"no bishengir-compile in {bishengir}"
    os.environ["PATH"] = os.pathsep.join([str(bishengir), os.environ["PATH"]])

    def no_extension(self) -> None:
        self.npu_utils_mod = None

    driver.NPUUtils.__init__ = no_extension
    driver.NPUUtils.get_arch = lambda self: os.environ["ASCEND_SPEC_TARGET_SOC"]


def _specialise(fn, args: tuple, kwargs: dict, soc: str) -> tuple:
    """One recorded launch bound by triton-ascend's binder, as ``JITFunction.run`` binds it before compiling."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    target = GPUTarget("npu", soc, 0)
    backend = make_backend(target)
    fn.create_binder(backend)
    kwargs = {**kwargs, "debug": False}
    bound_args, sig_and_spec, _, _, _ = fn.binder(*args, **kwargs)
    options = backend.parse_options(kwargs)
    bound_vals = tuple(bound_args.values())
    sigkeys = [fn.params[i].name for i in fn.non_constexpr_indices]
    signature = {k: ("*i8" if v == "none" else v) for k, v in zip(sigkeys, sig_and_spec[: len(sigkeys)])}
    attrs = backend.get_attrs_descriptor(fn.params, bound_vals)
    constant_params = attrs.get_constants()
    constants = {
        p.name: v
        for v, p in zip(bound_vals, fn.params)
        if p.is_constexpr or p.num in constant_params or v is None
    }
    shown = ", ".join(
        f"{k}={constants[k]!r}" if k in constants else f"{k}:{signature.get(k)}"
        for k in (p.name for p in fn.params)
    )
    return target, signature, constants, attrs, options, shown


def _compile(fn, args: tuple, kwargs: dict, soc: str) -> tuple[bool, str, str, dict[str, str]]:
    """Specialise one recorded launch and compile it for ``soc``; (ok, error, shown signature, signature)."""
    import triton
    from triton.compiler import ASTSource

    target, signature, constants, attrs, options, shown = _specialise(fn, args, kwargs, soc)
    os.environ["ASCEND_SPEC_TARGET_SOC"] = soc
    try:
        binary = triton.compile(
            ASTSource(fn, signature, constants, attrs), target=target, options=options.__dict__
        )
    except Exception as err:  # noqa: BLE001  (reported per launch)
        return False, f"{type(err).__name__}: {_essence(str(err))}", shown, signature
    module = binary.asm.get("npubin", b"")
    module = module.decode(errors="replace") if isinstance(module, bytes) else str(module)
    if "hivm.module_core_type" not in module or binary.metadata.mix_mode != "aiv":
        return False, f"no AIV HIVM module came out of bishengir-compile: {module[:300]!r}", shown, signature
    return True, "", shown, signature


def _essence(message: str) -> str:
    """The compiler's diagnostics without the stack dump LLVM prints after them."""
    lines = [line for line in message.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    lines = [
        line for line in lines if "triton-adapter-opt+0x" not in line and "bishengir-compile+0x" not in line
    ]
    text = "\n".join(lines)
    return text if len(text) <= 3000 else text[:2000] + "\n...\n" + text[-1000:]


def _probe(soc: str) -> dict:
    """A kernel the pipeline accepts and one it rejects (a two-operand tl.reduce), compiled like the rest."""
    global tl, _keep_larger  # jit functions resolve names in their module's globals
    import triton
    import triton.language as tl

    @triton.jit
    def _keep_larger(a, ia, b, ib):
        take = a >= b
        return tl.where(take, a, b), tl.where(take, ia, ib)

    @triton.jit
    def accepted(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)

    @triton.jit
    def rejected(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        _, i = tl.reduce((tl.load(x_ptr + offs), offs), 0, _keep_larger)
        tl.store(out_ptr, i)

    import torch

    x = torch.zeros(64)
    out = torch.zeros(1, dtype=torch.int32)
    result = {}
    for name, fn, args in (("accepted", accepted, (x, 64)), ("rejected", rejected, (x, out))):
        ok, error, _, _ = _compile(fn, args, {"BLOCK": 64}, soc)
        result[name] = {"ok": ok, "error": error}
    return result


def main(out: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    assert os.environ.get("TRITON_INTERPRET", "0") != "1", "run without TRITON_INTERPRET"
    _use_pypi_toolchain()
    from test_triton_gpu_compile import GPU_ONLY_CASES, _discover, _record_launches

    start = time.perf_counter()
    kernels, helpers = _discover()
    launches = _record_launches(kernels, skip=GPU_ONLY_CASES)
    probe = _probe(SOCS[0])
    compiles, signatures, seen = [], {}, set()
    for soc in SOCS:
        for name, case, fn, args, kwargs in launches:
            *_, attrs, options, shown = _specialise(fn, args, kwargs, soc)
            ident = (soc, name, shown, repr(attrs.to_dict()), options.hash())
            if ident in seen:
                continue
            seen.add(ident)
            t0 = time.perf_counter()
            ok, error, shown, signature = _compile(fn, args, kwargs, soc)
            if soc == SOCS[0]:
                signatures.setdefault(name, []).append(signature)
            compiles.append({
                "kernel": name, "case": case, "soc": soc, "ok": ok, "error": error, "signature": shown,
                "seconds": round(time.perf_counter() - t0, 2),
            })  # fmt: skip
    result = {
        "kernels": sorted(kernels),
        "helpers": sorted(helpers),
        "launches": sum(1 for row in compiles if row["soc"] == SOCS[0]),
        "signatures": signatures,
        "compiles": compiles,
        "probe": probe,
        "seconds": round(time.perf_counter() - start, 1),
    }
    out.write_text(json.dumps(result, indent=1))
    for row in compiles:
        print(
            f"{'ok  ' if row['ok'] else 'FAIL'} {row['soc']:14} {row['seconds']:5.2f}s {row['kernel']} [{row['case']}]"
        )
    print(
        f"{len(kernels)} kernels, {len(helpers)} helpers, {len(compiles)} compiles in {result['seconds']} s"
    )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main(Path(sys.argv[1]))
