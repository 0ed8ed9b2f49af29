"""Bench case for verify_gated_delta_rule: memory and traffic against the per-draft-slot layout, time against a
per-request loop.

Shapes: one Gated DeltaNet layer of a Qwen3.5-9B-like model (``linear_num_key_heads`` H = 16,
``linear_num_value_heads`` HV = 32, Dk = Dv = 128, fp32 state = 2 MiB per request and layer; the model has 24 such
layers), B in {16, 64, 256} requests, K = 15 drafts, so every row verifies K + 1 = 16 tokens (bf16 q/k/v, fp32
g/beta, q/k l2-normalised in the op). Each row has ``pending`` in 1..8 accepted tokens of its previous call
(seeded; mean about 4.5, near the 3.85 mean acceptance length of Qwen3.5-9B drafters in Huawei's talk on DFlash and DSpark in vLLM).

Memory per request: this design keeps one state slot plus the records of one call (``record_bytes_per_slot``);
the per-draft-slot layout (vLLM) keeps 1 + K full states. Bytes moved per verify step are counted from the
tensors of the case: this design reads each state once, writes it once (rows with something pending), reads
``pending`` tokens of records and writes this call's records; the per-draft-slot layout reads one state and
writes a state after every verified token. Both add the same q/k/v/g/beta reads and output writes.

Time: the op (``ctx.backend``) against a per-request loop doing the same math one row and one token at a time
(what naive engine code does), checked to agree before timing. Every timed call is a real steady-state step
(it replays the previous call's records). On CPU the large cases take seconds per call, so CPU timing uses at
most 1 warm-up and 3 repeats.
"""

from __future__ import annotations

import torch

from ascend_spec.backend import resolve_backend
from ascend_spec.bench.core import BenchContext, BenchRow, measure_ms
from ascend_spec.gdn import GDNRecords, allocate_records, record_bytes_per_slot, verify_gated_delta_rule
from ascend_spec.gdn.verify_gated_delta_rule.ascendc import instruction_minimum

K = 15
H, HV, DK, DV = 16, 32, 128, 128
QUICK = dict(h=2, hv=4, dk=32, dv=32, batches=(2, 4), k=3)


def _inputs(b: int, n_tok: int, h: int, hv: int, dk: int, dv: int, device: torch.device, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    t = b * n_tok
    bf16 = torch.bfloat16
    return {
        "q": torch.randn(t, h, dk, generator=gen).to(device, bf16),
        "k": torch.randn(t, h, dk, generator=gen).to(device, bf16),
        "v": torch.randn(t, hv, dv, generator=gen).to(device, bf16),
        "g": (-0.5 * torch.rand(t, hv, generator=gen)).to(device),
        "beta": torch.rand(t, hv, generator=gen).to(device),
        "cu_seqlens": (torch.arange(b + 1) * n_tok).to(device, torch.int32),
        # rows in shuffled slot order: records are keyed by slot, not by row
        "state_indices": torch.randperm(b, generator=gen).to(device, torch.int32),
        "pending": torch.randint(1, min(8, n_tok) + 1, (b,), generator=gen).to(device, torch.int32),
    }


def _state(b: int, n_tok: int, hv: int, dk: int, dv: int, h: int, device: torch.device, seed: int):
    """A pool and records as after one earlier verify call of n_tok tokens per slot."""
    gen = torch.Generator().manual_seed(seed)
    pool = (0.05 * torch.randn(b, hv, dk, dv, generator=gen)).to(device)
    rec = allocate_records(b, n_tok, hv, dk, dv, num_k_heads=h, device=device)
    rec.k.copy_(torch.nn.functional.normalize(torch.randn(rec.k.shape, generator=gen), dim=-1))
    rec.g.copy_(-0.5 * torch.rand(rec.g.shape, generator=gen))
    rec.u.copy_(0.1 * torch.randn(rec.u.shape, generator=gen))
    rec.num_recorded.fill_(n_tok)
    return pool, rec


def loop_baseline(inp: dict, pool: torch.Tensor, rec: GDNRecords) -> torch.Tensor:
    """One request and one token at a time: replay pending records, write the state, run and record the tokens."""
    q, k, v, g, beta = (inp[n].float() for n in ("q", "k", "v", "g", "beta"))
    cu, idx, pending = inp["cu_seqlens"].tolist(), inp["state_indices"].tolist(), inp["pending"].tolist()
    num_heads, dk = q.shape[1:]
    group = v.shape[1] // num_heads
    q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) * dk**-0.5
    k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    o = torch.zeros(v.shape, dtype=inp["v"].dtype, device=v.device)
    for b, slot in enumerate(idx):
        bank = int(rec.bank[slot])
        s = pool[slot].clone()
        for t in range(min(pending[b], int(rec.num_recorded[slot]))):
            s.mul_(torch.exp(rec.g[slot, bank, t])[:, None, None])
            s.add_(rec.k[slot, bank, t].repeat_interleave(group, 0)[:, :, None] * rec.u[slot, t][:, None, :])
        if pending[b] > 0:
            pool[slot] = s
        for j, t in enumerate(range(cu[b], cu[b + 1])):
            kt = k[t].repeat_interleave(group, 0)
            s.mul_(torch.exp(g[t])[:, None, None])
            u = beta[t][:, None] * (v[t] - torch.einsum("hkv,hk->hv", s, kt))
            s.add_(kt[:, :, None] * u[:, None, :])
            o[t] = torch.einsum("hkv,hk->hv", s, q[t].repeat_interleave(group, 0)).to(o.dtype)
            rec.k[slot, 1 - bank, j], rec.g[slot, 1 - bank, j], rec.u[slot, j] = k[t], g[t], u
        rec.bank[slot] = 1 - bank
        rec.num_recorded[slot] = cu[b + 1] - cu[b]
    return o


