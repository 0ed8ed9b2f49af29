"""Bench case for verify_causal_conv1d: the op against a per-request loop of F.conv1d, plus memory and traffic.

Shapes: the short conv of a Qwen3-Next / Qwen3.5-style GDN layer, C = 8192 channels (q, k: 16 heads x 128; v: 32
heads x 128), W = 4, bf16 activations, state and records; B in {16, 64, 256} requests, K = 15 drafts (16 tokens
per row at most), ragged lengths 1..16 and random accepted counts from the previous step. Quick mode: C = 256,
B in {2, 4}.

Memory per request: this design keeps one state (W-1 inputs per channel) plus the records of the last call (L
inputs per channel); the per-draft-slot layout keeps 1+K states. Traffic per step is counted from the actual
batch: the op reads x, the weights and, per row, the W-1 committed inputs (from the state and/or the records),
writes y, the state once (when something was accepted) and the records; the per-draft-slot layout reads one
state and x and writes y plus one state per token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ascend_spec.backend import resolve_backend
from ascend_spec.bench.core import BenchContext, BenchRow
from ascend_spec.gdn.verify_causal_conv1d import allocate_conv_records, verify_causal_conv1d
from ascend_spec.gdn.verify_causal_conv1d.ascendc import instruction_minimum

K = 15
W = 4
DTYPE = torch.bfloat16


def _setup(b: int, channels: int, device: torch.device, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    slots = 2 * b
    lens = torch.randint(1, K + 2, (b,), generator=gen)
    prev = torch.randint(1, K + 2, (b,), generator=gen)
    # 1..min(prev, lens): still valid when the timing loop repeats the call (it records lens tokens)
    pending = (torch.rand(b, generator=gen) * torch.minimum(prev, lens)).long() + 1
    idx = torch.randperm(slots, generator=gen)[:b].to(torch.int32)
    cu = torch.zeros(b + 1, dtype=torch.int32)
    cu[1:] = lens.cumsum(0)
    records = allocate_conv_records(slots, K + 1, channels, W, device=device, dtype=DTYPE)
    records.x.copy_(torch.randn(records.x.shape, generator=gen).to(DTYPE))
    records.num_recorded[idx.long()] = prev.to(torch.int32).to(device)
    return {
        "x": torch.randn(int(cu[-1]), channels, generator=gen).to(DTYPE).to(device),
        "weight": (torch.randn(channels, W, generator=gen) / W).to(DTYPE).to(device),
        "bias": (torch.randn(channels, generator=gen) * 0.1).to(DTYPE).to(device),
        "cu_seqlens": cu.to(device),
        "conv_state_pool": torch.randn(slots, channels, W - 1, generator=gen).to(DTYPE).to(device),
        "state_indices": idx.to(device),
        "records": records,
        "pending": pending.to(torch.int32).to(device),
    }


def loop_baseline(inp: dict) -> torch.Tensor:
    """One request at a time with F.conv1d: commit pending inputs, conv over (state ++ x_b), record x_b."""
    x, weight, bias, cu = inp["x"], inp["weight"], inp["bias"], inp["cu_seqlens"].tolist()
    pool, rec, idx, pend = inp["conv_state_pool"], inp["records"], inp["state_indices"], inp["pending"]
    channels = x.shape[1]
    y = torch.zeros_like(x)
    for b, s in enumerate(idx.tolist()):
        n = cu[b + 1] - cu[b]
        if s < 0 or n == 0:
            continue
        p = min(int(pend[b]), int(rec.num_recorded[s]))
        committed = torch.cat([pool[s].T, rec.x[s, :p].to(pool.dtype)])[-(W - 1) :]
        pool[s] = committed.T
        seq = torch.cat([committed.to(x.dtype), x[cu[b] : cu[b + 1]]]).T[None].float()
        out = F.conv1d(seq, weight.float()[:, None, :], bias.float(), groups=channels)[0].T
        y[cu[b] : cu[b + 1]] = F.silu(out).to(x.dtype)
        rec.x[s, :n] = x[cu[b] : cu[b + 1]]
        rec.num_recorded[s] = n
    return y


def _clone(inp: dict) -> dict:
    out = dict(inp)
    out["conv_state_pool"] = inp["conv_state_pool"].clone()
    rec = inp["records"]
    out["records"] = type(rec)(x=rec.x.clone(), num_recorded=rec.num_recorded.clone(), width=rec.width)
    return out


def _traffic(inp: dict, channels: int) -> tuple[int, int]:
    """Bytes moved per step: (this design, per-draft-slot layout with a state write per token)."""
    e = torch.empty((), dtype=DTYPE).element_size()
    lens = (inp["cu_seqlens"][1:] - inp["cu_seqlens"][:-1]).cpu()
    tokens, rows = int(lens.sum()), lens.numel()
    state = channels * (W - 1) * e
    weights = channels * (W + 1) * e
    committed_reads = rows * state  # W-1 inputs per channel, from the state and/or the records
    state_writes = int((inp["pending"].cpu() > 0).sum()) * state
    ours = 2 * tokens * channels * e + weights + committed_reads + state_writes + tokens * channels * e
    per_slot = 2 * tokens * channels * e + weights + rows * state + tokens * state
    return ours, per_slot


def run(ctx: BenchContext) -> list[BenchRow]:
    impl = resolve_backend(ctx.backend, ctx.device, op="verify_causal_conv1d")
    channels = 256 if ctx.quick else 8192
    rows = []
    for b in (2, 4) if ctx.quick else (16, 64, 256):
        inp = _setup(b, channels, ctx.device, seed=b)
        ref_inp, base_inp = _clone(inp), _clone(inp)
        got = verify_causal_conv1d(**ref_inp, backend=ctx.backend)
        want = loop_baseline(base_inp)
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
        if not torch.equal(ref_inp["conv_state_pool"], base_inp["conv_state_pool"]):
            raise AssertionError(
                f"verify_causal_conv1d bench: op and loop baseline committed different states at B={b}"
            )

        def op(inp=inp) -> torch.Tensor:
            return verify_causal_conv1d(**inp, backend=ctx.backend)

        def base(inp=inp) -> torch.Tensor:
            return loop_baseline(inp)

        time_ms, base_ms = ctx.time(op), ctx.time(base)
        e = torch.empty((), dtype=DTYPE).element_size()
        cu = inp["cu_seqlens"].tolist()
        recorded = inp["records"].num_recorded[inp["state_indices"].long()].tolist()
        minimum = instruction_minimum(
            [cu[i + 1] - cu[i] for i in range(b)], [min(int(p), r) for p, r in zip(inp["pending"].tolist(), recorded)],
            channels, W, e, inp["records"].x.element_size(), inp["conv_state_pool"].element_size(), True, True,
        )  # fmt: skip
        ours_state = channels * (W - 1) * e + inp["records"].bytes_per_slot
        per_slot_state = (1 + K) * channels * (W - 1) * e
        ours_bytes, per_slot_bytes = _traffic(inp, channels)
        rows.append(
            BenchRow(
                op="verify_causal_conv1d",
                case=f"B={b} C={channels} W={W} K={K} bf16",
                impl=impl,
                baseline="per-request F.conv1d loop",
                time_ms=time_ms,
                baseline_ms=base_ms,
                metrics={
                    **ctx.instruction_counts(op, minimum),
                    "state_bytes_per_request": ours_state,
                    "per_draft_slot_state_bytes_per_request": per_slot_state,
                    "bytes_moved": ours_bytes,
                    "per_draft_slot_bytes_moved": per_slot_bytes,
                    "tokens": int(inp["x"].shape[0]),
                    "bandwidth_gbs": ours_bytes / (time_ms * 1e6),
                },
            )
        )
    return rows
