"""One engine with prefix caching (in a child process) decoding rounds of requests, one round after the other.

A later round's prompts extend an earlier round's prompts and outputs, so their prefix hits blocks that filled
while the earlier round decoded. A round gives its prompts (``{"prompts": [...]}``) or extends the previous
round's prompts by ``keep`` of their output tokens and a tail each (``{"keep": n, "tails": [...]}``). Records per
round the prompts, the tokens, each request's cached prompt tokens and, with ``logprobs``, the top-2 raw logits
per position; and the plugin's align-mode counters (``AlignStats``) where the runner has them.
Run as ``python prefix_cache_probe.py request.json result.json`` (tests/vllm/test_vllm_prefix_caching.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path


def _align_stats(worker) -> tuple[dict | None, str]:  # noqa: ANN001 - runs inside the worker
    """The plugin's align-mode counters, and the runner's module (which runner decoded)."""
    stats = getattr(worker.model_runner, "ascend_spec_align", None)
    return (dataclasses.asdict(stats) if stats is not None else None), type(worker.model_runner).__module__


def _record_hit_states(hits: dict) -> None:
    """Wrap vLLM's ``preprocess_mamba`` and the plugin's (which replaces it on an enabled runner): before a request
    that starts from a cached block runs, keep that block's GDN states (conv, recurrent: every layer of the first
    mamba group), keyed by the request's first prompt tokens (saved next to the result as ``.pt``)."""
    from vllm.v1.worker import mamba_utils

    from ascend_spec.vllm.v1 import gdn_align

    mamba_utils.preprocess_mamba = _recording(mamba_utils.preprocess_mamba, hits)
    gdn_align.preprocess_mamba = _recording(gdn_align.preprocess_mamba, hits)
    _record_v2_hit_states(hits)


