"""Build script: pure Python everywhere; the AscendC extension only where CANN is installed.

Follows vllm-ascend's conventions: ``COMPILE_CUSTOM_KERNELS`` (default 1; 0 turns the native build off),
``SOC_VERSION`` (e.g. ascend910b1 for Atlas A2, ascend910_9391 for Atlas A3) and ``ASCEND_HOME_PATH`` (the CANN
toolkit, e.g. /usr/local/Ascend/ascend-toolkit/latest). With CANN present, CMake builds ``csrc/`` into
``ascend_spec/_C_ascend_spec*.so``, which registers ``torch.ops._C_ascend_spec.npu_*`` (PrivateUse1 + Meta).
Without it (CPU / GPU machines, CI) nothing native is built: the AscendC kernels still run through the host
model (``ascend_spec/ascendc/host_model.py``), which compiles them with g++ at first use. Either way the wheel
carries ``csrc/`` and ``configs/`` inside the package (``ascend_spec/csrc``, ``ascend_spec/configs``), so an
installed package finds its kernel sources and shipped configs (``ascend_spec/paths.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _env_flag(name: str, default: str) -> bool:
    value = os.environ.get(name, default).strip().lower()
    if value not in ("0", "1", "true", "false", "on", "off"):
        raise ValueError(f"{name} must be 0 or 1; got {value!r}")
    return value in ("1", "true", "on")


def _cann_home() -> Path | None:
    home = os.environ.get("ASCEND_HOME_PATH")
    if home and Path(home).is_dir():
        return Path(home)
    return None


def _soc_version() -> str:
    soc = os.environ.get("SOC_VERSION", "").strip()
    if soc:
        return soc
    try:  # Same fallback as vllm-ascend: ask the driver for the chip name.
        out = subprocess.run(["npu-smi", "info", "-m"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 4 and parts[-1].lower().startswith(("910", "ascend")):
                return "ascend" + parts[-1].lower().removeprefix("ascend")
    except (OSError, subprocess.CalledProcessError):
        pass
    raise RuntimeError(
        "CANN was found (ASCEND_HOME_PATH) but SOC_VERSION is not set and npu-smi could not tell the chip. "
        "Set it, e.g. SOC_VERSION=ascend910b1 (Atlas A2) or SOC_VERSION=ascend910_9391 (Atlas A3), or set "
        "COMPILE_CUSTOM_KERNELS=0 to install without the AscendC extension."
    )


class CMakeExtension(Extension):
    def __init__(self, name: str, source_dir: Path) -> None:
        super().__init__(name, sources=[])
        self.source_dir = source_dir


class CMakeBuild(build_ext):
    """Configure and build csrc/ with CANN's ascendc.cmake, then place the library in the package."""

    def build_extension(self, ext: Extension) -> None:
        assert isinstance(ext, CMakeExtension)
        import torch

        build_dir = Path(self.build_temp) / ext.name
        build_dir.mkdir(parents=True, exist_ok=True)
        try:
            import torch_npu  # noqa: F401

            torch_npu_path = Path(torch_npu.__file__).parent
        except ImportError as exc:
            raise RuntimeError("building the AscendC extension needs torch_npu installed") from exc
        cmake_args = [
            f"-DSOC_VERSION={_soc_version()}",
            f"-DASCEND_HOME_PATH={_cann_home()}",
            f"-DTORCH_NPU_PATH={torch_npu_path}",
            f"-DPYTHON_EXECUTABLE={sys.executable}",
            f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
            f"-DCMAKE_BUILD_TYPE={os.environ.get('CMAKE_BUILD_TYPE', 'Release')}",
            f"-DCMAKE_INSTALL_PREFIX={build_dir / 'install'}",
        ]
        subprocess.check_call(["cmake", str(ext.source_dir), *cmake_args], cwd=build_dir)
        jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", ".", "--target", "install", "-j", jobs], cwd=build_dir)
        built = sorted((build_dir / "install").rglob("_C_ascend_spec*.so"))
        if not built:
            raise RuntimeError(f"CMake finished but no _C_ascend_spec*.so was installed under {build_dir}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[0], target)
        for lib in (build_dir / "install").rglob("libascend_spec_kernels*.so"):
            shutil.copy2(lib, target.parent / lib.name)
        if self.inplace:
            shutil.copy2(target, ROOT / "ascend_spec" / target.name)


class BuildPyWithData(build_py):
    """Copy csrc/ and configs/ into the built package; an editable install reads them from the source tree."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for name in ("csrc", "configs"):
            shutil.copytree(ROOT / name, Path(self.build_lib) / "ascend_spec" / name, dirs_exist_ok=True)


def _extensions() -> list[Extension]:
    if not _env_flag("COMPILE_CUSTOM_KERNELS", "1"):
        print("COMPILE_CUSTOM_KERNELS=0: installing without the AscendC extension")
        return []
    if _cann_home() is None:
        print("ASCEND_HOME_PATH not set or missing (no CANN): installing without the AscendC extension")
        return []
    return [CMakeExtension("ascend_spec._C_ascend_spec", ROOT)]


setup(ext_modules=_extensions(), cmdclass={"build_ext": CMakeBuild, "build_py": BuildPyWithData})
