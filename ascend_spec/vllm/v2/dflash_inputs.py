"""DFlash / DSpark block inputs on Model Runner V2 from ``prepare_block_slots``.

V2's ``DFlashSpeculator.propose`` (``spec_decode/dflash/speculator.py:343``, DSpark's speculator subclasses it)
calls the module global ``prepare_dflash_inputs`` (``:733``) once per draft KV-cache group: one Triton kernel
(``_prepare_dflash_inputs_kernel``, ``:534``) that writes the block's ids, positions and query slots, the
context slots of the accepted target tokens, the sampling rows and the per-request sampling state.
:func:`prepare_dflash_inputs_with_block_slots` fills the same buffers with the same values, the block and its
context from the project's op, the rest with a few tensor ops; :func:`use_block_slots` swaps the global in for
one enabled speculator's ``propose`` call only, so other engines in the process keep V2's kernel.

V2's conventions kept here: query positions are clamped to ``max_model_len - 1`` and ``seq_lens`` to
``max_model_len``; slots in the null block 0 are ``PAD_SLOT_ID``; the context buffers keep the target step's
row layout (request b's rows at ``query_start_loc[b] ..``), the rejected rows at position 0 and ``PAD_SLOT_ID``.
One difference: a query position on a page past the block table gets ``PAD_SLOT_ID`` (V2's kernel clamps the page
to the table's last column). Context parallelism (``cp_size > 1``) and 0.33's ``num_reqs_override`` run V2's
kernel.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

import torch

from ascend_spec.ops import prepare_block_slots


def prepare_dflash_inputs_with_block_slots(
    original: Callable[..., None], backend: str, arguments_of: Callable[..., None] | None = None
) -> Callable[..., None]:
    """A drop-in for V2's ``prepare_dflash_inputs`` (same arguments, same buffers written); ``original`` runs where
    the op does not apply. ``arguments_of``: the function whose signature names the arguments (default
    ``original``; vllm-ascend's replacement takes ``*args, **kwargs``)."""
    signature = inspect.signature(arguments_of or original)

    @functools.wraps(original)
    def prepare(*args: Any, **kwargs: Any) -> None:
        a = signature.bind(*args, **kwargs)
        a.apply_defaults()
        v = a.arguments
        if v["cp_size"] != 1 or v.get("num_reqs_override") is not None:
            original(*args, **kwargs)
            return
        _prepare(v, backend)

    return prepare


def _prepare(v: dict[str, Any], backend: str) -> None:
    from vllm.v1.attention.backends.utils import PAD_SLOT_ID

    batch = v["input_batch"]
    bufs = v["input_buffers"]
    b = batch.num_reqs
    q, k = v["num_query_per_req"], v["num_speculative_steps"]
    bs, max_len = v["block_size"], v["max_model_len"]
    max_reqs, max_tokens = v["max_num_reqs"], v["max_num_tokens"]
    sample_from_anchor = bool(v["sample_from_anchor"])
    qsl = batch.query_start_loc[: b + 1].to(torch.int64)
    rejected = v["num_rejected"][:b].to(torch.int64)
    num_valid = (qsl[1:] - qsl[:-1] - rejected).to(torch.int32)
    idx = batch.idx_mapping[:b].to(torch.int64)
    bonus = torch.where(
        v["num_sampled"][:b] > 0,
        v["last_sampled"].reshape(-1).index_select(0, idx),
        v["next_prefill_tokens"].reshape(-1).index_select(0, idx).to(torch.int64),  # chunked prefill
    )
    positions = batch.positions if batch.positions.dim() == 1 else batch.positions[0]
    anchor_positions = positions.index_select(0, qsl[1:] - rejected - 1) + 1
    slots = prepare_block_slots(
        bonus.to(bufs.input_ids.dtype),
        anchor_positions,
        v["block_table"][:b].to(torch.int32),
        block_size=bs,
        num_query_tokens=q,
        mask_token_id=int(v["parallel_drafting_token_id"]),
        sample_from_anchor=sample_from_anchor,
        context_lens=num_valid,
        backend=backend,
    )

    def no_null_block(s: torch.Tensor) -> torch.Tensor:
        return torch.where((s >= 0) & (s < bs), PAD_SLOT_ID, s)

    nq = b * q
    bufs.input_ids[:nq].copy_(slots.input_ids)
    bufs.positions[:nq].copy_(slots.positions.clamp_max(max_len - 1))
    query_slots = v["query_slot_mapping"]
    query_slots[:nq].copy_(no_null_block(slots.slot_mapping))
    query_slots[nq:max_tokens].fill_(PAD_SLOT_ID)
    bufs.query_start_loc[: b + 1].copy_(slots.query_start_loc)
    bufs.query_start_loc[b + 1 : max_reqs + 1].fill_(nq)
    bufs.seq_lens[:b].copy_(slots.seq_lens.clamp_max(max_len))
    bufs.seq_lens[b:max_reqs].fill_(0)

    # Context in the target step's row layout: accepted rows from the op, rejected rows at 0 / PAD.
    num_target = int(batch.query_start_loc_np[b])
    ctx_pos, ctx_slots = v["context_positions"], v["context_slot_mapping"]
    ctx_pos[:num_target].fill_(0)
    ctx_slots[:num_target].fill_(PAD_SLOT_ID)
    n = slots.context_positions.shape[-1]
    if n:
        device = qsl.device
        req = torch.repeat_interleave(torch.arange(b, device=device), num_valid, output_size=n)
        start = slots.context_start_loc.to(torch.int64)
        rows = qsl.index_select(0, req) + torch.arange(n, device=device) - start.index_select(0, req)
        context_positions = slots.context_positions
        if context_positions.dim() == 2:
            context_positions = context_positions[0]
        ctx_pos.index_copy_(0, rows, context_positions.to(ctx_pos.dtype))
        ctx_slots.index_copy_(0, rows, no_null_block(slots.context_slot_mapping).to(ctx_slots.dtype))

    # Sampling rows: DFlash samples the masks at their own positions, DSpark every row for the next position.
    ns = slots.sample_indices.numel()
    sample_positions = slots.positions if slots.positions.dim() == 1 else slots.positions[0]
    v["sample_indices"][:ns].copy_(slots.sample_indices)
    v["sample_pos"][:ns].copy_(
        sample_positions.index_select(0, slots.sample_indices) + int(sample_from_anchor)
    )
    v["sample_idx_mapping"][:ns].copy_(idx.repeat_interleave(k))  # K rows per request, both layouts
    v["sample_indices"][ns : max_reqs * k].fill_(0)
    v["sample_pos"][ns : max_reqs * k].fill_(0)
    v["sample_idx_mapping"][ns : max_reqs * k].fill_(-1)
    v["temperature"].index_copy_(0, idx, v["input_temperature"].index_select(0, idx))
    v["seeds"].index_copy_(0, idx, v["input_seeds"].index_select(0, idx))


def use_block_slots(speculator, backend: str) -> None:  # noqa: ANN001
    """Make this speculator's ``propose`` prepare its block inputs with ``prepare_block_slots``. What the global
    holds when ``propose`` runs stays the fallback: vllm-ascend's V2 DFlash speculator rebinds it to its own
    Triton kernel in ``set_attn`` (``vllm_ascend/worker/v2/spec_decode/dflash/speculator.py:135``; the same slots
    as vLLM's without context parallelism)."""
    from vllm.v1.worker.gpu.spec_decode.dflash import speculator as dflash_module

    propose = speculator.propose
    arguments_of = dflash_module.prepare_dflash_inputs  # vLLM's own, before any rebinding
    speculator._ascend_spec_block_slot_calls = (
        0  # draft steps prepared by the op (the e2e harness reports it)
    )
    made: list[tuple[Callable[..., None], Callable[..., None]]] = []  # (the global's kernel, its replacement)

    def counted_for(upstream: Callable[..., None]) -> Callable[..., None]:
        if not made or made[0][0] is not upstream:  # the global is rebound once, in set_attn
            ours = prepare_dflash_inputs_with_block_slots(upstream, backend, arguments_of)

            def counted(*args: Any, **kwargs: Any) -> None:
                speculator._ascend_spec_block_slot_calls += 1
                ours(*args, **kwargs)

            made[:] = [(upstream, counted)]
        return made[0][1]

    def propose_with_block_slots(self, *args: Any, **kwargs: Any):  # noqa: ANN001, ANN202
        upstream = dflash_module.prepare_dflash_inputs
        dflash_module.prepare_dflash_inputs = counted_for(upstream)
        try:
            return propose(*args, **kwargs)
        finally:
            dflash_module.prepare_dflash_inputs = upstream

    speculator.propose = types.MethodType(propose_with_block_slots, speculator)
