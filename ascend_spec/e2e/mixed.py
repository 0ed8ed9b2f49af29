"""The mixed workload of ``ascend-spec e2e --sweep --workload mixed``: requests that differ, a target whose
step cost has a fixed and a per-token part.

**The target** (``AscendSpecStepCostQwen3ForCausalLM``, :mod:`ascend_spec.e2e.step_cost_target`) is a Qwen3
dense model whose output is a fixed function of the last token, ``next = successor[t]`` (a bigram model: every
layer's ``o_proj`` and ``down_proj`` are zero, so the residual stream is the token's embedding, and lm_head row
``u`` is the embedding of the token whose successor ``u`` is, scaled: a greedy margin of ~14 logits). The
successor permutation has two kinds of cycles:

- tokens 1..255 form short cycles (3-6 tokens): text in them repeats with a short period;
- tokens 0 and 256..511 form one long cycle (the *orbit*, 257 tokens): no request's output repeats.

**The requests** alternate between two classes (request 0, 2, ... repetitive; 1, 3, ... other):

- *repetitive*: a few periods of one short cycle. The target continues the period; ngram (``prompt_lookup_min``
  1, ``max`` 3) finds the last 3 tokens earlier in the text and drafts the period: every draft is accepted.
- *other*: the orbit's next ``L`` tokens in a stride permutation (no token followed by its successor), then the
  token before them. The target walks the orbit, and every token it emits occurs once in the prompt followed by a
  token that is not its successor, while no 2-gram of its output occurs earlier: ngram drafts (from a 1-token
  match) and every draft is rejected.

So a fixed K verifies K drafts for every request, half of them wasted; a planner that knew the classes would
verify K for the first half and none for the second.

**The drafters**: the DSpark drafter (:func:`_write_dspark`) knows the short cycles and not the long one: every
draft of a repetitive request is accepted, none of the others', and its confidence head says so (0.993 against
0.007), so dynamic verification can plan the two halves apart today. The DFlash drafter has random weights:
its drafts are rejected in both halves alike.

**The step cost** (why the target is not a plain Qwen3): on a CPU a GEMM is compute bound at a few tokens, so
every part of a dense model costs per token and nothing plays the accelerator's "weights read once per step".
The target therefore adds a deliberate fixed part: once per forward, one matrix-vector product of a
``[hidden, STEP_COST_COLUMNS]`` weight (64 MiB in bf16) with a fixed vector, its (small, constant) result added
to every token's hidden state: a memory-bound read of the whole weight whatever the step's tokens. The layers
(hidden 128, MLP ``PER_TOKEN_INTERMEDIATE`` wide, 2 layers) are the per-token part. docs/vllm.md has the
measured profile and why these sizes.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from math import gcd
from pathlib import Path

import torch

from ascend_spec.e2e.tiny_models import (
    HIDDEN_SIZE,
    VOCAB_SIZE,
    TinyModels,
    _dflash_drafter,
    _dspark_drafter,
    tiny_qwen3_config,
)

REPETITIVE, OTHER = "repetitive", "other"
CLASSES = (REPETITIVE, OTHER)
# The architecture name vLLM resolves to the step-cost target (registered by the e2e engine harness).
STEP_COST_ARCH = "AscendSpecStepCostQwen3ForCausalLM"
# The fixed part: a [HIDDEN_SIZE, STEP_COST_COLUMNS] bf16 weight read once per forward (64 MiB).
STEP_COST_COLUMNS = 262_144
# The per-token part: 2 Qwen3 layers with this MLP width.
PER_TOKEN_INTERMEDIATE = 2048
PER_TOKEN_LAYERS = 2
SHORT_CYCLE_LENGTHS = (3, 4, 5, 6)
REPETITIVE_TOKENS = range(1, 256)
# lm_head scale: the successor's logit is ~SCALE, the best other one ~0.3 x SCALE.
LOGIT_SCALE = 20.0
# Longest output + K an *other* request may ask for: its prompt lists that many orbit tokens (and 8 more).
MAX_REQUEST_TOKENS = VOCAB_SIZE - len(REPETITIVE_TOKENS) - 10
# The DSpark drafter's Markov head: rank (one dimension per token), and the bias it puts on a successor.
MARKOV_RANK = VOCAB_SIZE
MARKOV_BIAS = 40.0
# Its confidence head's logit: +CONFIDENCE_LOGIT after a repetitive token, -CONFIDENCE_LOGIT after any other.
CONFIDENCE_LOGIT = 5.0
GENERATOR_VERSION = 3


@dataclass(frozen=True)
class MixedTokens:
    """The target's successor function and its cycles."""

    successor: list[int]  # successor[t]: the target's greedy next token after t
    cycles: list[list[int]]  # the short cycles (repetitive text)
    orbit: list[int]  # the long cycle, in order (orbit[i + 1] = successor[orbit[i]])

    def continuation(self, last: int, n: int) -> list[int]:
        """The target's greedy output after a prompt ending in ``last`` (its oracle)."""
        out, t = [], last
        for _ in range(n):
            t = self.successor[t]
            out.append(t)
        return out


