"""Engines forked from a fork server (ascend_spec.e2e.fork_server, on for every engine test) are engines started
in a fresh child process: the same tokens, logits, counters and GDN state layout; a hung one is killed."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from engine_helpers import run, speculative

from ascend_spec.e2e import fork_server
from ascend_spec.e2e.engine import EngineSpec, run_isolated

pytestmark = pytest.mark.slow


def _fields(r) -> dict:  # noqa: ANN001
    return {
        "tokens": r.tokens,
        "top2": r.top2,
        "num_drafts": r.num_drafts,
        "num_accepted": r.num_accepted,
        "accepted_per_position": r.accepted_per_position,
        "kv_cache_layout": r.kv_cache_layout,
        "runner_class": r.runner_class,
        "gdn_slots_per_request": r.gdn_slots_per_request,
        "gdn_state_bytes_per_request": r.gdn_state_bytes_per_request,
    }


def test_a_forked_engine_is_a_freshly_started_one(engine_dir, hybrid_low_entropy, monkeypatch) -> None:
    """MTP with GDN verification on the hybrid (the plugin patches vLLM inside the engine's constructor):
    forked and started as a new interpreter, every field of the run is equal."""
    kwargs = {"speculative": speculative("mtp", hybrid_low_entropy), "plugin": {}, "logprobs": True}
    forked = run(engine_dir, hybrid_low_entropy, **kwargs)
    monkeypatch.setattr(fork_server, "_enabled", False)
    started = run(engine_dir, hybrid_low_entropy, **kwargs)
    assert _fields(forked) == _fields(started)
    assert forked.num_accepted > 0 and forked.gdn_slots_per_request == 1


def test_a_forked_engine_past_its_timeout_is_killed_and_the_server_serves_on(
    engine_dir, dense_low_entropy
) -> None:
    spec = EngineSpec(target=dense_low_entropy.target)
    prompts = [[1, 2, 3]]
    with pytest.raises(subprocess.TimeoutExpired):
        run_isolated(spec, prompts, work_dir=engine_dir, max_tokens=4, timeout=0.5)
    again = run_isolated(spec, prompts, work_dir=engine_dir, max_tokens=4)
    assert again.error is None and len(again.tokens[0]) == 4


SCRIPT = """import json, os, sys
with open(os.path.join(sys.argv[1], "seen_" + sys.argv[2] + ".json"), "w") as f:
    seen = [os.getcwd(), __name__, os.environ["FORK_TEST"], os.environ.get("PYTEST_CURRENT_TEST")]
    json.dump([sys.argv[1:], sys.path[0], *seen], f)
sys.stderr.write("leaving with 3\\n")
sys.exit(3)
"""


def test_a_forked_script_sees_what_a_started_one_sees(tmp_path, monkeypatch) -> None:
    """argv, sys.path[0] (the script's folder), the working folder, ``__main__``, the environment, the exit
    status and the output: forked as started."""
    scripts, cwd = tmp_path / "scripts", tmp_path / "cwd"
    scripts.mkdir()
    cwd.mkdir()
    script = scripts / "probe.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, FORK_TEST="yes")
    for how, on in (("forked", True), ("started", False)):
        monkeypatch.setattr(fork_server, "_enabled", on)
        code, output = fork_server.run_python([str(script), str(tmp_path), how], env, work=tmp_path, cwd=cwd)
        assert code == 3 and "leaving with 3" in output, (how, code, output)
    forked, started = (
        json.loads((tmp_path / f"seen_{how}.json").read_text()) for how in ("forked", "started")
    )
    # PYTEST_CURRENT_TEST: a value per test phase, left out of a server's key and passed to each forked process
    current = os.environ["PYTEST_CURRENT_TEST"]
    assert forked[1:] == started[1:] == [str(scripts), str(cwd), "__main__", "yes", current]
    assert forked[0] == [str(tmp_path), "forked"] and started[0] == [str(tmp_path), "started"]
