"""Tiny random-weight checkpoints for engine runs without a model hub: targets and the drafters vLLM needs.

Targets are saved by transformers (so vLLM reads real HF checkpoints): a Qwen3 dense model, a Qwen3.5 hybrid
(Gated DeltaNet + full attention; GDN head dims 128, the only size vLLM's CPU GDN kernels take) and a Qwen3-Next
hybrid of the same GDN shapes (its interleaved q/k/v/z layout). The DFlash
and DSpark drafters and the Qwen3.5 MTP head are written as safetensors with the names vLLM's loaders expect.

``low_entropy=True`` keeps only a few non-zero lm_head rows: the target then picks among few tokens, so drafters
with random weights still get drafts accepted (tests assert acceptance > 0), and greedy margins are wide.

``constant=True`` (dense only) makes the target emit one token, always and with a wide margin, and its DFlash
and DSpark drafters draft that token with confidence ~1: perfect drafters. One hidden channel carries a constant
from the embeddings to the final norm (no layer writes it; every final norm keeps only it), and one lm_head row
reads it; the DSpark confidence head is certain of every draft (:func:`with_dspark_confidence` rewrites it).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch

VOCAB_SIZE = 512
HIDDEN_SIZE = 128
# Low-entropy targets: the lm_head rows of these tokens are the only non-zero ones.
LOW_ENTROPY_TOKENS = 6
# Part of the folder name: a changed generator never reuses checkpoints an older one wrote.
GENERATOR_VERSION = 4
# Constant targets: the channel that carries the constant, its value, and the token they emit.
CONSTANT_CHANNEL, CONSTANT_VALUE, CONSTANT_TOKEN = 0, 8.0, 7
# Constant DSpark drafters: the confidence head's logit for every draft (sigmoid(10) = 1 - 4.5e-5).
CONSTANT_CONFIDENCE_LOGIT = 10.0


@dataclass(frozen=True)
class TinyModels:
    """Paths of one generated set: a target and the drafters that fit it (None where none applies)."""

    target: Path
    dflash: Path
    mtp: bool  # the target checkpoint carries an MTP head (method "mtp" drafts from the target path)
    hybrid: bool
    dspark: Path | None = None  # a Qwen3DSparkModel drafter (Markov + confidence heads)
    eagle3: Path | None = None  # an EAGLE-3 drafter (dense targets only)


def _save_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True))


def _sharpen_lm_head(state: dict[str, torch.Tensor], generator: torch.Generator) -> None:
    """Zero every lm_head row except a few (with large norms) so the target is nearly deterministic."""
    w = state["lm_head.weight"]
    keep = torch.randperm(w.shape[0], generator=generator)[:LOW_ENTROPY_TOKENS]
    new = torch.zeros_like(w)
    new[keep] = (torch.randn(len(keep), w.shape[1], generator=generator) * 0.5).to(w.dtype)
    state["lm_head.weight"] = new


def _write_target(model: torch.nn.Module, out: Path, low_entropy: bool, seed: int) -> dict[str, torch.Tensor]:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(out)
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    if low_entropy:
        _sharpen_lm_head(state, torch.Generator().manual_seed(seed + 1))
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    return state


def tiny_qwen3_config(
    *, intermediate_size: int = 256, num_hidden_layers: int = 2, architecture: str = "Qwen3ForCausalLM"
):  # noqa: ANN201 - transformers' Qwen3Config
    """The built-in dense targets' shape (vocab, hidden size, heads); the MLP width, the depth and the
    architecture name are what the targets differ in."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        dtype="bfloat16",
        architectures=[architecture],
    )


def _qwen3_target(out: Path, *, low_entropy: bool, seed: int) -> dict[str, torch.Tensor]:
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(seed)
    return _write_target(Qwen3ForCausalLM(tiny_qwen3_config()).eval(), out, low_entropy, seed)


