"""Engines timed in interleaved rounds: every row of a comparison lives through the same machine load.

``run_isolated`` times one engine after another, so on a shared machine a busy minute lands on whichever rows run
in it (a row 2x slower than its neighbours with nothing of its own changed). Here the engines of one comparison
are all started first, each in its own child process (one at a time: a dynamic engine's cost profiles are
measured while the others wait idle), then timed in rounds: round r runs one ``generate`` on engine 1, then 2,
..., and each engine keeps its best round (of wall time, and separately of its process's CPU time, which other
jobs on a shared host cannot stretch). Slow stretches then hit every row alike, and the best of many rounds
is each row's uncontended speed. The counters (acceptance, dynamic verification's statistics) are those of the
first timed round, read at the end, as in ``run_isolated``.

Protocol with a child (``python -m ascend_spec.e2e.interleaved REQUEST RESULT``): it answers on a pipe of its
own (vLLM logs to stdout) one line per command read from stdin: ``ready`` after start-up and warm-up, the
wall and CPU seconds of one timed ``generate`` per ``run``, and ``done`` after writing the result file on ``stop``.

``cpus`` pins every child to the same logical CPUs (``os.sched_setaffinity`` before torch starts a thread): only
one engine runs at a time, so nothing waits for it, and every row then runs on the same core and its caches
instead of wherever the scheduler put each process (on a 2-vCPU VM the two vCPUs differ from run to run).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ascend_spec.e2e.engine import EngineRun, EngineSpec, engine_child_env

CPUS_ENV = "ASCEND_SPEC_E2E_CPUS"  # the child pins itself to these CPUs before it imports torch


class _Child:
    """One resident engine process and its reply pipe."""

    def __init__(self, spec: EngineSpec, request: dict, work: Path, env: dict[str, str]) -> None:
        stamp = f"{os.getpid()}_{time.monotonic_ns()}"
        self.request = work / f"interleaved_request_{stamp}.json"
        self.result = work / f"interleaved_result_{stamp}.json"
        self.log = work / f"interleaved_log_{stamp}.txt"
        spec_dict = dataclasses.asdict(spec)
        spec_dict["target"] = str(spec.target)
        self.request.write_text(json.dumps(dict(request, spec=spec_dict)))
        read_fd, write_fd = os.pipe()
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ascend_spec.e2e.interleaved", str(self.request), str(self.result)],
                env=dict(env, ASCEND_SPEC_E2E_REPLY_FD=str(write_fd)),
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
                pass_fds=(write_fd,),
            )
        os.close(write_fd)
        self.replies = os.fdopen(read_fd, "r")
        self.error: str | None = None

    def ask(self, command: str | None) -> str | None:
        """Send ``command`` (None: only read) and return the reply line, or None once the child is gone."""
        if self.error is not None:
            return None
        try:
            if command is not None:
                self.proc.stdin.write(command + "\n")  # type: ignore[union-attr]
                self.proc.stdin.flush()  # type: ignore[union-attr]
            line = self.replies.readline()
        except (BrokenPipeError, OSError) as exc:
            line, self.error = "", f"engine process pipe closed: {exc}"
        if not line:
            self.proc.wait()
            tail = self.log.read_text()[-2000:] if self.log.exists() else ""
            self.error = self.error or f"engine process exited with {self.proc.returncode}: {tail}"
            return None
        return line.strip()

    def finish(self) -> EngineRun:
        """Stop the child and read its result (also the error of a child that failed while starting)."""
        self.ask("stop")
        with contextlib.suppress(OSError):  # already gone
            self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait(timeout=120)
        self.replies.close()
        if self.result.exists():
            data = json.loads(self.result.read_text())
            data["top2"] = [[tuple(x) for x in row] for row in data["top2"]]
            return EngineRun(**data)
        return EngineRun(error=self.error or "engine process gave no result")


def run_interleaved(
    specs: list[EngineSpec],
    prompts: list[list[int]],
    *,
    max_tokens: list[int],
    rounds: int,
    work_dir: Path | None = None,
    env: dict[str, str] | None = None,
    cpus: list[int] | None = None,
) -> list[EngineRun]:
    """Each spec's :class:`EngineRun`, its ``seconds`` (``cpu_seconds``) the best wall (CPU) time of ``rounds``
    interleaved timed runs; ``cpus``: the logical CPUs every engine process is pinned to (None: not pinned)."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1; got {rounds}")
    if cpus is not None:
        allowed = os.sched_getaffinity(0)
        if not cpus or any(c not in allowed for c in cpus):
            raise ValueError(
                f"cpus must be a non-empty subset of this process's CPUs {sorted(allowed)}; got {cpus}"
            )
    work = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="ascend_spec_e2e_"))
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    child_env = engine_child_env(work, env)
    if cpus is not None:
        child_env[CPUS_ENV] = ",".join(map(str, cpus))
    request = {"prompts": prompts, "max_tokens": max_tokens}
    children: list[_Child] = []
    try:
        for spec in specs:  # one at a time: start-up (and profile measuring) runs with the others idle
            child = _Child(spec, request, work, child_env)
            children.append(child)
            if child.ask(None) != "ready":  # it failed while starting: its result says why
                child.error = child.error or "engine failed while starting"
        best = [float("inf")] * len(children)
        best_cpu = [float("inf")] * len(children)
        for _ in range(rounds):
            for i, child in enumerate(children):
                reply = child.ask("run")
                if reply is not None and reply != "done":
                    wall, cpu = (float(x) for x in reply.split())
                    best[i] = min(best[i], wall)
                    best_cpu[i] = min(best_cpu[i], cpu)
        runs = []
        for child, seconds, cpu_seconds in zip(children, best, best_cpu):
            run = child.finish()
            if run.error is None:
                run.seconds, run.cpu_seconds = seconds, cpu_seconds
            runs.append(run)
        return runs
    finally:
        for child in children:
            if child.proc.poll() is None:
                child.proc.kill()
                child.proc.wait()


