"""The vllm-ascend releases the adapter's patch points were read from, and the check before patching.

The adapter's patch points (class names, method signatures, the attributes the runner reads:
``drafter.dynamic_spec.num_verify_tokens``, ``runner.cudagraph_dispatcher``) are read from vllm-ascend release
``0.30.0rc2`` (its PyPI sdist; run in the emulated-NPU engine tests of tests/vllm_ascend_emu), the release Ascend
users install. Each accepted release names the vLLM releases it runs with (``VLLM_ASCEND_RELEASES``: 0.30.0rc2 is
built and tested against vLLM 0.30.0); any other pair is refused with the pairs it would accept, never patched
blind. Builds of vllm-ascend main are refused: the main tree the adapter was first written against (182b75ea84,
2026-08) pairs with vLLM 0.27.1, which the plugin itself refuses (ascend_spec/vllm/releases.py).
"""

from __future__ import annotations

# vllm-ascend release -> the vLLM releases it runs with (the release's own pairing).
VLLM_ASCEND_RELEASES: dict[str, tuple[str, ...]] = {"0.30.0rc2": ("0.30.0",)}


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


def vllm_ascend_supported(version: str) -> bool:
    return version in VLLM_ASCEND_RELEASES


def vllm_supported_on_npu(version: str, vllm_ascend_version: str) -> bool:
    """vLLM ``version`` (local part ignored: ``0.30.0+cpu``) is a release ``vllm_ascend_version`` runs with."""
    return version.split("+")[0] in VLLM_ASCEND_RELEASES.get(vllm_ascend_version, ())


def accepted_pairs() -> str:
    return "; ".join(f"vllm-ascend {r} with vLLM {' or '.join(v)}" for r, v in VLLM_ASCEND_RELEASES.items())


def check_versions(vllm_ascend_version: str, vllm_version: str) -> None:
    """Refuse (RuntimeError naming both versions and what is accepted) any pair the adapter was not written for."""
    if not vllm_ascend_supported(vllm_ascend_version):
        raise RuntimeError(
            f"additional_config['ascend_spec'] is set on an NPU runner but the installed vllm-ascend is "
            f"{vllm_ascend_version!r}; ascend-spec's vllm-ascend adapter supports {accepted_pairs()} and does not "
            "patch other versions blind. Remove the key or install a supported vllm-ascend"
        )
    if not vllm_supported_on_npu(vllm_version, vllm_ascend_version):
        raise RuntimeError(
            f"additional_config['ascend_spec'] is set on an NPU runner but the installed vLLM is {vllm_version!r} "
            f"with vllm-ascend {vllm_ascend_version!r}; the adapter supports {accepted_pairs()}"
        )
