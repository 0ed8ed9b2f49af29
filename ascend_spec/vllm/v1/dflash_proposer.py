"""DFlash proposer whose block inputs come from ``prepare_block_slots``.

vLLM's V1 ``DFlashProposer.set_inputs_first_pass`` expands each request's block ``[anchor, mask x K]`` (ids,
positions, paged slots) and its context tokens with a kernel of its own. This subclass builds the same inputs
with the project's op: the anchor is the token the target just produced at position ``p_b`` (one past the last
accepted context token), the block covers ``p_b .. p_b + K`` (pages crossed through the block table), and the
context is the ``n_b`` accepted tokens of this target step at ``p_b - n_b .. p_b - 1``. In vLLM's padded
drafter batch the target step's rejected tokens are not context: their hidden states are dropped here instead of
being written to the drafter cache past the sequence end (where vLLM writes them and later overwrites them).

With dynamic verification on, the subclass also keeps this step's draft logits ``[B*K, V]`` for the controller
(:meth:`take_draft_scores`, the :class:`~ascend_spec.vllm.dynamic.ConfidenceSource` seam): DFlash has no
confidence head, so its confidence is the max-softmax of these logits.
"""

from __future__ import annotations

import torch
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.spec_decode.dflash import DFlashProposer

from ascend_spec.ops import prepare_block_slots
from ascend_spec.vllm.config import parse_config
from ascend_spec.vllm.dynamic import DraftScores


class AscendSpecDFlashProposer(DFlashProposer):
    """``DFlashProposer`` with ``prepare_block_slots`` input preparation (module docstring)."""

    # Block layout: [anchor, mask x K] with candidates read at the masks (DSpark overrides both).
    sample_from_anchor = False
    # What take_draft_scores() hands dynamic verification: the draft logits (DSpark: its confidence head).
    draft_score_kind = "logits"

    @property
    def num_query_per_request(self) -> int:
        return 1 + self.num_speculative_tokens

    def __init__(self, vllm_config, device, runner=None) -> None:  # noqa: ANN001 - vLLM signature
        super().__init__(vllm_config, device, runner)
        settings = parse_config(vllm_config.additional_config)
        self.ascend_spec = settings if settings is not None and settings.block_slots else None
        self.keep_draft_scores = settings is not None and settings.dynamic.enabled
        self._draft_scores: DraftScores | None = None
        # (logits, B, K) -> greedy draft tokens or None: dynamic verification's one pass over the draft logits
        # for the tokens and their confidences (set by the engine's verifier; DynamicVerifier.greedy_draft_tokens)
        self.greedy_draft_sampler = None
        if (
            self.keep_draft_scores
            and self.draft_score_kind == "logits"
            and (self.use_local_argmax_reduction or self.use_heterogeneous_vocab)
        ):
            raise ValueError(
                "additional_config['ascend_spec']['dynamic'] needs the DFlash drafter's full logits; it does not "
                "run with use_local_argmax_reduction or a heterogeneous draft vocabulary"
            )

    def take_draft_scores(self) -> DraftScores | None:
        """This step's draft logits (consumed once; None when the drafter has not run since)."""
        scores, self._draft_scores = self._draft_scores, None
        return scores

    def _sample_draft_tokens(self, hidden_states, sampling_metadata):  # noqa: ANN001, ANN202 - vLLM signature
        if not self.keep_draft_scores:
            return super()._sample_draft_tokens(hidden_states, sampling_metadata)
        # One logits computation serves both the drafts and their confidences.
        logits = self.model.compute_logits(hidden_states)
        k = self.num_speculative_tokens
        b = logits.shape[0] // k
        self._draft_scores = DraftScores("logits", logits, b, k)
        sampler = self.greedy_draft_sampler
        if sampler is not None and (
            not self._enable_probabilistic_draft_probs or sampling_metadata.all_greedy
        ):
            tokens = sampler(logits, b, k)  # what _sample_from_logits returns here: argmax, no probabilities
            if tokens is not None:
                return tokens, None
        return self._sample_from_logits(logits, sampling_metadata)

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
        if self.ascend_spec is None:
            return super().set_inputs_first_pass(
                target_token_ids,
                next_token_ids,
                target_positions,
                target_hidden_states,
                token_indices_to_sample,
                cad,
                num_rejected_tokens_gpu,
            )
        batch = cad.batch_size()
        q = self.num_query_per_request
        qsl = cad.query_start_loc[: batch + 1].to(torch.int64)
        step_lens = qsl[1:] - qsl[:-1]
        accepted = (
            step_lens if num_rejected_tokens_gpu is None else step_lens - num_rejected_tokens_gpu[:batch]
        )
        accepted = accepted.clamp_min(1)  # a row always carries its last token (discarded rows included)
        # Text positions: row 0 of M-RoPE positions (DFlash drafters are text models with 1-D rope).
        positions = target_positions if target_positions.dim() == 1 else target_positions[0]
        anchor_positions = positions.index_select(0, qsl[:-1] + accepted - 1) + 1
        # A block that starts within K of the table's end (a request near max_model_len) would run past it;
        # vLLM writes such positions into its null block 0, so extra table columns name block 0 (no host sync).
        table = cad.block_table_tensor[:batch].to(torch.int32)
        spare = torch.zeros(batch, -(-q // self.block_size) + 1, dtype=torch.int32, device=table.device)
        slots = prepare_block_slots(
            next_token_ids[:batch],
            anchor_positions,
            torch.cat([table, spare], dim=1),
            block_size=self.block_size,
            num_query_tokens=q,
            mask_token_id=int(self.parallel_drafting_token_id),
            sample_from_anchor=self.sample_from_anchor,
            context_lens=accepted,
            backend=self.ascend_spec.backend,
        )
        num_query = batch * q
        num_context = slots.context_slot_mapping.numel()
        self.input_ids[:num_query].copy_(slots.input_ids)
        self.positions[:num_query].copy_(slots.positions)
        self._slot_mapping_buffer[:num_query].copy_(slots.slot_mapping)
        self._context_positions_buffer[:num_context].copy_(slots.context_positions)
        self._context_slot_mapping_buffer[:num_context].copy_(slots.context_slot_mapping)
        self._dflash_num_context = num_context
        if num_context == target_hidden_states.shape[0]:
            self._dflash_hidden_states = target_hidden_states
        else:  # drop the rejected tokens' hidden states: row j of request b is step row qsl[b] + j
            start = slots.context_start_loc.to(torch.int64)
            req = torch.repeat_interleave(
                torch.arange(batch, device=qsl.device), accepted, output_size=num_context
            )
            rows = (
                qsl.index_select(0, req)
                + torch.arange(num_context, device=qsl.device)
                - start.index_select(0, req)
            )
            self._dflash_hidden_states = target_hidden_states.index_select(0, rows)

        upper = cad.seq_lens_cpu_upper_bound
        new_cad = CommonAttentionMetadata(
            query_start_loc=slots.query_start_loc,
            seq_lens=slots.seq_lens,
            query_start_loc_cpu=torch.arange(batch + 1, dtype=torch.int32) * q,
            seq_lens_cpu_upper_bound=upper + q if upper is not None else None,
            num_reqs=cad.num_reqs,
            num_actual_tokens=num_query,
            max_query_len=q,
            max_seq_len=cad.max_seq_len + q,
            block_table_tensor=cad.block_table_tensor,
            slot_mapping=self._slot_mapping_buffer[:num_query],
            causal=self.dflash_causal,
        )
        return num_query, slots.sample_indices, new_cad
