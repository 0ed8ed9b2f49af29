"""vllm-ascend 0.30.0rc2's Model Runner V2 (``vllm_ascend.worker.v2.model_runner.NPUModelRunner``) on the emulated
NPU's second mode (``ASCEND_SPEC_EMULATED_NPU=v2``: Triton's interpreter on CPU tensors, emulated_npu/
triton_interpreter.py), against plain decoding by vLLM's CPU engine in the same venv; the interpreter repairs that
mode makes, against PyTorch; the plugin's GDN verification on that runner (MTP and DFlash on the hybrid), DFlash's
block inputs against vllm-ascend's kernel; and its V1 runner under async scheduling, which launches Triton kernels
the first mode only mocks. Its refusal of dynamic verification there is check_v2_engine's
(tests/vllm/test_vllm_install.py), reached through the same runner hook these engines show running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ascend_engine_env import EMULATED_V2, PLAIN_CPU, needs_vllm_ascend

from ascend_spec.e2e.cli import builtin_prompts
from ascend_spec.e2e.engine import EngineRun, EngineSpec, run_isolated
from ascend_spec.e2e.tiny_models import TinyModels, make_tiny_models

sys.path.insert(0, str(Path(__file__).parents[1] / "vllm"))  # the engine tests' bf16-tie rule
from block_inputs_compare import compare_block_inputs  # noqa: E402
from engine_helpers import assert_matches_plain  # noqa: E402

pytestmark = [needs_vllm_ascend, pytest.mark.slow]

V2_RUNNER = "vllm_ascend.worker.v2.model_runner.NPUModelRunner"
V1_RUNNER = "vllm_ascend.worker.model_runner_v1.NPUModelRunner"
K = 3
# Requests that reach max_model_len (prompt + max_tokens = 16, 25, 28, 28 of 28): V2's scheduler caps their last
# steps' drafts at max_model_len - computed - 1 (tests/vllm/test_v2_plugin.py's ragged case).
RAGGED = (builtin_prompts(4), [10, 14, 12, 7])
RAGGED_LIMITS = {"max_model_len": 28}
# The emulated NPU's engines: vLLM's start-up profile run pushes a dummy batch of max_num_batched_tokens (8192 by
# default here) through kernels Triton's interpreter runs (vllm-ascend's rope: 26 s an engine); these requests
# never batch more than 2 x 28 tokens, so no prompt is split at 256.
NPU_BATCH = {"max_num_batched_tokens": 256}

REPAIRS = """
import json, sys
import torch
import triton
import triton.language as tl


@triton.jit
def store_bf16(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)  # fp32 -> bf16 on store


