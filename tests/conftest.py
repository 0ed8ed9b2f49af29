"""Test setup: Triton kernels run in the interpreter on CPU tensors; checks that read values are on."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("ASCEND_SPEC_CHECKS", "1")
os.environ.pop("ASCEND_SPEC_BACKEND", None)
