"""The NPU runner's drafter choice: ``NPUModelRunner._get_drafter`` builds the adapter's proposers.

``NPUModelRunner.__init__`` calls ``super().__init__`` (vLLM's GPUModelRunner: the plugin's ``runner_init``
wrapper runs there and sets ``runner.ascend_spec``) and then ``_set_up_drafter``, which takes its drafter from
``_get_drafter()`` and asserts the drafter's class. The wrapper installed here builds
:func:`~ascend_spec.vllm.ascend.proposers.proposer_class`'s subclass for runners with ``ascend_spec`` set and
DFlash / DSpark; every other runner gets vllm-ascend's own proposer. A DFlash2 draft (``DFlash2DraftModel``,
which vllm-ascend 0.30.0rc2 serves with ``AscendDflash2Proposer``: ``spec_decode/__init__.py``,
``get_spec_decode_method``) keeps vllm-ascend's proposer: the adapter's DFlash subclass drafts DFlash blocks, not
DFlash2's.
"""

from __future__ import annotations

import functools
from typing import Any

_MARK = "__ascend_spec_wrapped__"


def install_get_drafter() -> None:
    """Wrap ``NPUModelRunner._get_drafter`` once per process."""
    from vllm_ascend.worker import model_runner_v1

    cls = model_runner_v1.NPUModelRunner
    original = cls._get_drafter
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def _get_drafter(self: Any) -> Any:
        if getattr(self, "ascend_spec", None) is None:
            return original(self)
        if is_dflash2(self.speculative_config):
            return original(self)
        from ascend_spec.vllm.ascend.proposers import proposer_class

        proposer = proposer_class(self.speculative_config.method)
        if proposer is None:
            return original(self)
        return proposer(self.vllm_config, self.device, self)

    setattr(_get_drafter, _MARK, True)
    cls._get_drafter = _get_drafter


def is_dflash2(speculative_config: Any) -> bool:
    """vllm-ascend's own test for a DFlash2 draft (the one its drafter choice reads)."""
    from vllm_ascend.spec_decode.dflash2_proposer import is_dflash2_draft

    return bool(is_dflash2_draft(speculative_config))
