"""Separate graph dispatchers for the target and the drafter.

The target verifies 1 + (verified drafts) tokens per request; a block drafter runs Q tokens per request (Q = K+1
for DFlash: anchor + K masks; Q = K for DSpark, whose first candidate is read at the anchor). With one shared
dispatcher the drafter is padded to the target's graphs (seed: B = 16, K = 7 -> the target runs 16 x 8 = 128
tokens, the DSpark drafter only 16 x 7 = 112, with the 128 target hidden states as its context); the seed measured
+10% from separate dispatch. Each dispatcher here has its own buckets and tokens per request and returns a
:class:`GraphDescriptor` (padded tokens, padded requests, graph key; key None = eager).

Capture and replay go through ``torch.cuda.CUDAGraph`` on CUDA and torch_npu's ``torch.npu.NPUGraph`` on NPU
when torch_npu is importable; everywhere else the function runs eagerly. A captured function must read and write
only static buffers sized for the descriptor's padded shapes (the usual graph rule); the dispatcher keeps one graph
per key and one memory pool shared by all of them. Nothing here imports vLLM: the engine wiring adapts these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ascend_spec.checks import check_int
from ascend_spec.graph.buckets import GraphBuckets


@dataclass(frozen=True)
class GraphDescriptor:
    """What to run: ``num_tokens``/``num_reqs`` padded to the graph; ``key`` names the graph (None = eager)."""

    part: str  # "target" | "draft"
    num_tokens: int  # padded token count (the actual count when eager)
    num_reqs: int  # padded request count
    key: tuple | None
    actual_tokens: int
    actual_reqs: int
    uniform: bool  # every request has tokens_per_request tokens
    context_tokens: int | None = (
        None  # drafter: target hidden states it reads (padded requests x context per req)
    )

    @property
    def eager(self) -> bool:
        return self.key is None

    @property
    def padding_tokens(self) -> int:
        return self.num_tokens - self.actual_tokens


def graph_backend(device: torch.device | str) -> str:
    """ "cuda", "npu" (torch_npu with NPUGraph) or "eager" for tensors on ``device``."""
    kind = device.split(":")[0] if isinstance(device, str) else device.type
    if kind == "cuda" and torch.cuda.is_available():
        return "cuda"
    if kind == "npu":
        try:
            import torch_npu  # noqa: F401
        except ImportError:
            return "eager"
        if hasattr(torch, "npu") and hasattr(torch.npu, "NPUGraph"):
            return "npu"
    return "eager"


class _GraphDispatcher:
    part = ""

    def __init__(
        self,
        buckets: GraphBuckets,
        *,
        tokens_per_request: int,
        device: torch.device | str = "cpu",
        capture_warmup: int = 2,
    ) -> None:
        if not isinstance(buckets, GraphBuckets):
            buckets = GraphBuckets(buckets)
        self.buckets = buckets
        self.tokens_per_request = check_int("tokens_per_request", tokens_per_request, minimum=1)
        self.backend = graph_backend(device)
        try:
            self.device: torch.device | str = torch.device(device)
        except (
            RuntimeError
        ):  # "npu" parses only once torch_npu is imported; without it the graphs run eagerly
            self.device = device
        self.capture_warmup = check_int("capture_warmup", capture_warmup, minimum=0)
        self._graphs: dict[tuple, tuple[Any, Any]] = {}
        self._pool = None

    def _uniform(self, num_reqs: int) -> tuple[int, int, tuple | None, int]:
        q = self.tokens_per_request
        tokens = num_reqs * q
        bucket = self.buckets.pad(tokens)
        if bucket is None:
            return tokens, num_reqs, None, tokens
        return bucket, bucket // q, (self.part, "uniform", bucket), tokens

    def descriptors(self) -> list[GraphDescriptor]:
        """Every uniform graph :meth:`dispatch` can replay, once each, smallest first (what start-up captures).

        A bucket ``s`` runs the uniform batch of ``s // q`` requests exactly when no smaller bucket holds that
        batch; a bucket that no uniform batch pads to (e.g. 12 between 8 and 16 with ``q = 8``: one request
        runs the 8 graph, two the 16 graph) would be captured and never replayed, so it gets no descriptor.
        """
        q = self.tokens_per_request
        return [
            self.dispatch(size // q)
            for size in self.buckets
            if size >= q and self.buckets.pad(size // q * q) == size
        ]

    # -- capture and replay --------------------------------------------------------------------------------
    @property
    def captured(self) -> list[tuple]:
        return list(self._graphs)

    def capture(self, desc: GraphDescriptor, fn: Callable[[], Any]) -> Any:
        """Capture ``fn`` as the graph for ``desc`` (eager backends and eager descriptors: nothing to capture)."""
        if desc.key is None or self.backend == "eager":
            return None
        mod = torch.cuda if self.backend == "cuda" else torch.npu  # type: ignore[attr-defined]
        graph_cls = mod.CUDAGraph if self.backend == "cuda" else mod.NPUGraph
        if self._pool is None:
            self._pool = mod.graph_pool_handle()
        side = mod.Stream(device=self.device)
        side.wait_stream(mod.current_stream(self.device))
        with mod.stream(side):
            for _ in range(self.capture_warmup):
                fn()
        mod.current_stream(self.device).wait_stream(side)
        graph = graph_cls()
        with mod.graph(graph, pool=self._pool):
            out = fn()
        self._graphs[desc.key] = (graph, out)
        return out

    def run(self, desc: GraphDescriptor, fn: Callable[[], Any]) -> Any:
        """Replay the graph for ``desc`` (capturing it first if needed), or call ``fn`` eagerly."""
        if desc.key is None or self.backend == "eager":
            return fn()
        if desc.key not in self._graphs:
            self.capture(desc, fn)
        graph, out = self._graphs[desc.key]
        graph.replay()
        return out

    def clear(self) -> None:
        self._graphs.clear()
        self._pool = None


class TargetGraphDispatcher(_GraphDispatcher):
    """The target's graphs: ``tokens_per_request`` = 1 + verified drafts (K + 1 for uniform verification)."""

    part = "target"

    def dispatch(self, num_reqs: int, num_tokens: int | None = None) -> GraphDescriptor:
        """Uniform batch (``num_tokens`` None: every request runs tokens_per_request) or ragged (``num_tokens``).

        A ragged batch (each request 1..tokens_per_request tokens, e.g. after the controller's split) is padded
        to the token bucket, and its request count to the bucket holding it (requests added by padding have no
        tokens); above the largest bucket it runs eagerly.
        """
        b = check_int("num_reqs", num_reqs, minimum=1)
        if num_tokens is None:
            tokens, reqs, key, actual = self._uniform(b)
            return GraphDescriptor(self.part, tokens, reqs, key, actual, b, uniform=True)
        n = check_int("num_tokens", num_tokens, minimum=1)
        q = self.tokens_per_request
        if not b <= n <= b * q:
            raise ValueError(
                f"num_tokens must be between num_reqs ({b}) and num_reqs * tokens_per_request ({b * q}); got {n}"
            )
        if n == b * q:
            tokens, reqs, key, actual = self._uniform(b)
            return GraphDescriptor(self.part, tokens, reqs, key, actual, b, uniform=True)
        bucket = self.buckets.pad(n)
        if bucket is None:
            return GraphDescriptor(self.part, n, b, None, n, b, uniform=False)
        reqs = self.buckets.pad(b) or b  # b <= n <= bucket, so pad(b) exists and is <= bucket
        return GraphDescriptor(
            self.part, bucket, reqs, (self.part, "ragged", bucket, reqs), n, b, uniform=False
        )


