"""Act on a module right after it is first executed, without importing it early: the plugin changes
vllm-ascend's config module only in processes that load vllm-ascend, and the V2 CPU harness changes a vLLM module
that imports vLLM's layers (importing it early would import them before an engine loads its plugins)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

Action = Callable[[ModuleType], None]


class _Loader(importlib.abc.Loader):
    """The module's own loader, then the actions."""

    def __init__(self, inner: importlib.abc.Loader, actions: list[Action]) -> None:
        self.inner = inner
        self.actions = actions

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        for action in self.actions:
            action(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for one module only, wraps the loader the other finders return (one finder a module,
    holding every action asked for it)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.actions: list[Action] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if isinstance(finder, _Finder) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, self.actions)
                return spec
        return None


def after_import(name: str, action: Action) -> None:
    """``action(module)`` now if ``name`` is imported, else each time it is executed (idempotent per action)."""
    module = sys.modules.get(name)
    if module is not None:
        action(module)
        return
    finder = next((f for f in sys.meta_path if isinstance(f, _Finder) and f.name == name), None)
    if finder is None:
        finder = _Finder(name)
        sys.meta_path.insert(0, finder)
    if action not in finder.actions:
        finder.actions.append(action)
