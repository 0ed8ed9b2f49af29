"""The vllm-ascend builds the adapter's patch points were written against, and the check before patching.

The adapter reads vllm-ascend's main branch at one commit (``VLLM_ASCEND_COMMIT``); its class names, method
signatures and the attributes the runner reads (``drafter.dynamic_spec.num_verify_tokens``,
``runner.cudagraph_dispatcher``) are those of that tree. A vllm-ascend built from a git checkout carries its commit
in the version's local part (setuptools-scm: ``0.19.2.dev1637+g182b75ea8``); a release carries none. Anything
else is refused with the versions it would accept, never patched blind. That commit's CI pairs it with vLLM
``v0.27.1`` (``.github/vllm-release-tag.commit``) or vLLM main at ``VLLM_MAIN_COMMIT``
(``.github/vllm-main-verified.commit``); the vLLM check on NPU accepts exactly those.
"""

from __future__ import annotations

import re

VLLM_ASCEND_COMMIT = "182b75ea84ff13ece27b57391331ef8935410aea"  # vllm-project/vllm-ascend main, 2026-08-22
VLLM_ASCEND_RELEASES: tuple[str, ...] = ()  # releases read and tested: none yet
VLLM_RELEASES_FOR_VLLM_ASCEND = ("0.27.1",)
VLLM_MAIN_COMMIT = "cdc4824a21eaa986d4d1fee90a7e6465c9f706e6"

_NODE = re.compile(r"[+.]g([0-9a-f]{7,40})(?:\.|$)")


def git_node(version: str) -> str | None:
    """The abbreviated commit a setuptools-scm version names (``...+g182b75ea8[.d20260822]``), else None."""
    m = _NODE.search(version)
    return m.group(1) if m else None


def installed_vllm_ascend_version() -> str:
    """vllm-ascend's own version string (its ``_version.py``, written by setuptools-scm at build time)."""
    try:
        from vllm_ascend._version import __version__
    except ImportError:
        from importlib.metadata import PackageNotFoundError, version

        for dist in ("vllm_ascend", "vllm-ascend"):
            try:
                return version(dist)
            except PackageNotFoundError:
                continue
        raise RuntimeError(
            "additional_config['ascend_spec'] on an NPU runner: vllm_ascend is importable but has no version "
            "(no vllm_ascend/_version.py and no installed distribution); reinstall vllm-ascend"
        ) from None
    return str(__version__)


def _commit_matches(node: str | None, commit: str) -> bool:
    return node is not None and commit.startswith(node)


def vllm_ascend_supported(version: str) -> bool:
    return version in VLLM_ASCEND_RELEASES or _commit_matches(git_node(version), VLLM_ASCEND_COMMIT)


def vllm_supported_on_npu(version: str) -> bool:
    return version.split("+")[0] in VLLM_RELEASES_FOR_VLLM_ASCEND or _commit_matches(
        git_node(version), VLLM_MAIN_COMMIT
    )


def check_versions(vllm_ascend_version: str, vllm_version: str) -> None:
    """Refuse (RuntimeError naming both versions and what is accepted) any pair the adapter was not written for."""
    if not vllm_ascend_supported(vllm_ascend_version):
        accepted = [f"a build of commit {VLLM_ASCEND_COMMIT[:10]} (version '...+g{VLLM_ASCEND_COMMIT[:9]}')"]
        accepted += [f"release {r}" for r in VLLM_ASCEND_RELEASES]
        raise RuntimeError(
            f"additional_config['ascend_spec'] is set on an NPU runner but the installed vllm-ascend is "
            f"{vllm_ascend_version!r}; ascend-spec's vllm-ascend adapter is written for {' or '.join(accepted)} "
            "and does not patch other versions blind. Remove the key or install a supported vllm-ascend"
        )
    if not vllm_supported_on_npu(vllm_version):
        raise RuntimeError(
            f"additional_config['ascend_spec'] is set on an NPU runner but the installed vLLM is {vllm_version!r}; "
            f"vllm-ascend {VLLM_ASCEND_COMMIT[:10]} runs with vLLM {', '.join(VLLM_RELEASES_FOR_VLLM_ASCEND)} or "
            f"vLLM main at {VLLM_MAIN_COMMIT[:10]}, the versions the adapter accepts"
        )
