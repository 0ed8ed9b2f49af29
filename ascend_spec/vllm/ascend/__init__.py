"""The vllm-ascend adapter: the same plugin on vllm-ascend's V1 path (``NPUModelRunner``) on Ascend NPUs.

Active only for a runner that is vllm-ascend's ``NPUModelRunner`` (so only where vllm_ascend is importable) and
whose engine enables the plugin (``additional_config["ascend_spec"]``). The plugin's ``runner_init`` wrapper calls
:func:`prepare_npu_runner` before the runner is built; it checks the vllm-ascend and vLLM versions
(:mod:`~ascend_spec.vllm.ascend.version`: vllm-ascend 0.30.0rc2 with vLLM 0.30.0) and installs the adapter's
hooks, each listed in the register (:data:`ascend_spec.vllm.patch_register.PATCH_POINTS`, ``releases`` naming the
vllm-ascend release). One module per hook:

* :mod:`~ascend_spec.vllm.ascend.config_key`: ``AscendConfig`` leaves ``additional_config["ascend_spec"]`` alone
  (installed by ``register()`` where vllm_ascend is importable, the one hook that precedes any runner);
* :mod:`~ascend_spec.vllm.ascend.runner`: ``NPUModelRunner._get_drafter`` -> the adapter's proposers;
* :mod:`~ascend_spec.vllm.ascend.proposers`: subclasses of ``AscendDflashProposer`` / ``AscendDSparkProposer``;
* :mod:`~ascend_spec.vllm.ascend.block_inputs`: DFlash's block inputs from ``prepare_block_slots``;
* :mod:`~ascend_spec.vllm.ascend.verify_scheduler`: the ``DynamicSpecScheduler`` replacement and the planner seam;
* :mod:`~ascend_spec.vllm.ascend.draft_graphs`: the drafter's ACL graphs on its own B x Q;
* :mod:`~ascend_spec.vllm.ascend.gdn`: the GDN layer of part 1's ragged verification on vllm-ascend's GDN path.

Nothing here imports vllm_ascend at import time.
"""

from __future__ import annotations

import importlib.util
from typing import Any

RUNNER_MODULE = "vllm_ascend.worker.model_runner_v1"
V2_RUNNER_MODULE = "vllm_ascend.worker.v2.model_runner"
RUNNER_CLASS = "NPUModelRunner"


def vllm_ascend_importable() -> bool:
    return importlib.util.find_spec("vllm_ascend") is not None


def is_npu_runner(runner: Any, module: str = RUNNER_MODULE) -> bool:
    """True for vllm-ascend's NPUModelRunner defined in ``module`` (default: its Model Runner V1's;
    ``V2_RUNNER_MODULE``: its Model Runner V2) and its subclasses; never true without vllm_ascend."""
    return any(c.__name__ == RUNNER_CLASS and c.__module__ == module for c in type(runner).__mro__)


def check_versions() -> None:
    """The installed vllm-ascend and vLLM against :mod:`~ascend_spec.vllm.ascend.version` (RuntimeError if not)."""
    import vllm

    from ascend_spec.vllm.ascend.version import check_versions as _check
    from ascend_spec.vllm.ascend.version import installed_vllm_ascend_version

    _check(installed_vllm_ascend_version(), str(vllm.__version__))


def prepare_npu_runner() -> None:
    """Before an enabled NPU runner is built: versions checked, then the class-level hooks (idempotent)."""
    check_versions()
    from ascend_spec.vllm.ascend.runner import install_get_drafter

    install_get_drafter()
