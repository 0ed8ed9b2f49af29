"""verify_gated_delta_rule / flush_pending against fla-core and transformers over each request's accepted history.

A session runs several verify steps over a pool of state slots: rows come in a new random order each step, some
slots sit out, some rows have length 0, 1 or > 16, graph padding rows (state index -1) are mixed in, and after
every step a random number (>= 1) of each row's tokens is accepted. The oracle keeps, per slot, the state after
the prefill and every accepted token (fla's ``fused_recurrent_gated_delta_rule`` or transformers' Qwen3.5
``torch_recurrent_gated_delta_rule``, both fp32 state) and runs the current tokens from it. Checked after each
call: outputs, the committed state in the pool, and that slots without a live row are bitwise untouched (state,
records, metadata).
"""

from __future__ import annotations

import random
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_spec.backend import BACKENDS
from ascend_spec.gdn import allocate_records, flush_pending, record_bytes_per_slot, verify_gated_delta_rule

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
    from transformers.models.qwen3_5.modeling_qwen3_5 import torch_recurrent_gated_delta_rule

# transformers swaps in fla's kernel when fla is installed (and passes g/beta positionally into fla's gk/gv);
# the torch recurrence itself is the wrapped function.
hf_recurrence = getattr(torch_recurrent_gated_delta_rule, "__wrapped__", torch_recurrent_gated_delta_rule)


def fla_oracle(q, k, v, g, beta, state, scale, l2norm):
    """One request: ``(o [T, HV, Dv], final state [HV, Dk, Dv])`` by fla's fused recurrent kernel."""
    o, st_ = fused_recurrent_gated_delta_rule(
        q[None], k[None], v[None], g=g[None], beta=beta[None], scale=scale, initial_state=state[None].clone(),
        output_final_state=True, use_qk_l2norm_in_kernel=l2norm,
    )  # fmt: skip
    return o[0], st_[0]


def hf_oracle(q, k, v, g, beta, state, scale, l2norm):
    """One request by transformers' Qwen3.5 torch recurrence (scale fixed at Dk**-0.5; GQA by repeat)."""
    assert scale is None
    rep = v.shape[1] // q.shape[1]
    q, k = q.repeat_interleave(rep, dim=1), k.repeat_interleave(rep, dim=1)
    o, st_ = hf_recurrence(
        q[None], k[None], v[None], g[None], beta[None], initial_state=state[None].clone(),
        output_final_state=True, use_qk_l2norm_in_kernel=l2norm,
    )  # fmt: skip
    return o[0], st_[0]


