"""Separate graph dispatch for the target and the drafter of one engine, from its vLLM config.

The target verifies B + T tokens per step (ragged after the controller's split); a block drafter runs B x Q tokens
(Q = K + 1 for DFlash: anchor + K masks; Q = K for DSpark, whose first candidate is read at the anchor). vLLM's V1
drafter pads to the target's capture sizes, so a ragged target step also decides the drafter's graph. Here each
part has its own :mod:`ascend_spec.graph` dispatcher: the drafter's sizes are multiples of its own Q
(``GraphBuckets.for_engine(max_num_seqs, Q)``), the target's are vLLM's capture sizes where graphs exist and the
controller's bucket boundaries (``GraphBuckets.for_engine(max_num_seqs * (K + 1))``) on an eager engine. The
cost profiles are measured at exactly these sizes (:mod:`ascend_spec.vllm.cost_profiles`), so the controller's
step costs are those of the graphs that run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ascend_spec.graph import DraftGraphDispatcher, GraphBuckets, GraphDescriptor, TargetGraphDispatcher

#: Drafter query tokens per request as a function of K, by speculative method: a block drafter's one pass (DFlash
#: K + 1, DSpark K); a sequential drafter's tokens per forward (EAGLE, EAGLE-3, MTP, draft_model: one per request
#: in each of its K forwards); ngram runs no forward (its profile is the host lookup, ~0).
DRAFT_QUERY_TOKENS = {
    "dflash": lambda k: k + 1,
    "dspark": lambda k: k,
    "ngram": lambda k: 1,
    "mtp": lambda k: 1,
    "eagle": lambda k: 1,
    "eagle3": lambda k: 1,
    "draft_model": lambda k: 1,
    "ngram_gpu": lambda k: 1,
}
#: Methods whose drafter scores its own drafts (take_draft_scores); the others are planned on the estimate.
SCORED_METHODS = ("dflash", "dspark")
#: What each runner's dynamic verification plans. Model Runner V2 runs "ngram_gpu" with its ngram speculator
#: (vLLM's ``SpeculativeConfig.use_ngram()`` covers both names), so it is planned as ngram there; V1 runs a
#: separate device-side proposer for it that the plugin does not hook.
V1_PLANNED_METHODS = tuple(m for m in DRAFT_QUERY_TOKENS if m != "ngram_gpu")
V2_PLANNED_METHODS = tuple(DRAFT_QUERY_TOKENS)


def draft_query_tokens(method: str, num_spec_tokens: int) -> int:
    if method not in DRAFT_QUERY_TOKENS:
        raise ValueError(
            f"speculative method {method!r} has no block-drafter query size; known: {', '.join(DRAFT_QUERY_TOKENS)}"
        )
    return DRAFT_QUERY_TOKENS[method](num_spec_tokens)


def target_capture_sizes(vllm_config) -> list[int] | None:  # noqa: ANN001
    """vLLM's target capture sizes, or None when the engine runs eagerly (enforce_eager, CPU)."""
    if vllm_config.model_config.enforce_eager:
        return None
    sizes = vllm_config.compilation_config.cudagraph_capture_sizes
    return sorted(set(sizes)) if sizes else None


@dataclass(frozen=True)
class EngineGraphs:
    """The two dispatchers of one engine and the numbers they were built from."""

    target: TargetGraphDispatcher
    draft: DraftGraphDispatcher
    num_spec_tokens: int
    draft_tokens_per_request: int
    graphs: bool  # False: eager engine, the buckets are the controller's boundaries only

    def step(self, num_reqs: int, target_tokens: int) -> tuple[GraphDescriptor, GraphDescriptor]:
        """(draft, target) descriptors of one step: the draft one depends on B only, never on target_tokens."""
        return self.draft.dispatch(num_reqs), self.target.dispatch(num_reqs, target_tokens)


def build_engine_graphs(
    *,
    method: str,
    num_spec_tokens: int,
    max_num_seqs: int,
    capture_sizes: list[int] | None,
    device: torch.device | str = "cpu",
) -> EngineGraphs:
    k = num_spec_tokens
    q = draft_query_tokens(method, k)
    verify_q = k + 1
    if capture_sizes:
        target_buckets = GraphBuckets(capture_sizes)
    else:
        target_buckets = GraphBuckets.for_engine(max_num_seqs * verify_q)
    draft_buckets = GraphBuckets.for_engine(max_num_seqs, q)
    return EngineGraphs(
        target=TargetGraphDispatcher(target_buckets, tokens_per_request=verify_q, device=device),
        draft=DraftGraphDispatcher(
            draft_buckets, tokens_per_request=q, context_tokens_per_request=verify_q, device=device
        ),
        num_spec_tokens=k,
        draft_tokens_per_request=q,
        graphs=bool(capture_sizes),
    )


def engine_graphs(vllm_config, device: torch.device | str = "cpu") -> EngineGraphs:  # noqa: ANN001
    spec = vllm_config.speculative_config
    return build_engine_graphs(
        method=spec.method,
        num_spec_tokens=spec.num_speculative_tokens,
        max_num_seqs=vllm_config.scheduler_config.max_num_seqs,
        capture_sizes=target_capture_sizes(vllm_config),
        device=device,
    )
