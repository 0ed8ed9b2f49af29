"""The plugin's logger: a child of vLLM's ``vllm`` logger, so its lines reach wherever vLLM's own lines go.

vLLM configures only the ``vllm`` logger tree (its handler and format, ``VLLM_CONFIGURE_LOGGING``); a logger
outside it (``ascend_spec.vllm``) is silent in a server's log, and a user could not tell the plugin is on.
"""

from __future__ import annotations

import logging

LOGGER_NAME = "vllm.ascend_spec"


def plugin_logger() -> logging.Logger:
    return logging.getLogger(LOGGER_NAME)
