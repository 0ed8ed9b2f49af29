"""vllm-ascend's DFlash and DSpark proposers with ascend-spec's verify scheduler and the drafter's own graphs.

The NPU runner type-checks its drafter (``isinstance(self.drafter, AscendDSparkProposer)`` and friends), so these
are subclasses; :func:`proposer_class` picks one for the engine's method. Each subclass:

* replaces ``self.dynamic_spec`` (vllm-ascend's ``DynamicSpecScheduler`` or None) with
  :class:`~ascend_spec.vllm.ascend.verify_scheduler.AscendSpecDynamicSpec` when ``dynamic`` is on;
* DFlash with ACL graphs: runs ``_propose`` and ``dummy_run`` with the runner's ``cudagraph_dispatcher`` seen
  as a :class:`~ascend_spec.vllm.ascend.draft_graphs.DraftBatchDispatcher` on the drafter's sizes, so capture and
  replay use the same B x Q descriptors whatever the target's step looks like. DSpark runs eagerly on
  vllm-ascend's V1 path (its proposer sets ``use_cuda_graph = False``), so it has no draft graphs to dispatch.

This module imports vllm_ascend: it is imported only by the adapter, on an NPU runner.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from vllm.config import CUDAGraphMode
from vllm.forward_context import BatchDescriptor
from vllm_ascend.spec_decode.dflash_proposer import AscendDflashProposer
from vllm_ascend.spec_decode.dspark_proposer import AscendDSparkProposer

from ascend_spec.vllm.ascend.draft_graphs import (
    DraftBatchDispatcher,
    draft_sizes_from_target,
    ensure_draft_graph_params,
)
from ascend_spec.vllm.ascend.verify_scheduler import AscendSpecDynamicSpec
from ascend_spec.vllm.config import AscendSpecConfig, parse_config


def _adapter_backend(settings: AscendSpecConfig) -> str:
    """The ops' backend on NPU: ``auto`` means ascendc (the AscendC kernels of the compiled extension)."""
    return "ascendc" if settings.backend == "auto" else settings.backend


