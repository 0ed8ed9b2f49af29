"""GraphBuckets: padding (the seed's literal examples), the generation rule, shipped defaults, bad input."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_spec.graph import GraphBuckets

SEED = GraphBuckets([32, 64, 128, 192, 256])


def test_seed_padding_examples():
    assert SEED.pad(184) == 192
    assert SEED.pad(160) == 192
    assert SEED.pad(128) == 128
    assert SEED.pad(127) == 128
    assert SEED.pad(1) == 32
    assert SEED.pad(257) is None  # above the largest bucket: eager


def test_seed_budget_65_needs_the_next_graph():
    b = GraphBuckets([32, 64, 128])
    assert b.pad(64) == 64
    assert b.pad(65) == 128


def test_seed_64_requests_times_10_tokens_on_shipped_910b_buckets():
    b = GraphBuckets.for_soc("ascend910b")
    assert 64 * (9 + 1) == 640
    assert b.pad(64 * (9 + 1)) == 640
    assert b.pad(184) == b.pad(160) == 192
    assert b.pad(128) == 128
    assert b.pad(256 * 10) == 2560
    draft = GraphBuckets.for_soc("ascend910b", "draft")
    assert draft.pad(256 * 9) == 2304
    assert draft.pad(16 * 7) == 112 and b.pad(16 * 7) == 128  # seed B=16, K=7 DSpark: drafter 112, target 128


def test_sizes_are_sorted_and_container_behaviour():
    b = GraphBuckets([128, 32, 64])
    assert b.sizes == (32, 64, 128)
    assert list(b) == [32, 64, 128] and len(b) == 3 and 64 in b and 65 not in b
    assert b == GraphBuckets([32, 64, 128]) and b.largest == 128 and b.smallest == 32
    assert b.sizes_above(64) == (128,) and b.sizes_above(10) == (32, 64, 128) and b.sizes_above(128) == ()


@pytest.mark.parametrize(
    "sizes, match",
    [
        ([], "must not be empty"),
        ([0, 8], "sizes entry must be >= 1; got 0"),
        ([-4], "sizes entry must be >= 1; got -4"),
        ([8, 8], "must not repeat a capture size; got 8 twice"),
        ([8, 2.5], "sizes entry must be an int; got 2.5"),
        ([True], "sizes entry must be an int; got True"),
        ("128", "sizes must be an iterable of positive ints"),
        (None, "sizes must be an iterable of positive ints"),
    ],
)
def test_bad_sizes(sizes, match):
    with pytest.raises(ValueError, match=match):
        GraphBuckets(sizes)


@pytest.mark.parametrize(
    "n, match", [(0, "num_tokens must be >= 1; got 0"), (-3, ">= 1"), (1.5, "must be an int")]
)
def test_bad_pad(n, match):
    with pytest.raises(ValueError, match=match):
        SEED.pad(n)


@pytest.mark.parametrize("max_reqs, q", [(1, 1), (16, 8), (64, 10), (256, 1), (256, 10), (37, 7)])
def test_for_engine_rule(max_reqs, q):
    b = GraphBuckets.for_engine(max_reqs, q)
    limit = max_reqs * q
    assert b.largest == limit
    assert all(s % q == 0 or s == limit for s in b)
    # every uniform batch of r requests fits a graph with at most one base step of padding
    for r in range(1, max_reqs + 1):
        padded = b.pad(r * q)
        assert padded is not None and padded >= r * q
        step = 8 if r * q < 256 else 16
        assert padded - r * q < max(step, q) + q
    # the vLLM-style base when q = 1
    if q == 1 and max_reqs == 256:
        assert b.sizes[:5] == (1, 2, 4, 8, 16) and 248 in b and 256 in b and 252 not in b


def test_for_engine_thinning_keeps_ends():
    full = GraphBuckets.for_engine(256, 10)
    thin = GraphBuckets.for_engine(256, 10, max_graphs=20)
    assert len(thin) == 20
    assert thin.smallest == full.smallest and thin.largest == full.largest
    assert set(thin) <= set(full)
    assert GraphBuckets.for_engine(8, 2, max_graphs=1).sizes == (16,)


def test_for_engine_and_soc_errors():
    with pytest.raises(ValueError, match="max_num_reqs must be >= 1; got 0"):
        GraphBuckets.for_engine(0, 4)
    with pytest.raises(ValueError, match="tokens_per_request must be >= 1"):
        GraphBuckets.for_engine(8, 0)
    with pytest.raises(ValueError, match="soc must be one of .*ascend910b.*; got 'h100'"):
        GraphBuckets.for_soc("h100")
    with pytest.raises(ValueError, match="part must be 'target' or 'draft'; got 'both'"):
        GraphBuckets.for_soc("ascend910b", "both")


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(1, 5000), min_size=1, max_size=20), st.integers(1, 6000))
def test_pad_and_sizes_above_match_a_linear_scan(sizes, n):
    b = GraphBuckets(sizes)
    ordered = sorted(sizes)
    assert b.sizes == tuple(ordered)
    assert b.pad(n) == next((s for s in ordered if s >= n), None)
    assert b.sizes_above(n) == tuple(s for s in ordered if s > n)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 300), st.integers(1, 16), st.one_of(st.none(), st.integers(1, 40)))
def test_for_engine_sizes_for_any_request_count(max_reqs, q, max_graphs):
    b = GraphBuckets.for_engine(max_reqs, q, max_graphs=max_graphs)
    limit = max_reqs * q
    assert b.largest == limit and len(set(b.sizes)) == len(b)
    assert all(s % q == 0 for s in b)  # limit = max_reqs * q is a multiple too
    if max_graphs is not None:
        assert len(b) <= max_graphs
        full = GraphBuckets.for_engine(max_reqs, q)
        assert set(b) <= set(full) and (max_graphs == 1 or b.smallest == full.smallest)
    for r in range(1, max_reqs + 1):  # every uniform batch has a graph
        assert b.pad(r * q) is not None
