"""The plugin on vLLM's Model Runner V2 (V2 on the CPU engine through ascend_spec.e2e.cpu_v2): the hybrid keeps one
GDN state slot per request and decodes what V1 plain decoding decodes.

V2's Triton kernels run in Triton's interpreter here, so V2 steps are slow: a few short prompts. The oracle is V1
plain decoding of the same target with the same engine limits (low-entropy target: wide logit margins, exact
match); every V2 run must report that the worker built V2 (V2 falls back to V1 silently where Triton is missing).
"""

from __future__ import annotations

import pytest
from block_inputs_compare import compare_block_inputs
from engine_helpers import (
    ONE_OMP_THREAD,
    PREEMPTION_KV_CACHE_BYTES,
    PREEMPTION_LENGTHS,
    PROMPTS,
    K,
    assert_matches_plain,
    gdn_bytes_per_request,
    run,
    speculative,
)

pytestmark = pytest.mark.slow

PLUGIN: dict = {}  # enabled with its defaults
V2_PROMPTS = PROMPTS[:3]
V2_LENGTHS = [10, 8, 12]
# Ragged drafts from V2's own scheduler: prompt + max_tokens of the last two requests reach max_model_len, so
# their last steps get fewer than K drafts (scheduler.py caps a request's tokens at max_model_len - computed - 1);
# two sequences at a time, so the later requests take the state slots of finished ones.
RAGGED_PROMPTS = PROMPTS[:4]  # 6, 11, 16, 21 tokens
RAGGED_LENGTHS = [10, 14, 12, 7]
RAGGED_LIMITS = {"max_model_len": 28}


def _run(engine_dir, models, runner: str, method: str | None = None, **kwargs):
    if method is not None:
        kwargs["speculative"] = speculative(method, models)
    kwargs.setdefault("prompts", V2_PROMPTS)
    kwargs.setdefault("max_tokens", V2_LENGTHS)
    return run(engine_dir, models, env=ONE_OMP_THREAD, runner=runner, **kwargs)


@pytest.fixture(scope="module")
def v1_plain(engine_dir, hybrid_low_entropy):
    result = _run(engine_dir, hybrid_low_entropy, "v1")
    assert result.runner == "v1"
    return result


def _assert_lossless_on_one_slot(v1_plain, v2, lengths: list[int]) -> None:
    assert v2.runner == "v2", f"the worker built {v2.runner}, not Model Runner V2"
    assert [len(t) for t in v2.tokens] == lengths
    assert v2.tokens == v1_plain.tokens
    assert v2.num_drafts > 0 and v2.num_accepted > 0, (v2.num_drafts, v2.num_accepted)
    assert v2.gdn_slots_per_request == 1


def test_dflash_on_one_state_slot_against_upstream_v2(engine_dir, hybrid_low_entropy, v1_plain):
    """Upstream V2 keeps 1 + K GDN state slots per request (and K more conv columns per slot); the plugin one slot
    plus its records of 1 + K tokens outside the KV cache: both byte counts follow the formula, in the same run."""
    upstream = _run(engine_dir, hybrid_low_entropy, "v2", "dflash")
    ours = _run(engine_dir, hybrid_low_entropy, "v2", "dflash", plugin=PLUGIN)
    assert upstream.runner == "v2" and upstream.tokens == v1_plain.tokens
    _assert_lossless_on_one_slot(v1_plain, ours, V2_LENGTHS)
    assert upstream.gdn_slots_per_request == 1 + K
    want_ours = gdn_bytes_per_request(hybrid_low_entropy, K, plugin=True)
    want_upstream = gdn_bytes_per_request(hybrid_low_entropy, K, plugin=False)
    assert ours.gdn_state_bytes_per_request == want_ours
    assert upstream.gdn_state_bytes_per_request == want_upstream
    print(
        f"GDN state bytes per request on V2: upstream {want_upstream}, plugin {want_ours}, "
        f"ratio {want_upstream / want_ours:.3f}"
    )
    assert want_upstream > want_ours


@pytest.mark.parametrize("method", ["ngram", "mtp"])
def test_method_on_one_state_slot_matches_v1_plain(engine_dir, hybrid_low_entropy, v1_plain, method):
    ours = _run(engine_dir, hybrid_low_entropy, "v2", method, plugin=PLUGIN)
    _assert_lossless_on_one_slot(v1_plain, ours, V2_LENGTHS)
    assert ours.gdn_state_bytes_per_request == gdn_bytes_per_request(hybrid_low_entropy, K, plugin=True)