def f64_oracle(q, k, v, g, beta, state, scale, l2norm):
    """Plain float64 recurrence, token by token (the definition, for the hypothesis tests)."""
    q, k, v, g, beta, s = (x.double() for x in (q, k, v, g, beta, state))
    if l2norm:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    rep = v.shape[1] // q.shape[1]
    q, k = q.repeat_interleave(rep, dim=1), k.repeat_interleave(rep, dim=1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = []
    for t in range(q.shape[0]):
        s = s * torch.exp(g[t])[:, None, None]
        u = beta[t][:, None] * (v[t] - torch.einsum("hkv,hk->hv", s, k[t]))
        s = s + k[t][:, :, None] * u[:, None, :]
        out.append(torch.einsum("hkv,hk->hv", s, q[t] * scale))
    o = torch.stack(out) if out else torch.zeros(0, *v.shape[1:], dtype=torch.float64)
    return o, s


class Session:
    """Drives the op and an oracle side by side over several verify steps."""

    def __init__(self, rng, *, backend, oracle, dtype, S, H, HV, DK, DV, L, l2norm, scale, value_major=False):
        self.rng, self.backend, self.oracle, self.dtype = rng, backend, oracle, dtype
        self.S, self.H, self.HV, self.DK, self.DV, self.L = S, H, HV, DK, DV, L
        self.l2norm, self.scale = l2norm, scale
        self.gen = torch.Generator().manual_seed(rng.randrange(1 << 30))
        # A prefill's final state enters the pool with pending = 0. value_major: the pool is the [S, HV, Dk, Dv]
        # view of a dense [S, HV, Dv, Dk] buffer (vLLM's GPU layout), which the op updates in place.
        self.pool = torch.randn(S, HV, DK, DV, generator=self.gen) * 0.5
        if value_major:
            self.pool = self.pool.transpose(-1, -2).contiguous().transpose(-1, -2)
            assert self.pool.stride()[1:] == (DK * DV, 1, DK)
        self.committed = [self.pool[s].clone().double() for s in range(S)]
        self.records = allocate_records(S, L, HV, DK, DV, num_k_heads=H)
        self.pending = [0] * S
        self.last: list[tuple | None] = [None] * S
        self.o_tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)

    def tokens(self, n):
        gen, H, HV = self.gen, self.H, self.HV
        q = torch.randn(n, H, self.DK, generator=gen)
        k = torch.randn(n, H, self.DK, generator=gen)
        if not self.l2norm:
            k = torch.nn.functional.normalize(k, dim=-1)
        v = torch.randn(n, HV, self.DV, generator=gen)
        g = -torch.rand(n, HV, generator=gen) * 0.7
        beta = torch.rand(n, HV, generator=gen)
        return q.to(self.dtype), k.to(self.dtype), v.to(self.dtype), g, beta.to(self.dtype)

    def run_oracle(self, s, toks):
        state = self.committed[s].float()
        o, st_ = self.oracle(*toks, state, self.scale, self.l2norm)
        return o, st_

    def _commit_oracle(self, s):
        if self.pending[s]:
            toks = [x[: self.pending[s]] for x in self.last[s]]
            self.committed[s] = self.run_oracle(s, toks)[1].double()

    def step(self, lengths: dict[int, int], n_pad: int):
        """One verify call: ``lengths`` maps slot -> tokens this step (insertion order = row order)."""
        rows = list(lengths.items()) + [(-1, self.rng.choice([0, 1, 3])) for _ in range(n_pad)]
        self.rng.shuffle(rows)
        toks_per_row = [self.tokens(n) for _, n in rows]
        cat = [torch.cat([t[i] for t in toks_per_row]) for i in range(5)]
        lens = [n for _, n in rows]
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
        idx = torch.tensor([s for s, _ in rows], dtype=torch.int32)
        pending = torch.tensor([self.pending[s] if s >= 0 else self.rng.randint(0, 5) for s, _ in rows])
        pending = pending.to(torch.int32)
        pending_before = pending.clone()
        live_slots = {s for s, n in rows if s >= 0 and n > 0}
        snap = [t.clone() for t in (self.pool, *self.records.tensors())]
        o = verify_gated_delta_rule(
            *cat, cu_seqlens=cu, state_pool=self.pool, state_indices=idx, records=self.records,
            pending=pending, scale=self.scale, use_qk_l2norm=self.l2norm, backend=self.backend,
        )  # fmt: skip
        assert o.dtype == self.dtype and o.shape == (cu[-1].item(), self.HV, self.DV)
        assert torch.equal(pending, pending_before), "verify must not modify pending"
        for s_, n in rows:
            if s_ >= 0 and n > 0:
                self._commit_oracle(s_)
        for (s_, n), toks, b in zip(rows, toks_per_row, range(len(rows))):
            got = o[cu[b] : cu[b + 1]].float()
            if s_ < 0:
                assert torch.equal(got, torch.zeros_like(got)), "padding rows give zero outputs"
                continue
            if n == 0:
                continue
            want, _ = self.run_oracle(s_, toks)
            torch.testing.assert_close(got, want.float(), **self.o_tol)
            # The pool holds the committed state (written once when something was pending).
            torch.testing.assert_close(self.pool[s_].double(), self.committed[s_], rtol=1e-4, atol=1e-4)
        untouched = torch.tensor([s not in live_slots for s in range(self.S)])
        for before, after in zip(snap, (self.pool, *self.records.tensors())):
            assert torch.equal(before[untouched], after[untouched]), "a slot without a live row was written"
        for s_, n in rows:
            if s_ >= 0 and n > 0:
                assert int(self.records.num_recorded[s_]) == n
                self.last[s_] = next(t for (ss, _), t in zip(rows, toks_per_row) if ss == s_)
                self.pending[s_] = self.rng.randint(1, n)  # the bonus always counts

    def flush(self, slots: list[int], *, reset: bool = True):
        idx = torch.tensor(slots + [-1], dtype=torch.int32)
        pending = torch.tensor([self.pending[s] for s in slots] + [7], dtype=torch.int32)
        flush_pending(self.pool, idx, self.records, pending, reset_pending=reset, backend=self.backend)
        assert torch.equal(pending, torch.zeros_like(pending)) if reset else int(pending[-1]) == 7
        for s in slots:
            self._commit_oracle(s)
            self.pending[s] = 0
            assert int(self.records.num_recorded[s]) == 0
            torch.testing.assert_close(self.pool[s].double(), self.committed[s], rtol=1e-4, atol=1e-4)

    def random_step(self, max_rows):
        slots = self.rng.sample(range(self.S), self.rng.randint(1, min(max_rows, self.S)))
        choices = [0, 1, self.L, self.rng.randint(2, self.L), self.rng.randint(2, self.L)]
        self.step({s: self.rng.choice(choices) for s in slots}, n_pad=self.rng.randint(0, 2))


