"""For the block-input tests' engine processes: every draft step runs the kernel the runner would run and the
plugin's ``prepare_block_slots`` path on the same state and records which buffers differ.

Imported by the scripts of ``tests/vllm/test_v2_plugin.py`` (vLLM's own V2 kernel) and
``tests/vllm_ascend_emu/test_v2_runner.py`` (vllm-ascend's) before the engine starts.
"""

from __future__ import annotations

import inspect
from typing import Any

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
