"""The rules CANN's build applies to csrc/, checked without CANN (which cannot be installed here).

1. The launch-stub generator. ``ascendc_library`` runs ``extract_host_stub.py`` (asc-devkit
   ``cmake/asc/legacy_modules/util/``) over each preprocessed kernel source: it finds the entry points
   (``__global__ __aicore__`` functions), takes every parameter whose type name matches a struct found by
   ``^\\s*struct\\s+(\\w+)\\s*\\{`` anywhere in the source as a tiling struct, and writes that struct, by its
   unqualified name, at global scope into the generated host stub and the header force-included into the kernel
   sources. A struct declared in a namespace and re-exported with a global ``using`` then conflicts with that
   global declaration. The test applies the rule: it force-includes ``struct X;`` for every entry-point struct
   ``X`` into the kernel source and compiles it with g++, and it compiles the host stub the generator would write.
2. The link line. Every symbol ``csrc/torch_binding.cpp`` leaves undefined (compiled against real torch headers
   and tests/native/npu_stubs, whose declarations mirror CANN's and torch_npu's) must come from a library that
   ``target_link_libraries(_C_ascend_spec ...)`` in CMakeLists.txt names; :data:`PROVIDERS` says which library
   ships which symbols (asc-devkit's cmake: ``impl/adv_api/tiling/CMakeLists.txt`` builds
   ``platform_ascendc.cpp`` into the static ``tiling_api``), :data:`STATIC_NEEDS` what a static one needs in turn.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from ascend_spec.backend import host_compiler
from ascend_spec.paths import CSRC_DIR

ROOT = CSRC_DIR.parent
STUBS = Path(__file__).parent / "native" / "npu_stubs"
KERNELS = sorted((CSRC_DIR / "kernels").glob("*.cpp"))
CXX = host_compiler()
pytestmark = pytest.mark.skipif(CXX is None, reason="needs a C++ compiler")

# The generator's patterns (asc-devkit cmake/asc/legacy_modules/util/constants.py), on host-model preprocessed
# source, where `__global__ __aicore__` expand to nothing and GM_ADDR to `uint8_t *`.
STRUCT = re.compile(r"^\s*struct\s+(\w+)\s*\{", re.MULTILINE)
ENTRY = re.compile(r'extern "C"\s+void\s+(\w+)\s*\(([^)]*)\)\s*\{')
PARAM_SKIPS = ("__restrict__", "__restrict", "struct", "const")

# Demangled symbol pattern -> the library on the link line that defines it.
PROVIDERS: list[tuple[str, str]] = [
    (r"^ascend_spec::\w+_impl\(", "ascend_spec_kernels"),  # the kernels' <<<>>> launchers (csrc/ops.h)
    (r"^platform_ascendc::", "tiling_api"),  # PlatformAscendCManager / PlatformAscendC: platform_ascendc.cpp
    (r"^acl\w*\(", "ascendcl"),  # aclrtGetDevice, aclGetDeviceCapability
    (r"^(at_npu|c10_npu)::", "torch_npu"),  # OpCommand, getCurrentNPUStream
    (r"^([\w:<>, ]+ )?(c10|at|torch|caffe2)::", "${TORCH_LIBRARIES}"),
]
# Resolved without a line on the link list: the C/C++ runtime, libpython (a Python extension module), pybind11
# (header-only).
RUNTIME = re.compile(
    r"^(std::|__cxa|__cxx|__gxx|_Unwind|__dynamic_cast|operator (new|delete)|typeinfo|vtable|VTT|"
    r"_GLOBAL_OFFSET_TABLE_|__stack_chk|__assert_fail|__libc|__dso_handle|__errno|pthread_|Py|_Py|pybind11::|"
    r"(mem|str)\w*$|f?printf$|fputc$|fputs$|fflush$|fwrite$|free$|malloc$|calloc$|realloc$|abort$|stderr$|stdout$)"
)
# A static library's objects leave these undefined in turn (tiling_api's host link line in
# impl/adv_api/tiling/CMakeLists.txt; platform_ascendc.cpp uses fe::PlatformInfoManager, securec and dlog).
STATIC_NEEDS = {"tiling_api": {"platform", "c_sec", "ascendalog"}}


def _compile(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([CXX, "-std=c++17", *args], capture_output=True, text=True)


def _errors(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if "error" in line]
    return "\n".join(lines[:12]) or done.stderr[-2000:]


def _without_launch_syntax(src: Path, tmp: Path) -> Path:
    """The NPU path with `k<<<dim, nullptr, stream>>>(args)` -> `k(args)` (as tests/test_npu_binding.py does)."""
    plain = tmp / src.name
    plain.write_text(re.sub(r"<<<[^>]*>>>", "", src.read_text()))
    return plain


def _flags() -> list[str]:
    return ["-DASCEND_SPEC_NPU_LAUNCH_CHECK", f"-I{CSRC_DIR / 'host_model'}", f"-I{CSRC_DIR / 'kernels'}"]


def entry_point_structs(preprocessed: str) -> dict[str, list[tuple[str, str]]]:
    """Entry point -> its (struct type, parameter) pairs that the generator treats as tiling structs."""
    structs = set(STRUCT.findall(preprocessed))
    found: dict[str, list[tuple[str, str]]] = {}
    for name, params in ENTRY.findall(preprocessed):
        pairs = []
        for param in filter(None, (p.strip() for p in params.split(","))):
            if "*" in param:
                continue  # a GM pointer, never a tiling struct
            tokens = [t for t in param.split() if t not in PARAM_SKIPS]
            if len(tokens) >= 2 and tokens[-2] in structs:
                pairs.append((tokens[-2], tokens[-1]))
        found[name] = pairs
    return found


def generator_header(types: set[str]) -> str:
    """What the generator declares at global scope for the entry points' struct types."""
    return "".join(f"struct {t};\n" for t in sorted(types))


