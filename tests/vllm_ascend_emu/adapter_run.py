"""One engine in a child process on the emulated NPU, with what the adapter did inside vllm-ascend's runner.

``run_with_probe`` starts ``python adapter_run.py REQUEST RESULT`` (as ``ascend_spec.e2e.engine.run_isolated`` does)
and returns the engine's tokens and counters (:class:`~ascend_spec.e2e.engine.EngineRun`) plus a probe of the
worker: the runner's and drafter's classes, which methods the plugin wrapped on the runner instance, and for the
adapter's dynamic verification every step's verify lengths, its host copies and the host reads (``item``,
``tolist``, ``int()``, ...) made while it scored and planned. Counting is test-only: it wraps
``AscendSpecDynamicSpec.update`` / ``finish`` in this child process, never in a user's engine.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ascend_spec.e2e import fork_server
from ascend_spec.e2e.engine import EngineRun, EngineSpec, engine_child_env

# Tensor methods that read device memory on the host (a sync on a real NPU).
HOST_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__", "nonzero")
_STEPS: list[dict[str, Any]] = []


def _count_host_reads(fn):  # noqa: ANN001, ANN202 - wraps a method
    import torch
    from torch.overrides import TorchFunctionMode

    names = {getattr(torch.Tensor, n) for n in HOST_READS}

    class Counting(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.readers: list[str] = []

        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            if func in names:
                self.readers.append(sys._getframe(1).f_code.co_name)  # the function that read
            return func(*args, **(kwargs or {}))

    def wrapped(self, *args: Any, **kwargs: Any) -> Any:
        with Counting() as mode:
            out = fn(self, *args, **kwargs)
        self.__dict__.setdefault("_probe_host_reads", []).extend(mode.readers)
        return out

    return wrapped


def _install_step_probe() -> None:
    """Record each finished step of the adapter's verify scheduler (lengths, copies, host reads)."""
    from ascend_spec.vllm.ascend.verify_scheduler import AscendSpecDynamicSpec

    update = _count_host_reads(AscendSpecDynamicSpec.update)
    finish_counted = _count_host_reads(AscendSpecDynamicSpec.finish)

    def finish(self, num_reqs: int, *, num_drafts: int | None = None):  # noqa: ANN202
        copies = self.host_copies
        out = finish_counted(self, num_reqs, num_drafts=num_drafts)
        reads = self.__dict__.pop("_probe_host_reads", [])
        _STEPS.append(
            {
                "lengths": [int(x) for x in self._host[:num_reqs]],
                "num_drafts": num_drafts,
                "host_copies": self.host_copies - copies,
                "host_reads": reads,
            }
        )
        return out

    AscendSpecDynamicSpec.update = update
    AscendSpecDynamicSpec.finish = finish


def adapter_probe(worker) -> dict:  # noqa: ANN001 - collective_rpc target, runs in the worker
    runner = worker.model_runner
    drafter = getattr(runner, "drafter", None)
    spec = getattr(drafter, "dynamic_spec", None)

    def name(obj: Any) -> str | None:
        return None if obj is None else f"{type(obj).__module__}.{type(obj).__qualname__}"

    own = {}
    for method in (
        "execute_model",
        "_sample",
        "propose_draft_token_ids",
        "take_draft_token_ids",
        "sample_tokens",
        "_update_states",
    ):
        bound = getattr(runner, method)
        wrapped = method in runner.__dict__  # an instance attribute set by the plugin
        func = getattr(bound, "__func__", bound)
        inner = None
        if wrapped:  # the bound method the plugin's wrapper closed over
            for cell in func.__closure__ or ():
                target = getattr(cell.cell_contents, "__func__", None)
                if target is not None and getattr(target, "__name__", "") == method:
                    inner = f"{target.__module__}.{target.__qualname__}"
        else:
            inner = f"{func.__module__}.{func.__qualname__}"
        own[method] = {"instance_wrapped": wrapped, "calls": inner}
    return {
        "runner": name(runner),
        "drafter": name(drafter),
        "drafter_mro": [f"{c.__module__}.{c.__qualname__}" for c in type(drafter).__mro__] if drafter else [],
        "dynamic_spec": name(spec),
        "backend": getattr(spec, "backend", None),
        "block_slot_calls": getattr(drafter, "block_slot_calls", 0),
        "ascend_spec": runner.__dict__.get("ascend_spec") is not None,
        "methods": own,
        "steps": list(_STEPS),
        "dynamic_stats": (
            runner.ascend_spec_dynamic.stats.as_dict()
            if getattr(runner, "ascend_spec_dynamic", None) is not None
            else None
        ),
    }


def run_with_probe(
    spec: EngineSpec,
    prompts: list[list[int]],
    max_tokens: list[int],
    *,
    work_dir: Path,
    env: dict[str, str],
    timeout: float = 1200.0,
) -> tuple[EngineRun, dict]:
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "tmp").mkdir(exist_ok=True)
    stamp = f"{os.getpid()}_{time.monotonic_ns()}"
    request, result = work_dir / f"adapter_request_{stamp}.json", work_dir / f"adapter_result_{stamp}.json"
    spec_dict = dataclasses.asdict(spec)
    spec_dict["target"] = str(spec.target)
    request.write_text(json.dumps({"spec": spec_dict, "prompts": prompts, "max_tokens": max_tokens}))
    child_env = engine_child_env(work_dir, env)
    code, output = fork_server.run_python(
        [str(Path(__file__)), str(request), str(result)],
        child_env,
        work=work_dir,
        runner=spec.runner,
        timeout=timeout,
    )
    if not result.exists():
        return EngineRun(error=f"engine process exited with {code}: {output}"), {}
    data = json.loads(result.read_text())
    probe = data.pop("probe")
    data["top2"] = []
    return EngineRun(**data), probe


def _main(request: str, result: str) -> None:
    from ascend_spec.e2e import engine

    data = json.loads(Path(request).read_text())
    spec = data["spec"]
    spec["target"] = Path(spec["target"])
    spec = EngineSpec(**spec)
    _install_step_probe()
    from vllm.inputs import TokensPrompt

    run, probe, llm = EngineRun(), {}, None
    try:
        llm = engine.start_engine(spec, data["prompts"])
        _STEPS.clear()  # the warm-up's steps
        before = engine._metric_values(llm)
        prompts = [TokensPrompt(prompt_token_ids=p) for p in data["prompts"]]
        outs = llm.generate(prompts, engine.engine_sampling(data["max_tokens"]), use_tqdm=False)
        after = engine._metric_values(llm)
        run.tokens = [list(o.outputs[0].token_ids) for o in outs]
        engine.collect_counters(llm, run, before, after)
        probe = llm.collective_rpc(adapter_probe)[0]
    except Exception as exc:  # noqa: BLE001 - reported to the test
        run.error = engine.engine_error(exc)
    finally:
        engine.shutdown_engine(llm)
    out = dataclasses.asdict(run)
    out["probe"] = probe
    Path(result).write_text(json.dumps(out))


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
