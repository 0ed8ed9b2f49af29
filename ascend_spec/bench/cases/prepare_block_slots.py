"""Bench case for prepare_block_slots: the op against a per-request Python loop, as naive engine code does it.

Shapes: B in {1, 64, 256} requests, Q = 16 query tokens (DFlash, K = 15), page size 128, anchors spread over
4096-token sequences on shuffled physical pages, 0..Q context tokens per request, 2 padding rows for graph
replay. The baseline computes the same tensors (checked equal before timing) one request at a time with torch
ops; it skips the value checks the op runs on CPU, so the ratio is conservative.
"""

from __future__ import annotations

import torch

from ascend_spec.backend import resolve_backend
from ascend_spec.bench.core import BenchContext, BenchRow
from ascend_spec.ops import BlockSlots, prepare_block_slots
from ascend_spec.ops.prepare_block_slots.ascendc import instruction_minimum

Q = 16
PAGE = 128
MAX_LEN = 4096
MASK_ID = 151_669
PADDING = 2


def _inputs(b: int, device: torch.device, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    pages_per_req = MAX_LEN // PAGE + 1
    table = torch.randperm(b * pages_per_req, generator=gen).to(torch.int32).reshape(b, pages_per_req)
    ctx = torch.randint(0, Q + 1, (b,), generator=gen)
    pos = torch.randint(Q, MAX_LEN - Q, (b,), generator=gen)
    ids = torch.randint(0, MASK_ID, (b,), generator=gen)
    return {
        "anchor_token_ids": ids.to(device),
        "anchor_positions": pos.to(device),
        "block_table": table.to(device),
        "context_lens": ctx.to(device),
    }


def loop_baseline(inp: dict, num_padded_reqs: int) -> BlockSlots:
    """One request at a time: what the op replaces."""
    ids, pos, table, ctx = (
        inp[k] for k in ("anchor_token_ids", "anchor_positions", "block_table", "context_lens")
    )
    dev, b, r = pos.device, pos.shape[0], num_padded_reqs
    input_ids = torch.full((r * Q,), MASK_ID, dtype=ids.dtype, device=dev)
    positions = torch.zeros(r * Q, dtype=torch.int64, device=dev)
    slots = torch.full((r * Q,), -1, dtype=torch.int64, device=dev)
    seq_lens = torch.zeros(r, dtype=torch.int32, device=dev)
    ctx_slots, ctx_pos, ctx_start = [], [], [0]
    for i in range(b):
        p, n = int(pos[i]), int(ctx[i])
        logical = torch.arange(p - n, p + Q, device=dev)
        s = table[i, logical // PAGE].to(torch.int64) * PAGE + logical % PAGE
        input_ids[i * Q] = ids[i]
        positions[i * Q : (i + 1) * Q] = logical[n:]
        slots[i * Q : (i + 1) * Q] = s[n:]
        seq_lens[i] = p + Q
        ctx_slots.append(s[:n])
        ctx_pos.append(logical[:n])
        ctx_start.append(ctx_start[-1] + n)
    return BlockSlots(
        input_ids=input_ids,
        positions=positions,
        slot_mapping=slots,
        query_start_loc=(torch.arange(r + 1, device=dev) * Q).to(torch.int32),
        seq_lens=seq_lens,
        sample_indices=(torch.arange(b, device=dev)[:, None] * Q + torch.arange(1, Q, device=dev)).reshape(
            -1
        ),
        context_slot_mapping=torch.cat(ctx_slots),
        context_positions=torch.cat(ctx_pos),
        context_start_loc=torch.tensor(ctx_start, dtype=torch.int32, device=dev),
    )


def _bytes(slots: BlockSlots) -> int:
    return sum(t.numel() * t.element_size() for t in vars(slots).values())


def run(ctx: BenchContext) -> list[BenchRow]:
    impl = resolve_backend(ctx.backend, ctx.device, op="prepare_block_slots")
    rows = []
    for b in (1, 4) if ctx.quick else (1, 64, 256):
        inp = _inputs(b, ctx.device, seed=b)
        r = b + PADDING

        def op(inp=inp, r=r) -> BlockSlots:
            return prepare_block_slots(
                **inp,
                block_size=PAGE,
                num_query_tokens=Q,
                mask_token_id=MASK_ID,
                num_padded_reqs=r,
                backend=ctx.backend,
            )

        def base(inp=inp, r=r) -> BlockSlots:
            return loop_baseline(inp, r)

        got, want = op(), base()
        for name, value in vars(want).items():
            if not torch.equal(getattr(got, name), value):
                raise AssertionError(f"block_slots bench: op and loop baseline disagree on {name} at B={b}")
        # read: ids, positions, context lengths, the touched block-table entries (<= 2 pages per request)
        touched_pages = int(
            (
                (inp["anchor_positions"] + Q - 1) // PAGE
                - (inp["anchor_positions"] - inp["context_lens"]) // PAGE
                + 1
            ).sum()
        )
        bytes_read = b * 3 * 8 + touched_pages * 4
        time_ms, base_ms = ctx.time(op), ctx.time(base)
        written = _bytes(got)
        # computed outputs: ids, positions, slots of the B x Q rows and the context rows (the rest are <= B + 1)
        computed = [t.numel() for t in (got.input_ids, got.positions, got.slot_mapping, got.context_slot_mapping,
                                        got.context_positions)]  # fmt: skip
        minimum = instruction_minimum(computed, bytes_read, written, r)
        rows.append(
            BenchRow(
                op="prepare_block_slots",
                case=f"B={b} Q={Q} page={PAGE}",
                impl=impl,
                baseline="per-request loop",
                time_ms=time_ms,
                baseline_ms=base_ms,
                metrics={
                    **ctx.instruction_counts(op, minimum),
                    "bytes_written": written,
                    "bytes_read": bytes_read,
                    "tokens": r * Q + int(inp["context_lens"].sum()),
                    "write_gbs": written / (time_ms * 1e6),
                },
            )
        )
    return rows