def _serve(request_path: str, result_path: str) -> None:
    """The child: start the engine, then time one ``generate`` per ``run`` until ``stop``."""
    if os.environ.get(CPUS_ENV):
        os.sched_setaffinity(0, [int(c) for c in os.environ[CPUS_ENV].split(",")])
    from ascend_spec.e2e.engine import (
        EngineRun,
        _metric_values,
        collect_counters,
        engine_error,
        engine_sampling,
        request_drafts,
        shutdown_engine,
        start_engine,
        timed_generate,
    )

    reply = os.fdopen(int(os.environ["ASCEND_SPEC_E2E_REPLY_FD"]), "w")

    def say(text: str) -> None:
        reply.write(text + "\n")
        reply.flush()

    data = json.loads(Path(request_path).read_text())
    spec = data["spec"]
    spec["target"] = Path(spec["target"])
    prompts = data["prompts"]
    run = EngineRun()
    llm = None
    try:
        llm = start_engine(
            EngineSpec(**spec), prompts
        )  # first: it selects the runner before vLLM is imported
        from vllm.inputs import TokensPrompt

        token_prompts = [TokensPrompt(prompt_token_ids=p) for p in prompts]
        sampling = engine_sampling(data["max_tokens"])
        say("ready")
        before = after = None
        while sys.stdin.readline().strip() == "run":
            if before is None:
                before = _metric_values(llm)
            outs, seconds, cpu_seconds = timed_generate(llm, token_prompts, sampling)
            tokens = [list(o.outputs[0].token_ids) for o in outs]
            if after is None:
                after = _metric_values(llm)
                run.tokens = tokens
                run.request_drafts = request_drafts(outs)
            elif tokens != run.tokens:
                raise RuntimeError("greedy decoding gave different tokens on a repeated run")
            say(f"{seconds:.9f} {cpu_seconds:.9f}")
        if before is not None:
            collect_counters(llm, run, before, after)
        run.cpus = sorted(os.sched_getaffinity(0))
    except Exception as exc:  # reported in the result, as run_engine does
        run.error = engine_error(exc)
    finally:
        shutdown_engine(llm)
        Path(result_path).write_text(json.dumps(dataclasses.asdict(run)))
        say("done")


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])
