"""Test setup: Triton kernels run in the interpreter on CPU tensors; checks that read values are on.

Fixtures shared by the test modules: ``backend`` runs a test once per backend of ``ascend_spec.backend.BACKENDS``
(a module that needs fewer parametrizes ``backend`` itself). Shared helpers live in ``tests/helpers.py``.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("ASCEND_SPEC_CHECKS", "1")
os.environ.pop("ASCEND_SPEC_BACKEND", None)

import pytest  # noqa: E402

from ascend_spec.backend import BACKENDS  # noqa: E402


@pytest.fixture(params=BACKENDS, scope="session")  # session scope: hypothesis tests may use it
def backend(request: pytest.FixtureRequest) -> str:
    return request.param
