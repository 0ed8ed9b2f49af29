"""ascend_spec.e2e.engine's environment for engine children: a cache root of their own whose model infos are
vLLM's default folder, shared by every engine (vLLM otherwise inspects each model class in a fresh subprocess)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ascend_spec.e2e.engine import engine_cache_root, engine_child_env


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    return tmp_path / "xdg"


def test_each_work_has_its_own_root_sharing_vllms_default_model_infos(tmp_path: Path, xdg: Path) -> None:
    first, second = engine_cache_root(tmp_path / "a"), engine_cache_root(tmp_path / "b")
    assert (first, second) == (tmp_path / "a" / "vllm_cache", tmp_path / "b" / "vllm_cache")
    shared = xdg / "vllm" / "modelinfos"
    for root in (first, second):
        assert (root / "modelinfos").is_symlink() and (root / "modelinfos").resolve() == shared.resolve()
    (first / "modelinfos" / "m.json").write_text("{}")  # what one engine's vLLM writes, the next one reads
    assert (second / "modelinfos" / "m.json").read_text() == "{}"
    (first / "ascend_spec").mkdir()  # anything else (start-up cost profiles) stays the work's own
    assert not (second / "ascend_spec").exists()
    assert engine_cache_root(tmp_path / "a") == first  # again: the link is kept


def test_a_work_with_model_infos_of_its_own_keeps_them(tmp_path: Path, xdg: Path) -> None:
    own = tmp_path / "w" / "vllm_cache" / "modelinfos"
    own.mkdir(parents=True)
    assert engine_cache_root(tmp_path / "w") == own.parent
    assert not own.is_symlink() and not (xdg / "vllm").exists()


def test_child_env_sets_caches_tmp_and_in_process_engine(tmp_path: Path, xdg: Path) -> None:
    env = engine_child_env(tmp_path, {"OMP_NUM_THREADS": "1", "VLLM_NO_USAGE_STATS": "0"})
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "vllm_cache")
    assert env["TMPDIR"] == str(tmp_path / "tmp")
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert env["OMP_NUM_THREADS"] == "1" and env["VLLM_NO_USAGE_STATS"] == "0"  # the caller's word wins
    assert engine_child_env(tmp_path, None)["VLLM_NO_USAGE_STATS"] == "1"
    assert env["PATH"] == os.environ["PATH"]


def test_child_env_keeps_a_cache_root_the_caller_set(
    tmp_path: Path, xdg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "mine"))
    assert engine_child_env(tmp_path / "w", None)["VLLM_CACHE_ROOT"] == str(tmp_path / "mine")
    assert not (tmp_path / "w" / "vllm_cache").exists()
