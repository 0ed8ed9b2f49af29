"""Separate target/draft dispatchers: padded descriptors, graph keys, eager fallback, run/capture on CPU."""

import pytest
import torch

from ascend_spec.graph import DraftGraphDispatcher, GraphBuckets, TargetGraphDispatcher, graph_backend


def test_talk_dspark_b16_k7_target_128_drafter_112():
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
    # with the talk's sparse buckets a drafter-only dispatcher still pads less than the target's 128 graph
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
    # the talk's split: drafts [4, 3, 1] -> query lens [5, 4, 2] -> 11 tokens for 3 requests
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
