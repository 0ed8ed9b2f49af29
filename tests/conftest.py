"""Test setup: Triton kernels run in the interpreter on CPU tensors (its language patches cached:
ascend_spec/e2e/interpreter_speed.py); checks that read values are on.

Fixtures shared by the test modules: ``backend`` runs a test once per backend of ``ascend_spec.backend.BACKENDS``
(a module that needs fewer parametrizes ``backend`` itself). Shared helpers live in ``tests/helpers.py``.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("ASCEND_SPEC_CHECKS", "1")
os.environ.pop("ASCEND_SPEC_BACKEND", None)

import importlib.util  # noqa: E402

import pytest  # noqa: E402

from ascend_spec.backend import BACKENDS  # noqa: E402

if os.environ["TRITON_INTERPRET"] == "1" and importlib.util.find_spec("triton") is not None:
    from ascend_spec.e2e.interpreter_speed import cache_language_patches

    cache_language_patches()  # before any kernel runs (tests/test_interpreter_speed.py checks it changes nothing)


@pytest.fixture(scope="session", autouse=True)
def _vllm_default_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """vLLM's default cache root (under XDG_CACHE_HOME) in the session's folder: the engine tests' engines share
    its model infos (ascend_spec.e2e.engine.engine_cache_root) and write nothing to the user's cache."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg_cache"))


@pytest.fixture(params=BACKENDS, scope="session")  # session scope: hypothesis tests may use it
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files in order of their count of slow (engine) tests, most first, each file's tests kept together and in
    order: pytest-xdist's loadfile (run with ``--no-loadscope-reorder``) hands files to the workers in this order,
    so the long engine files start first and the quick files fill both workers' tails."""
    files: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        files[path] = files.get(path, 0) + (item.get_closest_marker("slow") is not None)
    rank = {path: (-slow, i) for i, (path, slow) in enumerate(files.items())}
    items.sort(key=lambda item: rank[item.nodeid.split("::", 1)[0]])
