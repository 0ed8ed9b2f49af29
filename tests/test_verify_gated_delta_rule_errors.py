"""Every bad input of verify_gated_delta_rule / flush_pending / allocate_records: ValueError naming the argument."""

from __future__ import annotations

import re

import pytest
import torch

from ascend_spec.gdn import allocate_records, flush_pending, verify_gated_delta_rule

T, H, HV, DK, DV, S, L = 5, 1, 2, 8, 4, 3, 4


def make(**over):
    args = dict(
        q=torch.randn(T, H, DK),
        k=torch.randn(T, H, DK),
        v=torch.randn(T, HV, DV),
        g=-torch.rand(T, HV),
        beta=torch.rand(T, HV),
        cu_seqlens=torch.tensor([0, 2, 5], dtype=torch.int32),
        state_pool=torch.zeros(S, HV, DK, DV),
        state_indices=torch.tensor([0, 2], dtype=torch.int32),
        records=allocate_records(S, L, HV, DK, DV, num_k_heads=H),
        pending=torch.zeros(2, dtype=torch.int32),
    )
    args.update(over)
    return args


def call(**over):
    a = make(**over)
    pos = [a.pop(n) for n in ("q", "k", "v", "g", "beta")]
    return verify_gated_delta_rule(*pos, **a)


def test_valid_call_runs():
    o = call()
    assert o.shape == (T, HV, DV)


@pytest.mark.parametrize(
    "over,match",
    [
        (dict(k=torch.randn(T, 2, DK)), r"k must have shape \[5, 1, 8\]"),
        (
            dict(q=torch.randn(T, 2, DK), k=torch.randn(T, 2, DK), v=torch.randn(T, 3, DV)),
            "HV = 3 heads, not a multiple of the H = 2",
        ),
        (dict(g=-torch.rand(T, 3)), r"g must have shape \[5, 2\]"),
        (dict(beta=torch.rand(T + 1, HV)), r"beta must have shape \[5, 2\]"),
        (dict(k=torch.randn(T, H, DK, dtype=torch.bfloat16)), "k must have dtype in"),
        (dict(v=torch.randn(T, HV, DV).double()), "v must have dtype in"),
        (dict(g=torch.zeros(T, HV, dtype=torch.int32)), "g must have dtype in"),
        (dict(state_pool=torch.zeros(S, HV, DK, DV, dtype=torch.bfloat16)), "state_pool must have dtype in"),
        (
            dict(state_pool=torch.zeros(S, HV, DK, DV + 1)),
            r"state_pool must have shape \[S, HV=2, Dk=8, Dv=4\]",
        ),
        (dict(records=allocate_records(S + 1, L, HV, DK, DV, num_k_heads=1)), "do not match state_pool"),
        (
            dict(records=allocate_records(S, L, HV, DK, DV)),
            "records keep keys for 2 k-heads but q/k have H = 1",
        ),
        (dict(records=object()), "records must be a GDNRecords"),
        (dict(pending=torch.zeros(2, dtype=torch.int64)), "pending must have dtype in"),
        (
            dict(pending=torch.zeros(3, dtype=torch.int32)),
            "pending must have one entry per state_indices row",
        ),
        (dict(state_indices=torch.tensor([0.0, 1.0])), "state_indices must have dtype in"),
        (dict(cu_seqlens=torch.tensor([0, 5], dtype=torch.int32)), r"cu_seqlens must have shape \[3\]"),
        (dict(cu_seqlens=torch.tensor([1, 2, 5])), "cu_seqlens must start at 0"),
        (
            dict(cu_seqlens=torch.tensor([0, 3, 2])),
            r"non-decreasing; got cu_seqlens\[1\] = 3 > cu_seqlens\[2\] = 2",
        ),
        (dict(cu_seqlens=torch.tensor([0, 1, 4])), r"cu_seqlens must end at T = 5 \(rows of q\); got 4"),
        (
            dict(cu_seqlens=torch.tensor([0, 0, 5])),
            "row 1 5 tokens, above the records' max_tokens_per_step = 4",
        ),
        (dict(state_indices=torch.tensor([0, 3])), r"state_indices\[1\] = 3 is out of range \[-1, 3\)"),
        (dict(state_indices=torch.tensor([-2, 1])), r"state_indices\[0\] = -2 is out of range"),
        (dict(state_indices=torch.tensor([1, 1])), "must not repeat a state slot"),
        (
            dict(pending=torch.tensor([-1, 0], dtype=torch.int32)),
            r"pending must be >= 0; got pending\[0\] = -1",
        ),
        (
            dict(pending=torch.tensor([0, 2], dtype=torch.int32)),
            r"pending\[1\] = 2 exceeds the 0 tokens recorded",
        ),
        (dict(scale=float("nan")), "scale must be a finite float"),
        (dict(scale="0.5"), "scale must be a finite float"),
        (dict(use_qk_l2norm=1), "use_qk_l2norm must be a bool"),
        (dict(q=torch.randn(T, H)), "q must have 3 dimensions"),
        (
            dict(cu_seqlens=torch.tensor([0, 2, 5], device="meta")),
            "cu_seqlens is on meta but the other inputs are on cpu",
        ),
        (dict(state_pool=torch.zeros(S, HV, DK, DV, device="meta")), "state_pool is on meta"),
        (dict(v=torch.randn(T, HV, DV, device="meta")), "v is on meta"),
    ],
)
def test_bad_verify_inputs(over, match):
    with pytest.raises(ValueError, match=match):
        call(**over)


