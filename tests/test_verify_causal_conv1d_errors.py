"""Bad inputs to verify_causal_conv1d / flush_conv_pending / allocate_conv_records: ValueError naming the argument;
and with value checks off, kernels clamp pending to what is recorded instead of reading stale records."""

from __future__ import annotations

import pytest
import torch

from ascend_spec.gdn.verify_causal_conv1d import (
    ConvRecords,
    allocate_conv_records,
    flush_conv_pending,
    verify_causal_conv1d,
)

S, C, W, L = 4, 6, 4, 5


def make(**over):
    """A valid call (two rows: slot 2 with 3 tokens, slot 0 with 2), with any argument overridden."""
    args = dict(
        x=torch.randn(5, C),
        weight=torch.randn(C, W),
        bias=torch.randn(C),
        cu_seqlens=torch.tensor([0, 3, 5], dtype=torch.int32),
        conv_state_pool=torch.randn(S, C, W - 1),
        state_indices=torch.tensor([2, 0], dtype=torch.int32),
        records=allocate_conv_records(S, L, C, W, dtype=torch.float32),
        pending=torch.zeros(2, dtype=torch.int32),
    )
    args.update(over)
    return args


def call(args, backend="reference", **kw):
    a = dict(args)
    x, weight, bias = a.pop("x"), a.pop("weight"), a.pop("bias")
    return verify_causal_conv1d(x, weight, bias, backend=backend, **a, **kw)


def test_valid_call_runs():
    args = make()
    y = call(args)
    assert y.shape == (5, C)
    assert args["records"].num_recorded.tolist() == [2, 0, 3, 0]


@pytest.mark.parametrize(
    ("over", "match"),
    [
        (dict(x=torch.randn(5, C, 1)), "x must have 2 dimensions"),
        (dict(x=torch.randint(0, 3, (5, C))), "x must have dtype"),
        (dict(weight=torch.randn(C + 1, W)), r"weight must have shape \[C=6, W\]"),
        (dict(weight=torch.randn(C, 1), conv_state_pool=torch.randn(S, C, 0)), "weight width W must be >= 2"),
        (dict(weight=torch.randn(C, W, device="meta")), "weight is on meta"),
        (dict(bias=torch.randn(C + 2)), r"bias must have shape \[6\]"),
        (dict(conv_state_pool=torch.randn(S, C, W)), r"conv_state_pool must have shape \[S, C=6, W-1=3\]"),
        (dict(conv_state_pool=torch.randn(S, C, W - 1).int()), "conv_state_pool must have dtype"),
        (dict(records="nope"), "records must be a ConvRecords"),
        (dict(records=allocate_conv_records(S + 1, L, C, W, dtype=torch.float32)), "records .* do not match"),
        (dict(records=allocate_conv_records(S, L, C, W + 1, dtype=torch.float32)), "records .* do not match"),
        (
            dict(records=allocate_conv_records(S, L, C, W)),
            "records hold torch.bfloat16, which cannot store x",
        ),
        (
            dict(
                records=ConvRecords(
                    torch.zeros(C, L, S).transpose(0, 2), torch.zeros(S, dtype=torch.int32), W
                )
            ),
            "records must come from allocate_conv_records",
        ),
        (
            dict(records=ConvRecords(torch.zeros(S, L, C), torch.zeros(S, dtype=torch.int64), W)),
            "records must come from allocate_conv_records",
        ),
        (dict(cu_seqlens=torch.tensor([0.0, 3.0, 5.0])), "cu_seqlens must have dtype"),
        (dict(cu_seqlens=torch.tensor([0, 5], dtype=torch.int32)), "cu_seqlens must have B\\+1 = 3 entries"),
        (dict(cu_seqlens=torch.tensor([1, 3, 5], dtype=torch.int32)), "cu_seqlens must start at 0"),
        (dict(cu_seqlens=torch.tensor([0, 4, 3], dtype=torch.int32)), "cu_seqlens must be non-decreasing"),
        (dict(cu_seqlens=torch.tensor([0, 3, 4], dtype=torch.int32)), "cu_seqlens must end at T = 5"),
        (
            dict(x=torch.randn(8, C), cu_seqlens=torch.tensor([0, 6, 8], dtype=torch.int32)),
            "cu_seqlens gives row 0 6 tokens, above the records' max_tokens_per_step = 5",
        ),
        (dict(state_indices=torch.tensor([2.0, 0.0])), "state_indices must have dtype"),
        (
            dict(state_indices=torch.tensor([4, 0], dtype=torch.int32)),
            r"state_indices\[0\] = 4 is out of range",
        ),
        (dict(state_indices=torch.tensor([2, -2], dtype=torch.int32)), r"state_indices\[1\] = -2 is out of"),
        (dict(state_indices=torch.tensor([1, 1], dtype=torch.int32)), "state_indices must not repeat"),
        (dict(pending=torch.zeros(2, dtype=torch.int64)), "pending must have dtype"),
        (
            dict(pending=torch.zeros(3, dtype=torch.int32)),
            "pending must have one entry per state_indices row",
        ),
        (dict(pending=torch.tensor([0, -1], dtype=torch.int32)), "pending must be >= 0"),
        (
            dict(pending=torch.tensor([0, 1], dtype=torch.int32)),
            r"pending\[1\] = 1 exceeds the 0 tokens recorded for state slot 0",
        ),
    ],
)
def test_bad_verify_input_names_the_argument(over, match):
    with pytest.raises(ValueError, match=match):
        call(make(**over))