def _bytes_moved(inp: dict, state_bytes: int, rec_token_bytes: int, n_tok: int, design: str) -> int:
    b = inp["state_indices"].shape[0]
    io = sum(inp[n].numel() * inp[n].element_size() for n in ("q", "k", "v", "g", "beta"))
    io += inp["v"].numel() * inp["v"].element_size()  # outputs
    if design == "replay":
        pend = int(inp["pending"].sum())
        writes = int((inp["pending"] > 0).sum())
        return io + (b + writes) * state_bytes + (pend + b * n_tok) * rec_token_bytes
    return io + b * state_bytes + b * n_tok * state_bytes  # per-draft-slot: 1 read + a write per token


def run(ctx: BenchContext) -> list[BenchRow]:
    impl = resolve_backend(ctx.backend, ctx.device, op="verify_gated_delta_rule")
    if ctx.quick:
        h, hv, dk, dv, batches, k_drafts = (QUICK[n] for n in ("h", "hv", "dk", "dv", "batches", "k"))
    else:
        h, hv, dk, dv, batches, k_drafts = H, HV, DK, DV, (16, 64, 256), K
    n_tok = k_drafts + 1
    state_bytes = hv * dk * dv * 4
    rec_slot = record_bytes_per_slot(n_tok, h, hv, dk, dv)
    rec_token = 4 * (h * dk + hv + hv * dv)  # k once per k-head, g, u
    if ctx.device.type == "cpu":
        warmup, repeats = min(ctx.warmup, 1), min(ctx.repeats, 3)
    else:
        warmup, repeats = ctx.warmup, ctx.repeats
    rows = []
    for b in batches:
        inp = _inputs(b, n_tok, h, hv, dk, dv, ctx.device, seed=b)
        pool, rec = _state(b, n_tok, hv, dk, dv, h, ctx.device, seed=b + 1)
        pool_l, rec_l = _state(b, n_tok, hv, dk, dv, h, ctx.device, seed=b + 1)

        def op(inp=inp, pool=pool, rec=rec) -> torch.Tensor:
            return verify_gated_delta_rule(
                inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], cu_seqlens=inp["cu_seqlens"],
                state_pool=pool, state_indices=inp["state_indices"], records=rec, pending=inp["pending"],
                use_qk_l2norm=True, backend=ctx.backend,
            )  # fmt: skip

        def base(inp=inp, pool=pool_l, rec=rec_l) -> torch.Tensor:
            return loop_baseline(inp, pool, rec)

        got, want = op(), base()
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(pool, pool_l, rtol=1e-4, atol=1e-5)
        minimum = instruction_minimum(
            [n_tok] * b,
            [min(int(p), n_tok) for p in inp["pending"].tolist()],
            h,
            hv,
            dk,
            dv,
            inp["v"].element_size(),
        )
        time_ms = measure_ms(op, ctx.device, warmup=warmup, repeats=repeats)
        base_ms = measure_ms(base, ctx.device, warmup=warmup, repeats=repeats)
        ours = _bytes_moved(inp, state_bytes, rec_token, n_tok, "replay")
        slots = _bytes_moved(inp, state_bytes, rec_token, n_tok, "per-draft-slot")
        rows.append(
            BenchRow(
                op="verify_gated_delta_rule",
                case=f"B={b} K={k_drafts} H={h} HV={hv} Dk={dk} Dv={dv}",
                impl=impl,
                baseline="per-request loop",
                time_ms=time_ms,
                baseline_ms=base_ms,
                metrics={
                    **ctx.instruction_counts(op, minimum),
                    "state_bytes_per_req": state_bytes,
                    "records_bytes_per_req": rec_slot,
                    "per_draft_slot_bytes_per_req": (k_drafts + 1) * state_bytes,
                    "memory_ratio": (k_drafts + 1) * state_bytes / (state_bytes + rec_slot),
                    "state_rw_per_req_step": (b + int((inp["pending"] > 0).sum())) / b,
                    "mean_pending": float(inp["pending"].float().mean()),
                    "bytes_moved": ours,
                    "per_draft_slot_bytes_moved": slots,
                    "traffic_ratio": slots / ours,
                    "bandwidth_gbs": ours / (time_ms * 1e6),
                },
            )
        )
    return rows