def test_ragged_drafts_and_slot_reuse_match_v1_plain(engine_dir, hybrid_low_entropy):
    """Requests near max_model_len get 1..K-1 drafts from V2's scheduler (ragged speculative rows next to full
    ones), requests finish at different steps (flush) and later requests take their state slots."""
    kwargs = {"prompts": RAGGED_PROMPTS, "max_tokens": RAGGED_LENGTHS, "extra": RAGGED_LIMITS}
    plain = _run(engine_dir, hybrid_low_entropy, "v1", **kwargs)
    ours = _run(engine_dir, hybrid_low_entropy, "v2", "ngram", plugin=PLUGIN, max_num_seqs=2, **kwargs)
    _assert_lossless_on_one_slot(plain, ours, RAGGED_LENGTHS)
    assert ours.num_draft_tokens < K * ours.num_drafts, "no step verified fewer than K drafts"
    # The warm-up request and every request that finished before the last step left V2's request states
    # through the flush (the last step's finished requests leave at the next step); only those hold records.
    finished_last = 2  # at most max_num_seqs
    print(
        f"flushed {ours.gdn_flushed_requests}, recorded slots {ours.gdn_recorded_slots}, drafts {ours.num_drafts}, draft tokens {ours.num_draft_tokens}"
    )
    assert ours.gdn_flushed_requests >= 1 + len(RAGGED_PROMPTS) - finished_last
    assert ours.gdn_recorded_slots <= finished_last


def test_preemption_with_a_small_kv_cache(engine_dir, hybrid_low_entropy, plain_hybrid_long):
    """Requests grow past one attention block in a cache of 11 blocks: V2's scheduler preempts (recompute), the
    flush commits the preempted requests' records as they leave V2's request states, their recomputed prefill
    starts their slots afresh, and the output stays that of plain decoding (V1)."""
    ours = _run(
        engine_dir,
        hybrid_low_entropy,
        "v2",
        "ngram",
        plugin=PLUGIN,
        prompts=PROMPTS,
        max_tokens=PREEMPTION_LENGTHS,
        kv_cache_bytes=PREEMPTION_KV_CACHE_BYTES,
    )
    assert ours.runner == "v2" and ours.gdn_slots_per_request == 1
    assert ours.num_preemptions > 0 and plain_hybrid_long.num_preemptions == 0
    # every preemption and every finished request but the last step's went through the flush
    assert ours.gdn_flushed_requests >= ours.num_preemptions + 1
    print(
        f"preemptions {ours.num_preemptions}, flushed {ours.gdn_flushed_requests}, accepted {ours.num_accepted}"
    )
    # 250-token greedy runs of a bf16 model meet near ties (as the V1 test): comparison stops only there
    assert_matches_plain(plain_hybrid_long, ours, allow_ties=True)


def test_dflash_block_inputs_from_prepare_block_slots(engine_dir, hybrid_low_entropy, v1_plain):
    """With block_slots (the default) V2's DFlash inputs come from prepare_block_slots: the drafter sees the
    inputs V2's own kernel gives it, so drafts and acceptance are those of the same engine with V2's kernel."""
    ours = _run(engine_dir, hybrid_low_entropy, "v2", "dflash", plugin=PLUGIN)
    kernel = _run(engine_dir, hybrid_low_entropy, "v2", "dflash", plugin={"block_slots": False})
    _assert_lossless_on_one_slot(v1_plain, ours, V2_LENGTHS)
    assert ours.block_slot_calls and ours.block_slot_calls > 0
    assert kernel.block_slot_calls is None
    assert kernel.tokens == ours.tokens
    assert (ours.num_drafts, ours.num_draft_tokens, ours.num_accepted, ours.accepted_per_position) == (
        kernel.num_drafts,
        kernel.num_draft_tokens,
        kernel.num_accepted,
        kernel.accepted_per_position,
    )


@pytest.mark.parametrize("drafter", ["dflash-hybrid", "dspark-dense"])
def test_block_inputs_equal_v2_kernels_buffers(models_dir, drafter, tmp_path):
    """Every draft step: V2's own kernel and the prepare_block_slots path, run on the same state, write equal
    buffers (ids, positions, query and context slots, query_start_loc, seq_lens, sampling rows and state)."""
    import os

    from ascend_spec.e2e.tiny_models import make_tiny_models

    method, target = drafter.split("-")
    models = make_tiny_models(models_dir, hybrid=target == "hybrid", low_entropy=True)
    draft = str(models.dflash if method == "dflash" else models.dspark)
    spec = {
        "target": str(models.target),
        "hybrid": models.hybrid,
        "speculative": {"method": method, "model": draft, "num_speculative_tokens": K},
        "plugin": PLUGIN,
        "runner": "v2",
    }
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "VLLM_USE_V2_MODEL_RUNNER")}
    env.update(ONE_OMP_THREAD, VLLM_ENABLE_V1_MULTIPROCESSING="0", TMPDIR=str(tmp_path))
    out = compare_block_inputs(spec, V2_PROMPTS, V2_LENGTHS, work=tmp_path, env=env, cpu_v2=True, timeout=600)
    assert len(out["steps"]) > 0 and out["run"].num_accepted > 0
    assert [s for s in out["steps"] if s[1]] == [], out["steps"]
