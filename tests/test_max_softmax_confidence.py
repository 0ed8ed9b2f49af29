"""max_softmax_confidence / partials / merge, head_confidence and survival_probs against float64 oracles."""

from __future__ import annotations

import pytest
import torch
from helpers import assert_close

from ascend_spec.bench.core import peak_allocated_bytes
from ascend_spec.ops import (
    head_confidence,
    max_softmax_confidence,
    max_softmax_partials,
    merge_max_softmax_partials,
    survival_probs,
)
from ascend_spec.ops.max_softmax_confidence import REFERENCE_CHUNK_ELEMS

INF = float("inf")
# The host model's ReduceSum accumulates sequentially in fp32 (the chip reduces pairwise), so over 8192-element
# tiles its rounding error is ~sqrt(8192) ulp instead of ~log2(V) ulp: a looser bound for that backend only.
# cpu sums a vectorised exp (Cephes polynomial, within 2 ulp)
RTOL = {"reference": 2e-6, "triton": 2e-6, "ascendc": 3e-5, "cpu": 4e-6}


def oracle(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """float64 max-softmax with the documented rules: NaN/+inf rows and all -inf rows -> 0."""
    x = logits.double()
    m = x.amax(dim=-1, keepdim=True)
    c = 1.0 / torch.exp((x - m) / temperature).sum(dim=-1)
    broken = torch.isnan(x).any(-1) | (x == INF).any(-1) | (x == -INF).all(-1)
    return torch.where(broken, 0.0, c)


def make_logits(n: int, v: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random rows plus the hard cases: very peaked, constant, -inf entries, half -inf, huge magnitudes."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, v, generator=g) * 4.0
    x[0, 3] += 60.0  # very peaked: c ~ 1
    x[1] = 1.5  # constant: c = 1 / V exactly
    x[2, ::3] = -INF  # masked tokens
    x[3, : v // 2] = -INF  # first tiles entirely masked (online max starts at -inf)
    x[4] *= 1000.0  # huge spread: most exps underflow
    x[5, -1] = 30.0  # peak in the last (partial) tile
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(9, 1000), (17, 2500), (6, 7)])
def test_matches_float64(backend: str, dtype: torch.dtype, shape: tuple[int, int]) -> None:
    x = make_logits(*shape, dtype=dtype)
    if dtype == torch.float16:
        x[4] = x[4].clamp(-60000, 60000)
    got = max_softmax_confidence(x, backend=backend)
    # The oracle reads the same low-precision values: accumulation is fp32, so rel error ~ 1e-6 whatever the dtype.
    assert_close(got, oracle(x), dtype=torch.float32, rtol=RTOL[backend])
    assert float(got[1]) == pytest.approx(1.0 / shape[1], rel=RTOL[backend])
    if shape[1] > 10:
        assert float(got[0]) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("temperature", [0.3, 0.7, 2.5])
def test_temperature(backend: str, temperature: float) -> None:
    x = make_logits(11, 1500, torch.float32, seed=3)
    got = max_softmax_confidence(x, temperature=temperature, backend=backend)
    assert_close(got, oracle(x, temperature), dtype=torch.float32, rtol=RTOL[backend] * 1.5)
    # Higher temperature flattens: confidence never rises with T (checked row by row on finite rows).
    hotter = max_softmax_confidence(x, temperature=temperature * 2, backend=backend)
    assert bool((hotter <= got * (1 + 1e-6)).all())


def test_non_finite_rows_are_zero_and_isolated(backend: str) -> None:
    x = make_logits(10, 700, torch.float32, seed=5)
    clean = max_softmax_confidence(x, backend=backend)
    bad = x.clone()
    bad[6, 100] = float("nan")
    bad[7, 699] = INF
    bad[8] = -INF
    bad[9, 0] = float("nan")
    bad[9, 1] = INF
    got = max_softmax_confidence(bad, backend=backend)
    assert got[6:].tolist() == [0.0, 0.0, 0.0, 0.0]
    torch.testing.assert_close(got[:6], clean[:6], rtol=0, atol=0)
    assert bool(torch.isfinite(got).all())


def test_backends_agree_on_strided_logits(backend: str) -> None:
    base = make_logits(40, 900, torch.float32, seed=7)
    strided = base.t().contiguous().t()  # column-major view: stride along V is 40
    rows = base[::3]  # row stride 3 * 900
    for x in (strided, rows):
        want = max_softmax_confidence(x.contiguous(), backend="reference")
        torch.testing.assert_close(
            max_softmax_confidence(x, backend=backend), want, rtol=RTOL[backend], atol=0
        )


def test_largest_vocabulary(backend: str) -> None:
    x = torch.randn(2, 262144, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16) * 3
    x[1, 200000] = 40
    assert_close(
        max_softmax_confidence(x, backend=backend), oracle(x), dtype=torch.float32, rtol=RTOL[backend]
    )


def test_empty_batch() -> None:
    for backend in ("reference", "triton"):
        assert max_softmax_confidence(torch.zeros(0, 5), backend=backend).shape == (0,)


def test_reference_temporary_memory_is_bounded() -> None:
    n, v = 96, 65536  # 24 MiB of fp32 logits, softmax would be 24 MiB more
    bound = 4 * max(REFERENCE_CHUNK_ELEMS, v) + 64 * n + 4096
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(n, v).to(dtype)
        peak = peak_allocated_bytes(lambda x=x: max_softmax_confidence(x, backend="reference"), x.device)
        assert 0 < peak <= bound, (dtype, peak, bound)
    x = torch.randn(n, v)
    baseline = peak_allocated_bytes(lambda: torch.softmax(x, -1).max(-1), x.device)
    assert baseline >= 4 * n * v
    # One row wider than the chunk: the workspace is one row, whatever N is.
    wide = torch.randn(3, 4 * REFERENCE_CHUNK_ELEMS // 2)
    peak = peak_allocated_bytes(lambda: max_softmax_confidence(wide, backend="reference"), wide.device)
    assert peak <= 4 * wide.shape[1] + 4096


def test_reference_runs_on_meta_without_reading_values() -> None:
    x = torch.empty(4096, 1000, device="meta", dtype=torch.bfloat16)
    out = max_softmax_confidence(x, backend="reference")
    assert out.shape == (4096,) and out.dtype == torch.float32 and out.device.type == "meta"


def test_partials_and_merge(backend: str) -> None:
    x = make_logits(12, 1200, torch.float32, seed=11)
    x[:, 1000:] = -INF  # the last shard is a padded vocabulary tail for every row
    x[7, 50] = float("nan")
    x[8, 10] = INF
    t = 0.8
    cuts = [0, 300, 301, 1000, 1200]
    ms, ss = [], []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        m, s = max_softmax_partials(x[:, lo:hi], temperature=t, backend=backend)
        shard = x[:, lo:hi].double()
        ok = ~(torch.isnan(shard).any(-1) | (shard == INF).any(-1))
        want_m = shard.amax(-1)
        torch.testing.assert_close(m[ok].double(), want_m[ok])
        all_masked = (shard == -INF).all(-1)
        assert bool((s[all_masked] == 0).all()) and bool((m[all_masked] == -INF).all())
        live = ok & ~all_masked
        want_s = torch.exp((shard - want_m[:, None]) / t).sum(-1)
        torch.testing.assert_close(s[live].double(), want_s[live], rtol=RTOL[backend], atol=0)
        assert bool(torch.isnan(s[~ok]).all())
        ms.append(m)
        ss.append(s)
    merged = merge_max_softmax_partials(torch.stack(ms), torch.stack(ss), temperature=t)
    assert_close(merged, oracle(x, t), dtype=torch.float32, rtol=RTOL[backend] * 1.5)
    assert merged[7] == 0 and merged[8] == 0
    # All shards entirely -inf for a row: confidence 0, no NaN.
    m, s = torch.full((2, 1), -INF), torch.zeros(2, 1)
    assert merge_max_softmax_partials(m, s).tolist() == [0.0]


def test_head_confidence_and_survival_talk_example() -> None:
    h = torch.tensor([[0.0, 2.0, -3.0, float("nan")]], dtype=torch.bfloat16)
    c = head_confidence(h)
    want = torch.sigmoid(h.double())
    assert c.dtype == torch.float32
    torch.testing.assert_close(c[0, :3].double(), want[0, :3], rtol=1e-6, atol=0)
    assert float(c[0, 3]) == 0.0
    talk = survival_probs(torch.tensor([[0.90, 0.80, 0.70, 0.50]]))
    torch.testing.assert_close(talk, torch.tensor([[0.90, 0.72, 0.504, 0.252]]), rtol=1e-6, atol=0)
    conf = torch.rand(64, 16, generator=torch.Generator().manual_seed(2))
    conf[3] = 1.0
    conf[4, 5] = 0.0
    p = survival_probs(conf)
    assert bool((p[:, 1:] <= p[:, :-1]).all())
    torch.testing.assert_close(p.double(), torch.cumprod(conf.double(), 1), rtol=1e-5, atol=0)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: max_softmax_confidence(torch.zeros(3)), "logits must have 2 dimensions"),
        (lambda: max_softmax_confidence(torch.zeros(2, 3, 4)), "logits must have 2 dimensions"),
        (lambda: max_softmax_confidence(torch.zeros(3, 0)), "logits must have a non-empty vocabulary"),
        (lambda: max_softmax_confidence(torch.zeros(3, 4, dtype=torch.int64)), "logits must have dtype"),
        (lambda: max_softmax_confidence(torch.zeros(3, 4, dtype=torch.float64)), "logits must have dtype"),
        (lambda: max_softmax_confidence([[1.0]]), "logits must be a torch.Tensor"),
        (
            lambda: max_softmax_confidence(torch.zeros(3, 4), temperature=0.0),
            "temperature must be finite and > 0",
        ),
        (
            lambda: max_softmax_confidence(torch.zeros(3, 4), temperature=-1),
            "temperature must be finite and > 0",
        ),
        (lambda: max_softmax_confidence(torch.zeros(3, 4), temperature=INF), "temperature must be finite"),
        (lambda: max_softmax_confidence(torch.zeros(3, 4), temperature=True), "temperature must be a float"),
        (lambda: max_softmax_confidence(torch.zeros(3, 4), backend="cuda"), "backend must be one of"),
        (lambda: max_softmax_partials(torch.zeros(3, 0)), "logits_shard must have a non-empty"),
        (
            lambda: merge_max_softmax_partials(torch.zeros(2, 3), torch.zeros(2, 4)),
            "row_sumexp must have shape",
        ),
        (
            lambda: merge_max_softmax_partials(torch.zeros(3), torch.zeros(3)),
            "row_max must have 2 dimensions",
        ),
        (
            lambda: merge_max_softmax_partials(torch.zeros(0, 3), torch.zeros(0, 3)),
            "row_max must hold at least",
        ),
        (
            lambda: merge_max_softmax_partials(torch.zeros(2, 3), torch.zeros(2, 3, device="meta")),
            "row_sumexp is on meta",
        ),
        (lambda: head_confidence(torch.zeros(3, dtype=torch.int32)), "head_logits must have dtype"),
        (lambda: survival_probs(torch.zeros(3)), "conf must have 2 dimensions"),
        (lambda: survival_probs(torch.zeros(3, 0)), "conf must have K >= 1"),
        (lambda: survival_probs(torch.tensor([[0.5, 1.5]])), r"conf\[0, 1\] = 1.5"),
        (lambda: survival_probs(torch.tensor([[0.5, float("nan")]])), r"conf\[0, 1\] = nan"),
        (lambda: survival_probs(torch.tensor([[-0.1]])), r"conf\[0, 0\] = -0.1"),
    ],
)
def test_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_vocab_parallel_needs_initialised_group() -> None:
    from ascend_spec.ops import vocab_parallel_max_softmax_confidence

    with pytest.raises(ValueError, match="group: torch.distributed is not initialised"):
        vocab_parallel_max_softmax_confidence(torch.zeros(2, 3))