# The hybrids' shapes (Qwen3.5 and Qwen3-Next): 2 GDN + 2 full-attention layers. Wide KV heads keep vLLM's hybrid
# page alignment at ~144-token attention blocks (not ~1150), so a small KV cache fills within a few hundred
# tokens and the scheduler preempts (tests/vllm); GDN head dims 128 (vLLM's CPU GDN kernels take no other).
_HYBRID_SHAPES = dict(
    vocab_size=VOCAB_SIZE,
    hidden_size=HIDDEN_SIZE,
    intermediate_size=256,
    num_hidden_layers=4,
    layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
    num_attention_heads=8,
    num_key_value_heads=8,
    head_dim=64,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    max_position_embeddings=1024,
    tie_word_embeddings=False,
    dtype="bfloat16",
)


def _vary_gdn_gates(model: torch.nn.Module) -> None:
    """transformers initialises A_log/dt_bias to constants; vary them per head."""
    with torch.no_grad():
        for layer in model.model.layers:
            if hasattr(layer, "linear_attn"):
                layer.linear_attn.A_log.uniform_(-2.0, 0.5)
                layer.linear_attn.dt_bias.uniform_(-1.0, 1.0)


def hybrid_layer_types(gdn_groups: int) -> list[str]:
    """Two blocks of ``gdn_groups`` GDN layers and one full-attention layer. vLLM puts the GDN layers in
    ``gdn_groups`` KV-cache groups (groups as large as the attention group), each with its own block table: one
    request's state slot then differs from group to group, as in Qwen3.5's 3:1 layout."""
    if gdn_groups < 1:
        raise ValueError(f"gdn_groups must be at least 1; got {gdn_groups}")
    return (["linear_attention"] * gdn_groups + ["full_attention"]) * 2


def _qwen35_target(
    out: Path, *, low_entropy: bool, seed: int, gdn_groups: int = 1
) -> dict[str, torch.Tensor]:
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch.manual_seed(seed)
    types = hybrid_layer_types(gdn_groups)
    shapes = dict(_HYBRID_SHAPES, num_hidden_layers=len(types), layer_types=types)
    config = Qwen3_5TextConfig(**shapes, mtp_num_hidden_layers=1, architectures=["Qwen3_5ForCausalLM"])
    model = Qwen3_5ForCausalLM(config).eval()
    _vary_gdn_gates(model)
    state = _write_target(model, out, low_entropy, seed)
    _add_mtp_head(out, state, seed)
    return state


def _qwen3_next_target(out: Path, *, low_entropy: bool, seed: int) -> dict[str, torch.Tensor]:
    """Qwen3-Next: the same GDN shapes as the Qwen3.5 target, its interleaved q/k/v/z projection layout, a tiny
    sparse-MoE block (4 experts, 2 per token, a shared expert; vLLM's Qwen3-Next class needs at least one MoE
    layer) on the last layer, dense MLPs elsewhere, and no MTP head."""
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    torch.manual_seed(seed)
    layers = _HYBRID_SHAPES["num_hidden_layers"]
    config = Qwen3NextConfig(
        **_HYBRID_SHAPES,
        mlp_only_layers=list(range(layers - 1)),
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        shared_expert_intermediate_size=64,
        architectures=["Qwen3NextForCausalLM"],
    )
    model = Qwen3NextForCausalLM(config).eval()
    _vary_gdn_gates(model)
    return _write_target(model, out, low_entropy, seed)