class DraftGraphDispatcher(_GraphDispatcher):
    """The drafter's graphs: Q tokens per request (K + 1 for DFlash, K for DSpark), its own buckets.

    ``context_tokens_per_request`` (optional) is the number of target hidden states per request the drafter reads
    as context (K + 1 after a uniform verify); descriptors then carry ``context_tokens`` for the padded batch.
    """

    part = "draft"

    def __init__(
        self,
        buckets: GraphBuckets,
        *,
        tokens_per_request: int,
        context_tokens_per_request: int | None = None,
        device: torch.device | str = "cpu",
        capture_warmup: int = 2,
    ) -> None:
        super().__init__(
            buckets, tokens_per_request=tokens_per_request, device=device, capture_warmup=capture_warmup
        )
        self.context_tokens_per_request = (
            None
            if context_tokens_per_request is None
            else check_int("context_tokens_per_request", context_tokens_per_request, minimum=1)
        )

    def dispatch(self, num_reqs: int) -> GraphDescriptor:
        b = check_int("num_reqs", num_reqs, minimum=1)
        tokens, reqs, key, actual = self._uniform(b)
        ctx = None if self.context_tokens_per_request is None else reqs * self.context_tokens_per_request
        return GraphDescriptor(self.part, tokens, reqs, key, actual, b, uniform=True, context_tokens=ctx)
