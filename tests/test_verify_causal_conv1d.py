"""verify_causal_conv1d / flush_conv_pending against torch's conv1d over each request's accepted history.

A session runs several verify steps over a pool of state slots: rows come in a new random order each step,
some slots sit out, some rows have length 0, 1 or > 16, graph padding rows (state index -1) are mixed in, and
after every step a random number of each row's tokens is accepted. The oracle keeps, per slot, the prefill
state followed by every accepted token and runs ``F.conv1d`` (fp32) over it plus the current tokens.
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_spec.gdn.verify_causal_conv1d import (
    allocate_conv_records,
    flush_conv_pending,
    verify_causal_conv1d,
)


def oracle_outputs(history: torch.Tensor, weight: torch.Tensor, bias, n_out: int, silu: bool) -> torch.Tensor:
    """Last ``n_out`` outputs of the causal conv over ``history [N, C]`` (the W-1 state inputs first)."""
    c = history.shape[1]
    # fp32: torch's grouped conv1d is ~20x slower in float64 on CPU, and the op accumulates in fp32 anyway.
    b = None if bias is None else bias.float()
    y = F.conv1d(history.T[None].float(), weight.float()[:, None, :], b, groups=c)[0].T
    y = F.silu(y) if silu else y
    return y[y.shape[0] - n_out :].double()


class Session:
    """Drives the op and the oracle side by side; checks outputs, pool state and records after each call."""

    def __init__(
        self, rng: random.Random, *, backend, dtype, num_slots, channels, width, max_len, bias, silu
    ):
        self.rng, self.backend, self.dtype, self.silu = rng, backend, dtype, silu
        self.S, self.C, self.W, self.L = num_slots, channels, width, max_len
        gen = torch.Generator().manual_seed(rng.randrange(1 << 30))
        self.gen = gen
        self.weight = (torch.randn(channels, width, generator=gen) / width).to(dtype)
        self.bias = (torch.randn(channels, generator=gen) * 0.1).to(dtype) if bias else None
        # The prefill's final state enters the pool with pending = 0.
        self.pool = torch.randn(num_slots, channels, width - 1, generator=gen).to(dtype)
        self.records = allocate_conv_records(num_slots, max_len, channels, width, dtype=dtype)
        self.history = [[self.pool[s].T.double()] for s in range(num_slots)]
        self.last_x: list[torch.Tensor | None] = [None] * num_slots
        self.pending = [0] * num_slots
        self.tol = 1e-5 if dtype == torch.float32 else 2e-2

    def committed(self, s: int) -> torch.Tensor:
        return torch.cat(self.history[s])[-(self.W - 1) :].T  # [C, W-1]

    def _commit_oracle(self, s: int) -> None:
        if self.pending[s]:
            self.history[s].append(self.last_x[s][: self.pending[s]])

    def random_length(self) -> int:
        choices = [0, 1, 1, self.rng.randint(1, self.L), self.rng.randint(min(17, self.L), self.L)]
        return self.rng.choice(choices)

    def step(self) -> None:
        rng = self.rng
        slots = rng.sample(range(self.S), rng.randint(1, self.S))  # new order, some slots absent
        rows = slots + [-1] * rng.randint(0, 2)
        rng.shuffle(rows)
        lens = [self.random_length() if s >= 0 else rng.randint(0, 3) for s in rows]
        cu = torch.tensor([0] + lens, dtype=torch.int32).cumsum(0).to(torch.int32)
        x = torch.randn(int(cu[-1]), self.C, generator=self.gen).to(self.dtype)
        idx = torch.tensor(rows, dtype=torch.int32)
        pending = torch.tensor(
            [self.pending[s] if s >= 0 else rng.randint(0, 2) for s in rows], dtype=torch.int32
        )
        pending_before = pending.clone()
        pool_before, rec_before = self.pool.clone(), self.records.x.clone()
        nrec_before = self.records.num_recorded.clone()

        y = verify_causal_conv1d(
            x, self.weight, self.bias, cu_seqlens=cu, conv_state_pool=self.pool, state_indices=idx,
            records=self.records, pending=pending, activation="silu" if self.silu else None,
            backend=self.backend,
        )  # fmt: skip

        assert y.dtype == self.dtype and y.shape == x.shape
        assert torch.equal(pending, pending_before), "verify must not modify pending"
        touched = set()
        for r, s in enumerate(rows):
            a, b, n = int(cu[r]), int(cu[r + 1]), lens[r]
            if s < 0:
                assert torch.count_nonzero(y[a:b]) == 0, "padding rows produce zeros"
                continue
            if n == 0:
                continue
            touched.add(s)
            self._commit_oracle(s)
            want = oracle_outputs(
                torch.cat([*self.history[s], x[a:b].double()]), self.weight, self.bias, n, self.silu
            )
            torch.testing.assert_close(y[a:b].double(), want, rtol=self.tol, atol=self.tol)
            # The committed state is written once, exactly (a copy, no arithmetic).
            assert torch.equal(self.pool[s].double(), self.committed(s))
            assert torch.equal(self.records.x[s, :n], x[a:b])
            assert int(self.records.num_recorded[s]) == n
            self.last_x[s] = x[a:b].double()
            self.pending[s] = rng.randint(1, n)
        for s in range(self.S):
            if s not in touched:  # absent, length 0 and padding rows write nothing
                assert torch.equal(self.pool[s], pool_before[s])
                assert torch.equal(self.records.x[s], rec_before[s])
                assert int(self.records.num_recorded[s]) == int(nrec_before[s])

    def flush(self, slots: list[int], reset_pending: bool = True) -> None:
        rows = slots + [-1]
        self.rng.shuffle(rows)
        idx = torch.tensor(rows, dtype=torch.int32)
        pending = torch.tensor([self.pending[s] if s >= 0 else 3 for s in rows], dtype=torch.int32)
        pool_before = self.pool.clone()
        flush_conv_pending(
            self.pool, idx, self.records, pending, reset_pending=reset_pending, backend=self.backend
        )
        if reset_pending:
            assert torch.count_nonzero(pending) == 0
        for s in slots:
            self._commit_oracle(s)
            self.pending[s] = 0
            assert torch.equal(self.pool[s].double(), self.committed(s))
            assert int(self.records.num_recorded[s]) == 0
        for s in set(range(self.S)) - set(slots):
            assert torch.equal(self.pool[s], pool_before[s])


def run_session(seed: int, *, steps: int, **kw) -> None:
    rng = random.Random(seed)
    sess = Session(rng, **kw)
    for _ in range(steps):
        sess.step()
        if rng.random() < 0.3:  # preemption / finish: flush some slots mid-session
            sess.flush(rng.sample(range(sess.S), rng.randint(1, sess.S)))
    sess.flush(list(range(sess.S)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("silu", [True, False])
def test_sessions_match_conv1d_over_accepted_history(backend, dtype, silu):
    run_session(
        11, steps=6, backend=backend, dtype=dtype, num_slots=5, channels=24, width=4, max_len=20,
        bias=silu == (dtype == torch.float32), silu=silu,
    )  # fmt: skip


def test_several_channel_tiles_and_width_two(backend):
    # 150 channels = two Triton channel tiles; W = 2 keeps a single input of state.
    run_session(
        7, steps=4, backend=backend, dtype=torch.float32, num_slots=3, channels=150, width=2, max_len=18,
        bias=True, silu=True,
    )  # fmt: skip


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**30), width=st.integers(2, 6), max_len=st.integers(1, 24))
def test_reference_random_sessions(seed, width, max_len):
    run_session(
        seed, steps=4, backend="reference", dtype=torch.float32, num_slots=4, channels=8, width=width,
        max_len=max_len, bias=seed % 2 == 0, silu=seed % 3 != 0,
    )  # fmt: skip


@pytest.mark.parametrize("backend", ["triton", "ascendc", "cpu"])
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**30), width=st.integers(2, 5))
def test_kernel_random_sessions(backend, seed, width):
    run_session(
        seed, steps=3, backend=backend, dtype=torch.float32, num_slots=3, channels=8, width=width,
        max_len=20, bias=True, silu=True,
    )  # fmt: skip


@pytest.mark.parametrize("backend", ["triton", "ascendc", "cpu"])
@pytest.mark.parametrize(
    ("x_dtype", "rec_dtype", "pool_dtype"),
    [
        (torch.bfloat16, torch.float32, torch.float32),
        (torch.bfloat16, torch.bfloat16, torch.float32),
        (torch.float16, torch.float16, torch.bfloat16),
        (torch.float32, torch.float32, torch.bfloat16),
    ],
)
def test_mixed_dtypes_match_reference(backend, x_dtype, rec_dtype, pool_dtype):
    """Kernels agree with the reference when x, records and pool dtypes differ (state conversions included)."""
    gen = torch.Generator().manual_seed(9)
    S, C, W, L = 3, 40, 4, 18
    weight = torch.randn(C, W, generator=gen).to(torch.bfloat16)
    bias = torch.randn(C, generator=gen).to(torch.float16)
    pools = [torch.randn(S, C, W - 1, generator=gen).to(pool_dtype) for _ in range(2)]
    pools[1].copy_(pools[0])
    recs = [allocate_conv_records(S, L, C, W, dtype=rec_dtype) for _ in range(2)]
    steps = [([2, -1, 0], [5, 2, 18], [0, 1, 0]), ([0, 1, 2], [3, 0, 1], [7, 0, 4]), ([1, 0], [2, 2], [0, 3])]
    for rows, lens, pend in steps:
        cu = torch.tensor([0, *lens], dtype=torch.int32).cumsum(0).to(torch.int32)
        x = torch.randn(int(cu[-1]), C, generator=gen).to(x_dtype)
        kw = dict(cu_seqlens=cu, state_indices=torch.tensor(rows, dtype=torch.int32))
        outs = []
        for which, pool, rec in (("reference", pools[0], recs[0]), (backend, pools[1], recs[1])):
            pending = torch.tensor(pend, dtype=torch.int32)
            outs.append(
                verify_causal_conv1d(
                    x, weight, bias, conv_state_pool=pool, records=rec, pending=pending, backend=which, **kw
                )
            )
        tol = 1e-5 if x_dtype == torch.float32 else 1e-2
        torch.testing.assert_close(outs[1], outs[0], rtol=tol, atol=tol)
        assert torch.equal(pools[1], pools[0])
        assert torch.equal(recs[1].x, recs[0].x) and torch.equal(recs[1].num_recorded, recs[0].num_recorded)
    for pool, rec, which in ((pools[0], recs[0], "reference"), (pools[1], recs[1], backend)):
        flush_conv_pending(
            pool,
            torch.tensor([0, 1, 2], dtype=torch.int32),
            rec,
            torch.tensor([1, 2, 1], dtype=torch.int32),
            backend=which,
        )
    assert torch.equal(pools[1], pools[0])


def test_non_contiguous_inputs_and_pool(backend):
    """x sliced from a wider projection and a pool that is a strided view, as in vLLM's layouts."""
    gen = torch.Generator().manual_seed(3)
    S, C, W, L = 3, 10, 4, 8
    wide = torch.randn(9, 2 * C, generator=gen)
    x = wide[:, 1 : C + 1]
    weight = torch.randn(W, C, generator=gen).T  # [C, W], non-contiguous
    big = torch.randn(S, W - 1, C, generator=gen)
    pool = big.transpose(1, 2)  # [S, C, W-1] view
    ref_pool = pool.contiguous()
    rec = allocate_conv_records(S, L, C, W, dtype=torch.float32)
    ref_rec = allocate_conv_records(S, L, C, W, dtype=torch.float32)
    cu = torch.tensor([0, 4, 4, 9], dtype=torch.int32)
    idx = torch.tensor([2, 0, 1], dtype=torch.int32)
    pending = torch.zeros(3, dtype=torch.int32)
    kw = dict(cu_seqlens=cu, state_indices=idx, pending=pending)
    y = verify_causal_conv1d(x, weight, None, conv_state_pool=pool, records=rec, backend=backend, **kw)
    want = verify_causal_conv1d(
        x.contiguous(), weight.contiguous(), None, conv_state_pool=ref_pool, records=ref_rec,
        backend="reference", **kw,
    )  # fmt: skip
    torch.testing.assert_close(y, want)
    pending2 = torch.tensor([3, 0, 5], dtype=torch.int32)
    kw2 = dict(cu_seqlens=torch.tensor([0, 2, 3, 5], dtype=torch.int32), state_indices=idx, pending=pending2)
    x2 = wide[:5, C:]
    y = verify_causal_conv1d(x2, weight, None, conv_state_pool=pool, records=rec, backend=backend, **kw2)
    want = verify_causal_conv1d(
        x2.contiguous(), weight.contiguous(), None, conv_state_pool=ref_pool, records=ref_rec,
        backend="reference", **kw2,
    )  # fmt: skip
    torch.testing.assert_close(y, want)
    assert torch.equal(pool, ref_pool)
    assert torch.equal(rec.x, ref_rec.x) and torch.equal(rec.num_recorded, ref_rec.num_recorded)