class _AscendSpecProposerMixin:
    """What both proposers add; ``method`` and ``draft_tokens_per_request`` differ."""

    method = ""
    ascend_spec: AscendSpecConfig | None
    draft_graphs: DraftBatchDispatcher | None

    def _setup_ascend_spec(self, vllm_config: Any, device: Any) -> None:
        settings = parse_config(vllm_config.additional_config)
        self.ascend_spec = settings
        self.draft_graphs = None
        if settings is None:
            return
        if settings.dynamic.enabled:
            self.dynamic_spec = self._verify_scheduler(settings, device)
        if settings.vllm_ascend.draft_graphs and getattr(self, "use_cuda_graph", False):
            self.draft_graphs = self._draft_dispatcher(settings, vllm_config, device)

    def _verify_scheduler(self, settings: AscendSpecConfig, device: Any) -> AscendSpecDynamicSpec:
        """The planner comes at the engine's first real step (:mod:`ascend_spec.vllm.ascend.dynamic`)."""
        return AscendSpecDynamicSpec(
            method=self.method,
            planner=None,
            max_batch_size=self.max_batch_size,  # type: ignore[attr-defined]
            num_speculative_tokens=self.num_speculative_tokens,  # type: ignore[attr-defined]
            device=device,
            backend=_adapter_backend(settings),
        )

    def _draft_dispatcher(
        self, settings: AscendSpecConfig, vllm_config: Any, device: Any
    ) -> DraftBatchDispatcher:
        q = self.draft_tokens_per_request()
        max_reqs = self.max_batch_size  # type: ignore[attr-defined]
        sizes = settings.vllm_ascend.draft_capture_sizes or draft_sizes_from_target(
            vllm_config.compilation_config.cudagraph_capture_sizes or (),
            target_tokens_per_request=1 + self.num_speculative_tokens,  # type: ignore[attr-defined]
            draft_tokens_per_request=q,
            max_requests=max_reqs,
        )
        too_many = [size for size in sizes if size // q > max_reqs]
        if too_many:
            raise ValueError(
                "additional_config['ascend_spec']['vllm_ascend']['draft_capture_sizes'] hold more requests "
                f"than max_num_seqs={max_reqs} at {q} tokens each: {too_many}"
            )
        return DraftBatchDispatcher(
            sizes,
            tokens_per_request=q,
            full_mode=CUDAGraphMode.FULL,
            none_mode=CUDAGraphMode.NONE,
            descriptor_cls=BatchDescriptor,
            device=device,
        )

    def draft_tokens_per_request(self) -> int:
        raise NotImplementedError

    @contextlib.contextmanager
    def _own_graph_dispatch(self) -> Iterator[None]:
        """The runner's dispatcher reads as the drafter's while this proposer dispatches its own pass."""
        if self.draft_graphs is None:
            yield
            return
        runner = self.runner  # type: ignore[attr-defined]
        target = runner.cudagraph_dispatcher
        runner.cudagraph_dispatcher = self.draft_graphs
        try:
            yield
        finally:
            runner.cudagraph_dispatcher = target

    def _propose(self, num_speculative_tokens: int, *args: Any, **kwargs: Any) -> Any:
        """The draft pass (on the drafter's own graphs), then the verify lengths outside any graph."""
        spec = getattr(self, "dynamic_spec", None)
        ours = isinstance(spec, AscendSpecDynamicSpec)
        if ours and num_speculative_tokens > 0:
            spec.step_drafts = num_speculative_tokens
        with self._own_graph_dispatch():
            drafts = super()._propose(num_speculative_tokens, *args, **kwargs)  # type: ignore[misc]
        if ours:
            next_ids = kwargs.get("next_token_ids")
            num_reqs = int(next_ids.shape[0]) if next_ids is not None else int(drafts.shape[0])
            spec.req_ids = self.runner.input_batch.req_ids  # type: ignore[attr-defined]
            spec.finish(num_reqs, num_drafts=num_speculative_tokens)
        return drafts

    def dummy_run(
        self,
        num_tokens: int,
        num_reqs: int = 0,
        num_tokens_across_dp: Any = None,
        aclgraph_runtime_mode: Any = CUDAGraphMode.NONE,
        batch_descriptor: Any = None,
        **kwargs: Any,
    ) -> None:
        """Capture/warm up at the drafter's descriptor for ``num_reqs`` (the runner passes the target's)."""
        graphs = self.draft_graphs
        if graphs is None or num_reqs <= 0 or aclgraph_runtime_mode != CUDAGraphMode.FULL:
            return super().dummy_run(  # type: ignore[misc]
                num_tokens,
                num_reqs=num_reqs,
                num_tokens_across_dp=num_tokens_across_dp,
                aclgraph_runtime_mode=aclgraph_runtime_mode,
                batch_descriptor=batch_descriptor,
                **kwargs,
            )
        mode, batch, desc = graphs.for_requests(
            num_reqs, has_lora=getattr(batch_descriptor, "has_lora", False)
        )
        ensure_draft_graph_params(graphs.sizes)
        with self._own_graph_dispatch():
            return super().dummy_run(  # type: ignore[misc]
                desc.num_tokens,
                num_reqs=desc.num_reqs,
                num_tokens_across_dp=None,
                aclgraph_runtime_mode=mode,
                batch_descriptor=batch,
                **kwargs,
            )


class AscendSpecNPUDflashProposer(_AscendSpecProposerMixin, AscendDflashProposer):
    """vllm-ascend's DFlash proposer; Q = K + 1 (anchor + K masks)."""

    method = "dflash"

    def __init__(self, vllm_config: Any, device: Any, runner: Any = None) -> None:
        super().__init__(vllm_config, device, runner=runner)
        self._setup_ascend_spec(vllm_config, device)

    def draft_tokens_per_request(self) -> int:
        return 1 + self.num_speculative_tokens

    def set_inputs_first_pass(
        self,
        target_token_ids: Any,
        next_token_ids: Any,
        target_positions: Any,
        target_hidden_states: Any,
        token_indices_to_sample: Any,
        cad: Any,
        num_rejected_tokens_gpu: Any,
        req_scheduled_tokens: Any = None,
        long_seq_metadata: Any = None,
        num_prefill_reqs: int = 0,
        num_decode_reqs: int = 0,
    ) -> Any:
        """``block_slots`` on: the block inputs from ``prepare_block_slots`` (ascend_spec/vllm/ascend/
        block_inputs.py); off, or with context parallelism (``long_seq_metadata``): vllm-ascend's kernel."""
        settings = self.ascend_spec
        if settings is None or not settings.block_slots or long_seq_metadata is not None:
            return super().set_inputs_first_pass(
                target_token_ids,
                next_token_ids,
                target_positions,
                target_hidden_states,
                token_indices_to_sample,
                cad,
                num_rejected_tokens_gpu,
                req_scheduled_tokens=req_scheduled_tokens,
                long_seq_metadata=long_seq_metadata,
                num_prefill_reqs=num_prefill_reqs,
                num_decode_reqs=num_decode_reqs,
            )
        from ascend_spec.vllm.ascend.block_inputs import set_block_inputs

        return set_block_inputs(
            self,
            next_token_ids=next_token_ids,
            target_positions=target_positions,
            target_hidden_states=target_hidden_states,
            cad=cad,
            num_rejected_tokens_gpu=num_rejected_tokens_gpu,
            backend=_adapter_backend(settings),
        )


class AscendSpecNPUDSparkProposer(_AscendSpecProposerMixin, AscendDSparkProposer):
    """vllm-ascend's DSpark proposer; Q = K when the first candidate is read at the anchor, else K + 1."""

    method = "dspark"

    def __init__(self, vllm_config: Any, device: Any, runner: Any = None) -> None:
        super().__init__(vllm_config, device, runner=runner)
        self._setup_ascend_spec(vllm_config, device)

    def draft_tokens_per_request(self) -> int:
        return self.num_query_per_req


PROPOSERS = {"dflash": AscendSpecNPUDflashProposer, "dspark": AscendSpecNPUDSparkProposer}


def proposer_class(method: str) -> type | None:
    """The adapter's proposer for a speculative method, or None (vllm-ascend's own proposer is kept)."""
    return PROPOSERS.get(method)
