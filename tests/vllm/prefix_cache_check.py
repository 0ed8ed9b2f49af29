"""Prefix caching with GDN verification, checked against plain decoding with prefix caching: the rounds the
engines decode, the probe that runs them (``prefix_cache_probe.py``, a child process), and the checks of tokens
and GDN states. Used by tests/vllm/test_vllm_prefix_caching.py (Model Runner V1 and V2) and
tests/vllm_ascend_emu/test_prefix_caching.py (vllm-ascend's runner on the emulated NPU).

A first round decodes past the hybrid's first cache block (256 tokens), so the boundary state of that block is
written while decoding, where the boundary may fall inside an accepted draft; a second round's prompts extend the
first round's prompts and outputs, so vLLM hands them that block's state (``num_cached_tokens``). Periodic
checkpoints (``prefix_cache_retention_interval``) make vLLM keep blocks that fill while decoding.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch
from engine_helpers import assert_matches_plain

from ascend_spec.e2e import fork_server
from ascend_spec.e2e.engine import EngineRun, EngineSpec, engine_child_env

PROBE = Path(__file__).with_name("prefix_cache_probe.py")
BLOCK = 256  # the tiny hybrid's attention/mamba block size in align mode
# Prompt lengths around the block size: the 256th token is decoded at a different step of each request.
PREFIX_LENGTHS = [236, 241, 246, 250]
# Two of them (the shortest and the longest prefix: the boundary at the 17th and the 3rd decoded token), for the
# engines that carry no inside-draft check (MTP's drafts) and the slowest ones (Triton's interpreter): each such
# engine decodes these alone, checked against plain decoding's same two (requests_of).
TWO_REQUESTS = [0, 3]
MAX_TOKENS = 40
KEEP = 30  # output tokens of the first round that the second round's prompts carry
STATE_TOLERANCE = 0.05  # relative norm error of a cached GDN state against plain decoding's (bf16 rounding)


def plain_rounds() -> list[dict]:
    """The plain engine's rounds: prompts around the block size, then prompts extending them by its output."""
    rng = random.Random(0)
    prefixes = [[rng.randrange(1, 500) for _ in range(n)] for n in PREFIX_LENGTHS]
    return [
        {"prompts": [p + [5, 6, 7] for p in prefixes]},
        {"keep": KEEP, "tails": [[8, 9]] * len(PREFIX_LENGTHS)},
    ]


def prefix_spec(models, **fields) -> EngineSpec:  # noqa: ANN001
    extra = {
        "enable_prefix_caching": True,
        "mamba_cache_mode": "align",
        "prefix_cache_retention_interval": BLOCK,
    }
    return EngineSpec(target=models.target, hybrid=True, max_model_len=1024, extra=extra, **fields)


def run_probe(
    work: Path, spec: EngineSpec, rounds: list[dict], *, logprobs: bool = False, env: dict | None = None
) -> dict:
    """prefix_cache_probe.py in a child process of this interpreter (caches and TMPDIR in ``work``); returns
    its result with the GDN states it kept ("hits", "boundaries")."""
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    request, result = work / "request.json", work / "result.json"
    spec_dict = {**spec.__dict__, "target": str(spec.target)}
    request.write_text(
        json.dumps({"spec": spec_dict, "rounds": rounds, "max_tokens": MAX_TOKENS, "logprobs": logprobs})
    )
    child_env = engine_child_env(work, env)
    code, output = fork_server.run_python(
        [str(PROBE), str(request), str(result)], child_env, work=work, runner=spec.runner, timeout=1200
    )
    assert code == 0 and result.exists(), output
    out = json.loads(result.read_text())
    out.update(torch.load(result.with_suffix(".pt")))  # "hits", "boundaries": GDN states by request
    return out