SHAPES = {
    "gqa": dict(S=6, H=2, HV=4, DK=16, DV=32),
    "odd": dict(S=5, H=1, HV=3, DK=24, DV=40),  # non-power-of-two dims: masked tiles, two v tiles in Triton
    "small": dict(S=4, H=1, HV=2, DK=16, DV=16),  # fla's interpreted kernel is slow: keep its sessions small
    "tiny": dict(S=5, H=1, HV=2, DK=16, DV=16),
}


@pytest.mark.parametrize(
    "dtype,shape,l2norm",
    [(torch.float32, "gqa", False), (torch.bfloat16, "odd", True), (torch.float16, "tiny", True)],
)
def test_session_matches_transformers(backend, dtype, shape, l2norm):
    rng = random.Random(hash((backend, str(dtype), shape)) & 0xFFFF)
    sess = Session(rng, backend=backend, oracle=hf_oracle, dtype=dtype, L=20, l2norm=l2norm, scale=None,
                   **SHAPES[shape])  # fmt: skip
    # Step 1: every length class at once (0, 1, > 16 and full capacity), with padding rows.
    sess.step({0: 1, 1: 0, 2: 17, 3: 20, 4: 5}, n_pad=2)
    for i in range(3):
        sess.random_step(max_rows=4)
        if i == 0:
            sess.flush(rng.sample(range(sess.S), 2))
    sess.flush(list(range(sess.S)))  # after the flush the pool holds exactly the accepted history


@pytest.mark.parametrize("dtype,l2norm,scale", [(torch.float32, False, 0.3), (torch.bfloat16, True, None)])
def test_session_matches_fla(backend, dtype, l2norm, scale):
    rng = random.Random(hash((backend, str(dtype))) & 0xFFFF)
    sess = Session(rng, backend=backend, oracle=fla_oracle, dtype=dtype, L=18, l2norm=l2norm, scale=scale,
                   **SHAPES["small"])  # fmt: skip
    sess.step({3: 17, 0: 1, 1: 0, 2: 3}, n_pad=1)
    sess.step({2: 2, 3: 4, 1: 1}, n_pad=1)
    sess.flush(list(range(sess.S)))


# Every backend takes the value-major pool (vLLM's and vllm-ascend's layout); AscendC on the host model.
VALUE_MAJOR_BACKENDS = ("reference", "triton", "cpu", "ascendc")


@pytest.mark.parametrize("backend", VALUE_MAJOR_BACKENDS)
def test_value_major_pool_session_matches_transformers(backend):
    """The pool as ``vllm_state.transpose(-1, -2)`` of a dense [S, HV, Dv, Dk] buffer: same sessions, updated in
    place (Dk != Dv and GQA, so a swapped k/v or head stride shows; two value tiles in Triton)."""
    rng = random.Random(31)
    sess = Session(rng, backend=backend, oracle=hf_oracle, dtype=torch.float32, L=20, l2norm=False, scale=None,
                   value_major=True, **SHAPES["gqa"])  # fmt: skip
    buffer = sess.pool.transpose(-1, -2)  # what vLLM holds: [S, HV, Dv, Dk], dense
    assert buffer.is_contiguous()
    sess.step({0: 1, 1: 0, 2: 17, 3: 20, 4: 5}, n_pad=2)
    sess.random_step(max_rows=4)
    sess.flush(rng.sample(range(sess.S), 2))
    sess.random_step(max_rows=4)
    sess.flush(list(range(sess.S)))
    for s_ in range(sess.S):  # the committed history is in vLLM's buffer, value-major
        torch.testing.assert_close(
            buffer[s_].double(), sess.committed[s_].transpose(-1, -2), rtol=1e-4, atol=1e-4
        )


