"""For the block-input tests' engine processes: every draft step runs the kernel the runner would run and the
plugin's ``prepare_block_slots`` path on the same state and records which buffers differ.

:func:`compare_block_inputs` runs one engine so in a child process (used by ``tests/vllm/test_v2_plugin.py``
against vLLM's own V2 kernel, ``tests/vllm_ascend_emu/test_v2_runner.py`` against vllm-ascend's).
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

from ascend_spec.e2e import fork_server
from ascend_spec.e2e.engine import EngineRun

_SCRIPT = """
import dataclasses, json, sys
sys.path.insert(0, sys.argv[2])
from block_inputs_compare import record_block_input_steps
if sys.argv[3] == "cpu_v2":
    from ascend_spec.e2e.cpu_v2 import select_model_runner
    select_model_runner("v2")
from ascend_spec.e2e.engine import EngineSpec, run_engine

steps = record_block_input_steps()
spec, prompts, lengths, logprobs = json.loads(sys.argv[1])
run = run_engine(EngineSpec(**spec), prompts, max_tokens=lengths, logprobs=logprobs)
with open(sys.argv[4], "w") as f:
    json.dump({"error": run.error, "steps": steps, "run": dataclasses.asdict(run)}, f)
"""


def compare_block_inputs(
    spec: dict,
    prompts: list[list[int]],
    max_tokens: list[int],
    *,
    work: Path,
    env: dict[str, str],
    cpu_v2: bool,
    timeout: int,
    logprobs: bool = False,
) -> dict:
    """One engine (``spec``: EngineSpec's fields) in a child process of this interpreter, every draft step
    compared: ``{"error", "steps": [[kernel module, differing buffers], ...], "run": its EngineRun}``.
    ``cpu_v2``: V2 on the CPU through the test harness."""
    script = work / "compare_block_inputs.py"
    script.write_text(_SCRIPT)
    request = json.dumps([spec, prompts, max_tokens, logprobs])
    result = work / f"compare_block_inputs_{len(list(work.glob('compare_block_inputs_*.json')))}.json"
    args = [request, str(Path(__file__).parent), "cpu_v2" if cpu_v2 else "-", str(result)]
    code, output = fork_server.run_python(
        [str(script), *args], env, work=work, runner="v2" if cpu_v2 else "v1", timeout=timeout, cwd=work
    )
    assert code == 0 and result.exists(), output
    out = json.loads(result.read_text())
    assert out["error"] is None, out["error"]
    run = out["run"]
    run["top2"] = [[tuple(x) for x in row] for row in run["top2"]]
    out["run"] = EngineRun(**run)
    return out


_SAMPLING = (
    "query_slot_mapping",
    "context_positions",
    "context_slot_mapping",
    "sample_indices",
    "sample_pos",
    "sample_idx_mapping",
    "temperature",
    "seeds",
)


def record_block_input_steps() -> list[list[Any]]:
    """Wrap the plugin's block-input factory; returns the list each draft step appends ``[the kernel's module,
    names of the buffers that differ]`` to."""
    import torch

    from ascend_spec.vllm.v2 import dflash_inputs

    made = dflash_inputs.prepare_dflash_inputs_with_block_slots
    steps: list[list[Any]] = []

    def comparing(original, backend, arguments_of=None):  # noqa: ANN001, ANN202
        ours = made(original, backend, arguments_of)

        def prepare(*args: Any, **kwargs: Any) -> None:
            a = inspect.signature(arguments_of or original).bind(*args, **kwargs).arguments
            b = a["input_buffers"]
            outs = [b.input_ids, b.positions, b.query_start_loc, b.seq_lens] + [a[n] for n in _SAMPLING]
            start = [t.clone() for t in outs]
            original(*args, **kwargs)
            want = [t.clone() for t in outs]
            for t, s in zip(outs, start):
                t.copy_(s)
            ours(*args, **kwargs)
            names = ["input_ids", "positions", "query_start_loc", "seq_lens", *_SAMPLING]
            diff = [n for n, t, w in zip(names, outs, want) if not torch.equal(t, w)]
            steps.append([original.__module__, diff])

        return prepare

    dflash_inputs.prepare_dflash_inputs_with_block_slots = comparing
    return steps
