"""DSpark on vLLM's Model Runner V1: vLLM's own DSpark model class, block inputs from ``prepare_block_slots``.

vLLM runs DSpark only in its Model Runner V2 speculator (GPU); its V1 config check refuses the method. DSpark's
parallel stage is DFlash's (context K/V injected from the target's hidden states, one non-causal pass over a
query block), so this proposer is a DFlash proposer with three differences:

* **Q = K query positions** ``[anchor, mask x (K-1)]`` at ``p_b .. p_b + K - 1``: the anchor row predicts the
  first candidate, so every query row gives one (``prepare_block_slots(num_query_tokens=K,
  sample_from_anchor=True)``).
* **Markov head**, sequential over the block: candidate i is ``argmax(base_i + markov_bias(embed(t_{i-1})))``
  with ``t_0`` the anchor (or a draw from that distribution under probabilistic draft sampling).
* **Confidence head**: ``head_confidence(confidence_head(h_i, embed(t_{i-1})))``, one [B, K] float32 tensor per
  proposal, read with :meth:`AscendSpecDSparkProposer.last_confidences`. Under dynamic verification the head's
  ``[B, K]`` logits are this step's :class:`~ascend_spec.vllm.dynamic.DraftScores` (kind ``"head"``, through
  the inherited ``take_draft_scores()``): the controller scores DSpark drafts with ``head_confidence``, never
  with a max-softmax over the vocabulary, and a checkpoint without a confidence head is refused at load.

The model is vLLM's ``Qwen3DSparkForCausalLM`` (``Qwen3DSparkModel`` checkpoints, ``markov_head.*`` and
``confidence_head.*`` weights), loaded by V1's proposer loader (embeddings and lm_head shared with the target
when the checkpoint has none).
"""

from __future__ import annotations

import torch
from vllm.v1.attention.backend import CommonAttentionMetadata

from ascend_spec.ops import head_confidence
from ascend_spec.vllm.config import parse_config
from ascend_spec.vllm.dynamic import DraftScores
from ascend_spec.vllm.v1.dflash_proposer import AscendSpecDFlashProposer


class AscendSpecDSparkProposer(AscendSpecDFlashProposer):
    """DSpark drafter for V1 (module docstring); the runner builds it where it would build an EAGLE proposer."""

    sample_from_anchor = True
    draft_score_kind = "head"

    def __init__(self, vllm_config, device, runner=None) -> None:  # noqa: ANN001 - vLLM signature
        spec = vllm_config.speculative_config
        if spec is None or spec.method != "dspark":
            raise ValueError(
                "AscendSpecDSparkProposer drafts for speculative_config method 'dspark'; got "
                f"{None if spec is None else spec.method!r}"
            )
        settings = parse_config(vllm_config.additional_config)
        if settings is None or not settings.dspark:
            raise ValueError(
                "AscendSpecDSparkProposer needs additional_config['ascend_spec'] with dspark enabled"
            )
        _check_drafter(spec.draft_model_config)
        _aux_layers_in_dflash_config(spec.draft_model_config.hf_config)
        # DFlashProposer.__init__ asserts method == 'dflash'; its buffers are the ones DSpark needs. The method
        # reads 'dflash' only while that constructor runs (patch register: dspark_proposer_init).
        object.__setattr__(spec, "method", "dflash")
        try:
            super().__init__(vllm_config, device, runner)
        finally:
            object.__setattr__(spec, "method", "dspark")
        self.method = "dspark"
        self.ascend_spec = settings  # DSpark's block always comes from prepare_block_slots
        k = self.num_speculative_tokens
        self._anchor_token_ids = torch.zeros(self.max_batch_size, dtype=torch.int64, device=device)
        self._confidences = torch.zeros(self.max_batch_size, k, dtype=torch.float32, device=device)
        self._num_confident_reqs: int | None = None
        self._num_confident_cols = k

    @property
    def num_query_per_request(self) -> int:
        return self.num_speculative_tokens

    def load_model(self, target_model) -> None:  # noqa: ANN001 - vLLM signature
        super().load_model(target_model)
        check_confidence_head(self.model, self.keep_draft_scores, self.speculative_config.model)

    def model_returns_tuple(self) -> bool:
        # The base class reads method names; 'dspark' is not among those returning one tensor.
        return False

    def set_inputs_first_pass(
        self,
        target_token_ids: torch.Tensor,
        next_token_ids: torch.Tensor,
        target_positions: torch.Tensor,
        target_hidden_states: torch.Tensor,
        token_indices_to_sample: torch.Tensor | None,
        cad: CommonAttentionMetadata,
        num_rejected_tokens_gpu: torch.Tensor | None,
    ) -> tuple[int, torch.Tensor, CommonAttentionMetadata]:
        # V1's propose() projects the target's aux hidden states for 'eagle3'/'dflash' only.
        target_hidden_states = self.model.combine_hidden_states(target_hidden_states)
        batch = cad.batch_size()
        self._anchor_token_ids[:batch].copy_(next_token_ids[:batch])
        return super().set_inputs_first_pass(
            target_token_ids,
            next_token_ids,
            target_positions,
            target_hidden_states,
            token_indices_to_sample,
            cad,
            num_rejected_tokens_gpu,
        )

    def _sample_draft_tokens(self, hidden_states, sampling_metadata):  # noqa: ANN001, ANN202 - vLLM signature
        """Markov-head sampling over the block's K rows per request (request-major), then the confidences."""
        k = self.num_speculative_tokens
        rows = hidden_states.shape[0]
        if rows % k:
            raise ValueError(f"DSpark samples K={k} rows per request; got {rows} hidden rows")
        batch = rows // k
        base = self.model.compute_draft_logits(hidden_states).view(batch, k, -1)
        probabilistic = self._enable_probabilistic_draft_probs and not sampling_metadata.all_greedy
        prev = self._anchor_token_ids[:batch]
        tokens, embeds, probs = [], [], []
        for i in range(k):
            embed = self.model.markov_embed(prev)
            logits = base[:, i] + self.model.markov_bias(embed)
            if probabilistic:
                draft, p = self._sample_from_logits(logits, sampling_metadata)
                probs.append(p)
            else:
                draft = logits.argmax(dim=-1)
            draft = self.model.map_draft_to_target(draft)
            tokens.append(draft)
            embeds.append(embed)
            prev = draft
        self._record_confidences(hidden_states, torch.stack(embeds, dim=1).flatten(0, 1), batch)
        draft_ids = torch.stack(tokens, dim=1).flatten()
        draft_probs = (
            torch.stack(probs, dim=1).flatten(0, 1) if probabilistic and probs[0] is not None else None
        )
        return draft_ids, draft_probs

    def _record_confidences(
        self, hidden_states: torch.Tensor, markov_embeds: torch.Tensor, batch: int
    ) -> None:
        head = self.model.model.confidence_head
        if head is None:  # the checkpoint has no confidence head
            self._num_confident_reqs = None
            return
        logits = head(hidden_states, markov_embeds.to(hidden_states.dtype))
        k = self.num_speculative_tokens  # propose() may run with fewer tokens than the engine's K
        self._confidences[:batch, :k].copy_(head_confidence(logits).view(batch, k))
        self._num_confident_reqs, self._num_confident_cols = batch, k
        if self.keep_draft_scores:  # dynamic verification: the head's logits, consumed by take_draft_scores()
            self._draft_scores = DraftScores("head", logits.view(batch, k), batch, k)

    def last_confidences(self) -> torch.Tensor | None:
        """``[B, K]`` float32 confidences of the last proposal (``head_confidence`` of the DSpark confidence head,
        row b = request b of the runner's input batch, column i = candidate i), or None before the first
        proposal or when the checkpoint has no confidence head. A view of a persistent buffer: the next
        proposal overwrites it."""
        if self._num_confident_reqs is None:
            return None
        return self._confidences[: self._num_confident_reqs, : self._num_confident_cols]


