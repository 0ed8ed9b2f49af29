"""The adapter's hooks against the real vllm-ascend 0.30.0rc2 package (not a mirror of its names): the version
gate, every ``npu_*`` register target, the ``additional_config["ascend_spec"]`` key past ``AscendConfig``'s
``extra="forbid"``, the DFlash2 draft left to vllm-ascend, and the NPUModelRunner overrides that make the core
V1 runner's dynamic verification refused there. Each check runs in a fresh child process (the emulated NPU's
stubs, vllm-ascend's imports and the plugin's wrappers are process-wide)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from ascend_engine_env import EMULATED, needs_vllm_ascend

pytestmark = needs_vllm_ascend


def _child(code: str, env: dict[str, str]) -> dict:
    """Run ``code`` (which sets ``out``, a JSON-able dict) in a fresh interpreter of this venv."""
    script = (
        textwrap.dedent(code)
        + "\nimport json as _j, sys as _s\n_s.stdout.write('\\nRESULT ' + _j.dumps(out))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, **env}, capture_output=True, text=True, timeout=600
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


def test_the_installed_pair_is_accepted_and_others_refused() -> None:
    out = _child(
        """
        import vllm
        from ascend_spec.vllm.ascend import check_versions
        from ascend_spec.vllm.ascend.version import check_versions as check_pair, installed_vllm_ascend_version

        check_versions()  # raises on a pair the adapter does not support
        refused = {}
        for pair in [("0.30.0rc1", "0.30.0"), ("0.30.0rc2", "0.32.0"), ("0.19.2.dev1637+g182b75ea8", "0.27.1")]:
            try:
                check_pair(*pair)
                refused[str(pair)] = None
            except RuntimeError as exc:
                refused[str(pair)] = str(exc)
        out = {"vllm_ascend": installed_vllm_ascend_version(), "vllm": vllm.__version__, "refused": refused}
        """,
        EMULATED,
    )
    assert out["vllm_ascend"] == "0.30.0rc2" and out["vllm"].split("+")[0] == "0.30.0"
    for pair, message in out["refused"].items():
        assert message is not None, pair
        assert "vllm-ascend 0.30.0rc2 with vLLM 0.30.0" in message, message


def test_every_npu_register_target_exists_in_vllm_ascend() -> None:
    out = _child(
        """
        import importlib
        from ascend_spec.vllm.patch_register import NPU_V1_RUNNER, PATCH_POINTS

        def resolve(target):
            parts = target.split(" ")[0].split(".")
            for cut in range(len(parts), 0, -1):
                try:
                    obj = importlib.import_module(".".join(parts[:cut]))
                except ImportError:
                    continue
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
                return obj
            raise ImportError(target)

        out = {}
        for p in PATCH_POINTS:
            if p.runner == NPU_V1_RUNNER:
                obj = resolve(p.target)
                out[p.name] = {"target": p.target, "callable": callable(obj), "releases": list(p.releases)}
        """,
        EMULATED,
    )
    assert set(out) >= {
        "npu_config_key",
        "npu_get_drafter",
        "npu_dflash_proposer",
        "npu_dspark_proposer",
        "npu_dynamic_spec",
        "npu_draft_graph_dispatch",
        "npu_draft_graph_capture",
        "npu_draft_graph_params",
        "npu_gdn_layer",
    }
    for name, point in out.items():
        assert point["target"].startswith("vllm_ascend."), name
        assert point["callable"], name
        assert point["releases"] == ["vllm-ascend 0.30.0rc2 with vLLM 0.30.0"], name


_CONFIG_KEY = """
    import sys
    from ascend_spec.vllm.ascend import config_key

    def build(**kwargs):
        from vllm_ascend.ascend_config import AscendConfig
        try:
            AscendConfig(**kwargs)
        except Exception as exc:  # the call lacks the fields init_ascend_config passes: only the keys matter
            return str(exc)
        return ""

    out = {"loaded_first": "vllm_ascend.ascend_config" in sys.modules}
    if out["loaded_first"]:
        out["unwrapped"] = build(ascend_spec={"backend": "ascendc"})
    config_key.install_config_key()
    import vllm_ascend.ascend_config  # noqa: F401 - through the import hook when not loaded yet
    out["wrapped"] = config_key.is_wrapped()
    out["with_key"] = build(ascend_spec={"backend": "ascendc"})
    # pydantic completes AscendConfig on first use and installs a new __init__: the key must pass again.
    out["with_key_again"] = build(ascend_spec={"backend": "ascendc"})
    out["typo"] = build(ascend_spek={"backend": "ascendc"})
