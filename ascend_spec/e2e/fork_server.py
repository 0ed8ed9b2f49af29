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

# Servers kept per calling process (each holds torch and vLLM in memory, ~0.6 GiB); the least recently used
# one is closed when another is needed.
MAX_SERVERS = 4
# Variables whose value changes from call to call but is read by no import (pytest names the running test in
# one): a server's key leaves them out and each forked process gets the caller's value.
PER_CALL = frozenset({"PYTEST_CURRENT_TEST"})

_enabled = False
_servers: OrderedDict[tuple, ForkServer] = OrderedDict()


def enable(on: bool = True) -> None:
    """Let run_isolated fork its engines from fork servers in this process (off: plain child processes)."""
    global _enabled
    _enabled = on
    if not on:
        close_all()


class ForkServer:
    """One server process (``python -m ascend_spec.e2e.fork_server RUNNER REPLY_FD``) and its pipes."""

    def __init__(self, env: dict[str, str], runner: str, log: Path) -> None:
        self.log = log
        self._log_file = open(log, "ab")  # noqa: SIM115 - open while the server lives
        # Replies come on a pipe of their own: the server's stdout and stderr go to the log (an emulation loaded
        # at interpreter start-up, or vLLM's logger, print there before the server's code runs).
        read_fd, write_fd = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ascend_spec.e2e.fork_server", runner, str(write_fd)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=self._log_file,
            stderr=self._log_file,
            pass_fds=(write_fd,),
        )
        os.close(write_fd)
        self._replies = os.fdopen(read_fd, "rb")
        try:
            self._expect("ready", timeout=600.0)
        except BaseException:  # a server that never became ready is not left behind
            self.proc.kill()
            self.close()
            raise

    def _line(self, deadline: float) -> str:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self._replies], [], [], left)
            if ready:
                line = self._replies.readline().decode()
                if not line:
                    raise RuntimeError(f"fork server exited with {self.proc.wait()}: {_tail(self.log)}")
                return line.strip()

    def _expect(self, word: str, timeout: float) -> str:
        line = self._line(time.monotonic() + timeout)
        head, _, rest = line.partition(" ")
        if head != word:
            raise RuntimeError(f"fork server said {line!r} where {word!r} was due: {_tail(self.log)}")
        return rest

    def run(
        self, args: list[str], env: dict[str, str], log: Path, timeout: float, cwd: Path | None = None
    ) -> int:
        """Fork one process running ``python ARGS`` with ``env``'s PER_CALL values in ``cwd`` (its output in
        ``log``); its exit status."""
        assert self.proc.stdin is not None
        per_call = {name: env[name] for name in PER_CALL if name in env}
        job = {"args": args, "per_call": per_call, "log": str(log), "cwd": None if cwd is None else str(cwd)}
        self.proc.stdin.write(json.dumps(job).encode() + b"\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        pid = int(self._expect("pid", timeout))
        try:
            return int(self._line(deadline).partition(" ")[2])
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            self._expect("exit", 60.0)
            raise subprocess.TimeoutExpired([sys.executable, *args], timeout) from None

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._replies.close()
        self._log_file.close()


def _tail(path: Path, size: int = 2000) -> str:
    try:
        return path.read_bytes()[-size:].decode(errors="replace")
    except OSError:
        return ""


def server_for(env: dict[str, str], runner: str, work: Path) -> ForkServer:
    """The server for this environment (but PER_CALL) and runner, started if there is none."""
    key = (sys.executable, runner, tuple(sorted((k, v) for k, v in env.items() if k not in PER_CALL)))
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


def run_python(
    args: list[str],
    env: dict[str, str],
    *,
    work: Path,
    runner: str = "v1",
    fork: bool = True,
    timeout: float = 900.0,
    cwd: Path | None = None,
) -> tuple[int, str]:
    """``python ARGS`` (``-m MODULE ...`` or ``SCRIPT ...``) under ``env``: (exit status, the end of its output,
    stderr first). Forked from this environment's server when servers are enabled and ``fork`` (its output kept
    in ``work``), else a plain child process. ``runner``: the model runner the program selects before it
    imports vLLM (a server for V1 has decided Triton's use already)."""
    if not (_enabled and fork):
        proc = subprocess.run(
            [sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd
        )
        return proc.returncode, (proc.stderr or proc.stdout)[-3000:]
    log = work / f"forked_{os.getpid()}_{time.monotonic_ns()}.log"
    code = server_for(env, runner, work).run(args, env, log, timeout, cwd)
    return code, _tail(log, 3000)


def close_all() -> None:
    while _servers:
        _servers.popitem()[1].close()


atexit.register(close_all)


def _forked_process(args: list[str], per_call: dict[str, str], log: str, cwd: str | None) -> None:
    """In the forked process: the caller's PER_CALL variables, output to ``log``, run ``python ARGS`` as the
    interpreter would, exit as it would."""
    import runpy

    # The rest equals the server's environment, with what its start-up set (V2: TRITON_INTERPRET).
    for name in PER_CALL:
        if name in per_call:
            os.environ[name] = per_call[name]
        else:
            os.environ.pop(name, None)
    if cwd is not None:
        os.chdir(cwd)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    code = 0
    try:
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(args)
            sys.path[0] = os.path.dirname(os.path.abspath(args[0]))  # as ``python SCRIPT`` sets it
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _serve(runner: str, reply_fd: int) -> None:
    """Import what run_engine imports before its engine, then fork one process per request line (replies on
    ``reply_fd``)."""
    import gc

    out = os.fdopen(reply_fd, "wb", buffering=0)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # as start_engine sets it
    if runner != "v1":  # as run_engine does first (engine.py is left to the forked process's ``-m``)
        from ascend_spec.e2e.cpu_v2 import select_model_runner

        select_model_runner(runner)
    import torch  # noqa: F401
    from vllm import LLM, SamplingParams  # noqa: F401
    from vllm.inputs import TokensPrompt  # noqa: F401

    gc.collect()
    gc.freeze()
    out.write(b"ready\n")
    for line in sys.stdin.buffer:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            out.close()
            _forked_process(job["args"], job["per_call"], job["log"], job["cwd"])
        out.write(f"pid {pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        out.write(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
