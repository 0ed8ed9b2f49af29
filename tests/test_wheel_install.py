"""A wheel install (not editable) carries the kernel sources and the configs, and runs with them.

Builds the wheel of this tree, installs it into a fresh virtual environment (``--system-site-packages``, plus the
test environment's site-packages for torch), then, from a directory outside the repository: runs the AscendC
host-model backend of one op against the reference (compiling the kernel from the installed ``csrc/`` into an
empty cache) and ``ascend-spec plan`` with its default profile and curve (the installed ``configs/``).
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from ascend_spec.backend import host_compiler

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(host_compiler() is None, reason="needs a C++ compiler")

RUN_ONE_OP = """
import torch
import ascend_spec
from ascend_spec.ascendc import host_model
from ascend_spec.ops import allocate_verify_budget, survival_probs
from ascend_spec.paths import CONFIGS_DIR, CSRC_DIR

here = ascend_spec.__file__
assert str(CSRC_DIR).startswith(str(__import__("pathlib").Path(here).parent)), (CSRC_DIR, here)
assert host_model.KERNELS_DIR.joinpath("allocate_verify_budget.cpp").is_file()
assert CONFIGS_DIR.joinpath("profiles", "talk_ascend910b.json").is_file()
surv = survival_probs(torch.rand(6, 5, generator=torch.Generator().manual_seed(0)))
got = allocate_verify_budget(surv, 9, backend="ascendc")
want = allocate_verify_budget(surv, 9, backend="reference")
assert torch.equal(got.num_drafts, want.num_drafts) and torch.equal(got.draft_index, want.draft_index)
from ascend_spec.cpu import native
from ascend_spec.gdn import allocate_conv_records, verify_causal_conv1d
assert str(native.CPU_KERNELS_DIR).startswith(str(CSRC_DIR))
gen = torch.Generator().manual_seed(1)
x, w = torch.randn(5, 8, generator=gen), torch.randn(8, 3, generator=gen)
ys = []
for backend in ("cpu", "reference"):  # the native kernel compiled from the installed csrc/cpu
    pool, rec = torch.zeros(2, 8, 2), allocate_conv_records(2, 5, 8, 3, dtype=torch.float32)
    ys.append(verify_causal_conv1d(x, w, None, cu_seqlens=torch.tensor([0, 5]), conv_state_pool=pool,
              state_indices=torch.tensor([1]), records=rec, pending=torch.zeros(1, dtype=torch.int32),
              backend=backend))
torch.testing.assert_close(ys[0], ys[1])
print("installed at", here)
"""


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert done.returncode == 0, f"{cmd}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def test_wheel_install_runs_the_host_model_and_plan(tmp_path: Path) -> None:
    # Build from a clean copy: an in-tree build/ directory could carry files the tree no longer has.
    source = tmp_path / "source"
    skip = shutil.ignore_patterns(".*", "build", "dist", "*.egg-info", "__pycache__", "*.so")
    shutil.copytree(ROOT, source, ignore=skip)
    wheels = tmp_path / "wheels"
    env = {**os.environ, "COMPILE_CUSTOM_KERNELS": "0"}
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(source), "-w", str(wheels)], env=env, cwd=source)  # fmt: skip
    (wheel,) = wheels.glob("ascend_spec-*.whl")

    target = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(target)
    python = target / "bin" / "python"
    inner_site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    # torch and friends come from the test environment; its editable ascend_spec hook is not loaded (a path in
    # a .pth file adds the directory but does not run the .pth files inside it).
    outer_site = [
        p for p in {*site.getsitepackages(), sysconfig.get_paths()["purelib"]} if "site-packages" in p
    ]
    (inner_site / "test_env.pth").write_text("\n".join(outer_site) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)])

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    run_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ASCEND_SPEC_BACKEND")}
    run_env["ASCEND_SPEC_CACHE_DIR"] = str(tmp_path / "cache")  # compile from the installed sources
    done = _run([str(python), "-c", RUN_ONE_OP], cwd=outside, env=run_env)
    assert str(inner_site) in done.stdout
    plan = _run(
        [str(target / "bin" / "ascend-spec"), "plan", "--batch-sizes", "8", "64"], cwd=outside, env=run_env
    )
    # the default profile and curve, read from the installed package
    assert f"{inner_site}/ascend_spec/configs/profiles/talk_ascend910b.json" in plan.stdout, plan.stdout[
        -2000:
    ]
    assert "expected tokens/s" in plan.stdout
