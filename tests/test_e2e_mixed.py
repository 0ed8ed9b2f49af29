"""The mixed workload without an engine: the target's successor function, the prompts of both classes against
an n-gram lookup written here (every match of the last 1-3 tokens, whichever one vLLM's ngram picks), the
per-class lengths, and the cost-profile lines of ``--print-profile``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_spec.e2e.mixed import (
    MAX_REQUEST_TOKENS,
    OTHER,
    REPETITIVE,
    REPETITIVE_TOKENS,
    class_lengths,
    mixed_prompts,
    mixed_tokens,
)
from ascend_spec.e2e.target_profile import profile_lines
from ascend_spec.e2e.tiny_models import VOCAB_SIZE


def test_successor_is_one_permutation_of_short_cycles_and_one_long_orbit() -> None:
    t = mixed_tokens(0)
    assert sorted(t.successor) == list(range(VOCAB_SIZE))
    assert sorted(x for c in t.cycles for x in c) == list(REPETITIVE_TOKENS)
    assert all(3 <= len(c) <= 8 for c in t.cycles)
    assert len(t.orbit) == VOCAB_SIZE - len(REPETITIVE_TOKENS)
    for cycle in [*t.cycles, t.orbit]:
        assert [t.successor[a] for a in cycle] == cycle[1:] + cycle[:1]
    assert mixed_tokens(0) == t and mixed_tokens(1) != t


def _matches(seq: list[int]) -> list[int]:
    """Every token that followed an earlier occurrence of the last 1, 2 or 3 tokens of ``seq``."""
    out = []
    for n in (1, 2, 3):
        suffix = seq[-n:]
        for i in range(len(seq) - n):
            if seq[i : i + n] == suffix:
                out.append(seq[i + n])
    return out


@settings(max_examples=30, deadline=None)
@given(
    num=st.integers(1, 10),
    max_tokens=st.integers(1, 64),
    num_spec=st.integers(1, 8),
    seed=st.integers(0, 5),
)
def test_ngram_drafts_are_right_for_repetitive_requests_and_wrong_for_the_others(
    num: int, max_tokens: int, num_spec: int, seed: int
) -> None:
    tokens = mixed_tokens(seed)
    prompts, classes = mixed_prompts(num, max_tokens=max_tokens, num_spec=num_spec, seed=seed)
    assert classes == [REPETITIVE if i % 2 == 0 else OTHER for i in range(num)]
    for prompt, cls in zip(prompts, classes):
        output = tokens.continuation(prompt[-1], max_tokens)
        for j in range(
            1, max_tokens
        ):  # the decode step emitting output[j]: what an n-gram lookup drafts first
            nexts = _matches(prompt + output[:j])
            assert nexts, "every step finds a match, so ngram drafts"
            if cls == REPETITIVE:
                assert set(nexts) == {output[j]}  # every match drafts the target's token
            else:
                assert output[j] not in nexts  # no match drafts it: the first draft is rejected


def test_the_prompts_of_a_seed_are_fixed_and_the_longest_request_is_checked() -> None:
    a = mixed_prompts(6, max_tokens=32, num_spec=3)
    assert a == mixed_prompts(6, max_tokens=32, num_spec=3)
    assert a[0][:2] == mixed_prompts(2, max_tokens=32, num_spec=3)[0]  # batch B is the first B requests
    mixed_prompts(2, max_tokens=MAX_REQUEST_TOKENS - 3, num_spec=3)
    with pytest.raises(ValueError, match=rf"at most {MAX_REQUEST_TOKENS} .*got {MAX_REQUEST_TOKENS} \+ 1"):
        mixed_prompts(2, max_tokens=MAX_REQUEST_TOKENS, num_spec=1)


def test_class_lengths_count_every_decode_step_of_a_class() -> None:
    tokens = [[1] * 25, [1] * 25, [1] * 10]
    # request 0: 6 steps of 3 drafts, all accepted (24 tokens after the first in 6 steps)
    # request 1: 8 steps with 3 drafts, none accepted, and 16 steps without drafts
    # request 2: never drafted
    drafts = [[6, 18, 18], [8, 24, 0], [0, 0, 0]]
    got = class_lengths(tokens, drafts, [REPETITIVE, OTHER, OTHER])
    assert got[REPETITIVE] == {"verify": 4.0, "accept": 4.0}
    assert got[OTHER]["verify"] == pytest.approx((24 + 9 + 24) / (24 + 9))
    assert got[OTHER]["accept"] == 1.0
    assert class_lengths(tokens, [], [REPETITIVE, OTHER, OTHER]) == {}  # plain decoding: no metrics
    assert class_lengths(tokens, drafts, []) == {}  # the default workload: no classes


def test_profile_lines_read_each_size_at_the_bucket_it_pads_to() -> None:
    costs = {"1": 10.0, "2": 10.5, "4": 11.0, "8": 12.0, "16": 16.0, "32": 24.0}
    lines = profile_lines(costs, [1, 8], 3)
    assert lines[1].split("|")[0].strip() == "1" and lines[-3].endswith("2.40")
    assert lines[-2] == (
        "B=1: V(1)=10.00 ms, V(4)=11.00 ms: verifying K=3 drafts per request costs 1.10x a plain step"
    )
    assert lines[-1] == (
        "B=8: V(8)=12.00 ms, V(32)=24.00 ms: verifying K=3 drafts per request costs 2.00x a plain step"
    )
    assert profile_lines({"1": 1.0, "4": 2.0}, [2], 1)[-1].startswith("B=2: V(2)=2.00 ms, V(4)=2.00 ms")