def mixed_tokens(seed: int = 0) -> MixedTokens:
    """The successor permutation (module docstring), the same for the same seed."""
    rng = random.Random(seed)
    short = list(REPETITIVE_TOKENS)
    rng.shuffle(short)
    cycles: list[list[int]] = []
    i = 0
    while i < len(short):
        n = rng.choice(SHORT_CYCLE_LENGTHS)
        if len(short) - (i + n) < min(SHORT_CYCLE_LENGTHS):  # the rest joins this cycle
            n = len(short) - i
        cycles.append(short[i : i + n])
        i += n
    orbit = [t for t in range(VOCAB_SIZE) if t not in set(REPETITIVE_TOKENS)]
    rng.shuffle(orbit)
    successor = [0] * VOCAB_SIZE
    for cycle in [*cycles, orbit]:
        for a, b in zip(cycle, cycle[1:] + cycle[:1]):
            successor[a] = b
    return MixedTokens(successor, cycles, orbit)


def _stride(length: int) -> int:
    """A stride coprime to ``length`` whose steps never land on the next index (nor the previous one)."""
    for s in (5, 7, 11, 13, 17, 19, 23):
        if gcd(s, length) == 1 and s % length not in (1, length - 1):
            return s
    raise ValueError(f"no stride for a prompt body of {length} tokens")


def other_body_length(max_tokens: int, num_spec: int) -> int:
    """Orbit tokens an *other* prompt lists: every token its output (and the drafts after it) can reach."""
    return max_tokens + num_spec + 8


