"""The plugin's seam in vLLM's Model Runner V2 (``vllm/v1/worker/gpu/model_runner.py``, and the CPU runner built
on it, ``vllm/v1/worker/cpu/model_runner.py``), installed by :func:`install_v2` on a release listed for V2.

* :mod:`~ascend_spec.vllm.v2.runner`: ``v2_runner_init`` (applies the rest to an enabled runner), the GDN flush
  of leaving requests (``v2_gdn_flush``), the start-up line;
* :mod:`~ascend_spec.vllm.v2.dflash_inputs`: DFlash / DSpark block inputs from ``prepare_block_slots``
  (``v2_dflash_inputs``).

V2's GDN metadata (``model_states/mamba_hybrid.py``, ``prepare_attn``) already carries what the plugin's GDN layer
reads (the scheduled drafts per request as speculative rows, the accepted counts per request on the device), so
the layer serves V1 and V2 unchanged; only where a leaving request's state slot and accepted count are found
differs (:mod:`ascend_spec.vllm.gdn_setup` holds what the runners share).
"""

from __future__ import annotations

from ascend_spec.vllm.releases import VllmRelease, missing_targets

_RUNNER_MODULE = "vllm.v1.worker.gpu.model_runner"
_HYBRID_STATE_MODULE = "vllm.v1.worker.gpu.model_states.mamba_hybrid"

# Class attributes the hooks wrap or read; a release without one is not hooked at all. Their bodies, and the
# rest the hooks rely on, are compared across releases by scripts/compare_vllm_releases.py --runner v2.
V2_TARGETS = (
    (_RUNNER_MODULE, "GPUModelRunner", "__init__"),
    (_RUNNER_MODULE, "GPUModelRunner", "load_model"),
    (_RUNNER_MODULE, "GPUModelRunner", "finish_requests"),
    (_RUNNER_MODULE, "GPUModelRunner", "_remove_request"),
    (_RUNNER_MODULE, "GPUModelRunner", "add_requests"),  # a streaming re-add calls _remove_request
    (_HYBRID_STATE_MODULE, "MambaHybridModelState", "add_request"),  # resets num_accepted_tokens_gpu to 1
    (_HYBRID_STATE_MODULE, "MambaHybridModelState", "prepare_attn"),  # the GDN metadata's speculative rows
    (_HYBRID_STATE_MODULE, "MambaHybridModelState", "postprocess_state"),  # keeps num_accepted_tokens_gpu
)


def missing_v2_targets() -> list[str]:
    """The V2 targets the installed vLLM lacks (dotted names)."""
    return missing_targets(V2_TARGETS)


def unhooked_v2_runner(platform=None) -> str | None:  # noqa: ANN001
    """Why this process's V2 runner would not run the wrapped ``GPUModelRunner.__init__``, or None.

    vLLM 0.34's CPU worker builds ``StandaloneCPUModelRunner`` (``vllm/v1/worker/cpu/standalone_model_runner.py``,
    not a ``GPUModelRunner`` subclass) where ``uses_standalone_cpu_model_runner()`` says so (no Triton on a
    non-x86 CPU, ``platforms/cpu.py:652-656``): an enabled engine there would run without the plugin.
    """
    if platform is None:
        from vllm.platforms import current_platform as platform
    standalone = getattr(platform, "uses_standalone_cpu_model_runner", None)
    if standalone is not None and standalone():
        return "its CPU worker builds the standalone V2 runner (StandaloneCPUModelRunner), which has no hooks"
    return None


def install_v2(release: VllmRelease) -> None:
    """Wrap V2's runner constructor for ``release``; a missing target raises before anything is wrapped."""
    missing = missing_v2_targets()
    if missing:
        raise RuntimeError(f"vLLM {release.version} lacks Model Runner V2's {', '.join(missing)}")
    from vllm.v1.worker.gpu import model_runner

    from ascend_spec.vllm.v2.runner import wrap_runner_init

    runner = model_runner.GPUModelRunner
    if not getattr(runner.__init__, "_ascend_spec_v2", False):
        runner.__init__ = wrap_runner_init(runner.__init__, release)