@pytest.mark.parametrize("src", KERNELS, ids=lambda p: p.stem)
def test_entry_point_structs_survive_the_launch_stub_generator(src: Path, tmp_path: Path) -> None:
    """Every struct an entry point takes is a global-scope type: `struct X;` at global scope still compiles."""
    plain = _without_launch_syntax(src, tmp_path)
    pre = _compile(["-E", "-P", *_flags(), str(plain)])
    assert pre.returncode == 0, _errors(pre)
    entries = entry_point_structs(pre.stdout)
    assert entries, f'no extern "C" __global__ __aicore__ entry point found in {src.name}'
    types = {t for pairs in entries.values() for t, _ in pairs}
    header = tmp_path / "generated_types.h"
    header.write_text(generator_header(types))
    done = _compile(["-fsyntax-only", "-w", "-include", str(header), *_flags(), str(plain)])
    assert done.returncode == 0, (
        f"{src.name}: CANN's launch-stub generator declares {', '.join(sorted(types))} at global scope "
        "(extract_host_stub.py); declare these structs at global scope, not in a namespace re-exported by "
        f"`using`:\n{_errors(done)}"
    )
    # The host stub itself: the struct definitions as the generator copies them, then the kernel declarations.
    bodies = {name: _struct_body(pre.stdout, name) for name in types}
    decls = "".join(f'extern "C" void {name}({params});\n' for name, params in _entry_params(pre.stdout))
    stub = tmp_path / "host_stub.cpp"
    stub.write_text("#include <cstdint>\n" + "\n".join(bodies.values()) + "\n" + decls)
    done = _compile(["-fsyntax-only", str(stub)])
    assert done.returncode == 0, f"{src.name}: the generated host stub does not compile:\n{_errors(done)}"


def _struct_body(preprocessed: str, name: str) -> str:
    """The struct's text as the generator cuts it: from `struct NAME {` to its closing brace and `;`."""
    match = next(m for m in STRUCT.finditer(preprocessed) if m.group(1) == name)
    depth, pos = 1, match.end()
    while depth:
        depth += {"{": 1, "}": -1}.get(preprocessed[pos], 0)
        pos += 1
    return preprocessed[match.start() : pos] + ";"


def _entry_params(preprocessed: str) -> list[tuple[str, str]]:
    return [(name, " ".join(params.split())) for name, params in ENTRY.findall(preprocessed)]


def test_the_generator_rule_catches_a_namespaced_struct(tmp_path: Path) -> None:
    """The pattern CANN rejects (namespace + global `using`) fails the check; a global struct passes."""
    namespaced = (
        "#include <cstdint>\nnamespace ns {\nstruct T { int64_t n; };\n}\nusing ns::T;\n"
        'extern "C" void k(uint8_t *x, T tiling) {}\n'
    )
    flat = '#include <cstdint>\nstruct T { int64_t n; };\nextern "C" void k(uint8_t *x, T tiling) {}\n'
    header = tmp_path / "generated_types.h"
    for text, ok in ((namespaced, False), (flat, True)):
        assert entry_point_structs(text) == {"k": [("T", "tiling")]}
        header.write_text(generator_header({"T"}))
        src = tmp_path / "k.cpp"
        src.write_text(text)
        assert (_compile(["-fsyntax-only", "-include", str(header), str(src)]).returncode == 0) is ok


