"""Engine processes forked from a process that has already imported torch and vLLM.

Every engine of :func:`ascend_spec.e2e.engine.run_isolated` gets a process of its own (engine.py says why).
Starting one means importing torch and vLLM again: about 10 s on a 2-core CPU machine, more than a tiny engine's
whole run. A fork server is a Python process started under the engine's exact environment that imports what
:func:`~ascend_spec.e2e.engine.run_engine` imports before it builds the engine, and nothing more: plugins (this
package's included) load inside vLLM's engine constructor, so no module a plugin patches is imported early. It
then freezes that heap for the garbage collector (each engine's ``gc.collect`` calls skip it) and forks one
process per engine, which runs ``run_engine`` and exits: the engine starts in a fresh process holding the
modules a freshly started child would hold at that point, in the same environment.

A server is keyed by (interpreter, environment, model runner); the runner is chosen before vLLM is imported
(``cpu_v2``). Engines spanning processes (tensor parallelism) are not forked: their workers start as vLLM starts
them. Servers are opt-in (:func:`enable`): the test suite starts hundreds of engines; ``ascend-spec e2e``
starts a few and keeps plain child processes.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from collections import OrderedDict
from pathlib import Path

# Servers kept per calling process (each holds torch and vLLM in memory, ~0.5 GiB); the least recently used
# one is closed when another is needed.
MAX_SERVERS = 3

_enabled = False
_servers: OrderedDict[tuple, ForkServer] = OrderedDict()


def enable(on: bool = True) -> None:
    """Let run_isolated fork its engines from fork servers in this process (off: plain child processes)."""
    global _enabled
    _enabled = on
    if not on:
        close_all()


def enabled() -> bool:
    return _enabled


class ForkServer:
    """One server process (``python -m ascend_spec.e2e.fork_server RUNNER``) and the pipe to it."""

    def __init__(self, env: dict[str, str], runner: str, log: Path) -> None:
        self.log = log
        self._log_file = open(log, "ab")  # noqa: SIM115 - open while the server lives
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ascend_spec.e2e.fork_server", runner],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
        )
        self._expect("ready", timeout=600.0)

    def _line(self, deadline: float) -> str:
        assert self.proc.stdout is not None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                line = self.proc.stdout.readline().decode()
                if not line:
                    raise RuntimeError(f"fork server exited with {self.proc.wait()}: {_tail(self.log)}")
                return line.strip()

    def _expect(self, word: str, timeout: float) -> str:
        line = self._line(time.monotonic() + timeout)
        head, _, rest = line.partition(" ")
        if head != word:
            raise RuntimeError(f"fork server said {line!r} where {word!r} was due: {_tail(self.log)}")
        return rest

    def run(self, request: Path, result: Path, log: Path, timeout: float) -> int:
        """Fork one engine process for ``request``; its exit status (its output in ``log``)."""
        assert self.proc.stdin is not None
        line = json.dumps({"request": str(request), "result": str(result), "log": str(log)})
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        pid = int(self._expect("pid", timeout))
        try:
            return int(self._line(deadline).partition(" ")[2])
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            self._expect("exit", 60.0)
            raise subprocess.TimeoutExpired(["fork_server", str(request)], timeout) from None

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()


def _tail(path: Path, size: int = 2000) -> str:
    try:
        return path.read_bytes()[-size:].decode(errors="replace")
    except OSError:
        return ""


def server_for(env: dict[str, str], runner: str, work: Path) -> ForkServer:
    """The server for this environment and runner, started if there is none."""
    key = (sys.executable, runner, tuple(sorted(env.items())))
    server = _servers.get(key)
    if server is not None and server.proc.poll() is None:
        _servers.move_to_end(key)
        return server
    if server is not None:
        server.close()
        del _servers[key]
    while len(_servers) >= MAX_SERVERS:
        _servers.popitem(last=False)[1].close()
    log = work / f"fork_server_{os.getpid()}_{time.monotonic_ns()}.log"
    server = ForkServer(env, runner, log)
    _servers[key] = server
    return server


def run_forked(
    env: dict[str, str], runner: str, work: Path, request: Path, result: Path, timeout: float
) -> tuple[int, str]:
    """(exit status, output tail) of one engine process forked from this environment's server."""
    log = request.with_name(request.name.replace("request_", "output_").replace(".json", ".log"))
    code = server_for(env, runner, work).run(request, result, log, timeout)
    return code, _tail(log)


def close_all() -> None:
    while _servers:
        _servers.popitem()[1].close()


atexit.register(close_all)


def _engine_process(request: str, result: str, log: str) -> None:
    """In the forked process: output to ``log``, run the engine, exit as a child process would."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    code = 0
    try:
        from ascend_spec.e2e import engine

        sys.argv = [engine.__file__, request, result]
        engine._main(request, result)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _serve(runner: str) -> None:
    """Import what run_engine imports before its engine, then fork one engine process per request line."""
    import gc

    from ascend_spec.e2e import engine

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # as start_engine sets it
    engine._select_runner(engine.EngineSpec(target=Path("."), runner=runner))
    import torch  # noqa: F401
    from vllm import LLM, SamplingParams  # noqa: F401
    from vllm.inputs import TokensPrompt  # noqa: F401

    gc.collect()
    gc.freeze()
    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    for line in sys.stdin.buffer:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _engine_process(job["request"], job["result"], job["log"])
        out.write(f"pid {pid}\n".encode())
        out.flush()
        _, status = os.waitpid(pid, 0)
        out.write(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
        out.flush()


if __name__ == "__main__":
    _serve(sys.argv[1])
