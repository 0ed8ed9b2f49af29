"""The NPU-side C++ (csrc/torch_binding.cpp and the kernels' `<<<>>>` launchers) compiles and links together.

CANN is not installable here, so the NPU build itself never runs in CI. These checks catch what would otherwise
only show on an Ascend machine: a binding that does not compile against torch, a launcher whose signature
drifted from its declaration in csrc/ops.h (an undefined symbol at load time on the NPU), an NPU launcher that
would launch a tiling past the Unified Buffer (the chip checks nothing), and an op that takes its device, core
count, UB size or stream from the current device instead of its tensors' device.
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


def _npu_launcher_object(src: Path, tmp_path: Path) -> str:
    """The kernel source's NPU path with `k<<<dim, nullptr, stream>>>(args)` -> `k(args)`, compiled to an object."""
    plain = tmp_path / src.name
    plain.write_text(re.sub(r"<<<[^>]*>>>", "", src.read_text()))
    obj = tmp_path / f"{src.stem}.o"
    _run([
        CXX, "-std=c++17", "-O0", "-c", "-DASCEND_SPEC_NPU_LAUNCH_CHECK", f"-I{CSRC_DIR / 'host_model'}",
        f"-I{CSRC_DIR / 'kernels'}", str(plain), "-o", str(obj),
    ])  # fmt: skip
    return str(obj)


def test_every_kernel_launcher_matches_ops_h(tmp_path: Path) -> None:
    """Each `<op>_impl` declared in ops.h is defined, with that exact signature, by the kernel sources."""
    declared = re.findall(r"(?:void|int) (\w+_impl)\(", (CSRC_DIR / "ops.h").read_text())
    assert len(declared) >= len(KERNELS), "every kernel needs its launcher declared in csrc/ops.h"
    objects = [_npu_launcher_object(src, tmp_path) for src in KERNELS]
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


# Too large for one vector core's UB at the smallest tiling: Dk = 2048 (a [2048, 16] fp32 state tile and 4-token
# chunks of q/k), a conv width of 2048 (16 channels x 2047-token windows). Every pointer is null: a launcher that
# launched anyway would run the kernel body on them.
REFUSE_MAIN = r"""
#include <cstdio>
#include "ops.h"
int main() {
    VerifyGatedDeltaRuleArgs g{};
    g.numTokens = 4; g.numRows = 1; g.numHeads = 1; g.numVHeads = 1; g.dk = 2048; g.dv = 128; g.numSlots = 1;
    g.maxTokens = 4; g.poolStride = 2048 * 128; g.mode = kModeVerify; g.ubBytes = 196352; g.scale = 1.0f;
    VerifyCausalConv1dArgs c{};
    c.numRows = 1; c.channels = 16; c.width = 2048; c.maxTokens = 4; c.numSlots = 1; c.mode = kModeVerify;
    c.ubBytes = 196352;
    const int gdn = ascend_spec::verify_gated_delta_rule_impl(nullptr, 24, g);
    g.mode = kModeFlush;
    const int gdnFlush = ascend_spec::verify_gated_delta_rule_impl(nullptr, 24, g);
    const int conv = ascend_spec::verify_causal_conv1d_impl(nullptr, 24, c);
    c.mode = kModeFlushAndReset;
    const int convFlush = ascend_spec::verify_causal_conv1d_impl(nullptr, 24, c);
    std::printf("%d %d %d %d\n", gdn, gdnFlush, conv, convFlush);
    return 0;
}
"""


def test_npu_launchers_refuse_a_tiling_past_the_unified_buffer(tmp_path: Path) -> None:
    """The GDN and conv NPU launchers return -1 without launching when their tiling cannot fit UB."""
    objects = [
        _npu_launcher_object(CSRC_DIR / "kernels" / f"{stem}.cpp", tmp_path)
        for stem in ("verify_gated_delta_rule", "verify_causal_conv1d")
    ]
    main = tmp_path / "refuse.cpp"
    main.write_text(REFUSE_MAIN)
    exe = tmp_path / "refuse"
    _run([CXX, "-std=c++17", "-DASCEND_SPEC_NPU_LAUNCH_CHECK", f"-I{CSRC_DIR}", f"-I{CSRC_DIR / 'host_model'}",
          str(main), *objects, "-o", str(exe)])  # fmt: skip
    done = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["-1", "-1", "-1", "-1"]


def _function(source: str, name: str) -> tuple[str, str]:
    """(parameters, body) of the function ``name`` defined in ``source`` (the body cut at its matching brace)."""
    m = re.search(rf"\b{name}\(([^;{{]*?)\)\s*\{{", source, re.DOTALL)
    assert m, f"{name} is not defined"
    depth, pos = 1, m.end()
    while depth:
        depth += {"{": 1, "}": -1}.get(source[pos], 0)
        pos += 1
    return m.group(1), source[m.end() : pos]


BINDING = (CSRC_DIR / "torch_binding.cpp").read_text()
REGISTERED = re.findall(r'ops\.impl\("(\w+)"', BINDING)
UB_CHECKED = {
    "verify_gated_delta_rule_impl": "VerifyGdnUbFitError",
    "verify_causal_conv1d_impl": "VerifyConv1dUbFitError",
}


@pytest.mark.parametrize("op", REGISTERED)
def test_every_op_runs_under_its_tensors_device_guard(op: str) -> None:
    """An NPU device guard from one of the op's tensor parameters comes first: the core count, UB size, outputs
    and stream then belong to the tensors' device (vllm-ascend's ops do the same), not to the current device."""
    params, body = _function(BINDING, op)
    first = body.strip().splitlines()[0]
    m = re.fullmatch(r"const c10_npu::OptionalNPUGuard \w+\((\w+)\.device\(\)\);", first.strip())
    assert m, (
        f"{op} must start with `const c10_npu::OptionalNPUGuard guard(<tensor>.device());`, not {first!r}"
    )
    assert re.search(rf"at::Tensor &{m.group(1)}\b", params), f"{op}: {m.group(1)} is not one of its tensors"
    for call in re.findall(r"RunOnStream\(\s*\"\w+\",\s*([^,]+),", body):
        assert call.strip() == f"{m.group(1)}.device()", f"{op} launches on {call}, not its guarded device"


@pytest.mark.parametrize("op", REGISTERED)
def test_every_launch_with_a_ub_sized_tiling_checks_the_fit_first(op: str) -> None:
    """Before queueing a GDN or conv launch the binding raises the error naming the argument (ub_fit.h)."""
    _, body = _function(BINDING, op)
    for impl, check in UB_CHECKED.items():
        if impl in body:
            assert f"CheckUbFit({check}(a, cores));" in body.split("RunOnStream")[0], (
                f"{op}: no {check} before {impl}"
            )