# ------------------------------------------------------------------------------------------------ link line


def declared_link_libraries(cmake: str, target: str = "_C_ascend_spec") -> set[str]:
    """The libraries of every ``target_link_libraries(<target> ...)`` in CMakeLists.txt."""
    libs: set[str] = set()
    for body in re.findall(rf"target_link_libraries\(\s*{target}\s+([^)]*)\)", cmake):
        libs |= {t for t in body.split() if t not in ("PUBLIC", "PRIVATE", "INTERFACE")}
    return libs


def providers_of(symbols: list[str]) -> tuple[dict[str, set[str]], list[str]]:
    """(library -> the symbols it must provide, symbols no known library provides)."""
    needed: dict[str, set[str]] = {}
    unknown = []
    for sym in symbols:
        lib = next((lib for pattern, lib in PROVIDERS if re.search(pattern, sym)), None)
        if lib is not None:
            needed.setdefault(lib, set()).add(sym)
        elif not RUNTIME.search(sym):
            unknown.append(sym)
    return needed, unknown


def link_errors(symbols: list[str], libs: set[str]) -> list[str]:
    """Why ``libs`` would leave one of ``symbols`` (or a static library's own needs) unresolved."""
    needed, unknown = providers_of(symbols)
    errors = [f"{sym}: no library in PROVIDERS defines it; add where CANN ships it" for sym in unknown]
    for lib, syms in sorted(needed.items()):
        if lib not in libs:
            errors.append(f"{lib} is not linked but provides {', '.join(sorted(syms)[:3])}")
            continue
        for dep in sorted(STATIC_NEEDS.get(lib, set()) - libs):
            errors.append(f"{dep} is not linked but the static {lib} needs it")
    return errors


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm")
def test_the_link_line_resolves_every_symbol_the_binding_uses(tmp_path: Path) -> None:
    """torch_binding.cpp's undefined symbols each come from a library CMakeLists.txt links."""
    from torch.utils.cpp_extension import include_paths

    obj = tmp_path / "torch_binding.o"
    done = _compile([
        "-c", "-O0", "-w", *(f"-I{p}" for p in include_paths()), f"-I{sysconfig.get_paths()['include']}",
        f"-I{STUBS}", f"-I{CSRC_DIR}", str(CSRC_DIR / "torch_binding.cpp"), "-o", str(obj),
    ])  # fmt: skip
    assert done.returncode == 0, _errors(done)
    nm = subprocess.run(
        ["nm", "-C", "--undefined-only", str(obj)], capture_output=True, text=True, check=True
    )
    symbols = [line.split(None, 1)[1] for line in nm.stdout.splitlines() if line.strip()]
    needed, _ = providers_of(symbols)
    assert {"tiling_api", "ascendcl", "torch_npu", "ascend_spec_kernels"} <= set(needed), sorted(needed)
    libs = declared_link_libraries((ROOT / "CMakeLists.txt").read_text())
    errors = link_errors(symbols, libs)
    assert not errors, "CMakeLists.txt's link line for _C_ascend_spec:\n" + "\n".join(errors)


def test_a_missing_library_is_reported() -> None:
    """The check fails the way the issue predicted: platform alone leaves PlatformAscendCManager undefined."""
    symbols = [
        "platform_ascendc::PlatformAscendCManager::PlatformAscendCManagerInit(char const*)",
        "aclrtGetDevice(int*)",
        "c10_npu::getCurrentNPUStream()",
        "strlen",
    ]
    errors = link_errors(symbols, {"platform", "ascendcl", "torch_npu"})
    assert errors == ["tiling_api is not linked but provides " + symbols[0]]
    full = {"platform", "ascendcl", "torch_npu", "tiling_api", "c_sec", "ascendalog"}
    assert link_errors(symbols, full) == []
    assert link_errors([*symbols, "fe::PlatformInfoManager::Instance()"], full) == [
        "fe::PlatformInfoManager::Instance(): no library in PROVIDERS defines it; add where CANN ships it"
    ]
    assert declared_link_libraries("target_link_libraries(_C_ascend_spec PUBLIC a\n  b)\n") == {"a", "b"}
