"""DSpark's settings, patch points and V1 config check (no engine needed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("vllm", reason="the V1 check wrapper patches vLLM's config class")

from ascend_spec.vllm.config import AscendSpecConfig, parse_config  # noqa: E402
from ascend_spec.vllm.install import install  # noqa: E402
from ascend_spec.vllm.patch_register import PATCH_POINTS  # noqa: E402
from ascend_spec.vllm.v1.dspark_check import V1_DSPARK_REFUSAL, wrap_v1_check  # noqa: E402

UPSTREAM = ["prefill context parallel", V1_DSPARK_REFUSAL, "adaptive draft verification"]


def _check(method: str | None, additional_config: object) -> list[str]:
    wrapped = wrap_v1_check(lambda self: list(UPSTREAM))
    spec = None if method is None else SimpleNamespace(method=method)
    return wrapped(SimpleNamespace(speculative_config=spec, additional_config=additional_config))


def test_dspark_setting_defaults_on_and_is_checked() -> None:
    assert parse_config({"ascend_spec": {}}).dspark is True
    assert parse_config({"ascend_spec": {"dspark": False}}) == AscendSpecConfig(dspark=False)
    with pytest.raises(
        ValueError, match=r"additional_config\['ascend_spec'\]\['dspark'\] must be true or false"
    ):
        parse_config({"ascend_spec": {"dspark": "on"}})


def test_v1_check_lets_only_dspark_through_and_only_when_enabled() -> None:
    others = [u for u in UPSTREAM if u != V1_DSPARK_REFUSAL]
    assert _check("dspark", {"ascend_spec": {}}) == others  # adaptive verification is still refused
    for inert in ({}, None, {"ascend_spec": {"enabled": False}}, {"ascend_spec": {"dspark": False}}):
        assert _check("dspark", inert) == UPSTREAM
    assert _check("dflash", {"ascend_spec": {}}) == UPSTREAM
    assert _check(None, {"ascend_spec": {}}) == UPSTREAM


def test_v1_check_names_a_bad_plugin_setting() -> None:
    with pytest.raises(ValueError, match=r"unknown key additional_config\['ascend_spec'\]\['dsprak'\]"):
        _check("dspark", {"ascend_spec": {"dsprak": True}})


def test_dspark_patch_points_are_registered() -> None:
    points = {p.name: p for p in PATCH_POINTS}
    assert {"v1_dspark_check", "dspark_proposer", "dspark_proposer_init"} <= set(points)
    assert points["v1_dspark_check"].target.endswith("VllmConfig._get_v1_model_runner_unsupported_features")


def test_installed_check_wraps_vllms_own_method() -> None:
    from vllm.config import VllmConfig

    install()
    method = VllmConfig._get_v1_model_runner_unsupported_features
    assert method.__name__ == "_get_v1_model_runner_unsupported_features"
    assert method.__wrapped__ is not method
    install()  # idempotent: one wrapper, not two
    assert VllmConfig._get_v1_model_runner_unsupported_features is method