@triton.jit
def masked_nonzero(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    keep = mask & (x != 0.0)  # a float comparison joined with a mask, as categorical_sample.py:117
    tl.store(out_ptr + offs, keep.to(tl.int32), mask=mask)


@triton.jit
def ragged_prefix_sums(counts_ptr, out_ptr, BLOCK: tl.constexpr):
    from triton.language.extra.cann.extension import get_element

    counts = tl.load(counts_ptr + tl.arange(0, BLOCK))
    flags = counts > 2
    for pos in tl.range(0, BLOCK):  # a scalar loop over a block's elements, as reject_sample.py:120-126
        n = get_element(counts, (pos,))
        total = 0
        for i in range(n):
            total += i + 1
        if get_element(flags, (pos,)):
            total = -total
        tl.store(out_ptr + pos, total)
x = torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 3
x[::7] = 0.0
out = torch.empty(1000, dtype=torch.bfloat16)
store_bf16[(1,)](x, out, 1000, BLOCK=1024)
keep = torch.empty(1000, dtype=torch.int32)
masked_nonzero[(1,)](x, keep, 1000, BLOCK=1024)
counts = torch.tensor([0, 3, 1, 5, 2, 0, 4, 1], dtype=torch.int32)
sums = torch.empty(8, dtype=torch.int32)
ragged_prefix_sums[(1,)](counts, sums, BLOCK=8)
want = counts * (counts + 1) // 2 * torch.where(counts > 2, -1, 1)
result = {
    "bf16_equal": bool(torch.equal(out, x.to(torch.bfloat16))),
    "keep_equal": bool(torch.equal(keep, (x != 0).to(torch.int32))),
    "get_element_equal": bool(torch.equal(sums, want.to(torch.int32))),
    "truncated_differs": bool((x.view(torch.int32) & 0xFFFF0000).view(torch.float32).to(torch.bfloat16).ne(
        x.to(torch.bfloat16)).any()),
}
sys.stdout.write("RESULT " + json.dumps(result))
"""


def test_interpreter_repairs_behave_as_compiled_triton(tmp_path: Path) -> None:
    """Mode "v2" stores fp32 into bf16 rounding to nearest even (as compiled Triton and the NPU do; the plain
    interpreter truncates), gives a float comparison a boolean result a mask can be joined with, and reads a
    block's element as a scalar with triton-ascend's ``get_element``."""
    script = tmp_path / "repairs.py"  # a file: @triton.jit reads the kernel's source
    script.write_text(textwrap.dedent(REPAIRS))
    proc = subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, **EMULATED_V2},
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    assert result == {
        "bf16_equal": True,
        "keep_equal": True,
        "get_element_equal": True,
        "truncated_differs": True,
    }


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    return make_tiny_models(tmp_path_factory.mktemp("ascend_v2"), hybrid=True, low_entropy=True)


def _run(
    work: Path, spec: EngineSpec, env: dict[str, str], requests: tuple = RAGGED, *, logprobs: bool = False
) -> EngineRun:
    """One engine on ``requests``; ``logprobs`` (plain decoding's top-2, the tie rule's oracle) costs a second pass."""
    prompts, max_tokens = requests
    return run_isolated(
        spec, prompts, work_dir=work, env=env, max_tokens=max_tokens, logprobs=logprobs, timeout=1200
    )


@pytest.fixture(scope="module")
def plain_ragged(ascend_engine_dir: Path, hybrid: TinyModels) -> EngineRun:
    """Plain decoding of the requests that reach max_model_len, two at a time, by vLLM's CPU engine."""
    spec = EngineSpec(target=hybrid.target, hybrid=True, max_num_seqs=2, extra=RAGGED_LIMITS)
    plain = _run(ascend_engine_dir / "v2_plain_cpu_ragged", spec, PLAIN_CPU, RAGGED, logprobs=True)
    assert plain.error is None, plain.error
    return plain


@pytest.fixture(scope="module")
def plain_long(ascend_engine_dir: Path, hybrid: TinyModels) -> EngineRun:
    """The same requests at the default max_model_len, by vLLM's CPU engine."""
    spec = EngineSpec(target=hybrid.target, hybrid=True, max_num_seqs=2)
    plain = _run(ascend_engine_dir / "v2_plain_cpu_long", spec, PLAIN_CPU, RAGGED, logprobs=True)
    assert plain.error is None, plain.error
    return plain


def test_vllm_ascend_v2_runner_decodes_as_plain_cpu(
    ascend_engine_dir: Path, hybrid: TinyModels, plain_long: EngineRun
) -> None:
    """vllm-ascend's V2 runner starts in mode "v2" and decodes the hybrid as vLLM's CPU engine does (a prompt may
    leave plain decoding only at a bf16 tie of plain decoding's top-2 logits)."""
    spec = EngineSpec(target=hybrid.target, hybrid=True, max_num_seqs=2, extra=NPU_BATCH)
    ours = _run(ascend_engine_dir / "v2_npu", spec, EMULATED_V2)
    assert ours.error is None, ours.error
    assert ours.runner_class == V2_RUNNER and ours.runner == "v2", (ours.runner_class, ours.runner)
    assert_matches_plain(plain_long, ours, allow_ties=True)


def _assert_one_gdn_slot(ours: EngineRun) -> None:
    assert ours.runner_class == V2_RUNNER and ours.runner == "v2", (ours.runner_class, ours.runner)
    assert ours.gdn_slots_per_request == 1
    assert ours.num_drafts > 0 and ours.num_accepted > 0, (ours.num_drafts, ours.num_accepted)
    assert ours.gdn_flushed_requests is not None and ours.gdn_flushed_requests >= len(RAGGED[0]) - 2


def test_gdn_verification_on_vllm_ascend_v2_matches_plain_with_ragged_drafts(
    ascend_engine_dir: Path, hybrid: TinyModels, plain_ragged: EngineRun
) -> None:
    """The plugin on vllm-ascend's V2 runner under async scheduling (its default): MTP's drafts verified by the
    plugin's NPU GDN layer on one state slot per request (vllm-ascend keeps 1 + K), lossless against plain
    decoding by vLLM's CPU engine; two requests at a time, so later ones take the state slots of finished ones.
    The requests reach max_model_len, where V2's scheduler gives their last steps 1..K-1 drafts and then none
    (a decode vLLM 0.30.0's hybrid state runs through the plain kernels: its records are committed first)."""
    spec = EngineSpec(
        target=hybrid.target,
        hybrid=True,
        speculative={"method": "mtp", "num_speculative_tokens": K},
        plugin={"gdn_verify": True},
        async_scheduling=True,
        max_num_seqs=2,
        extra={**RAGGED_LIMITS, **NPU_BATCH},
    )
    ours = _run(ascend_engine_dir / "v2_npu_gdn_mtp_async", spec, EMULATED_V2)
    assert ours.error is None, ours.error
    _assert_one_gdn_slot(ours)
    assert ours.num_draft_tokens < K * ours.num_drafts, "no step verified fewer than K drafts"
    assert_matches_plain(plain_ragged, ours, allow_ties=True)


def test_dflash_on_vllm_ascend_v2_matches_plain_with_block_inputs_equal_to_its_kernels(
    ascend_engine_dir: Path, hybrid: TinyModels, plain_long: EngineRun, tmp_path: Path
) -> None:
    """DFlash through vllm-ascend's V2 speculator with the plugin: its drafts verified on one GDN state slot per
    request, lossless against plain decoding; at every draft step vllm-ascend's own Triton kernel (the global its
    speculator rebinds in set_attn; vLLM's before that) and the plugin's prepare_block_slots path, run on the same
    state, write equal buffers (ids, positions, query and context slots, query_start_loc, seq_lens, sampling rows
    and state). At the default max_model_len: vllm-ascend's DFlash input kernel needs the cache block size (which
    a hybrid's max_model_len of 28 sets to 28) to be a multiple of the draft's KV block (128)."""
    spec = {
        "target": str(hybrid.target),
        "hybrid": True,
        "speculative": {"method": "dflash", "model": str(hybrid.dflash), "num_speculative_tokens": K},
        "plugin": {"gdn_verify": True},
        "max_num_seqs": 2,
        "extra": NPU_BATCH,
    }
    env = {**os.environ, **EMULATED_V2, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "TMPDIR": str(tmp_path)}
    out = compare_block_inputs(spec, *RAGGED, work=tmp_path, env=env, cpu_v2=False, timeout=1200)
    ours = out["run"]
    _assert_one_gdn_slot(ours)
    assert ours.block_slot_calls and ours.block_slot_calls > 0, ours.block_slot_calls
    # vLLM's own kernel is the global until vllm-ascend's set_attn (the start-up's profiling draft step)
    ascend_steps = [s for s in out["steps"] if s[0] == "vllm_ascend.worker.v2.spec_decode.dflash.speculator"]
    assert len(ascend_steps) > 3, out["steps"]
    assert [s for s in out["steps"] if s[1]] == [], out["steps"]
    assert_matches_plain(plain_long, ours, allow_ties=True)


def test_gdn_verification_on_vllm_ascend_v1_runner_under_async_scheduling_matches_plain(
    ascend_engine_dir: Path, hybrid: TinyModels, plain_long: EngineRun
) -> None:
    """vllm-ascend's V1 runner as docs/vllm.md switches it on (``{"ascend_spec": {}}``, gdn_verify by default)
    under async scheduling: DFlash's drafts verified on one GDN state slot per request, the flush committing from
    the accepted counts on the device; two requests at a time (slots reused), lossless against plain decoding.
    Without logprobs: V1's sampler compiles its logprob ranking with torch.compile, which this mode cannot."""
    spec = EngineSpec(
        target=hybrid.target,
        hybrid=True,
        speculative={"method": "dflash", "model": str(hybrid.dflash), "num_speculative_tokens": K},
        plugin={},
        async_scheduling=True,
        max_num_seqs=2,
        extra=NPU_BATCH,
    )
    env = {**EMULATED_V2, "VLLM_USE_V2_MODEL_RUNNER": "0", "ASCEND_SPEC_CHECKS": "0"}
    prompts, max_tokens = RAGGED
    ours = run_isolated(
        spec,
        prompts,
        work_dir=ascend_engine_dir / "v1_npu_async",
        env=env,
        max_tokens=max_tokens,
        timeout=1200,
    )
    assert ours.error is None, ours.error
    assert ours.runner_class == V1_RUNNER, ours.runner_class
    assert ours.gdn_slots_per_request == 1
    assert ours.num_drafts > 0 and ours.num_accepted > 0, (ours.num_drafts, ours.num_accepted)
    assert_matches_plain(plain_long, ours, allow_ties=True)