@pytest.mark.parametrize("backend", VALUE_MAJOR_BACKENDS)
def test_value_major_pool_session_matches_fla(backend):
    rng = random.Random(32)
    sess = Session(rng, backend=backend, oracle=fla_oracle, dtype=torch.bfloat16, L=18, l2norm=True, scale=None,
                   value_major=True, S=4, H=1, HV=2, DK=16, DV=24)  # fmt: skip
    sess.step({3: 17, 0: 1, 1: 0, 2: 3}, n_pad=1)
    sess.step({2: 2, 3: 4, 1: 1}, n_pad=1)
    sess.flush(list(range(sess.S)))


def test_multi_layer_flush_without_reset(backend):
    """Two layers share one pending tensor: flush both with reset_pending=False, the caller zeroes it."""
    rng = random.Random(7)
    layers = [
        Session(
            rng,
            backend=backend,
            oracle=hf_oracle,
            dtype=torch.float32,
            L=6,
            l2norm=False,
            scale=None,
            **SHAPES["small"],
        )  # fmt: skip
        for _ in range(2)
    ]
    for sess in layers:
        sess.rng = random.Random(3)  # same row order, lengths and accepted counts in both layers
        sess.step({1: 4, 3: 6, 0: 2}, n_pad=1)
    assert layers[0].pending == layers[1].pending
    for sess in layers:
        sess.flush([1, 3, 0], reset=False)


def test_second_flush_cannot_double_commit(backend):
    rng = random.Random(11)
    sess = Session(rng, backend=backend, oracle=hf_oracle, dtype=torch.float32, L=8, l2norm=False,
                   scale=None, **SHAPES["small"])  # fmt: skip
    sess.step({2: 5}, n_pad=0)
    sess.flush([2], reset=False)
    state = sess.pool[2].clone()
    # A caller that forgot to zero pending: with checks on this is an error, not a second commit.
    with pytest.raises(ValueError, match="exceeds the 0 tokens recorded"):
        flush_pending(sess.pool, torch.tensor([2], dtype=torch.int32), sess.records,
                      torch.tensor([3], dtype=torch.int32), backend=backend)  # fmt: skip
    assert torch.equal(sess.pool[2], state)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    plan=st.lists(
        st.tuples(st.lists(st.integers(0, 9), min_size=1, max_size=5), st.integers(0, 2), st.booleans()),
        min_size=1,
        max_size=4,
    ),
    value_major=st.booleans(),
)
def test_reference_random_sessions_f64(seed, plan, value_major):
    """Any row order, lengths 0..9, padding and flush pattern, either pool layout: the reference equals the float64
    recurrence."""
    rng = random.Random(seed)
    sess = Session(rng, backend="reference", oracle=f64_oracle, dtype=torch.float32, S=6, H=1, HV=2, DK=8,
                   DV=12, L=9, l2norm=bool(seed & 1), scale=None, value_major=value_major)  # fmt: skip
    for lengths, n_pad, do_flush in plan:
        slots = rng.sample(range(sess.S), len(lengths))
        sess.step(dict(zip(slots, lengths)), n_pad=n_pad)
        if do_flush:
            sess.flush(rng.sample(range(sess.S), rng.randint(1, 3)))


def test_triton_and_reference_leave_the_same_records():
    """Same bank flips and counts; the same recorded tokens (to fp32 rounding) in both banks."""
    out = {}
    for backend in BACKENDS:
        rng = random.Random(5)
        sess = Session(rng, backend=backend, oracle=hf_oracle, dtype=torch.float32, L=12, l2norm=True,
                       scale=None, **SHAPES["gqa"])  # fmt: skip
        sess.step({0: 3, 5: 12, 2: 1}, n_pad=1)
        sess.step({5: 7, 0: 0, 4: 2}, n_pad=0)
        out[backend] = sess.records
    ref, tri = out["reference"], out["triton"]
    assert torch.equal(ref.bank, tri.bank) and torch.equal(ref.num_recorded, tri.num_recorded)
    for slot in range(ref.num_slots):
        n, bank = int(ref.num_recorded[slot]), int(ref.bank[slot])
        for a, b in ((ref.k[slot, bank, :n], tri.k[slot, bank, :n]), (ref.g[slot, bank, :n], tri.g[slot, bank, :n]),
                     (ref.u[slot, :n], tri.u[slot, :n])):  # fmt: skip
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert int(ref.num_recorded.sum()) == 3 + 7 + 1 + 2  # slot 0 kept its first call (length 0 this time)