# Slot layouts other than [HV, Dk, Dv] dense and the transposed view of [HV, Dv, Dk] dense (vLLM's GPU layout).
BAD_POOL_LAYOUTS = {
    "heads inside k": lambda: torch.zeros(S, DK, HV, DV).transpose(1, 2),
    "every other v": lambda: torch.zeros(S, HV, DK, 2 * DV)[..., ::2],
    "padded k rows": lambda: torch.zeros(S, HV, DK, DV + 1)[..., :DV],
    "padded heads": lambda: torch.zeros(S, HV, DK + 1, DV)[:, :, :DK],
    "value-major, padded v rows": lambda: torch.zeros(S, HV, DV, DK + 1)[..., :DK].transpose(2, 3),
    "value-major, padded heads": lambda: torch.zeros(S, HV, DV + 1, DK)[:, :, :DV].transpose(2, 3),
    "k-major over heads": lambda: torch.zeros(S, DV, DK, HV).permute(0, 3, 2, 1),
}


@pytest.mark.parametrize("layout", BAD_POOL_LAYOUTS)
@pytest.mark.parametrize("op", ["verify", "flush"])
def test_bad_pool_layouts(layout, op):
    pool = BAD_POOL_LAYOUTS[layout]()
    assert pool.shape == (S, HV, DK, DV)
    match = (
        rf"state_pool slots must be \[HV, Dk, Dv\] contiguous .* got strides {re.escape(str(pool.stride()))}"
    )
    with pytest.raises(ValueError, match=match):
        if op == "verify":
            call(state_pool=pool)
        else:
            flush_pending(pool, torch.tensor([0], dtype=torch.int32), allocate_records(S, L, HV, DK, DV),
                          torch.zeros(1, dtype=torch.int32))  # fmt: skip


def test_value_major_pool_accepted_by_the_checks():
    """The transposed view of a dense [S, HV, Dv, Dk] buffer (vLLM's GPU layout) passes; the backends' sessions
    test its values (test_verify_gated_delta_rule.py)."""
    o = call(state_pool=torch.zeros(S, HV, DV, DK).transpose(2, 3))
    assert o.shape == (T, HV, DV)


@pytest.mark.parametrize("op", ["verify", "flush"])
def test_ascendc_takes_value_major_pool_like_the_reference(op):
    """The AscendC kernel reads and writes value-major slots in place (a replay of pending records, then this
    call's tokens or the flush): the same state, outputs and records as the reference on the same buffer."""
    results = {}
    for backend in ("reference", "ascendc"):
        torch.manual_seed(0)
        pool = torch.randn(S, HV, DV, DK).transpose(2, 3)
        rec = allocate_records(S, L, HV, DK, DV, num_k_heads=H)
        call(state_pool=pool, records=rec, backend="reference")  # slots 0 and 2 record 2 and 3 tokens
        pending = torch.tensor([2, 1], dtype=torch.int32)
        if op == "verify":
            o = call(state_pool=pool, records=rec, pending=pending, backend=backend)
        else:
            o = flush_pending(pool, torch.tensor([0, 2], dtype=torch.int32), rec, pending, backend=backend)
        assert pool.stride()[1:] == (DK * DV, 1, DK)  # still the caller's buffer
        # The live records: each slot's first num_recorded tokens of its current bank (the rest is scratch).
        live = [
            (rec.k[s, b, :n], rec.g[s, b, :n], rec.u[s, :n])
            for s, (b, n) in enumerate(zip(rec.bank.tolist(), rec.num_recorded.tolist()))
        ]
        results[backend] = (o, pool, rec.bank, rec.num_recorded, *(t for parts in live for t in parts))
    for got, want in zip(results["ascendc"], results["reference"], strict=True):
        if want is None:
            assert got is None
        else:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_bad_input_writes_nothing():
    """A rejected call leaves pool and records as they were (checks run before any kernel)."""
    a = make(pending=torch.tensor([0, 2], dtype=torch.int32))
    before = [t.clone() for t in (a["state_pool"], *a["records"].tensors())]
    with pytest.raises(ValueError):
        call(**a)
    for b, t in zip(before, (a["state_pool"], *a["records"].tensors())):
        assert torch.equal(b, t)


