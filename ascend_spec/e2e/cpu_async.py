"""V1's async scheduling on vLLM's CPU engine, for the harness and the tests: one process, switched on explicitly.

vLLM 0.32's CPU platform turns async scheduling off in ``CpuPlatform.check_and_update_config`` ("not required on
CPU"), and V1's async output path calls ``torch.cuda`` streams and events, which a CPU-only torch cannot create.
On a host device every op has completed when it returns, so a stream to order work on and an event to wait for
have nothing to do: :func:`enable_cpu_async_scheduling` keeps an engine's requested ``async_scheduling`` through
the platform check and gives ``torch.cuda`` stream and event objects that do nothing. Everything else is V1's own
async machinery (the ``AsyncScheduler`` with its placeholder drafts, two batches in flight, the runner's
``prev_sampled_token_ids`` / draft scatter, ``AsyncGPUModelRunnerOutput``), which is what dynamic verification's
async mode needs to be run end to end without a GPU (docs/vllm.md). Refused where CUDA is available.
"""

from __future__ import annotations

import contextlib
from typing import Any

_enabled = False


class _HostEvent:
    """``torch.cuda.Event`` on a host device: the work before it has already completed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record(self, *args: Any, **kwargs: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait(self, *args: Any, **kwargs: Any) -> None:
        pass

    def query(self) -> bool:
        return True


class _HostStream:
    """``torch.cuda.Stream`` on a host device: ops run in program order, nothing to wait for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, *args: Any) -> None:
        pass

    def wait_event(self, *args: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass


def enable_cpu_async_scheduling() -> None:
    """Let engines started after this in this process run V1's async scheduling on the CPU (idempotent)."""
    global _enabled
    if _enabled:
        return
    import torch

    if torch.cuda.is_available():
        raise RuntimeError("enable_cpu_async_scheduling is for CPU-only processes; this one has CUDA")
    from vllm.platforms import cpu as cpu_platform

    platform = cpu_platform.CpuPlatform
    original = platform.check_and_update_config.__func__

    def check_and_update_config(cls, vllm_config) -> None:  # noqa: ANN001
        requested = vllm_config.scheduler_config.async_scheduling
        original(cls, vllm_config)
        if requested:  # the engine asked for it: undo the platform's reset
            vllm_config.scheduler_config.async_scheduling = True

    platform.check_and_update_config = classmethod(check_and_update_config)
    torch.cuda.Event = _HostEvent
    torch.cuda.Stream = _HostStream
    torch.cuda.current_stream = lambda *args, **kwargs: _HostStream()
    torch.cuda.stream = lambda *args, **kwargs: contextlib.nullcontext()
    _enabled = True