def test_bad_activation_and_backend():
    with pytest.raises(ValueError, match="activation must be one of"):
        call(make(), activation="relu")
    with pytest.raises(ValueError, match="backend must be one of"):
        call(make(), backend="cuda")


def test_padding_rows_may_exceed_capacity_they_record_nothing():
    args = make(x=torch.randn(9, C), cu_seqlens=torch.tensor([0, 3, 9], dtype=torch.int32))
    args["state_indices"] = torch.tensor([2, -1], dtype=torch.int32)
    y = call(args)
    assert torch.count_nonzero(y[3:]) == 0


def test_pending_check_uses_what_the_slot_recorded():
    args = make()
    call(args)  # slot 2 recorded 3, slot 0 recorded 2; next call in swapped order
    nxt = make(records=args["records"], conv_state_pool=args["conv_state_pool"])
    nxt["state_indices"] = torch.tensor([0, 2], dtype=torch.int32)
    nxt["pending"] = torch.tensor([2, 3], dtype=torch.int32)
    call(nxt)
    # The call just made recorded 3 tokens for slot 0 (row 0) and 2 for slot 2.
    nxt["pending"] = torch.tensor([3, 3], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"pending\[1\] = 3 exceeds the 2 tokens recorded for state slot 2"):
        call(nxt)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(conv_state_pool=torch.randn(S, C)), "conv_state_pool must have 3 dimensions"),
        (dict(records=allocate_conv_records(S, L, C + 1, W)), "records .* do not match"),
        (dict(state_indices=torch.tensor([5], dtype=torch.int32)), r"state_indices\[0\] = 5 is out of range"),
        (
            dict(pending=torch.tensor([2], dtype=torch.int32)),
            r"pending\[0\] = 2 exceeds the 0 tokens recorded",
        ),
        (dict(reset_pending=1), "reset_pending must be a bool"),
    ],
)
def test_bad_flush_input_names_the_argument(kw, match):
    args = dict(
        conv_state_pool=torch.randn(S, C, W - 1),
        state_indices=torch.tensor([1], dtype=torch.int32),
        records=allocate_conv_records(S, L, C, W),
        pending=torch.zeros(1, dtype=torch.int32),
    )
    reset = kw.pop("reset_pending", True)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        flush_conv_pending(**args, reset_pending=reset)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, L, C, W), "num_slots must be >= 1"),
        ((S, 0, C, W), "max_tokens_per_step must be >= 1"),
        ((S, L, 0, W), "channels must be >= 1"),
        ((S, L, C, 1), "width must be >= 2"),
        ((S, L, C, 4.0), "width must be an int"),
    ],
)
def test_bad_allocation(args, match):
    with pytest.raises(ValueError, match=match):
        allocate_conv_records(*args)
    with pytest.raises(ValueError, match="dtype must be one of"):
        allocate_conv_records(S, L, C, W, dtype=torch.int32)