def test_records_nbytes_and_layout():
    rec = allocate_records(3, 16, 32, 128, 128, num_k_heads=16)
    assert (
        rec.k.shape == (3, 2, 16, 16, 128)
        and rec.g.shape == (3, 2, 16, 32)
        and rec.u.shape == (3, 16, 32, 128)
    )
    per_slot = 16 * (2 * 4 * (16 * 128 + 32) + 4 * 32 * 128) + 8
    assert rec.nbytes == 3 * per_slot == 3 * record_bytes_per_slot(16, 16, 32, 128, 128)
    state = 32 * 128 * 128 * 4
    # One state + records vs 1+K = 16 full states per request (Qwen3.5-9B-like GDN layer, K = 15).
    assert 16 * state / (state + per_slot) >= 8


@pytest.mark.parametrize(
    "reverse,soc,value_major",
    [(True, "ascend910b3", False), (False, "ascend910_9391", True), (True, None, True)],
)
def test_ascendc_block_order_and_socs(reverse, soc, value_major, monkeypatch):
    """Host model: blocks run last-to-first / other core counts; records are owned, so results do not change.
    Odd Dk and Dv (masked rows, a partial value tile) in either slot layout."""
    from ascend_spec.gdn.verify_gated_delta_rule import ascendc as mod

    monkeypatch.setattr(mod, "REVERSE_BLOCKS", reverse)
    monkeypatch.setattr(mod, "SOC", soc)
    rng = random.Random(21)
    sess = Session(rng, backend="ascendc", oracle=hf_oracle, dtype=torch.bfloat16, L=18, l2norm=True,
                   scale=None, value_major=value_major, **SHAPES["odd"])  # fmt: skip
    sess.step({0: 17, 3: 2, 4: 0, 1: 5}, n_pad=1)
    sess.step({3: 1, 0: 6, 2: 3}, n_pad=1)
    sess.flush(list(range(sess.S)))


def test_ascendc_full_size_head_in_unified_buffer():
    """A 128 x 128 fp32 head (64 KiB) per unit: the kernel's tiling fits the 192 KiB UB and matches the reference."""
    from ascend_spec.gdn.verify_gated_delta_rule import ascendc as mod

    for dtype in (torch.float32, torch.bfloat16):
        tiling = mod.tiling(256, 16, 32, 128, 128, dtype)
        assert tiling["tile_v"] == 128 and tiling["ub_bytes"] <= 192 * 1024, tiling
        assert tiling["block_dim"] == 48  # 256 rows x 32 heads spread over every vector core of a 910B2
    # Dk = 256: the token chunk shrinks first, then the value tile (the state tile and the scratch tile of its
    # row products are 2 x tileV x Dk floats)
    big = mod.tiling(4, 1, 1, 256, 256, torch.float32)
    assert big["tile_t"] == 4 and big["tile_v"] < 128 and big["ub_bytes"] <= 192 * 1024, big
    huge = mod.tiling(4, 1, 1, 512, 256, torch.float32)  # Dk = 512: a still smaller value tile
    assert huge["tile_v"] < big["tile_v"] and huge["ub_bytes"] <= 192 * 1024, huge

    rng = random.Random(3)
    out = {}
    for backend in ("reference", "ascendc"):
        rng = random.Random(3)
        sess = Session(rng, backend=backend, oracle=hf_oracle, dtype=torch.bfloat16, L=17, l2norm=True,
                       scale=None, S=3, H=1, HV=2, DK=128, DV=128)  # fmt: skip
        sess.step({2: 17, 0: 3}, n_pad=0)
        sess.step({2: 2, 1: 1}, n_pad=0)
        sess.flush([0, 1, 2])
        out[backend] = sess.pool
    torch.testing.assert_close(out["ascendc"], out["reference"], rtol=1e-4, atol=1e-4)