def test_pending_checked_only_on_rows_with_tokens():
    """A length-0 row keeps its pending count for a later call: it is neither consumed nor an error now."""
    rec = allocate_records(S, L, HV, DK, DV, num_k_heads=H)
    call(records=rec)  # slots 0 and 2 now hold 2 and 3 recorded tokens
    call(
        records=rec,
        cu_seqlens=torch.tensor([0, 0, 3], dtype=torch.int32),
        q=torch.randn(3, H, DK),
        k=torch.randn(3, H, DK),
        v=torch.randn(3, HV, DV),
        g=-torch.rand(3, HV),
        beta=torch.rand(3, HV),
        state_indices=torch.tensor([1, 2], dtype=torch.int32),
        pending=torch.tensor([4, 3], dtype=torch.int32),  # slot 1 recorded nothing, but its row is empty
    )


@pytest.mark.parametrize(
    "over,match",
    [
        (dict(pending=torch.tensor([1, 0], dtype=torch.int32)), r"pending\[0\] = 1 exceeds the 0 tokens"),
        (
            dict(state_indices=torch.tensor([0, 5], dtype=torch.int32)),
            r"state_indices\[1\] = 5 is out of range",
        ),
        (dict(state_pool=torch.zeros(S, HV, DK, DV).double()), "state_pool must have dtype in"),
        (dict(records=allocate_records(S, L, HV, DK, DV + 1)), "do not match state_pool"),
        (dict(reset_pending=0), "reset_pending must be a bool"),
        (dict(pending=torch.zeros(2, dtype=torch.int32, device="meta")), "pending is on meta"),
    ],
)
def test_bad_flush_inputs(over, match):
    a = dict(
        state_pool=torch.zeros(S, HV, DK, DV),
        state_indices=torch.tensor([0, 2], dtype=torch.int32),
        records=allocate_records(S, L, HV, DK, DV),
        pending=torch.zeros(2, dtype=torch.int32),
    )
    a.update(over)
    with pytest.raises(ValueError, match=match):
        flush_pending(**a)


@pytest.mark.parametrize(
    "args,kw,match",
    [
        ((0, 4, 2, 8, 8), {}, "num_slots must be >= 1"),
        ((2, 0, 2, 8, 8), {}, "max_tokens_per_step must be >= 1"),
        ((2, 4, 3, 8, 8), dict(num_k_heads=2), r"num_v_heads \(3\) must be a multiple of num_k_heads; got 2"),
        ((2, 4, 2, 8.0, 8), {}, "head_k_dim must be an int"),
    ],
)
def test_bad_allocate_records(args, kw, match):
    with pytest.raises(ValueError, match=match):
        allocate_records(*args, **kw)


def test_unknown_backend():
    with pytest.raises(ValueError, match="backend must be one of"):
        call(backend="cuda")


def test_checks_off_kernels_clamp_instead_of_reading_stale_records(backend, monkeypatch):
    """With value checks off (graph mode) nothing raises, but no kernel reads past what a slot recorded and no
    record is written past the capacity: pending is clamped to num_recorded, num_recorded to the capacity."""
    monkeypatch.setenv("ASCEND_SPEC_CHECKS", "0")
    torch.manual_seed(0)
    a = make(backend=backend)
    a["state_pool"].normal_()
    call(**a)  # slot 0: 2 tokens recorded, slot 2: 3
    pool_after_first = a["state_pool"].clone()
    # Row 0 claims 4 pending tokens (only 2 recorded); row 1 has 6 tokens > capacity 4.
    b = make(
        backend=backend, state_pool=a["state_pool"], records=a["records"],
        q=torch.randn(7, H, DK), k=torch.randn(7, H, DK), v=torch.randn(7, HV, DV), g=-torch.rand(7, HV),
        beta=torch.rand(7, HV), cu_seqlens=torch.tensor([0, 1, 7], dtype=torch.int32),
        pending=torch.tensor([4, 0], dtype=torch.int32),
    )  # fmt: skip
    rec = a["records"]
    bank0 = int(rec.bank[0])
    want0 = pool_after_first[0].clone()
    from ascend_spec.gdn import replay_states

    want0 = replay_states(want0[None], rec.k[0:1, bank0], rec.g[0:1, bank0], rec.u[0:1], torch.tensor([2]))[0]
    o = call(**b)
    torch.testing.assert_close(b["state_pool"][0], want0, rtol=1e-5, atol=1e-5)
    assert rec.num_recorded.tolist() == [1, 0, L]
    assert torch.isfinite(o).all() and o[1:].abs().sum() > 0  # all 6 tokens of row 1 still produce outputs
