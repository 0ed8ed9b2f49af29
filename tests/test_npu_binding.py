"""The NPU-side C++ (csrc/torch_binding.cpp and the kernels' `<<<>>>` launchers) compiles and links together.

CANN is not installable here, so the NPU build itself never runs in CI. These checks catch what would otherwise
only show on an Ascend machine: a binding that does not compile against torch, or a launcher whose signature
drifted from its declaration in csrc/ops.h (an undefined symbol at load time on the NPU).
"""

from __future__ import annotations

import re
import subprocess
import sysconfig
from pathlib import Path

import pytest

from ascend_spec.backend import host_compiler
from ascend_spec.paths import CSRC_DIR

STUBS = Path(__file__).parent / "native" / "npu_stubs"
KERNELS = sorted((CSRC_DIR / "kernels").glob("*.cpp"))
CXX = host_compiler()
pytestmark = pytest.mark.skipif(CXX is None, reason="needs a C++ compiler")


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert done.returncode == 0, "\n".join(errors[:20]) or done.stderr[-3000:]


def test_every_kernel_launcher_matches_ops_h(tmp_path: Path) -> None:
    """Each `<op>_impl` declared in ops.h is defined, with that exact signature, by the kernel sources."""
    declared = re.findall(r"void (\w+_impl)\(", (CSRC_DIR / "ops.h").read_text())
    assert len(declared) >= len(KERNELS), "every kernel needs its launcher declared in csrc/ops.h"
    objects = []
    for src in KERNELS:
        # The NPU path with the launch syntax removed: `k<<<dim, nullptr, stream>>>(args)` -> `k(args)`.
        text = re.sub(r"<<<[^>]*>>>", "", src.read_text())
        plain = tmp_path / src.name
        plain.write_text(text)
        obj = tmp_path / f"{src.stem}.o"
        _run([
            CXX, "-std=c++17", "-O0", "-c", "-DASCEND_SPEC_NPU_LAUNCH_CHECK", f"-I{CSRC_DIR / 'host_model'}",
            f"-I{CSRC_DIR / 'kernels'}", str(plain), "-o", str(obj),
        ])  # fmt: skip
        objects.append(str(obj))
    main = tmp_path / "main.cpp"
    # A global table of their addresses: the linker must resolve every one with the declared signature.
    refs = ",\n".join(f"    reinterpret_cast<void *>(&ascend_spec::{name})" for name in declared)
    main.write_text(
        f'#include "ops.h"\nextern void *const kLaunchers[] = {{\n{refs}\n}};\nint main() {{ return 0; }}\n'
    )
    _run([CXX, "-std=c++17", f"-I{CSRC_DIR}", str(main), *objects, "-o", str(tmp_path / "link_check")])


def test_torch_binding_compiles_against_torch(tmp_path: Path) -> None:
    """torch_binding.cpp against real torch headers and stubs of the torch_npu / CANN declarations it uses."""
    from torch.utils.cpp_extension import include_paths

    includes = [f"-I{p}" for p in include_paths()]
    python_include = sysconfig.get_paths()["include"]
    _run([
        CXX, "-std=c++17", "-fsyntax-only", "-w", *includes, f"-I{python_include}", f"-I{STUBS}", f"-I{CSRC_DIR}",
        str(CSRC_DIR / "torch_binding.cpp"),
    ])  # fmt: skip
