"""Separate target/draft dispatchers: padded descriptors, graph keys, eager fallback, run/capture on CPU."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_spec.graph import DraftGraphDispatcher, GraphBuckets, TargetGraphDispatcher, graph_backend


def test_seed_dspark_b16_k7_target_128_drafter_112():
    k = 7
    target = TargetGraphDispatcher(GraphBuckets.for_engine(64, k + 1), tokens_per_request=k + 1)
    draft = DraftGraphDispatcher(
        GraphBuckets.for_engine(64, k), tokens_per_request=k, context_tokens_per_request=k + 1
    )
    t, d = target.dispatch(16), draft.dispatch(16)
    assert (t.num_tokens, t.num_reqs, t.actual_tokens, t.padding_tokens) == (128, 16, 128, 0)
    assert (d.num_tokens, d.num_reqs, d.actual_tokens, d.padding_tokens) == (112, 16, 112, 0)
    assert d.context_tokens == 128  # the drafter reads the 128 target hidden states
    assert t.key != d.key and t.key[0] == "target" and d.key[0] == "draft"
    # a shared dispatcher hands the drafter the target's descriptor: 128 tokens, 16 of them padding
    assert t.num_tokens - d.num_tokens == 16
    # with the seed's sparse buckets a drafter-only dispatcher still pads less than the target's 128 graph
    assert (
        DraftGraphDispatcher(GraphBuckets([32, 64, 112, 128]), tokens_per_request=7).dispatch(16).num_tokens
        == 112
    )


def test_uniform_padding_pads_requests_with_the_tokens():
    disp = TargetGraphDispatcher(GraphBuckets([32, 64, 128, 192]), tokens_per_request=10)
    d = disp.dispatch(7)  # 70 tokens -> 128 graph holding 12 requests of 10
    assert (d.num_tokens, d.num_reqs, d.actual_tokens, d.actual_reqs, d.uniform) == (128, 12, 70, 7, True)
    assert d.key == ("target", "uniform", 128) and not d.eager
    assert disp.dispatch(64 // 10).key == ("target", "uniform", 64)


def test_above_the_largest_bucket_runs_eagerly():
    disp = DraftGraphDispatcher(GraphBuckets([32, 64]), tokens_per_request=9)
    d = disp.dispatch(8)  # 72 tokens
    assert d.eager and d.key is None and (d.num_tokens, d.num_reqs) == (72, 8)


def test_ragged_target_batches():
    disp = TargetGraphDispatcher(GraphBuckets([8, 16, 32, 64]), tokens_per_request=5)
    # the seed's split: drafts [4, 3, 1] -> query lens [5, 4, 2] -> 11 tokens for 3 requests
    d = disp.dispatch(3, num_tokens=11)
    assert (d.num_tokens, d.num_reqs, d.actual_tokens, d.actual_reqs, d.uniform) == (16, 8, 11, 3, False)
    assert d.key == ("target", "ragged", 16, 8)
    assert disp.dispatch(3, num_tokens=15) == disp.dispatch(3)  # all full: the uniform graph
    eager = disp.dispatch(20, num_tokens=70)
    assert eager.eager and eager.num_tokens == 70
    with pytest.raises(ValueError, match=r"num_tokens must be between num_reqs \(3\) and .* \(15\); got 16"):
        disp.dispatch(3, num_tokens=16)
    with pytest.raises(ValueError, match="got 2"):
        disp.dispatch(3, num_tokens=2)


def test_descriptors_cover_every_bucket_holding_a_request():
    disp = TargetGraphDispatcher(GraphBuckets([4, 8, 16, 24]), tokens_per_request=8)
    assert [d.num_tokens for d in disp.descriptors()] == [8, 16, 24]
    assert [d.num_reqs for d in disp.descriptors()] == [1, 2, 3]


def test_bad_arguments():
    with pytest.raises(ValueError, match="tokens_per_request must be >= 1; got 0"):
        TargetGraphDispatcher(GraphBuckets([8]), tokens_per_request=0)
    with pytest.raises(ValueError, match="num_reqs must be >= 1; got 0"):
        DraftGraphDispatcher(GraphBuckets([8]), tokens_per_request=2).dispatch(0)
    with pytest.raises(ValueError, match="context_tokens_per_request must be >= 1"):
        DraftGraphDispatcher(GraphBuckets([8]), tokens_per_request=2, context_tokens_per_request=0)
    # a plain list is accepted as sizes
    assert TargetGraphDispatcher([16, 8], tokens_per_request=2).buckets == GraphBuckets([8, 16])


def test_cpu_runs_eagerly_and_npu_without_torch_npu_too():
    assert graph_backend("cpu") == "eager"
    try:
        import torch_npu  # noqa: F401
    except ImportError:
        assert graph_backend("npu") == "eager"
        disp = TargetGraphDispatcher(GraphBuckets([8]), tokens_per_request=2, device="npu:0")
        assert disp.backend == "eager" and disp.run(disp.dispatch(2), lambda: 5) == 5
    if not torch.cuda.is_available():
        assert graph_backend("cuda") == "eager"


def test_run_on_cpu_calls_the_function_every_time():
    disp = TargetGraphDispatcher(GraphBuckets([8, 16]), tokens_per_request=4)
    buf = torch.zeros(16)
    calls = []

    def step():
        calls.append(1)
        buf.add_(1.0)
        return buf

    d = disp.dispatch(3)
    assert disp.capture(d, step) is None and disp.captured == []
    for _ in range(3):
        out = disp.run(d, step)
    assert len(calls) == 3 and out is buf and float(buf[0]) == 3.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graph_capture_and_replay():  # pragma: no cover - runs on GPU machines only
    disp = TargetGraphDispatcher(GraphBuckets([8, 16]), tokens_per_request=4, device="cuda")
    x = torch.arange(16, dtype=torch.float32, device="cuda")

    def step():
        return x * 2.0

    d = disp.dispatch(3)
    out = disp.run(d, step)
    assert disp.captured == [d.key]
    x.add_(1.0)
    out = disp.run(d, step)  # replay reads the new values of the static input
    torch.testing.assert_close(out, (torch.arange(16, device="cuda") + 1.0) * 2.0)


# -- index math, for any bucket set (hypothesis) ----------------------------------------------------------------
@st.composite
def bucket_sets(draw):
    sizes = draw(st.sets(st.integers(1, 300), min_size=1, max_size=12))
    return GraphBuckets(sizes), draw(st.integers(1, 24))


def smallest_holding(sizes, n):
    """Linear-scan oracle for the graph that runs n tokens (None above the largest)."""
    return next((s for s in sorted(sizes) if s >= n), None)


def test_descriptors_skip_buckets_no_uniform_batch_reaches():
    disp = DraftGraphDispatcher(GraphBuckets([8, 12, 16, 20, 24]), tokens_per_request=8)
    # 1 request -> 8, 2 -> 16, 3 -> 24; 12 and 20 are never the graph of a uniform batch
    assert [(d.num_tokens, d.num_reqs, d.actual_reqs) for d in disp.descriptors()] == [
        (8, 1, 1),
        (16, 2, 2),
        (24, 3, 3),
    ]
    disp = TargetGraphDispatcher(GraphBuckets([5, 6, 20]), tokens_per_request=4)
    assert [d.num_tokens for d in disp.descriptors()] == [5, 20]  # 6 would repeat 5's batch of one request


@settings(max_examples=200, deadline=None)
@given(bucket_sets(), st.sampled_from([TargetGraphDispatcher, DraftGraphDispatcher]))
def test_descriptors_are_exactly_the_uniform_graphs_dispatch_can_return(bq, cls):
    buckets, q = bq
    disp = cls(buckets, tokens_per_request=q)
    descs = disp.descriptors()
    keys = [d.key for d in descs]
    assert len(keys) == len(set(keys))  # no duplicates
    reachable = {disp.dispatch(r).key for r in range(1, buckets.largest // q + 2)} - {None}
    assert set(keys) == reachable  # nothing missing, nothing extra
    assert [d.num_tokens for d in descs] == sorted(d.num_tokens for d in descs)
    for d in descs:
        assert d == disp.dispatch(d.actual_reqs) and not d.eager and d.uniform
        assert d.num_tokens in buckets and d.num_reqs == d.num_tokens // q
        assert d.actual_tokens == d.actual_reqs * q <= d.num_tokens < (d.actual_reqs + 1) * q


@settings(max_examples=200, deadline=None)
@given(bucket_sets(), st.integers(1, 400))
def test_uniform_dispatch_index_math(bq, num_reqs):
    buckets, q = bq
    d = TargetGraphDispatcher(buckets, tokens_per_request=q).dispatch(num_reqs)
    want = smallest_holding(buckets.sizes, num_reqs * q)
    assert (d.actual_reqs, d.actual_tokens, d.uniform) == (num_reqs, num_reqs * q, True)
    if want is None:
        assert d.eager and (d.num_tokens, d.num_reqs) == (num_reqs * q, num_reqs)
    else:
        assert d.key == ("target", "uniform", want) and d.num_tokens == want
        assert d.num_reqs == want // q >= num_reqs  # padded requests fill the graph, none split
        assert d.padding_tokens == want - num_reqs * q >= 0


@settings(max_examples=200, deadline=None)
@given(bucket_sets(), st.data())
def test_ragged_dispatch_index_math(bq, data):
    buckets, q = bq
    b = data.draw(st.integers(1, 200))
    n = data.draw(st.integers(b, b * q))
    d = TargetGraphDispatcher(buckets, tokens_per_request=q).dispatch(b, num_tokens=n)
    assert (d.actual_reqs, d.actual_tokens) == (b, n)
    if n == b * q:
        assert d.uniform
        return
    want = smallest_holding(buckets.sizes, n)
    assert not d.uniform
    if want is None:
        assert d.eager and (d.num_tokens, d.num_reqs) == (n, b)
    else:
        reqs = smallest_holding(buckets.sizes, b)
        assert d.key == ("target", "ragged", want, reqs) and (d.num_tokens, d.num_reqs) == (want, reqs)
        assert b <= d.num_reqs <= d.num_tokens