def _add_mtp_head(out: Path, target: dict[str, torch.Tensor], seed: int) -> None:
    """Qwen3.5's MTP head (``mtp.*``: fc, one full-attention layer, norms) in a second safetensors shard."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed + 2)
    full = next(i for i in range(8) if f"model.layers.{i}.self_attn.q_proj.weight" in target)
    prefix = f"model.layers.{full}."
    mtp = {
        "mtp." + "layers.0." + k[len(prefix) :]: (v.float() + 0.02 * torch.randn(v.shape, generator=g)).to(
            v.dtype
        )
        for k, v in target.items()
        if k.startswith(prefix)
    }
    h = HIDDEN_SIZE
    mtp["mtp.fc.weight"] = (torch.randn(h, 2 * h, generator=g) * 0.05).to(torch.bfloat16)
    for name in ("norm", "pre_fc_norm_hidden", "pre_fc_norm_embedding"):
        mtp[f"mtp.{name}.weight"] = torch.zeros(h, dtype=torch.bfloat16)
    save_file(mtp, str(out / "mtp.safetensors"), metadata={"format": "pt"})


def _dflash_drafter(out: Path, *, target_layers: list[int], seed: int) -> None:
    """A one-layer DFlash drafter (Qwen3 decoder layer, fc over the target's aux hidden states, norms)."""
    from safetensors.torch import save_file
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed + 3)
    config = Qwen3Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=256,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    layer_state = Qwen3ForCausalLM(config).model.layers[0].state_dict()
    state = {f"layers.0.{k}": v.detach().to(torch.bfloat16).contiguous() for k, v in layer_state.items()}
    h = HIDDEN_SIZE
    g = torch.Generator().manual_seed(seed + 4)
    state["fc.weight"] = (torch.randn(h, h * len(target_layers), generator=g) * 0.05).to(torch.bfloat16)
    state["hidden_norm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    state["norm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = config.to_dict()
    cfg.update(
        architectures=["DFlashDraftModel"],
        model_type="qwen3",
        dflash_config={"mask_token_id": VOCAB_SIZE - 1, "target_layer_ids": target_layers},
        block_size=16,
    )
    _save_json(out / "config.json", cfg)


# DSpark drafters: rank of the Markov head (markov_w1 [V, r], markov_w2 [V, r]).
DSPARK_MARKOV_RANK = 16


def _dspark_drafter(out: Path, *, target_layers: list[int], seed: int) -> None:
    """A one-layer DSpark drafter in the layout vLLM's ``Qwen3DSparkForCausalLM`` loads: DFlash's backbone
    (decoder layer, fc over the target's aux hidden states, norms; embeddings and lm_head shared with the
    target), ``markov_head.markov_w1/w2`` and a float32 ``confidence_head.proj`` over [hidden, markov embed]."""
    from safetensors.torch import load_file, save_file

    _dflash_drafter(out, target_layers=target_layers, seed=seed + 10)
    state = load_file(str(out / "model.safetensors"))
    g = torch.Generator().manual_seed(seed + 11)
    h, r = HIDDEN_SIZE, DSPARK_MARKOV_RANK
    # Small transition bias: it changes some greedy choices without drowning the low-entropy target's rows.
    state["markov_head.markov_w1.weight"] = torch.randn(VOCAB_SIZE, r, generator=g).to(torch.bfloat16)
    state["markov_head.markov_w2.weight"] = (torch.randn(VOCAB_SIZE, r, generator=g) * 0.1).to(torch.bfloat16)
    state["confidence_head.proj.weight"] = torch.randn(1, h + r, generator=g) * 0.1
    state["confidence_head.proj.bias"] = torch.randn(1, generator=g)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((out / "config.json").read_text())
    cfg.update(
        architectures=["Qwen3DSparkModel"],
        markov_rank=r,
        enable_confidence_head=True,
        confidence_head_with_markov=True,
        sample_from_anchor=True,
    )
    _save_json(out / "config.json", cfg)


# EAGLE-3 drafters: the target layers whose hidden states feed the drafter's fc (vLLM's aux-hidden-state numbering:
# 0 = the embeddings, n = after layer n-1, so 2 = after the tiny dense target's last layer), the size of the
# drafter's own vocabulary, and the scale of its attention and MLP output projections (small: they run but
# barely move the residual stream).
EAGLE3_AUX_LAYERS = [0, 1, 2]
EAGLE3_DRAFT_VOCAB = 128
EAGLE3_WRITE_SCALE = 5e-4


def _eagle3_drafter(out: Path, *, target: Path, seed: int) -> None:
    """A one-layer EAGLE-3 drafter in the common checkpoint layout (``LlamaForCausalLMEagle3``): ``midlayer.*``
    (a Llama decoder layer whose q/k/v read [embedding, hidden], 2 x hidden wide, plus ``hidden_norm``), ``fc``
    over the target's aux hidden states, ``norm``, and its own lm_head over a reduced draft vocabulary with
    ``d2t`` (target id - draft id, per draft id) and ``t2d`` (which target ids it holds); the embeddings are the
    target's. Random weights, arranged so requests differ in acceptance: fc passes the last aux layer (the
    target's hidden state before its final norm, which chose the token just emitted) into the residual stream,
    attention and MLP add little, and the lm_head rows are the target's: every draft is ~the token the target
    just emitted, right where the target repeats a token and wrong elsewhere. The draft vocabulary holds every
    token with a non-zero target lm_head row (all of a low-entropy target's choices) plus random ones."""
    from safetensors.torch import load_file, save_file
    from transformers import LlamaConfig

    head = load_file(str(target / "model.safetensors"))["lm_head.weight"]
    g = torch.Generator().manual_seed(seed + 20)
    used = torch.nonzero(head.float().abs().sum(dim=1)).flatten().tolist()[:EAGLE3_DRAFT_VOCAB]
    taken = set(used)
    rest = [i for i in torch.randperm(VOCAB_SIZE, generator=g).tolist() if i not in taken]
    ids = torch.tensor(sorted(used + rest[: EAGLE3_DRAFT_VOCAB - len(used)]), dtype=torch.int64)
    h, heads, kv_heads, head_dim, inter = HIDDEN_SIZE, 4, 2, 32, 256

    def w(rows: int, cols: int, scale: float = 0.05) -> torch.Tensor:
        return (torch.randn(rows, cols, generator=g) * scale).to(torch.bfloat16)

    fc = w(h, h * len(EAGLE3_AUX_LAYERS), EAGLE3_WRITE_SCALE).float()
    fc[:, -h:] += torch.eye(h)  # the last aux layer (the target's final hidden state) passes through
    ones = torch.ones(h, dtype=torch.bfloat16)
    state = {
        "midlayer.self_attn.q_proj.weight": w(heads * head_dim, 2 * h),
        "midlayer.self_attn.k_proj.weight": w(kv_heads * head_dim, 2 * h),
        "midlayer.self_attn.v_proj.weight": w(kv_heads * head_dim, 2 * h),
        "midlayer.self_attn.o_proj.weight": w(h, heads * head_dim, EAGLE3_WRITE_SCALE),
        "midlayer.mlp.gate_proj.weight": w(inter, h),
        "midlayer.mlp.up_proj.weight": w(inter, h),
        "midlayer.mlp.down_proj.weight": w(h, inter, EAGLE3_WRITE_SCALE),
        "midlayer.input_layernorm.weight": ones.clone(),
        "midlayer.post_attention_layernorm.weight": ones.clone(),
        "midlayer.hidden_norm.weight": ones.clone(),
        "fc.weight": fc.to(torch.bfloat16),
        "norm.weight": ones.clone(),
        "lm_head.weight": head[ids].clone(),
        "d2t": ids - torch.arange(len(ids)),
        "t2d": torch.isin(torch.arange(VOCAB_SIZE), ids),
    }
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=h,
        intermediate_size=inter,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        dtype="bfloat16",
        architectures=["LlamaForCausalLMEagle3"],
    )
    cfg = config.to_dict()
    cfg.update(
        draft_vocab_size=EAGLE3_DRAFT_VOCAB,
        target_hidden_size=h,
        eagle_config={"eagle_aux_hidden_state_layer_ids": EAGLE3_AUX_LAYERS, "use_aux_hidden_state": True},
    )
    _save_json(out / "config.json", cfg)