def mixed_prompts(
    num: int, *, max_tokens: int, num_spec: int, seed: int = 0
) -> tuple[list[list[int]], list[str]]:
    """``num`` prompts of the mixed workload and their classes (even index repetitive, odd other)."""
    tokens = mixed_tokens(seed)
    body = other_body_length(max_tokens, num_spec)
    if max_tokens + num_spec > MAX_REQUEST_TOKENS:
        raise ValueError(
            f"max_tokens + num_spec must be at most {MAX_REQUEST_TOKENS} for the mixed workload "
            f"(its long cycle has {len(tokens.orbit)} tokens); got {max_tokens} + {num_spec}"
        )
    rng = random.Random(seed + 1)
    stride = _stride(body)
    prompts, classes = [], []
    for i in range(num):
        if i % 2 == 0:
            cycle = rng.choice(tokens.cycles)
            start = rng.randrange(len(cycle))
            n = 12 + 3 * (i // 2 % 4)
            period = cycle[start:] + cycle[:start]
            prompts.append((period * (n // len(period) + 1))[:n])
            classes.append(REPETITIVE)
        else:
            p = rng.randrange(len(tokens.orbit))
            orbit = tokens.orbit
            listed = [orbit[(p + 1 + (j * stride) % body) % len(orbit)] for j in range(body)]
            prompts.append(listed + [orbit[p]])
            classes.append(OTHER)
    return prompts, classes


def _write_target(out: Path, tokens: MixedTokens, seed: int) -> None:
    from safetensors.torch import save_file
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = tiny_qwen3_config(
        intermediate_size=PER_TOKEN_INTERMEDIATE,
        num_hidden_layers=PER_TOKEN_LAYERS,
        architecture=STEP_COST_ARCH,
    )
    config.step_cost_columns = STEP_COST_COLUMNS
    model = Qwen3ForCausalLM(config).eval()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(seed + 5)
    for name in state:  # the layers compute (the per-token cost) but write nothing into the residual stream
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            state[name].zero_()
    emb = torch.randn(VOCAB_SIZE, HIDDEN_SIZE, generator=g)
    state["model.embed_tokens.weight"] = emb
    state["model.norm.weight"] = torch.ones(HIDDEN_SIZE)
    head = torch.empty_like(emb)
    for t, u in enumerate(tokens.successor):  # logit_u = <head_u, norm(e_t)> is largest for u = successor[t]
        head[u] = emb[t] * (LOGIT_SCALE / HIDDEN_SIZE)
    state["lm_head.weight"] = head
    # The fixed part: a small constant bias (|bias| ~0.01 per channel against embeddings of ~1 per channel).
    state["step_cost.weight"] = torch.randn(HIDDEN_SIZE, STEP_COST_COLUMNS, generator=g) * (
        0.01 / STEP_COST_COLUMNS**0.5
    )
    state["step_cost.probe"] = torch.randn(STEP_COST_COLUMNS, generator=g)
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    save_file(
        {k: v.to(torch.bfloat16).contiguous() for k, v in state.items()},
        str(out / "model.safetensors"),
        metadata={"format": "pt"},
    )
    (out / "successor.json").write_text(json.dumps(tokens.successor))


def _write_dspark(out: Path, tokens: MixedTokens, target_layers: list[int], seed: int) -> None:
    """A DSpark drafter that knows the short cycles and gets the long one wrong (module docstring).

    Its Markov head has one rank dimension per token, so its bias is exact: +MARKOV_BIAS on the successor of a
    repetitive token, -MARKOV_BIAS on the successor of any other (without it the random backbone's first draft
    would be right: its block position 0 carries the anchor token's embedding, which the shared lm_head maps to
    the successor). Its confidence head reads the Markov embedding only: sigmoid(+CONFIDENCE_LOGIT) after a
    repetitive token, sigmoid(-CONFIDENCE_LOGIT) after any other.
    """
    from safetensors.torch import load_file, save_file

    _dspark_drafter(out, target_layers=target_layers, seed=seed)
    state = load_file(str(out / "model.safetensors"))
    repetitive = set(REPETITIVE_TOKENS)
    w1 = torch.eye(VOCAB_SIZE, MARKOV_RANK) * MARKOV_BIAS
    w2 = torch.zeros(VOCAB_SIZE, MARKOV_RANK)
    for t in range(VOCAB_SIZE):  # bias[u] = <w1[t], w2[u]> = +-MARKOV_BIAS iff u = successor[t]
        w2[tokens.successor[t], t] = 1.0 if t in repetitive else -1.0
    state["markov_head.markov_w1.weight"] = w1.to(torch.bfloat16)
    state["markov_head.markov_w2.weight"] = w2.to(torch.bfloat16)
    proj = torch.zeros(1, HIDDEN_SIZE + MARKOV_RANK)
    for t in repetitive:  # the Markov embedding of t is MARKOV_BIAS on dimension t
        proj[0, HIDDEN_SIZE + t] = 2 * CONFIDENCE_LOGIT / MARKOV_BIAS
    state["confidence_head.proj.weight"] = proj
    state["confidence_head.proj.bias"] = torch.tensor([-CONFIDENCE_LOGIT])
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((out / "config.json").read_text())
    cfg["markov_rank"] = MARKOV_RANK
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))


def make_mixed_models(root: Path, *, seed: int = 0) -> TinyModels:
    """The step-cost target and its DFlash and DSpark drafters under ``root`` (reused when already written)."""
    base = Path(root) / f"mixed_stepcost_s{seed}_v{GENERATOR_VERSION}"
    target, dflash, dspark = base / "target", base / "dflash", base / "dspark"
    done = base / "done"
    layers = [0, PER_TOKEN_LAYERS - 1]
    if not done.exists():
        tokens = mixed_tokens(seed)
        _write_target(target, tokens, seed)
        _dflash_drafter(dflash, target_layers=layers, seed=seed)
        _write_dspark(dspark, tokens, layers, seed)
        done.write_text("ok")
    return TinyModels(target=target, dflash=dflash, mtp=False, hybrid=False, dspark=dspark)


def class_lengths(
    tokens: list[list[int]], drafts: list[list[int]], classes: list[str]
) -> dict[str, dict[str, float]]:
    """Per request class: mean verify length and tokens per decode step, over every decode step of its requests.

    ``drafts`` holds vLLM's per-request ``[steps with drafts, draft tokens, accepted]``. A request's decode steps
    are its output tokens after the first (the prefill's) less its accepted drafts, so a step that verified no
    draft (a zero-length plan, a skipped drafter, an ngram miss) counts with verify length 1, unlike vLLM's
    own mean, which counts only steps with drafts. Empty when the run has no per-request metrics.
    """
    if not drafts or len(drafts) != len(tokens) or len(classes) != len(tokens):
        return {}
    sums: dict[str, list[int]] = {}
    for out, (with_drafts, drafted, accepted), cls in zip(tokens, drafts, classes):
        steps = max(with_drafts, len(out) - 1 - accepted)
        s = sums.setdefault(cls, [0, 0, 0])
        s[0] += steps
        s[1] += drafted
        s[2] += steps + accepted
    return {
        cls: {"verify": (steps + drafted) / steps, "accept": emitted / steps}
        for cls, (steps, drafted, emitted) in sums.items()
        if steps
    }