def test_ascendc_value_major_pool_over_several_value_tiles():
    """Value-major slots when one unit holds a part of Dv (Dk = 256 shrinks the value tile below Dv = 200): each
    tile's rows start at v0 * Dk; the committed states land in the caller's [S, HV, Dv, Dk] buffer."""
    from ascend_spec.gdn.verify_gated_delta_rule import ascendc as mod

    assert mod.tiling(2, 1, 1, 256, 200, torch.float32)["tile_v"] < 200
    rng = random.Random(8)
    sess = Session(rng, backend="ascendc", oracle=hf_oracle, dtype=torch.float32, L=6, l2norm=True, scale=None,
                   value_major=True, S=3, H=1, HV=1, DK=256, DV=200)  # fmt: skip
    buffer = sess.pool.transpose(-1, -2)
    sess.step({2: 5, 0: 2}, n_pad=1)
    sess.step({2: 1, 1: 3, 0: 4}, n_pad=0)
    sess.flush([0, 1, 2])
    for s_ in range(sess.S):
        torch.testing.assert_close(
            buffer[s_].double(), sess.committed[s_].transpose(-1, -2), rtol=1e-4, atol=1e-4
        )


def test_bench_case_quick(capsys):
    """`ascend-spec bench --quick --case verify_gated_delta_rule` runs (op and loop baseline agree) and reports the traffic model."""
    from ascend_spec.cli import main

    assert main(["bench", "--quick", "--case", "verify_gated_delta_rule"]) == 0
    out = capsys.readouterr().out
    assert "verify_gated_delta_rule" in out and "per-request loop" in out and "memory_ratio" in out

    from ascend_spec.bench.cases import verify_gated_delta_rule as case
    from ascend_spec.bench.core import BenchContext

    rows = case.run(BenchContext(device=torch.device("cpu"), warmup=0, repeats=1, quick=True))
    for r in rows:
        m = r.metrics
        # one state read + one write per request (every row has something pending), records on top
        assert m["state_rw_per_req_step"] == 2
        b = int(r.case.split()[0][2:])
        state_traffic = 2 * b * m["state_bytes_per_req"]
        assert state_traffic < m["bytes_moved"] < m["per_draft_slot_bytes_moved"]


def test_strided_pool_view(backend):
    """A pool that is a view into a bigger per-layer buffer (slot stride > HV Dk Dv) is read and written in place."""
    torch.manual_seed(4)
    s, h, hv, dk, dv, cap = 3, 1, 2, 16, 16, 5
    big = torch.randn(s, 2, hv, dk, dv)
    pool = big[:, 1]  # slots 2 HV Dk Dv apart
    assert not pool.is_contiguous()
    dense = pool.clone()
    initial = pool.clone()
    other_half = big[:, 0].clone()
    lens, idx = [4, 2], torch.tensor([2, 0], dtype=torch.int32)
    t = sum(lens)
    q, k, v = torch.randn(t, h, dk), torch.randn(t, h, dk), torch.randn(t, hv, dv)
    g, beta = -torch.rand(t, hv), torch.rand(t, hv)
    cu = torch.tensor([0, 4, 6], dtype=torch.int32)
    outs = []
    for p in (pool, dense):
        rec = allocate_records(s, cap, hv, dk, dv, num_k_heads=h)
        pend = torch.zeros(2, dtype=torch.int32)
        kw = dict(
            cu_seqlens=cu, state_pool=p, state_indices=idx, records=rec, pending=pend, use_qk_l2norm=True
        )
        outs.append(verify_gated_delta_rule(q, k, v, g, beta, backend=backend, **kw))
        flush_pending(p, idx, rec, torch.tensor([3, 2], dtype=torch.int32), backend=backend)
    torch.testing.assert_close(outs[0], outs[1])
    torch.testing.assert_close(pool, dense)
    assert torch.equal(big[:, 0], other_half)  # the other half of the buffer is never touched
    assert not torch.equal(pool[2], initial[2]) and torch.equal(pool[1], initial[1])  # only live slots change


