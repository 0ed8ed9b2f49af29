"""ascend_spec.import_hooks.after_import: actions run right after a module is executed, not before, and never
import it early; several actions on one module all run (the plugin's config key and the V2 harness each use one)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from ascend_spec import import_hooks


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "hooked_mod.py").write_text("VALUE = 1\n")
    (tmp_path / "other_mod.py").write_text("VALUE = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # the finders added here go with the test
    for name in ("hooked_mod", "other_mod"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield tmp_path
    for name in ("hooked_mod", "other_mod"):
        sys.modules.pop(name, None)


def test_every_action_runs_once_after_the_module_is_executed(modules: Path) -> None:
    seen: list[tuple[str, int]] = []

    def first(module) -> None:  # noqa: ANN001
        seen.append(("first", module.VALUE))

    def second(module) -> None:  # noqa: ANN001
        seen.append(("second", module.VALUE))

    import_hooks.after_import("hooked_mod", first)
    import_hooks.after_import("hooked_mod", second)
    import_hooks.after_import("hooked_mod", first)  # asked twice: runs once
    import_hooks.after_import("other_mod", second)
    assert "hooked_mod" not in sys.modules and "other_mod" not in sys.modules  # nothing imported early
    importlib.import_module("hooked_mod")
    assert seen == [("first", 1), ("second", 1)]
    importlib.import_module("other_mod")
    assert seen[2:] == [("second", 2)]
    del sys.modules["hooked_mod"]
    importlib.import_module("hooked_mod")  # executed again: the actions again
    assert seen[3:] == [("first", 1), ("second", 1)]


def test_an_imported_module_gets_the_action_now(modules: Path) -> None:
    module = importlib.import_module("hooked_mod")
    seen = []
    import_hooks.after_import("hooked_mod", seen.append)
    assert seen == [module]
