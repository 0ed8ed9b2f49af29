"""vllm-ascend 0.30.0rc2's Model Runner V2 (``vllm_ascend.worker.v2.model_runner.NPUModelRunner``) on the emulated
NPU's second mode (``ASCEND_SPEC_EMULATED_NPU=v2``: Triton's interpreter on CPU tensors, emulated_npu/
triton_interpreter.py), against plain decoding by vLLM's CPU engine in the same venv; the interpreter repairs that
mode makes, against PyTorch; and the plugin's one-line refusal of that runner (vLLM 0.30.0's Model Runner V2 is not
hooked).
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

from ascend_spec.e2e.engine import EngineRun, EngineSpec, run_isolated
from ascend_spec.e2e.tiny_models import TinyModels, make_tiny_models

sys.path.insert(0, str(Path(__file__).parents[1] / "vllm"))  # the engine tests' bf16-tie rule
from engine_helpers import assert_matches_plain  # noqa: E402

pytestmark = [needs_vllm_ascend, pytest.mark.slow]

V2_RUNNER = "vllm_ascend.worker.v2.model_runner.NPUModelRunner"
PROMPTS = [[1, 5, 9, 20, 33], [7, 8, 2, 4], [3, 14, 15, 92, 65, 35, 89, 79, 32]]
MAX_TOKENS = [12, 10, 11]

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


x = torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 3
x[::7] = 0.0
out = torch.empty(1000, dtype=torch.bfloat16)
store_bf16[(1,)](x, out, 1000, BLOCK=1024)
keep = torch.empty(1000, dtype=torch.int32)
masked_nonzero[(1,)](x, keep, 1000, BLOCK=1024)
result = {
    "bf16_equal": bool(torch.equal(out, x.to(torch.bfloat16))),
    "keep_equal": bool(torch.equal(keep, (x != 0).to(torch.int32))),
    "truncated_differs": bool((x.view(torch.int32) & 0xFFFF0000).view(torch.float32).to(torch.bfloat16).ne(
        x.to(torch.bfloat16)).any()),
}
sys.stdout.write("RESULT " + json.dumps(result))
"""


def test_interpreter_repairs_behave_as_compiled_triton(tmp_path: Path) -> None:
    """Mode "v2" stores fp32 into bf16 rounding to nearest even (as compiled Triton and the NPU do; the plain
    interpreter truncates) and gives a float comparison a boolean result a mask can be joined with."""
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
    assert result == {"bf16_equal": True, "keep_equal": True, "truncated_differs": True}


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    return make_tiny_models(tmp_path_factory.mktemp("ascend_v2"), hybrid=True, low_entropy=True)


def _run(work: Path, spec: EngineSpec, env: dict[str, str]) -> EngineRun:
    return run_isolated(
        spec, PROMPTS, work_dir=work, env=env, max_tokens=MAX_TOKENS, logprobs=True, timeout=1200
    )


def test_vllm_ascend_v2_runner_decodes_as_plain_cpu(ascend_engine_dir: Path, hybrid: TinyModels) -> None:
    """vllm-ascend's V2 runner starts in mode "v2" and decodes the hybrid as vLLM's CPU engine does (a prompt may
    leave plain decoding only at a bf16 tie of plain decoding's top-2 logits)."""
    spec = EngineSpec(target=hybrid.target, hybrid=True)
    plain = _run(ascend_engine_dir / "v2_plain_cpu", spec, PLAIN_CPU)
    assert plain.error is None, plain.error
    ours = _run(ascend_engine_dir / "v2_npu", spec, EMULATED_V2)
    assert ours.error is None, ours.error
    assert ours.runner_class == V2_RUNNER and ours.runner == "v2", (ours.runner_class, ours.runner)
    assert_matches_plain(plain, ours, allow_ties=True)


def test_plugin_refuses_vllm_ascend_v2_runner_in_one_line(
    ascend_engine_dir: Path, hybrid: TinyModels
) -> None:
    """The plugin does not hook vLLM 0.30.0's Model Runner V2 (the release vllm-ascend 0.30.0rc2 runs on): an
    engine that enables it there stops at start with one line naming the switch to V1."""
    spec = EngineSpec(target=hybrid.target, hybrid=True, plugin={})
    run = _run(ascend_engine_dir / "v2_npu_plugin", spec, EMULATED_V2)
    assert run.error is not None and not run.tokens
    line = next(ln for ln in run.error.splitlines() if "additional_config['ascend_spec'] is set" in ln)
    assert "runs Model Runner V2 and ascend-spec does not hook it on vLLM 0.30.0" in line, line
    assert "Set VLLM_USE_V2_MODEL_RUNNER=0" in line, line