def test_multi_layer_flush_keeps_pending_until_caller_zeroes_it(backend):
    """Two layers share pending: flush each with reset_pending=False, then the caller zeroes it."""
    gen = torch.Generator().manual_seed(5)
    S, C, W, L = 2, 6, 3, 5
    layers = []
    for _ in range(2):
        pool = torch.randn(S, C, W - 1, generator=gen)
        layers.append((pool, allocate_conv_records(S, L, C, W, dtype=torch.float32), torch.randn(C, W)))
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    idx = torch.tensor([1, 0], dtype=torch.int32)
    x = torch.randn(7, C, generator=gen)
    pending = torch.zeros(2, dtype=torch.int32)
    for pool, rec, w in layers:
        verify_causal_conv1d(
            x, w, None, cu_seqlens=cu, conv_state_pool=pool, state_indices=idx, records=rec,
            pending=pending, backend=backend,
        )  # fmt: skip
    pending.copy_(torch.tensor([2, 4], dtype=torch.int32))
    flush_idx = torch.tensor([0, 1], dtype=torch.int32)
    flush_pending_rows = torch.tensor([4, 2], dtype=torch.int32)  # aligned with flush_idx
    for pool, rec, _ in layers:
        old = pool.clone()
        flush_conv_pending(pool, flush_idx, rec, flush_pending_rows, reset_pending=False, backend=backend)
        assert flush_pending_rows.tolist() == [4, 2]
        # slot 1 had x[0:3], 2 accepted; slot 0 had x[3:7], 4 accepted.
        for s, seq in ((1, x[0:2]), (0, x[3:7])):
            want = torch.cat([old[s].T, seq])[-(W - 1) :].T
            assert torch.equal(pool[s], want)


