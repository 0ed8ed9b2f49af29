"""``additional_config["ascend_spec"]`` past vllm-ascend's ``AscendConfig``, which forbids unknown keys.

vllm-ascend builds its ``AscendConfig`` (a pydantic dataclass with ``extra="forbid"``) from every
``additional_config`` key it does not strip itself (0.30.0rc2: ``ascend_config.py``, ``init_ascend_config``), in
the engine process while the platform checks the ``VllmConfig`` and again in every worker (``NPUWorker``). The
plugin's key would fail there ("ascend_spec: Unexpected keyword argument") before any runner exists. So
``AscendConfig.__init__`` is wrapped to drop that one keyword before validation; the ``VllmConfig`` keeps it for
the plugin. A config without the key reaches vllm-ascend's ``__init__`` unchanged.

The wrapper is installed by ``register()`` without importing vllm-ascend: if ``vllm_ascend.ascend_config`` is
already imported it is wrapped at once, else when vllm-ascend's own code first imports it (an import hook that
does nothing for any other module). A process that never loads vllm-ascend is untouched.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from types import ModuleType
from typing import Any

from ascend_spec.import_hooks import after_import
from ascend_spec.vllm.config import CONFIG_KEY

MODULE = "vllm_ascend.ascend_config"
_MARK = "__ascend_spec_strips_key__"


def wrap_ascend_config(module: ModuleType) -> None:
    """Wrap ``module.AscendConfig.__init__`` once: the plugin's keyword is dropped, every other one passed on.

    ``AscendConfig`` is a pydantic dataclass whose schema is completed on first use (its annotations are strings),
    and completing it installs a new ``__init__``, which would drop a wrapper set before. So the class is
    completed first; should pydantic still replace ``__init__`` later, the wrapper puts itself back after the call.
    """
    cls = getattr(module, "AscendConfig", None)
    if cls is None:  # a vllm-ascend without that class validates additional_config some other way
        return
    if not getattr(cls, "__pydantic_complete__", True):
        from pydantic.dataclasses import rebuild_dataclass

        # If it cannot complete now it completes on first use; the wrapper re-installs itself then.
        with contextlib.suppress(Exception):
            rebuild_dataclass(cls)
    original = cls.__init__
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.pop(CONFIG_KEY, None)
        try:
            original(self, *args, **kwargs)
        finally:
            if not getattr(cls.__init__, _MARK, False):
                wrap_ascend_config(module)

    setattr(__init__, _MARK, True)
    cls.__init__ = __init__


def is_wrapped() -> bool:
    module = sys.modules.get(MODULE)
    cls = getattr(module, "AscendConfig", None)
    return cls is not None and getattr(cls.__init__, _MARK, False)


def install_config_key() -> None:
    """Wrap now if vllm-ascend's config module is loaded, else when it is (idempotent)."""
    after_import(MODULE, wrap_ascend_config)
