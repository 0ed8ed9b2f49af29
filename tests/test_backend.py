"""Backend selection: auto by device type, env override, unavailable backends, invalid names, value checks env."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from ascend_spec import backend as bk
from ascend_spec.backend import BackendUnavailableError, resolve_backend, value_checks_enabled

CPU = torch.device("cpu")
CUDA = torch.device("cuda")  # a device object only: nothing here allocates on it
NPU = SimpleNamespace(type="npu")  # torch only knows "npu" once torch_npu renames PrivateUse1


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv(bk.BACKEND_ENV, raising=False)
    monkeypatch.delenv(bk.CHECKS_ENV, raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _extension(monkeypatch, loaded: bool) -> None:
    monkeypatch.setattr(bk, "ascendc_extension_loaded", lambda: loaded)


def test_auto_picks_by_device(monkeypatch) -> None:
    assert resolve_backend("auto", CPU, op="op") == "reference"
    for op in bk.NATIVE_CPU_OPS:  # the native CPU kernels where a compiler can build them, else the reference
        assert resolve_backend("auto", CPU, op=op) == "cpu"
        assert resolve_backend("auto", CUDA, op=op) == "triton"
    monkeypatch.setattr(bk, "host_compiler", lambda: None)
    assert resolve_backend("auto", CPU, op="verify_gated_delta_rule") == "reference"
    assert resolve_backend("auto", CUDA, op="op") == "triton"
    _extension(monkeypatch, True)
    assert resolve_backend("auto", NPU, op="op") == "ascendc"
    _extension(monkeypatch, False)
    assert resolve_backend("auto", NPU, op="op") == "triton"


@pytest.mark.parametrize("name", ["reference", "triton", "ascendc", "cpu"])
def test_env_overrides_auto_only(monkeypatch, name: str) -> None:
    monkeypatch.setenv(bk.BACKEND_ENV, name)
    assert resolve_backend("auto", CPU, op="op") == name
    assert resolve_backend("reference", CPU, op="op") == "reference"  # an explicit choice wins over the env
    monkeypatch.setenv(bk.BACKEND_ENV, "auto")
    assert resolve_backend("auto", CPU, op="op") == "reference"


def test_env_override_must_be_runnable(monkeypatch) -> None:
    monkeypatch.setenv(bk.BACKEND_ENV, "ascendc")
    with pytest.raises(BackendUnavailableError, match="ascendc.*on cuda tensors"):
        resolve_backend("auto", CUDA, op="my_op")


def test_invalid_names(monkeypatch) -> None:
    with pytest.raises(
        ValueError, match=r"backend must be one of 'auto', 'reference', 'triton', 'ascendc', 'cpu'; got 'npu'"
    ):
        resolve_backend("npu", CPU, op="op")
    monkeypatch.setenv(bk.BACKEND_ENV, "fast")
    with pytest.raises(ValueError, match=r"ASCEND_SPEC_BACKEND must be one of .*got 'fast'"):
        resolve_backend("auto", CPU, op="op")


def test_triton_unavailable_says_what_is_missing(monkeypatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(
        BackendUnavailableError, match=r"my_op: backend 'triton' on cpu tensors needs TRITON_INTERPRET=1"
    ):
        resolve_backend("triton", CPU, op="my_op")
    assert resolve_backend("triton", CUDA, op="my_op") == "triton"  # the interpreter matters on CPU only
    monkeypatch.setattr(bk, "triton_importable", lambda: False)
    with pytest.raises(BackendUnavailableError, match=r"needs the 'triton' package"):
        resolve_backend("triton", CUDA, op="my_op")


def test_ascendc_unavailable_says_what_is_missing(monkeypatch) -> None:
    _extension(monkeypatch, False)
    with pytest.raises(BackendUnavailableError, match=r"on npu tensors needs the compiled extension.*CANN"):
        resolve_backend("ascendc", NPU, op="my_op")
    _extension(monkeypatch, True)
    assert resolve_backend("ascendc", NPU, op="my_op") == "ascendc"
    with pytest.raises(BackendUnavailableError, match=r"on cuda tensors: AscendC kernels run on NPU tensors"):
        resolve_backend("ascendc", CUDA, op="my_op")
    monkeypatch.setattr(bk, "host_compiler", lambda: None)
    with pytest.raises(BackendUnavailableError, match=r"host model, which needs g\+\+ or clang\+\+"):
        resolve_backend("ascendc", CPU, op="my_op")


def test_host_compiler_honours_cxx(monkeypatch) -> None:
    bk._find_compiler.cache_clear()  # the PATH lookup is cached per CXX value
    monkeypatch.setattr(bk.shutil, "which", lambda name: f"/usr/bin/{name}" if name != "g++" else None)
    monkeypatch.setenv("CXX", "my-cxx")
    assert bk.host_compiler() == "my-cxx"
    monkeypatch.delenv("CXX")
    assert bk.host_compiler() == "clang++"  # g++ "missing", clang++ found
    bk._find_compiler.cache_clear()
    monkeypatch.setattr(bk.shutil, "which", lambda name: None)
    assert bk.host_compiler() is None
    bk._find_compiler.cache_clear()


def test_cpu_backend_unavailable_says_what_is_missing(monkeypatch) -> None:
    with pytest.raises(
        BackendUnavailableError, match=r"my_op: backend 'cpu' on cuda tensors: .* runs on CPU"
    ):
        resolve_backend("cpu", CUDA, op="my_op")
    assert resolve_backend("cpu", CPU, op="my_op") == "cpu"  # an op without a native kernel: its reference
    monkeypatch.setattr(bk, "host_compiler", lambda: None)
    assert resolve_backend("cpu", CPU, op="my_op") == "cpu"
    with pytest.raises(BackendUnavailableError, match=r"verify_gated_delta_rule: .*needs g\+\+ or clang\+\+"):
        resolve_backend("cpu", CPU, op="verify_gated_delta_rule")


def test_value_checks_env(monkeypatch) -> None:
    assert value_checks_enabled(CPU) is True
    assert value_checks_enabled(CUDA) is False
    assert value_checks_enabled(NPU) is False
    monkeypatch.setenv(bk.CHECKS_ENV, "1")
    assert value_checks_enabled(CUDA) is True
    monkeypatch.setenv(bk.CHECKS_ENV, "0")
    assert value_checks_enabled(CPU) is False
    monkeypatch.setenv(bk.CHECKS_ENV, "yes")
    with pytest.raises(ValueError, match=r"ASCEND_SPEC_CHECKS must be 0 or 1; got 'yes'"):
        value_checks_enabled(CPU)


def test_ops_route_through_the_resolved_backend(monkeypatch) -> None:
    """prepare_block_slots follows ASCEND_SPEC_BACKEND, and an explicit unavailable backend raises."""
    from ascend_spec.ops import prepare_block_slots
    from ascend_spec.ops.prepare_block_slots import triton as tri

    calls = []
    real = tri.prepare_block_slots
    monkeypatch.setattr(tri, "prepare_block_slots", lambda args, out: calls.append(args) or real(args, out))
    args = (torch.tensor([1]), torch.tensor([0]), torch.tensor([[0]], dtype=torch.int32))
    kw = dict(block_size=4, num_query_tokens=2, mask_token_id=0)
    prepare_block_slots(*args, **kw)
    assert calls == []
    monkeypatch.setenv(bk.BACKEND_ENV, "triton")
    out = prepare_block_slots(*args, **kw)
    assert len(calls) == 1 and out.slot_mapping.tolist() == [0, 1]
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(BackendUnavailableError, match="prepare_block_slots: backend 'triton'"):
        prepare_block_slots(*args, **kw)


def test_every_dispatch_entry_resolves_on_every_backend() -> None:
    """The dispatch table names real functions: one per op in each op folder's reference/triton/ascendc module,
    and cpu.py where the op has a native CPU kernel (else its cpu entry is the reference)."""
    native = {
        "prepare_block_slots",
        "max_softmax_partials",
        "verify_gated_delta_rule",
        "verify_causal_conv1d",
    }
    assert native <= bk.NATIVE_CPU_OPS
    for op, table in bk.DISPATCH.items():
        assert set(table) == set(bk.BACKENDS), op
        for backend in bk.BACKENDS:
            fn = bk.implementation(op, backend)
            module = "reference" if backend == "cpu" and op not in native else backend
            assert callable(fn) and fn.__module__.endswith(f".{module}"), (op, backend)


def test_check_int_takes_index_types_with_a_minimum() -> None:
    import numpy as np

    from ascend_spec.checks import check_int

    assert check_int("n", np.int64(5), minimum=1) == 5 and type(check_int("n", np.int32(3))) is int
    assert check_int("n", 0, minimum=0) == 0
    for bad in (True, 2.0, "3", torch.tensor(3), None):
        with pytest.raises(ValueError, match=r"n must be an int; got "):
            check_int("n", bad)
    with pytest.raises(ValueError, match="n must be >= 1; got 0"):
        check_int("n", np.int64(0), minimum=1)


def test_own_backends_leave_out_an_alias_of_the_reference() -> None:
    assert bk.own_backends("allocate_verify_budget") == ("reference", "triton", "ascendc")
    for op in (
        "prepare_block_slots",
        "max_softmax_partials",
        "verify_gated_delta_rule",
        "verify_causal_conv1d",
    ):
        assert bk.own_backends(op) == bk.BACKENDS
