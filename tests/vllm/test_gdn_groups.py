"""The GDN flush reads each layer's state slot from its own KV-cache group (no engine: a stand-in runner).

vLLM keeps a hybrid's GDN layers in several KV-cache groups when they outnumber the attention layers (Qwen3.5's
3:1 layout: three groups), each with its own block table, so one request's state slot differs per group.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.matrix  # no engine: cheap on every release of the matrix


class _Layer:
    """Records the slots and accepted counts each flush hands it."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.flushed: list[tuple[list[int], list[int]]] = []
        self.kv_cache = [torch.zeros(1), torch.zeros(1)]

    def flush(self, slots: torch.Tensor, accepted: torch.Tensor) -> None:
        self.flushed.append((slots.tolist(), accepted.tolist()))


def _spec(cls: type) -> object:
    return object.__new__(cls)  # isinstance is all the flush reads of a group's spec


def _runner(layers: list[_Layer], tables: list[np.ndarray] | None = None, **fields) -> SimpleNamespace:  # noqa: ANN003
    """Two requests in rows 0 and 1; GDN layers 0/2 in group 0, 1/3 in group 2, attention in group 1."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

    groups = [
        SimpleNamespace(kv_cache_spec=_spec(MambaSpec), layer_names=["l0", "l2"]),
        SimpleNamespace(kv_cache_spec=_spec(FullAttentionSpec), layer_names=["attn"]),
        SimpleNamespace(kv_cache_spec=_spec(MambaSpec), layer_names=["l1", "l3"]),
    ]
    if tables is None:
        tables = [np.array([[5], [9]]), np.array([[1], [2]]), np.array([[6], [10]])]
    batch = SimpleNamespace(
        req_id_to_index={"a": 0, "b": 1},
        block_table=[SimpleNamespace(block_table=SimpleNamespace(np=t)) for t in tables],
        num_accepted_tokens_cpu=np.array([3, 2], dtype=np.int32),
    )
    return SimpleNamespace(
        _ascend_spec_gdn_layers=layers,
        kv_cache_config=SimpleNamespace(kv_cache_groups=groups),
        input_batch=batch,
        use_async_scheduling=False,
        cache_config=SimpleNamespace(mamba_cache_mode=fields.pop("mamba_cache_mode", "none")),
        **fields,
    )


def test_flush_commits_each_layer_at_its_own_groups_slot() -> None:
    from ascend_spec.vllm.v1.runner import _flush_leaving_requests

    layers = [_Layer(f"l{i}") for i in range(4)]
    runner = _runner(layers)
    # "a" finishes; "b" decodes without drafts (vLLM 0.30.0 runs it through its own GDN kernels)
    step = SimpleNamespace(
        num_scheduled_tokens={"b": 1}, finished_req_ids={"a"}, scheduled_spec_decode_tokens={}
    )
    _flush_leaving_requests(runner, step, plain_decodes=True)
    assert layers[0].flushed == layers[2].flushed == [([5, 9], [3, 2])]
    assert layers[1].flushed == layers[3].flushed == [([6, 10], [3, 2])]


def test_flush_with_prefix_caching_commits_at_the_running_blocks_slot() -> None:
    """Align mode: a request's records are in the slot of its running block's column (``mamba_state_idx``), not
    column 0; a request with no running block yet (never scheduled) has nothing to commit."""
    from ascend_spec.vllm.v1.runner import _flush_leaving_requests

    layers = [_Layer(f"l{i}") for i in range(4)]
    tables = [
        np.array([[5, 7, 8], [9, 11, 12]]),
        np.array([[1, 3, 4], [2, 13, 14]]),
        np.array([[6, 15, 16], [10, 17, 18]]),
    ]
    runner = _runner(layers, tables, mamba_cache_mode="align", mamba_state_idx={"a": 2, "b": 1})
    step = SimpleNamespace(
        num_scheduled_tokens={}, finished_req_ids={"a", "b"}, scheduled_spec_decode_tokens={}
    )
    _flush_leaving_requests(runner, step)
    assert layers[0].flushed == layers[2].flushed == [([8, 11], [3, 2])]
    assert layers[1].flushed == layers[3].flushed == [([16, 17], [3, 2])]
    runner = _runner(
        layers := [_Layer(f"l{i}") for i in range(4)],
        tables,
        mamba_cache_mode="align",
        mamba_state_idx={"b": 0},
    )
    _flush_leaving_requests(runner, step)
    assert layers[0].flushed == [([9], [2])]


def test_a_gdn_layer_in_no_mamba_group_is_an_error() -> None:
    from ascend_spec.vllm.gdn_setup import mamba_groups

    layers = [_Layer("l0"), _Layer("stray")]
    with pytest.raises(RuntimeError, match=r"GDN layers \['stray'\] are in no KV-cache group"):
        mamba_groups(_runner(layers), layers)


def test_v2_flush_on_vllm_0_30_commits_draftless_decodes_before_the_step() -> None:
    """vLLM 0.30.0's V2 hybrid state (vllm-ascend's V2 runner) runs a decode without drafts through the plain GDN
    kernels, from the committed state: the step's first call (``finish_requests``) commits the pending records
    of such requests with the ones that leave, each layer at its group's slot, accepted counts from the device;
    requests with drafts, and ones V2 does not hold yet, are left to the verify call."""
    from ascend_spec.vllm.releases import V2_RELEASES
    from ascend_spec.vllm.v2.runner import _install_runner_hooks, plain_decodes

    layers = [_Layer(f"l{i}") for i in range(4)]
    tables = [torch.tensor([[5], [9], [4]]), None, torch.tensor([[6], [10], [3]])]
    runner = _runner(layers)
    runner.req_states = SimpleNamespace(req_id_to_index={"a": 0, "b": 1, "c": 2})
    runner.block_tables = SimpleNamespace(
        block_tables=[SimpleNamespace(gpu=t) for t in tables]  # V2 keeps one table per group
    )
    runner.model_state = SimpleNamespace(num_accepted_tokens_gpu=torch.tensor([3, 2, 4], dtype=torch.int32))
    step = SimpleNamespace(
        num_scheduled_tokens={"b": 1, "c": 4, "new": 7},
        scheduled_spec_decode_tokens={"c": [-1, -1, -1]},
        finished_req_ids={"a"},
        preempted_req_ids=None,
    )
    assert plain_decodes(runner, step) == {"b"}  # "c" verifies its drafts; "new" is not V2's yet
    seen = []
    runner.load_model = lambda *a, **k: None
    runner.finish_requests = lambda out: seen.append(set(runner._ascend_spec_flushed))
    runner._remove_request = lambda req_id: True
    for version, flushed in (("0.30.0", ([5, 9], [3, 2])), ("0.32.0", ([5], [3]))):
        for layer in layers:
            layer.flushed.clear()
        runner.ascend_spec_release = V2_RELEASES[version]
        _install_runner_hooks(runner)
        runner.finish_requests(step)
        assert layers[0].flushed == layers[2].flushed == [flushed], version
        want = ([6, 10], [3, 2]) if version == "0.30.0" else ([6], [3])
        assert layers[1].flushed == layers[3].flushed == [want], version
        runner.finish_requests = lambda out: seen.append(set(runner._ascend_spec_flushed))
    assert seen == [{"a", "b"}, {"a"}]