def _record_v2_hit_states(hits: dict) -> None:
    """The same on Model Runner V2, around the plugin's ``preprocess_state`` (a request's first step)."""

    from ascend_spec.vllm.v2 import gdn_align

    inner = gdn_align.preprocess_state
    seen: set[str] = set()

    def preprocess_state(runner, input_batch, kv_cache_config, num_computed_tokens):  # noqa: ANN001, ANN202
        gid, bs = _v2_group(runner)
        for i, req_id in enumerate(input_batch.req_ids[: input_batch.num_reqs]):
            if req_id in seen:
                continue
            seen.add(req_id)
            idx = int(input_batch.idx_mapping_np[i])
            computed = int(num_computed_tokens[idx])
            if computed >= bs:
                slot = int(runner.block_tables.block_tables[gid].gpu[idx, (computed - 1) // bs])
                hits[_v2_key(runner, idx)] = _states(runner, gid, slot)
        return inner(runner, input_batch, kv_cache_config, num_computed_tokens)

    gdn_align.preprocess_state = preprocess_state


def _v2_group(runner) -> tuple[int, int]:  # noqa: ANN001
    group_ids, spec = runner.model_state._get_mamba_group_info(runner.kv_cache_config)
    return group_ids[0], spec.block_size


def _v2_key(runner, idx: int) -> str:  # noqa: ANN001
    return _key(runner.req_states.all_token_ids.gpu[idx, :8].tolist())


def _states(runner, gid: int, slot: int) -> list:  # noqa: ANN001
    names = runner.kv_cache_config.kv_cache_groups[gid].layer_names
    context = runner.compilation_config.static_forward_context
    return [_layer_states(context[n], slot) for n in names]


def _record_boundary_states(boundaries: dict) -> None:
    """Wrap the plugin's align-mode write after sampling: the first boundary state each request gets (the round's
    decode crossing its first block), read from the boundary block's slot right after the write (every layer of
    the first mamba group), with whether the boundary fell at an accepted draft token."""

    from ascend_spec.vllm.v1 import gdn_align

    inner = gdn_align.postprocess_align

    def postprocess_align(runner, scheduler_output, num_reqs):  # noqa: ANN001, ANN202
        written = inner(runner, scheduler_output, num_reqs)
        gid = runner._get_mamba_bufs().preprocess.mamba_group_ids[0]
        names = runner.kv_cache_config.kv_cache_groups[gid].layer_names
        context = runner.compilation_config.static_forward_context
        for w in written:
            key = _key(runner.requests[w.req_id].prompt_token_ids)
            if key in boundaries:
                continue
            slot = int(runner.input_batch.block_table[gid].block_table.np[w.row, w.column])
            states = [_layer_states(context[n], slot) for n in names]
            boundaries[key] = {"inside_draft": w.inside_draft, "states": states}
        return written

    gdn_align.postprocess_align = postprocess_align

    from ascend_spec.vllm.v2 import gdn_align as v2_align

    inner_v2 = v2_align.postprocess_align

    def postprocess_align_v2(runner, idx_mapping, num_computed_tokens):  # noqa: ANN001, ANN202
        written = inner_v2(runner, idx_mapping, num_computed_tokens)
        gid, _ = _v2_group(runner)
        for w in written:
            key = _v2_key(runner, w.row)
            if key not in boundaries:
                slot = int(runner.block_tables.block_tables[gid].gpu[w.row, w.column])
                boundaries[key] = {
                    "inside_draft": w.inside_draft,
                    "states": _states(runner, gid, slot),
                }
        return written

    v2_align.postprocess_align = postprocess_align_v2


def _layer_states(layer, slot: int) -> list:  # noqa: ANN001
    """One GDN layer's (conv ``[C, W-1]``, recurrent ``[HV, Dk, Dv]``) state of ``slot`` in float64: through the
    plugin layer's views where it has them (vllm-ascend keeps both in other layouts), else vLLM's CPU layout (its
    conv state dim-first or state-first)."""
    import torch
    from vllm.model_executor.layers.mamba.mamba_utils import is_conv_state_dim_first

    if hasattr(layer, "_ssm_pool"):
        pools = (layer._conv_pool(), layer._ssm_pool())
    else:
        conv, ssm = layer.kv_cache[:2]
        pools = (conv if is_conv_state_dim_first() else conv.transpose(-1, -2), ssm)
    return [t[slot].to(torch.float64).clone() for t in pools]


def _key(prompt_token_ids: list[int]) -> str:
    return ",".join(map(str, prompt_token_ids[:8]))


def _recording(inner, hits: dict):  # noqa: ANN001, ANN202

    def preprocess_mamba(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - vLLM's signature, passed through
        _, kv_cache_config, _, mamba_state_idx, input_batch, requests, forward_context, *rest = args
        copy_bufs = rest[1] if len(rest) > 1 else kwargs["copy_bufs"]
        block_size = copy_bufs.mamba_spec.block_size
        gid = copy_bufs.mamba_group_ids[0]
        names = kv_cache_config.kv_cache_groups[gid].layer_names
        for row, req_id in enumerate(input_batch.req_ids):
            computed = requests[req_id].num_computed_tokens
            if req_id in mamba_state_idx or computed < block_size:
                continue
            block = int(input_batch.block_table[gid].block_table.np[row, (computed - 1) // block_size])
            key = _key(requests[req_id].prompt_token_ids)
            hits[key] = [_layer_states(forward_context[n], block) for n in names]
        return inner(*args, **kwargs)

    return preprocess_mamba


def main(request: str, result: str) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm.inputs import TokensPrompt

    from ascend_spec.e2e.engine import EngineSpec, _top2, engine_sampling, shutdown_engine, start_engine

    data = json.loads(Path(request).read_text())
    from ascend_spec.e2e.cpu_v2 import select_model_runner

    if (
        data["spec"].get("runner", "v1") != "v1"
    ):  # as start_engine: "v1" leaves the engine's default (env) alone
        select_model_runner(data["spec"]["runner"])  # before vLLM is imported (Model Runner V2: Triton)
    hits: dict = {}
    boundaries: dict = {}
    _record_hit_states(hits)
    _record_boundary_states(boundaries)
    spec = data["spec"]
    spec["target"] = Path(spec["target"])
    llm = start_engine(EngineSpec(**spec), data["rounds"][0]["prompts"][:1], warmup=False)
    out: dict = {
        "rounds": [],
        "align": None,
        "block_size": llm.llm_engine.vllm_config.cache_config.block_size,
    }
    try:
        prompts: list[list[int]] = []
        tokens: list[list[int]] = []
        for round_ in data["rounds"]:
            if "prompts" in round_:
                prompts = round_["prompts"]
            else:
                keep = round_["keep"]
                prompts = [p + t[:keep] + tail for p, t, tail in zip(prompts, tokens, round_["tails"])]
            sampling = engine_sampling(
                [data["max_tokens"]] * len(prompts), logprobs=data.get("logprobs", False)
            )
            outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sampling, use_tqdm=False)
            tokens = [list(o.outputs[0].token_ids) for o in outs]
            top2 = [[_top2(lp) for lp in o.outputs[0].logprobs] for o in outs] if data.get("logprobs") else []
            cached = [o.num_cached_tokens for o in outs]
            out["rounds"].append({"prompts": prompts, "tokens": tokens, "cached": cached, "top2": top2})
        out["align"], out["runner_module"] = llm.collective_rpc(_align_stats)[0]
    finally:
        shutdown_engine(llm)
    Path(result).write_text(json.dumps(out))
    import torch

    # The cached blocks' states a request started from, and the boundary states the plugin wrote, by request.
    torch.save({"hits": hits, "boundaries": boundaries}, Path(result).with_suffix(".pt"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
