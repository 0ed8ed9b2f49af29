"""The drafter's ACL graphs keyed on its own B x Q, not on the target's (ragged) step.

vllm-ascend's proposer asks ``runner.cudagraph_dispatcher.dispatch(num_tokens=..., uniform_decode=..., has_lora=...)``
for the draft pass, the target's dispatcher: a ragged target step (``uniform_decode`` False, as dynamic
verification produces) drops the drafter out of its FULL graphs, and the drafter is padded to the target's token
buckets. Its ``ACLGraphWrapper`` keys graphs on the forward context's ``BatchDescriptor``.
:class:`DraftBatchDispatcher` answers the same ``dispatch`` call from ascend-spec's
:class:`~ascend_spec.graph.dispatch.DraftGraphDispatcher`: the drafter always runs Q tokens per request (DFlash
K+1, DSpark K), so its descriptor depends only on the request count and the drafter's own sizes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ascend_spec.graph.buckets import GraphBuckets
from ascend_spec.graph.dispatch import DraftGraphDispatcher, GraphDescriptor


def draft_sizes_from_target(
    target_capture_sizes: Iterable[int],
    *,
    target_tokens_per_request: int,
    draft_tokens_per_request: int,
    max_requests: int,
) -> tuple[int, ...]:
    """One drafter size (r * Q) per request count r <= max_requests the target captures uniform graphs for."""
    target_capture_sizes = list(target_capture_sizes)
    counts = {
        s // target_tokens_per_request
        for s in target_capture_sizes
        if target_tokens_per_request <= s <= max_requests * target_tokens_per_request
    }
    if not counts:
        raise ValueError(
            f"the target captures no graph holding one full request of {target_tokens_per_request} tokens "
            f"(capture sizes {sorted(target_capture_sizes)}); set draft_capture_sizes or draft_graphs: false"
        )
    return tuple(sorted(r * draft_tokens_per_request for r in counts))


class DraftBatchDispatcher:
    """``dispatch`` with the signature of vLLM's ``CudagraphDispatcher.dispatch``, answered on the drafter's sizes.

    ``full_mode`` / ``none_mode`` are vLLM's ``CUDAGraphMode.FULL`` / ``NONE`` and ``descriptor_cls`` its
    ``BatchDescriptor``: passed in so this module does not import vLLM.
    """

    def __init__(
        self,
        sizes: Iterable[int],
        *,
        tokens_per_request: int,
        full_mode: Any,
        none_mode: Any,
        descriptor_cls: type,
        device: Any = "cpu",
    ) -> None:
        sizes = tuple(sizes)
        bad = [s for s in sizes if s % tokens_per_request]
        if bad:
            raise ValueError(
                f"additional_config['ascend_spec']['vllm_ascend']['draft_capture_sizes'] must be multiples of the "
                f"drafter's {tokens_per_request} tokens per request; got {bad}"
            )
        self.graphs = DraftGraphDispatcher(
            GraphBuckets(sizes), tokens_per_request=tokens_per_request, device=device
        )
        self.tokens_per_request = tokens_per_request
        self.full_mode = full_mode
        self.none_mode = none_mode
        self.descriptor_cls = descriptor_cls

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.graphs.buckets.sizes

    def for_requests(self, num_reqs: int, *, has_lora: bool = False) -> tuple[Any, Any, GraphDescriptor]:
        """(mode, vLLM BatchDescriptor, ascend-spec descriptor) of a draft pass over ``num_reqs`` requests."""
        desc = self.graphs.dispatch(num_reqs)
        if desc.eager:
            return self.none_mode, self.descriptor_cls(num_tokens=desc.num_tokens), desc
        batch = self.descriptor_cls(
            num_tokens=desc.num_tokens, num_reqs=desc.num_reqs, uniform=True, has_lora=has_lora
        )
        return self.full_mode, batch, desc

    def dispatch(self, num_tokens: int, uniform_decode: bool = False, has_lora: bool = False, **_: Any):
        """The drafter's (mode, BatchDescriptor) for ``num_tokens`` = B * Q draft tokens.

        ``uniform_decode`` (the target's step shape) is ignored: a draft block is always uniform. A token count
        that is not a whole number of requests (another K this step) runs eagerly.
        """
        if num_tokens <= 0 or num_tokens % self.tokens_per_request:
            return self.none_mode, self.descriptor_cls(num_tokens=num_tokens)
        mode, batch, _desc = self.for_requests(num_tokens // self.tokens_per_request, has_lora=has_lora)
        return mode, batch


def ensure_draft_graph_params(sizes: Iterable[int]) -> None:
    """Give vllm-ascend's draft graph params (keyed by the target's capture sizes) an entry per drafter size.

    FULL draft graphs record per-size attention params there (``update_full_graph_params``); sizes the target
    does not capture would otherwise be missing keys.
    """
    from vllm_ascend.compilation import acl_graph

    params = acl_graph.get_draft_graph_params()
    if params is None:  # no FULL graphs in this engine
        return
    for size in sizes:
        params.events.setdefault(size, [])
        params.workspaces.setdefault(size, None)
        params.handles.setdefault(size, [])
        params.attn_params.setdefault(size, [])