def _make_constant(path: Path, norm: str) -> None:
    """Rewrite a dense target or a drafter checkpoint so it always picks CONSTANT_TOKEN (module docstring)."""
    from safetensors.torch import load_file, save_file

    d = CONSTANT_CHANNEL
    state = load_file(str(path))
    for name, w in state.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            w[d] = 0  # no layer writes the constant channel
    state[norm] = torch.zeros_like(state[norm])
    state[norm][d] = 1.0
    if "model.embed_tokens.weight" in state:
        state["model.embed_tokens.weight"][:, d] = CONSTANT_VALUE
        head = torch.zeros_like(state["lm_head.weight"])
        head[CONSTANT_TOKEN, d] = 50.0
        state["lm_head.weight"] = head
    save_file(state, str(path), metadata={"format": "pt"})


def _set_confidence_logit(path: Path, logit: float) -> None:
    """A DSpark confidence head that gives every draft the logit ``logit`` (zero weights, that bias)."""
    from safetensors.torch import load_file, save_file

    state = load_file(str(path))
    state["confidence_head.proj.weight"] = torch.zeros_like(state["confidence_head.proj.weight"])
    state["confidence_head.proj.bias"] = torch.full_like(state["confidence_head.proj.bias"], logit)
    save_file(state, str(path), metadata={"format": "pt"})