def requests_of(result: dict, indices: list[int]) -> dict:
    """A probe's result restricted to the requests at ``indices`` (in each round), with their GDN states: the
    oracle for an engine given only those requests (greedy decoding of one request does not depend on the others
    beside it, up to the bf16 ties the checks allow)."""
    if not indices or sorted(set(indices)) != sorted(indices):
        raise ValueError(f"indices must be distinct and non-empty, got {indices}")
    rounds = []
    for round_ in result["rounds"]:
        rounds.append({k: [v[i] for i in indices] if v else v for k, v in round_.items()})
    keys = {_prompt_key(rounds[0]["prompts"][i]) for i in range(len(indices))}
    out = {**result, "rounds": rounds}
    for name in ("hits", "boundaries"):
        if name in result:
            out[name] = {key: value for key, value in result[name].items() if key in keys}
    return out


def _prompt_key(prompt: list[int]) -> str:
    """The key the probe files a request's GDN states under: its first 8 prompt tokens."""
    return ",".join(map(str, prompt[:8]))


def same_first_block(plain_round: dict, our_round: dict) -> list[str]:
    """Keys (first 8 prompt tokens, as the probe writes them) of the requests whose prompt and output agree with
    plain decoding's over the whole first cache block."""
    keys = []
    for prompt, plain_tokens, our_tokens in zip(
        plain_round["prompts"], plain_round["tokens"], our_round["tokens"], strict=True
    ):
        if (prompt + plain_tokens)[:BLOCK] == (prompt + our_tokens)[:BLOCK]:
            keys.append(_prompt_key(prompt))
    return keys


def relative_errors(plain_states: list, our_states: list) -> list[float]:
    """Relative norm error of GDN states (conv and recurrent, each layer) against plain decoding's."""
    errors = []
    for plain_layer, our_layer in zip(plain_states, our_states, strict=True):
        for a, b in zip(plain_layer, our_layer, strict=True):
            errors.append(float((a - b).norm() / a.norm()))
    return errors


def _as_run(round_: dict) -> EngineRun:
    return EngineRun(tokens=round_["tokens"], top2=[[tuple(x) for x in row] for row in round_["top2"]])


def assert_matches_plain_with_prefix_caching(plain: dict, ours: dict, *, inside_draft: bool = True) -> None:
    """Both rounds equal plain decoding with prefix caching (up to bf16 ties), and so do the GDN states: every
    boundary state the plugin wrote in the first round (at an accepted draft token or not) and every cached state
    a second-round request started from, against the state plain decoding cached for the same prefix (its second
    round started from it), up to bf16 rounding (measured 1.7e-3..1e-2; one token too few committed at the
    boundary gives 0.25..1.5). ``inside_draft``: at least one compared boundary fell inside an accepted draft
    (where the drafter's acceptance makes that happen on these requests)."""
    assert plain["block_size"] == ours["block_size"] == BLOCK
    for p, o in zip(plain["rounds"], ours["rounds"], strict=True):
        assert_matches_plain(_as_run(p), _as_run(o), allow_ties=True)
    # Plain decoding reuses every first block; the speculative engine the ones vLLM's scheduler kept: it frees a
    # block whose boundary a step's drafts carried the request past before hashing it (docs/measurements.md).
    requests = len(plain["rounds"][0]["prompts"])
    assert plain["rounds"][1]["cached"] == [BLOCK] * requests
    assert len(plain["hits"]) == requests
    assert set(ours["rounds"][1]["cached"]) <= {0, BLOCK}
    # A request whose first round left plain decoding at a bf16 tie before the boundary has another state there.
    assert sorted(ours["boundaries"]) == sorted(plain["hits"])  # each request crossed its first block
    same = same_first_block(plain["rounds"][0], ours["rounds"][0])
    compared = {key: ours["boundaries"][key] for key in same}
    assert not inside_draft or any(b["inside_draft"] for b in compared.values()), (
        same,
        ours["boundaries"].keys(),
    )
    for key, written in compared.items():
        errors = relative_errors(plain["hits"][key], written["states"])
        assert max(errors) < STATE_TOLERANCE, (key, written["inside_draft"], errors)
    assert len(ours["hits"]) == ours["rounds"][1]["cached"].count(BLOCK)
    for key, states in ours["hits"].items():
        errors = relative_errors(plain["hits"][key], states)
        assert max(errors) < STATE_TOLERANCE, (key, errors)
    # Every request crossed the boundary while decoding and the plugin wrote each boundary state.
    assert ours["align"]["boundary_writes"] >= requests
