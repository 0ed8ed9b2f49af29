"""The host model refuses what an A2/A3 chip breaks silently: one probe mode per rule (docs/host_model.md).

Sources: asc-devkit (``impl/utils/tiling/platform/platform_ascendc.cpp`` for GetCoreMemSize,
``impl/basic_api/utils/kernel_utils_constants.h`` and ``dav_c220/kernel_operator_vec_cmpsel_impl.h`` for Select's
scratch, ``kernel_tpipe_impl.h`` for the event pools, the API docs for the rest).
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest
import torch

from ascend_spec.ascendc import host_model
from ascend_spec.backend import host_compiler

PROBE = Path(__file__).parent / "host_model_kernels" / "npu_rules_probe.cpp"
RULES = Path(__file__).parent / "host_model_kernels" / "rules_probe.cpp"


def run(mode: int) -> torch.Tensor:
    out = torch.zeros(64)
    host_model.launch(PROBE, "npu_rules_probe_host", [host_model.tensor_ptr(out), ctypes.c_int32(mode)],
                      tensors=[out])  # fmt: skip
    return out


@pytest.mark.parametrize("soc", sorted(host_model.SOCS))
def test_usable_ub_is_what_get_core_mem_size_reports(soc: str) -> None:
    """910B1-B4 and 910_93: 192 KiB less the 256-byte kfc reserve, and not a byte more can be carved."""
    assert host_model.soc_spec(soc).ub_bytes == 196352
    from test_host_model import run_probe  # the rules probe carves its own 1088 bytes plus `extra_ub`

    run_probe(0, extra_ub=196352 - 1088, soc=soc)
    with pytest.raises(
        RuntimeError, match="needs 196384 bytes in total but GetCoreMemSize\\(UB\\) gives 196352"
    ):
        run_probe(0, extra_ub=196352 - 1088 + 32, soc=soc)


def test_select_scratch_at_184_kib() -> None:
    """Buffers below 184 KiB: Select works; the 64-float operand carved at 184 KiB is where it writes."""
    out = run(0)
    x = torch.arange(64, dtype=torch.float32)
    assert torch.equal(out, torch.where(x > 31.5, x, torch.tensor(-1.0)))
    match = r"writes its scratch at UB offset 188416 \(TMP_UB_OFFSET, 184 KiB\), inside the kernel's buffer at \[188416, 188672\)"
    with pytest.raises(RuntimeError, match=match):
        run(1)


def test_compare_scalar_needs_whole_256_byte_repeats_and_normal_operands() -> None:
    assert run(2)[0] == 255.0  # 1.0 > 0.5 in all of the first 8 lanes
    with pytest.raises(RuntimeError, match="CompareScalar: 63 elements are not whole 256-byte repeats"):
        run(3)
    with pytest.raises(RuntimeError, match="CompareScalar: the scalar is subnormal"):
        run(5)
    with pytest.raises(RuntimeError, match="CompareScalar: element 5 is subnormal"):
        run(7)


def test_gather_count_fits_the_8_bit_repeat_counter() -> None:
    assert run(8)[0] == 1.0  # offset 4 bytes -> element 1
    with pytest.raises(RuntimeError, match="Gather: count 16384 needs 256 repeats of 64 elements"):
        run(9)


def test_data_copy_pad_tail_fill_and_limits() -> None:
    out = run(10)
    assert out[8:16].tolist() == [2.0, 3.0, 4.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    with pytest.raises(RuntimeError, match="blockCount 4096 outside 1..4095"):
        run(11)
    with pytest.raises(RuntimeError, match="blockLen 2097152 bytes outside 1..2097151"):
        run(13)
    with pytest.raises(RuntimeError, match="padding of 36 \\+ 0 bytes"):
        run(15)


def test_reduce_workspaces_have_their_documented_minimum() -> None:
    out = run(16)
    assert out[0] == 1023.0 and out[1] == 1023.0 * 1024 / 2
    with pytest.raises(RuntimeError, match="ReduceMax sharedTmpBuffer .*past the tensor's 24 elements"):
        run(17)
    with pytest.raises(RuntimeError, match="ReduceSum sharedTmpBuffer .*past the tensor's 8 elements"):
        run(19)


def test_cast_follows_the_a2_table() -> None:
    assert run(20)[0] == 1.5
    with pytest.raises(RuntimeError, match="Cast: round mode 0 is not supported"):
        run(21)


def test_event_ids_come_from_one_pool_per_hard_event() -> None:
    assert run(22)[:4].tolist() == [0.0, 1.0, 0.0, 0.0]
    with pytest.raises(
        RuntimeError, match="SetFlag twice on one \\(HardEvent, event id\\) before its WaitFlag"
    ):
        run(23)


@pytest.mark.skipif(host_compiler() is None, reason="needs a C++ compiler")
@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("const AscendC::TBuf<> b; (void)b.Get<float>();", "discards qualifiers"),
        ("AscendC::LocalTensor<half> h; AscendC::LocalTensor<bfloat16_t> b; AscendC::Cast(h, b, "
         "AscendC::RoundMode::CAST_NONE, 16);", "not in the A2 Cast table"),
    ],
)  # fmt: skip
def test_what_cann_does_not_compile_does_not_compile_here(body: str, message: str, tmp_path: Path) -> None:
    """TBuf::Get is non-const in CANN; a Cast pair outside A2's table has no implementation."""
    src = tmp_path / "probe.cpp"
    src.write_text(f'#include "kernel_operator.h"\nvoid f() {{ {body} }}\n')
    done = subprocess.run(
        [host_compiler(), "-std=c++17", "-fsyntax-only", "-DASCEND_SPEC_HOST_MODEL",
         f"-I{host_model.HOST_MODEL_DIR}", str(src)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode != 0 and message in done.stderr, done.stderr[-1500:]
