"""The plugin's configuration, its patch register and its version gate (no engine needed)."""

from __future__ import annotations

import pytest

from ascend_spec.vllm.config import AscendSpecConfig, parse_config
from ascend_spec.vllm.patch_register import PATCH_POINTS


def test_absent_or_disabled_key_leaves_the_plugin_inert() -> None:
    assert parse_config({}) is None
    assert parse_config(None) is None
    assert parse_config({"other": 1}) is None
    assert parse_config({"ascend_spec": False}) is None
    assert parse_config({"ascend_spec": {"enabled": False}}) is None


def test_settings_are_read() -> None:
    assert parse_config({"ascend_spec": {}}) == AscendSpecConfig()
    assert parse_config({"ascend_spec": True}) == AscendSpecConfig()
    cfg = parse_config({"ascend_spec": {"backend": "triton", "block_slots": False}})
    assert cfg == AscendSpecConfig(backend="triton", block_slots=False, gdn_verify=True)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"backnd": "triton"}, "unknown key additional_config['ascend_spec']['backnd']"),
        ({"backend": "cuda"}, "additional_config['ascend_spec']['backend'] must be one of"),
        (
            {"gdn_verify": "yes"},
            "additional_config['ascend_spec']['gdn_verify'] must be true or false; got 'yes'",
        ),
        ({"enabled": 1}, "additional_config['ascend_spec']['enabled'] must be true or false; got 1"),
        ("on", "additional_config['ascend_spec'] must be a dict of settings"),
    ],
)
def test_bad_settings_name_the_key_and_value(raw: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_config({"ascend_spec": raw})


def test_the_deprecated_adapter_switch_is_dynamic_with_its_plan_profile(caplog) -> None:  # noqa: ANN001
    """``vllm_ascend.dynamic_verify`` (the adapter's own switch) keeps working one release as ``dynamic`` with
    its plan profile, with one deprecation line naming the new key; both switches at once are refused."""
    import logging

    from ascend_spec.vllm import config

    config._deprecation_logged = False
    with caplog.at_level(logging.WARNING):
        cfg = parse_config({"ascend_spec": {"vllm_ascend": {"dynamic_verify": True, "profile": "x.json"}}})
        parse_config({"ascend_spec": {"vllm_ascend": {"dynamic_verify": True}}})
    assert cfg.dynamic.enabled and cfg.dynamic.profile == "x.json" and cfg.dynamic.mode == "auto"
    lines = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert len(lines) == 1 and "additional_config['ascend_spec']['dynamic']" in lines[0]
    with pytest.raises(ValueError, match=r"both switch on dynamic verification; keep"):
        parse_config({"ascend_spec": {"dynamic": True, "vllm_ascend": {"dynamic_verify": True}}})
    assert not parse_config({"ascend_spec": {"vllm_ascend": {"profile": "x.json"}}}).dynamic.enabled


def test_every_patch_point_is_registered_with_what_why_how_and_when_it_can_go() -> None:
    names = [p.name for p in PATCH_POINTS]
    assert len(names) == len(set(names))
    assert {"runner_init", "gdn_layer", "gdn_flush", "dflash_proposer"} <= set(names)
    for point in PATCH_POINTS:
        for field in ("target", "what", "why", "how", "remove_when"):
            assert getattr(point, field).strip(), (point.name, field)


def test_every_patch_point_names_its_runner_and_releases() -> None:
    from ascend_spec.vllm.patch_register import ANY_RUNNER, NPU_V1_RUNNER, V1_RUNNER, V2_RUNNER
    from ascend_spec.vllm.releases import V1_RELEASES, V2_RELEASES

    for point in PATCH_POINTS:
        assert point.runner in (ANY_RUNNER, V1_RUNNER, V2_RUNNER, NPU_V1_RUNNER), point.name
        assert point.releases, point.name
        if point.runner == V1_RUNNER:  # every supported V1 release, or the ones a per-release shim names
            assert set(point.releases) <= {f"vLLM {v}" for v in V1_RELEASES}, point.name
        if point.runner == V2_RUNNER:
            assert set(point.releases) <= {f"vLLM {v}" for v in V2_RELEASES}, point.name
    assert {p.name for p in PATCH_POINTS if p.runner == V2_RUNNER} == {
        "v2_runner_init",
        "v2_gdn_layer",
        "v2_gdn_flush",
        "v2_gdn_align_moves",
        "v2_dflash_inputs",
        "v2_startup_log",
        "v2_dynamic_manager",
        "v2_dynamic_confidence",
        "v2_dynamic_take_drafts",
        "v2_dynamic_skip_drafter",
        "v2_dynamic_estimate",
    }


def test_docs_list_every_patch_point() -> None:
    from pathlib import Path

    docs = (Path(__file__).parents[2] / "docs" / "vllm.md").read_text()
    assert [p.name for p in PATCH_POINTS if f"`{p.name}`" not in docs] == []