def with_dspark_confidence(models: TinyModels, out: Path, logit: float) -> TinyModels:
    """``models`` with a copy of its DSpark drafter (under ``out``) whose confidence head says ``logit`` for
    every draft: the drafts are unchanged, only what the head claims about them."""
    import shutil

    if models.dspark is None:
        raise ValueError(
            f"with_dspark_confidence needs a set with a DSpark drafter; {models.target} has none"
        )
    dst = Path(out) / f"dspark_confidence_{logit:g}"
    if not (dst / "done").exists():
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(models.dspark, dst)
        _set_confidence_logit(dst / "model.safetensors", logit)
        (dst / "done").write_text("ok")
    return dataclasses.replace(models, dspark=dst)


def make_tiny_models(
    root: Path,
    *,
    hybrid: bool,
    low_entropy: bool = False,
    constant: bool = False,
    seed: int = 0,
    qwen3_next: bool = False,
    gdn_groups: int = 1,
) -> TinyModels:
    """Write a target (Qwen3, the Qwen3.5 hybrid, or with ``qwen3_next`` a Qwen3-Next hybrid) and its DFlash and
    DSpark drafters (and, for the dense target, an EAGLE-3 drafter) under ``root``; reuse them if they already
    exist (same arguments, same files). ``gdn_groups`` > 1 (Qwen3.5 only) gives the hybrid that many GDN layers
    per full-attention layer, which vLLM keeps in that many KV-cache groups (:func:`hybrid_layer_types`)."""
    if constant and (hybrid or low_entropy):
        raise ValueError(
            "constant=True makes a dense target of its own; it takes neither hybrid nor low_entropy"
        )
    if qwen3_next and not hybrid:
        raise ValueError("qwen3_next=True makes a hybrid target; pass hybrid=True")
    if gdn_groups != 1 and (not hybrid or qwen3_next):
        raise ValueError(
            f"gdn_groups={gdn_groups} shapes the Qwen3.5 hybrid; pass hybrid=True without qwen3_next"
        )
    hybrid_layer_types(gdn_groups)  # refuses gdn_groups < 1 before anything is written
    kind = (
        ("qwen3next" if qwen3_next else "qwen35" if hybrid else "qwen3")
        + ("_lowent" if low_entropy else "")
        + ("_constant" if constant else "")
        + (f"_g{gdn_groups}" if gdn_groups != 1 else "")
        + f"_s{seed}_v{GENERATOR_VERSION}"
    )
    base = Path(root) / kind
    target, dflash, dspark = base / "target", base / "dflash", base / "dspark"
    done = base / "done"
    layers = [0, 3] if hybrid else [0, 1]
    if not done.exists():
        if qwen3_next:
            _qwen3_next_target(target, low_entropy=low_entropy, seed=seed)
        elif hybrid:
            _qwen35_target(target, low_entropy=low_entropy, seed=seed, gdn_groups=gdn_groups)
        else:
            _qwen3_target(target, low_entropy=low_entropy, seed=seed)
        _dflash_drafter(dflash, target_layers=layers, seed=seed)
        if constant:
            _make_constant(target / "model.safetensors", "model.norm.weight")
            _make_constant(dflash / "model.safetensors", "norm.weight")
        done.write_text("ok")
    if not (dspark / "done").exists():
        _dspark_drafter(dspark, target_layers=layers, seed=seed)
        if constant:
            _make_constant(dspark / "model.safetensors", "norm.weight")
            _set_confidence_logit(dspark / "model.safetensors", CONSTANT_CONFIDENCE_LOGIT)
        (dspark / "done").write_text("ok")
    eagle3 = None if hybrid else base / "eagle3"
    if eagle3 is not None and not (eagle3 / "done").exists():
        _eagle3_drafter(eagle3, target=target, seed=seed)
        (eagle3 / "done").write_text("ok")
    return TinyModels(
        target=target,
        dflash=dflash,
        mtp=hybrid and not qwen3_next,
        hybrid=hybrid,
        dspark=dspark,
        eagle3=eagle3,
    )