"""


def test_ascend_config_takes_the_plugins_key_and_still_refuses_typos() -> None:
    out = _child(_CONFIG_KEY, EMULATED)  # the emulation loads vllm_ascend.ascend_config at start-up
    assert out["loaded_first"]
    assert "ascend_spec" in out["unwrapped"] and "Unexpected keyword argument" in out["unwrapped"]
    assert out["wrapped"]
    assert "ascend_spec" not in out["with_key"] and "ascend_spec" not in out["with_key_again"]
    assert "ascend_spek" in out["typo"] and "Unexpected keyword argument" in out["typo"]


def test_the_key_wrapper_waits_for_vllm_ascend_to_import_its_config() -> None:
    """A process that has not loaded vllm-ascend's config yet: wrapped by the import hook when it does."""
    plain_cpu = {"ASCEND_SPEC_EMULATED_NPU": "0", "VLLM_PLUGINS": "ascend_spec"}
    out = _child(_CONFIG_KEY, plain_cpu)
    assert not out["loaded_first"]
    assert out["wrapped"]
    assert "ascend_spec" not in out["with_key"] and "ascend_spec" not in out["with_key_again"]
    assert "ascend_spek" in out["typo"]


def test_dflash2_keeps_vllm_ascends_proposer() -> None:
    out = _child(
        """
        from types import SimpleNamespace
        from vllm_ascend.worker import model_runner_v1
        from ascend_spec.vllm.ascend.runner import install_get_drafter
        from ascend_spec.vllm.config import parse_config

        model_runner_v1.NPUModelRunner._get_drafter = lambda self: "vllm-ascend's proposer"
        install_get_drafter()
        runner = SimpleNamespace(
            ascend_spec=parse_config({"ascend_spec": {}}),
            speculative_config=SimpleNamespace(
                method="dflash",
                draft_model_config=SimpleNamespace(architectures=["DFlash2DraftModel"]),
            ),
        )
        out = {"drafter": model_runner_v1.NPUModelRunner._get_drafter(runner)}
        """,
        EMULATED,
    )
    assert out["drafter"] == "vllm-ascend's proposer"


def test_npu_runner_overrides_what_the_core_dynamic_hooks_wrap_so_the_adapter_plans_instead() -> None:
    """NPUModelRunner overrides every method V1's dynamic hooks wrap, so ``dynamic`` there is the adapter's
    (DFlash and DSpark scored into its verify scheduler); what it does not plan is refused in one line."""
    out = _child(
        """
        from types import SimpleNamespace
        from vllm_ascend.worker.model_runner_v1 import NPUModelRunner
        from ascend_spec.vllm.config import parse_config
        from ascend_spec.vllm.ascend.dynamic import check_npu_dynamic_engine, controller_mode

        names = ["execute_model", "_sample", "propose_draft_token_ids", "take_draft_token_ids", "sample_tokens",
                 "_input_fits_in_drafter", "_calc_spec_decode_metadata", "_copy_draft_token_ids_to_cpu",
                 "_update_states"]
        out = {"overridden": [n for n in names if n in NPUModelRunner.__dict__], "refusals": {}}

        def engine(method, async_scheduling):
            spec = SimpleNamespace(method=method, num_speculative_tokens=3,
                                   draft_model_config=SimpleNamespace(architectures=["DFlashDraftModel"]))
            return SimpleNamespace(speculative_config=spec,
                                   scheduler_config=SimpleNamespace(async_scheduling=async_scheduling),
                                   device_config=SimpleNamespace(device_type="npu"))

        new = parse_config({"ascend_spec": {"dynamic": {"mode": "sync"}}})
        by_mode = {"sync": new, "async": parse_config({"ascend_spec": {"dynamic": {"mode": "async"}}})}
        cases = {"ngram": ("ngram", False, "sync"), "ngram_async": ("ngram", True, "async"),
                 "sync_async": ("dflash", True, "sync"), "eagle": ("eagle3", False, "sync")}
        for name, (method, sched, mode) in cases.items():
            try:
                check_npu_dynamic_engine(engine(method, sched), by_mode[mode])
                out["refusals"][name] = None
            except ValueError as exc:
                out["refusals"][name] = str(exc)
        check_npu_dynamic_engine(engine("dspark", False), new)
        old = parse_config({"ascend_spec": {"vllm_ascend": {"dynamic_verify": True, "controller_mode": "sync"}}})
        out["old"] = [old.dynamic.enabled, old.dynamic.profile, controller_mode(old)]
        out["new_mode"] = controller_mode(new)
        """,
        EMULATED,
    )
    assert len(out["overridden"]) == 9, out["overridden"]
    assert out["refusals"]["ngram"] is None  # ngram's host drafts, planned on the acceptance estimate
    assert "only under sync scheduling" in out["refusals"]["ngram_async"]
    assert "dflash, dspark, ngram" in out["refusals"]["eagle"]
    assert "mode 'sync'" in out["refusals"]["sync_async"]
    assert out["old"] == [True, "talk_ascend910b", "sync"]  # the deprecated switch maps onto 'dynamic'
    assert out["new_mode"] == "sync"
