"""The plugin's seam in vLLM's Model Runner V1 (``vllm/v1/worker/gpu_model_runner.py``, and the CPU and
vllm-ascend runners built on it): one module per hook, installed by :func:`install_v1` on a supported release.

* :mod:`~ascend_spec.vllm.v1.runner`: ``runner_init`` (applies everything below to an enabled runner), the GDN
  flush, the start-up line;
* :mod:`~ascend_spec.vllm.v1.dspark_check`: V1's DSpark refusal lifted for the plugin's DSpark drafter;
* :mod:`~ascend_spec.vllm.v1.dflash_proposer`, :mod:`~ascend_spec.vllm.v1.dspark_proposer`: the drafters;
* :mod:`~ascend_spec.vllm.v1.dynamic_hooks`, :mod:`~ascend_spec.vllm.v1.dynamic_async`: dynamic verification's
  step hooks (sync and async scheduling);
* :mod:`~ascend_spec.vllm.v1.rejection_expand`: the CPU engine's rejection-sampler expansion.

What differs between releases is read from the release's :class:`~ascend_spec.vllm.releases.V1Shims`.
"""

from __future__ import annotations

from ascend_spec.vllm.releases import VllmRelease, missing_targets

# Class attributes the process-wide points wrap; a release without one is not hooked at all.
V1_TARGETS = (
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "__init__"),
    ("vllm.config", "VllmConfig", "_get_v1_model_runner_unsupported_features"),
    ("vllm.v1.core.sched.async_scheduler", "AsyncScheduler", "schedule"),
    ("vllm.v1.core.sched.async_scheduler", "AsyncScheduler", "update_from_output"),
)


def missing_v1_targets() -> list[str]:
    """The process-wide V1 targets the installed vLLM lacks (dotted names)."""
    return missing_targets(V1_TARGETS)


def install_v1(release: VllmRelease) -> None:
    """Wrap V1's process-wide targets for ``release``; a missing target raises before anything is wrapped."""
    missing = missing_v1_targets()
    if missing:
        raise RuntimeError(f"vLLM {release.version} lacks Model Runner V1's {', '.join(missing)}")
    from vllm.config import VllmConfig
    from vllm.v1.worker import gpu_model_runner

    from ascend_spec.vllm.v1.dspark_check import wrap_v1_check
    from ascend_spec.vllm.v1.dynamic_async import install_async_scheduler
    from ascend_spec.vllm.v1.runner import wrap_runner_init

    runner = gpu_model_runner.GPUModelRunner
    runner.__init__ = wrap_runner_init(runner.__init__, release)
    VllmConfig._get_v1_model_runner_unsupported_features = wrap_v1_check(
        VllmConfig._get_v1_model_runner_unsupported_features
    )
    install_async_scheduler()