def test_package_flush_pending_forwards_conv_records():
    """ascend_spec.gdn.flush_pending serves conv layers too (one flush call per layer, whatever its kind)."""
    from ascend_spec.gdn import flush_pending

    gen = torch.Generator().manual_seed(2)
    S, C, W = 2, 5, 4
    pool = torch.randn(S, C, W - 1, generator=gen)
    rec = allocate_conv_records(S, 6, C, W, dtype=torch.float32)
    x = torch.randn(6, C, generator=gen)
    idx = torch.tensor([1, 0], dtype=torch.int32)
    cu = torch.tensor([0, 4, 6], dtype=torch.int32)
    zero = torch.zeros(2, dtype=torch.int32)
    verify_causal_conv1d(
        x, torch.randn(C, W), None, cu_seqlens=cu, conv_state_pool=pool, state_indices=idx, records=rec,
        pending=zero,
    )  # fmt: skip
    old = pool.clone()
    pending = torch.tensor([4, 1], dtype=torch.int32)
    flush_pending(pool, idx, rec, pending)
    assert pending.tolist() == [0, 0]
    assert torch.equal(pool[1], torch.cat([old[1].T, x[0:4]])[-(W - 1) :].T)
    assert torch.equal(pool[0], torch.cat([old[0].T, x[4:5]])[-(W - 1) :].T)


@pytest.mark.parametrize("rows", [0, 2])
def test_empty_batches_write_nothing(backend, rows):
    """No rows, or rows without tokens: empty output, pool/records/pending untouched."""
    S, C, W = 3, 5, 3
    pool = torch.randn(S, C, W - 1)
    before = pool.clone()
    rec = allocate_conv_records(S, 4, C, W, dtype=torch.float32)
    idx = torch.arange(rows, dtype=torch.int32)
    pending = torch.zeros(rows, dtype=torch.int32)
    y = verify_causal_conv1d(
        torch.randn(0, C), torch.randn(C, W), None, cu_seqlens=torch.zeros(rows + 1, dtype=torch.int32),
        conv_state_pool=pool, state_indices=idx, records=rec, pending=pending, backend=backend,
    )  # fmt: skip
    assert y.shape == (0, C)
    flush_conv_pending(pool, idx, rec, pending, backend=backend)
    assert torch.equal(pool, before) and torch.count_nonzero(rec.num_recorded) == 0