def check_confidence_head(model, dynamic: bool, name: object) -> None:  # noqa: ANN001 - a DSpark model
    """Dynamic verification scores DSpark drafts with the confidence head: refuse a checkpoint without one
    (vLLM drops the head when the config does not enable it or the weights lack ``confidence_head.*``)."""
    if dynamic and model.model.confidence_head is None:
        raise ValueError(
            "additional_config['ascend_spec']['dynamic'] scores DSpark drafts with the drafter's confidence "
            f"head; the speculative model {name!r} has none (config enable_confidence_head and "
            "confidence_head.* weights). Use a checkpoint with a confidence head or switch 'dynamic' off"
        )


# vLLM's DSpark classes whose backbone is DFlash's Qwen3 stack (qwen3_dspark.Qwen3DSparkForCausalLM).
SUPPORTED_ARCHITECTURES = ("Qwen3DSparkModel", "Qwen3OmniDSparkModel")


def _check_drafter(draft_model_config) -> None:  # noqa: ANN001 - vLLM's ModelConfig
    """Refuse, naming the setting, the DSpark variants this proposer does not draft like V2 does."""
    archs = list(draft_model_config.architectures or [])
    if not set(archs) & set(SUPPORTED_ARCHITECTURES):
        raise ValueError(
            "additional_config['ascend_spec']['dspark'] runs DSpark drafters of architecture "
            f"{' or '.join(SUPPORTED_ARCHITECTURES)} on V1; the speculative model "
            f"{draft_model_config.model!r} resolved to {archs} (DeepSeek-V4, Gemma4 and Kimi DSpark drafters "
            "run on Model Runner V2 only)"
        )
    hf = draft_model_config.hf_config
    if getattr(hf, "dspark_draft_topk", None) is not None:
        raise ValueError(
            f"dspark_draft_topk={hf.dspark_draft_topk} (top-k truncated Markov sampling) is not supported by "
            "the plugin's V1 DSpark proposer; leave it unset (the full-vocabulary Markov bias is used)"
        )
    if not getattr(hf, "sample_from_anchor", True):
        raise ValueError(
            "sample_from_anchor=false (the 1+K fill-in block of speculators-format DSpark checkpoints) is not "
            "supported by the plugin's V1 DSpark proposer; it drafts Q = K positions from the anchor"
        )


def _aux_layers_in_dflash_config(hf_config) -> None:  # noqa: ANN001 - a transformers config
    """V1's runner reads the target layers feeding the drafter from ``dflash_config.target_layer_ids`` only;
    DSpark checkpoints may name them ``dspark_target_layer_ids`` or ``target_layer_ids`` (same 0-based
    semantics, vLLM's V2 reader adds one to each as for DFlash). Copy them there before the runner reads it."""
    dflash_config = dict(getattr(hf_config, "dflash_config", None) or {})
    if dflash_config.get("target_layer_ids"):
        return
    ids = getattr(hf_config, "dspark_target_layer_ids", None) or getattr(hf_config, "target_layer_ids", None)
    if ids:
        dflash_config["target_layer_ids"] = [int(i) for i in ids]
        hf_config.dflash_config = dflash_config