@pytest.mark.parametrize("backend", VALUE_MAJOR_BACKENDS)
def test_value_major_pool_in_a_wider_buffer(backend):
    """vLLM's GPU layout with slots apart in a bigger buffer: the same outputs, states and records as a dense
    [S, HV, Dk, Dv] pool, written in place; the rest of the buffer and idle slots are never touched."""
    torch.manual_seed(5)
    s, h, hv, dk, dv, cap = 4, 1, 2, 16, 24, 5
    big = torch.randn(s, 2, hv, dv, dk)  # [S, 2, HV, Dv, Dk]: this layer's states are big[:, 1]
    pool = big[:, 1].transpose(-1, -2)
    assert pool.stride()[1:] == (dk * dv, 1, dk) and pool.stride(0) == 2 * hv * dk * dv
    dense = pool.contiguous()
    initial, other_half = pool.clone(), big[:, 0].clone()
    idx = torch.tensor([3, -1, 0], dtype=torch.int32)
    cu = torch.tensor([0, 4, 5, 7], dtype=torch.int32)
    t = 7
    q, k, v = torch.randn(t, h, dk), torch.randn(t, h, dk), torch.randn(t, hv, dv)
    g, beta = -torch.rand(t, hv), torch.rand(t, hv)
    outs, recs = [], []
    for p in (pool, dense):
        rec = allocate_records(s, cap, hv, dk, dv, num_k_heads=h)
        kw = dict(cu_seqlens=cu, state_indices=idx, records=rec, use_qk_l2norm=True, backend=backend)
        outs.append(
            verify_gated_delta_rule(
                q, k, v, g, beta, state_pool=p, pending=torch.zeros(3, dtype=torch.int32), **kw
            )
        )
        # A second step replays 3 and 1 pending tokens (the commit writes the slot in place), then a flush.
        outs.append(
            verify_gated_delta_rule(
                q, k, v, g, beta, state_pool=p, pending=torch.tensor([3, 0, 1], dtype=torch.int32), **kw
            )
        )
        flush_pending(p, idx, rec, torch.tensor([2, 0, 2], dtype=torch.int32), backend=backend)
        recs.append(rec)
    for a, b in zip(outs[:2], outs[2:]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(pool, dense, rtol=1e-5, atol=1e-5)
    for a, b in zip(recs[0].tensors(), recs[1].tensors()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert torch.equal(big[:, 0], other_half)
    assert torch.equal(pool[1], initial[1]) and torch.equal(pool[2], initial[2])
    assert not torch.equal(pool[3], initial[3]) and not torch.equal(pool[0], initial[0])


def test_flush_pending_forwards_conv_records():
    """One flush call per layer serves GDN and conv layers alike (same pending, reset_pending=False)."""
    from ascend_spec.gdn import allocate_conv_records, flush_conv_pending, verify_causal_conv1d

    torch.manual_seed(9)
    c, w, s = 8, 4, 3
    base = torch.randn(s, c, w - 1)
    pools = [base.clone(), base.clone()]
    recs = [allocate_conv_records(s, 6, c, w, dtype=torch.float32) for _ in range(2)]
    x, weight = torch.randn(7, c), torch.randn(c, w)
    cu, idx = torch.tensor([0, 5, 7], dtype=torch.int32), torch.tensor([2, 0], dtype=torch.int32)
    for pool, rec in zip(pools, recs):
        verify_causal_conv1d(x, weight, None, cu_seqlens=cu, conv_state_pool=pool, state_indices=idx,
                             records=rec, pending=torch.zeros(2, dtype=torch.int32))  # fmt: skip
    pending = torch.tensor([4, 1], dtype=torch.int32)
    flush_pending(pools[0], idx, recs[0], pending, reset_pending=False)
    flush_conv_pending(pools[1], idx, recs[1], pending.clone(), reset_pending=False)
    assert pending.tolist() == [4, 1]
    assert torch.equal(pools[0], pools[1]) and not torch.equal(pools[0], base)
    assert torch.equal(recs[0].num_recorded, recs[1].num_recorded)


@pytest.mark.parametrize("rows", [0, 3])
def test_empty_calls_write_nothing(backend, rows):
    """No rows, or rows that all have length 0: empty outputs, pool and records untouched; empty flush too."""
    pool = torch.randn(4, 2, 16, 16)
    rec = allocate_records(4, 3, 2, 16, 16, num_k_heads=1)
    rec.num_recorded.fill_(3)
    before = [t.clone() for t in (pool, *rec.tensors())]
    idx = torch.arange(rows, dtype=torch.int32)
    pending = torch.full((rows,), 2, dtype=torch.int32)
    empty = (
        torch.zeros(0, 1, 16),
        torch.zeros(0, 1, 16),
        torch.zeros(0, 2, 16),
        torch.zeros(0, 2),
        torch.zeros(0, 2),
    )
    o = verify_gated_delta_rule(
        *empty, cu_seqlens=torch.zeros(rows + 1, dtype=torch.int32), state_pool=pool, state_indices=idx,
        records=rec, pending=pending, backend=backend,
    )  # fmt: skip
    assert o.shape == (0, 2, 16)
    flush_pending(pool, idx[:0], rec, pending[:0], backend=backend)
    for b, t in zip(before, (pool, *rec.tensors())):
        assert torch.equal(b, t)
    assert pending.tolist() == [2] * rows