def test_records_nbytes():
    rec = allocate_conv_records(8, 16, 32, 4)
    assert rec.nbytes == 8 * 16 * 32 * 2 + 8 * 4
    assert allocate_conv_records(8, 16, 32, 4, dtype=torch.float32).nbytes == 8 * 16 * 32 * 4 + 8 * 4


def test_unchecked_pending_is_clamped_to_recorded(backend, monkeypatch):
    """Checks off (as on device): an oversized pending commits only what was recorded, never stale data."""
    torch.manual_seed(0)
    first = make()
    call(first, backend=backend)
    records, pool = first["records"], first["conv_state_pool"]
    records.x[:, 3:] = float("nan")  # stale area past what slot 2 (3 tokens) recorded: must never be read
    clamped_pool, clamped_rec = pool.clone(), records.x.clone()
    clamped_nrec = records.num_recorded.clone()
    x = torch.randn(5, C)
    wb = dict(weight=first["weight"], bias=first["bias"])
    nxt = make(
        x=x, records=records, conv_state_pool=pool, pending=torch.tensor([5, 2], dtype=torch.int32), **wb
    )
    monkeypatch.setenv("ASCEND_SPEC_CHECKS", "0")
    y = call(nxt, backend=backend)
    monkeypatch.setenv("ASCEND_SPEC_CHECKS", "1")
    same = make(
        x=x,
        conv_state_pool=clamped_pool,
        records=ConvRecords(x=clamped_rec, num_recorded=clamped_nrec, width=W),
        pending=torch.tensor([3, 2], dtype=torch.int32),
        **wb,
    )
    want = call(same, backend="reference")
    assert not torch.isnan(y).any()
    torch.testing.assert_close(y, want)
    torch.testing.assert_close(pool, clamped_pool)


def test_package_exports_and_bytes_per_slot():
    import ascend_spec.gdn as gdn

    rec = gdn.allocate_conv_records(4, 16, 32, 4, dtype=torch.float32)
    assert isinstance(rec, gdn.ConvRecords)
    assert (
        rec.bytes_per_slot == gdn.conv_record_bytes_per_slot(16, 32, dtype=torch.float32) == 16 * 32 * 4 + 4
    )
    assert gdn.verify_causal_conv1d is verify_causal_conv1d and gdn.flush_conv_pending is flush_conv_pending


def test_unchecked_overlong_row_records_only_capacity(backend, monkeypatch):
    """Checks off: a row above the records' capacity still gets every output; only `capacity` tokens are
    recorded (num_recorded = capacity, so a later checked call sees it), and no other slot is touched."""
    torch.manual_seed(1)
    x = torch.randn(9, C)
    args = make(x=x, cu_seqlens=torch.tensor([0, 8, 9], dtype=torch.int32))  # row 0: 8 tokens, capacity 5
    weight, bias, pool = args["weight"], args["bias"], args["conv_state_pool"].clone()
    rec = args["records"]
    monkeypatch.setenv("ASCEND_SPEC_CHECKS", "0")
    y = call(args, backend=backend)
    monkeypatch.setenv("ASCEND_SPEC_CHECKS", "1")
    big = allocate_conv_records(S, 16, C, W, dtype=torch.float32)
    want = verify_causal_conv1d(
        x, weight, bias, cu_seqlens=args["cu_seqlens"], conv_state_pool=pool, state_indices=args["state_indices"],
        records=big, pending=args["pending"], backend="reference",
    )  # fmt: skip
    torch.testing.assert_close(y, want)
    assert rec.num_recorded.tolist() == [1, 0, L, 0]
    assert torch.equal(rec.x[2], x[:L]) and torch.equal(rec.x[0, :1], x[8:9])
    assert torch.count_nonzero(rec.x[1]) == 0 and torch.count_nonzero(rec.x[3]) == 0
    assert torch.count_nonzero(rec.x[0, 1:]) == 0
