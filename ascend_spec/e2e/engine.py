"""One vLLM engine run: greedy or seeded decoding of token-id prompts, with the numbers e2e reports.

:func:`run_isolated` starts a child Python process that runs :func:`run_engine` and exits: each engine gets a
fresh process (vLLM loads plugins once per process, keeps Prometheus counters and custom-op registries per
process, and on CPU rescans every loaded module when an engine starts, which fails once numba's llvmlite is
loaded, i.e. after any ngram engine). Inside the child the engine runs in-process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so no EngineCore or worker process can be orphaned, and
``VLLM_CACHE_ROOT`` / ``TMPDIR`` point into the caller's work folder. With :func:`fork_server.enable` the
child is forked from a process that has done vLLM's imports already (fork_server.py).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascend_spec.e2e import fork_server


@dataclass
class EngineSpec:
    """What to start: a target, an optional speculative config, the plugin's settings (None = not enabled)."""

    target: Path
    speculative: dict[str, Any] | None = None
    plugin: dict[str, Any] | None = None
    hybrid: bool = False
    max_num_seqs: int = 8
    max_model_len: int = 512
    kv_cache_bytes: int = 64 << 20
    async_scheduling: bool = False  # V1's async scheduling (on a CPU-only machine through cpu_async)
    runner: str = "v1"  # vLLM's model runner, "v1" or "v2" (Model Runner V2; CPU-only: through cpu_v2)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from ascend_spec.e2e.cpu_v2 import RUNNERS

        if self.runner not in RUNNERS:
            raise ValueError(f"EngineSpec.runner must be one of {RUNNERS}, got {self.runner!r}")

    def engine_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(
            model=str(self.target),
            skip_tokenizer_init=True,
            dtype="bfloat16",
            max_model_len=self.max_model_len,
            max_num_seqs=self.max_num_seqs,
            enable_prefix_caching=False,  # hybrid + speculative decoding on CPU (docs/vllm.md)
            enforce_eager=True,
            async_scheduling=self.async_scheduling,
            gpu_memory_utilization=0.05,
            kv_cache_memory_bytes=self.kv_cache_bytes,
            disable_log_stats=False,
            seed=0,
            speculative_config=self.speculative,
            logprobs_mode="raw_logits",  # "logprobs" returned are the raw logits: margins in logit units
            additional_config={"ascend_spec": self.plugin} if self.plugin is not None else {},
        )
        if self.speculative is not None and _has_engine_arg("per_request_spec_decode_metrics"):
            kwargs["per_request_spec_decode_metrics"] = "summary"  # per-request drafts and acceptance
        if self.hybrid:
            kwargs["mamba_ssm_cache_dtype"] = (
                "float32"  # the plugin keeps fp32 GDN states; plain runs match it
            )
        kwargs.update(self.extra)
        return kwargs


def _has_engine_arg(name: str) -> bool:
    from vllm.engine.arg_utils import EngineArgs

    return name in {f.name for f in dataclasses.fields(EngineArgs)}


def request_drafts(outs: list) -> list[list[int]]:  # noqa: ANN001 - vLLM RequestOutputs
    """[verify steps with drafts, draft tokens, accepted drafts] per request (empty without the metrics)."""
    rows = []
    for out in outs:
        metrics = getattr(out.outputs[0], "spec_decode_metrics", None)
        if metrics is None:
            return []
        m = metrics.to_dict()
        rows.append([m["num_spec_steps"], m["num_draft_tokens"], m["num_accepted_draft_tokens"]])
    return rows


def register_target(target: Path) -> None:
    """Register the built-in targets' own architectures (the mixed workload's step-cost target) with vLLM."""
    config = Path(target) / "config.json"
    if not config.exists():
        return
    from ascend_spec.e2e.mixed import STEP_COST_ARCH

    if STEP_COST_ARCH in json.loads(config.read_text()).get("architectures", []):
        from ascend_spec.e2e.step_cost_target import register

        register()


@dataclass
class EngineRun:
    """Tokens per prompt (and plain decoding's top-2 raw logits per position when asked) plus step statistics."""

    tokens: list[list[int]] = field(default_factory=list)
    top2: list[list[tuple[float, float]]] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = (
        0.0  # CPU time of the engine process over the same (best) run: robust on a shared host
    )
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    num_preemptions: int = 0
    gdn_state_bytes_per_request: int | None = None
    gdn_slots_per_request: int | None = None
    # After the run: requests whose GDN records the plugin's V2 flush committed (None: not a V2 runner with the
    # plugin) and state slots still holding records (None: no plugin GDN layer)
    gdn_flushed_requests: int | None = None
    gdn_recorded_slots: int | None = None
    block_slot_calls: int | None = None  # V2 draft steps whose block inputs came from prepare_block_slots
    kv_cache_layout: list = field(default_factory=list)
    dynamic: dict | None = None  # dynamic verification's counters (ascend_spec.vllm.dynamic.DynamicStats)
    dynamic_ranks: list[dict | None] = field(default_factory=list)  # the same, per tensor-parallel rank
    runner: str | None = None  # the runner the worker built ("v1"/"v2"): V2 can fall back to V1 silently
    cpus: list[int] = field(
        default_factory=list
    )  # the logical CPUs the engine process could run on (timed runs)
    # Per prompt, of the first timed run: [verify steps with drafts, draft tokens, accepted drafts] (vLLM's
    # per-request spec-decode metrics; empty for plain decoding or a vLLM without them)
    request_drafts: list[list[int]] = field(default_factory=list)
    runner_class: str = ""  # the worker's model runner class (module.qualname): which runner decoded
    error: str | None = None

    @property
    def num_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)

    @property
    def tokens_per_second(self) -> float:
        return self.num_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_cpu_second(self) -> float:
        return self.num_tokens / self.cpu_seconds if self.cpu_seconds > 0 else 0.0

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens per verify step and request: 1 (bonus) + accepted drafts."""
        return 1 + self.num_accepted / self.num_drafts if self.num_drafts else None

    @property
    def mean_verify_length(self) -> float | None:
        """Tokens the target verified per request and step: 1 + drafts. On Model Runner V2 with dynamic
        verification the device split's histogram (per request and planned step) is read: under async
        scheduling vLLM's counters hold the scheduler's K placeholders per request."""
        lengths = (self.dynamic or {}).get("lengths") if self.runner == "v2" else None
        if lengths:
            counts = {int(n): c for n, c in lengths.items()}
            return 1 + sum(n * c for n, c in counts.items()) / sum(counts.values())
        return 1 + self.num_draft_tokens / self.num_drafts if self.num_drafts else None

    @property
    def acceptance_rate_per_position(self) -> list[float]:
        return [a / self.num_drafts for a in self.accepted_per_position] if self.num_drafts else []


def _metric_values(llm) -> dict[str, Any]:  # noqa: ANN001
    from vllm.v1.metrics.reader import Counter, Vector

    out: dict[str, Any] = {}
    for metric in llm.get_metrics():
        if isinstance(metric, Counter):
            out[metric.name] = out.get(metric.name, 0) + metric.value
        elif isinstance(metric, Vector):
            prev = out.get(metric.name, [])
            vals = list(metric.values)
            size = max(len(prev), len(vals))
            out[metric.name] = [
                (prev[i] if i < len(prev) else 0) + (vals[i] if i < len(vals) else 0) for i in range(size)
            ]
    return out


def gdn_state_per_request(worker) -> tuple[int, int] | None:  # noqa: ANN001 - runs inside the worker
    """(bytes, slots) of GDN state one request holds: state slots x slot bytes, plus the plugin's records."""
    from vllm.v1.kv_cache_interface import MambaSpec

    runner = worker.model_runner
    total, slots = 0, None
    for group in runner.kv_cache_config.kv_cache_groups:
        spec = group.kv_cache_spec
        if not isinstance(spec, MambaSpec):
            continue
        slots = 1 + spec.num_speculative_blocks
        ctx = runner.compilation_config.static_forward_context
        for name in group.layer_names:
            layer = ctx[name]
            per_slot = sum(t[0].numel() * t.element_size() for t in layer.kv_cache)
            total += per_slot * slots
            record_nbytes = getattr(layer, "record_nbytes", 0)
            if record_nbytes:
                total += record_nbytes // layer.kv_cache[1].shape[0]
    return (total, slots) if slots is not None else None


def gdn_records_state(worker) -> tuple[int | None, int | None]:  # noqa: ANN001 - runs inside the worker
    """(requests the V2 flush committed, state slots whose records are not committed) of the plugin's GDN layers."""
    from ascend_spec.vllm.gdn_layer import AscendSpecGDNAttention

    runner = worker.model_runner
    flushed = runner.__dict__.get("_ascend_spec_flushed_requests")
    recorded = None
    for layer in runner.compilation_config.static_forward_context.values():
        if isinstance(layer, AscendSpecGDNAttention) and getattr(layer, "records", None) is not None:
            recorded = int((layer.records.num_recorded > 0).sum())  # every layer records the same slots
            break
    return flushed, recorded


def block_slot_calls(worker) -> int | None:  # noqa: ANN001 - runs inside the worker
    """Draft steps of a V2 speculator whose block inputs the plugin prepared (None: not hooked)."""
    speculator = getattr(worker.model_runner, "speculator", None)
    return getattr(speculator, "_ascend_spec_block_slot_calls", None)


def model_runner_class(worker) -> str:  # noqa: ANN001 - runs inside the worker
    runner = type(worker.model_runner)
    return f"{runner.__module__}.{runner.__qualname__}"


def _dynamic_stats(worker):  # noqa: ANN001, ANN202 - runs inside the worker
    from ascend_spec.vllm.v1.dynamic_hooks import dynamic_stats

    return dynamic_stats(worker)


def kv_cache_layout(worker) -> list:  # noqa: ANN001 - runs inside the worker
    """Every KV-cache group's spec (type, block size, state shapes, speculative blocks) and the block count."""
    config = worker.model_runner.kv_cache_config
    out: list = [["num_blocks", config.num_blocks]]
    for group in config.kv_cache_groups:
        spec = group.kv_cache_spec
        shapes = getattr(spec, "shapes", None)
        out.append(
            [
                type(spec).__name__,
                spec.block_size,
                spec.page_size_bytes,
                getattr(spec, "num_speculative_blocks", None),
                [list(s) for s in shapes] if shapes is not None else None,
                sorted(group.layer_names),
            ]
        )
    return out


def engine_sampling(
    lengths: list[int], *, temperature: float = 0.0, seed: int | None = None, logprobs: bool = False
) -> list:
    """One ``SamplingParams`` per prompt (request i seeded with ``seed + i`` when a seed is given)."""
    from vllm import SamplingParams

    return [
        SamplingParams(
            temperature=temperature,
            max_tokens=n,
            ignore_eos=True,
            logprobs=2 if logprobs else None,
            seed=None if seed is None else seed + i,
        )
        for i, n in enumerate(lengths)
    ]


def _select_runner(spec: EngineSpec) -> None:
    """V2 is selected (and on a CPU-only machine made to run, cpu_v2) before vLLM is imported: Triton's
    interpreter and vLLM's ``HAS_TRITON`` are decided at import."""
    if spec.runner != "v1":
        from ascend_spec.e2e.cpu_v2 import select_model_runner

        select_model_runner(spec.runner)


def start_engine(spec: EngineSpec, prompts: list[list[int]], *, warmup: bool = True):  # noqa: ANN201
    """The in-process engine (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), warmed up on the first prompt."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    _select_runner(spec)
    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    if spec.async_scheduling and not torch.cuda.is_available():
        from ascend_spec.e2e.cpu_async import enable_cpu_async_scheduling

        enable_cpu_async_scheduling()

    register_target(spec.target)
    llm = LLM(**spec.engine_kwargs())
    if warmup:
        llm.generate(
            [TokensPrompt(prompt_token_ids=prompts[0])], SamplingParams(max_tokens=4), use_tqdm=False
        )
    return llm


def timed_generate(llm, token_prompts: list, sampling: list) -> tuple[list, float, float]:  # noqa: ANN001
    """(outputs, wall seconds, CPU seconds of this process) of one ``generate`` over every prompt."""
    start, cpu_start = time.perf_counter(), time.process_time()
    outs = llm.generate(token_prompts, sampling, use_tqdm=False)
    return outs, time.perf_counter() - start, time.process_time() - cpu_start


def collect_counters(llm, run: EngineRun, before: dict, after: dict) -> None:  # noqa: ANN001
    """The speculative counters between ``before`` and ``after`` and what the worker reports, into ``run``."""

    def delta(name: str) -> int:
        return int(after.get(name, 0) - before.get(name, 0))

    run.num_drafts = delta("vllm:spec_decode_num_drafts")
    run.num_draft_tokens = delta("vllm:spec_decode_num_draft_tokens")
    run.num_accepted = delta("vllm:spec_decode_num_accepted_tokens")
    run.num_preemptions = delta("vllm:num_preemptions")
    per_pos_after = after.get("vllm:spec_decode_num_accepted_tokens_per_pos", [])
    per_pos_before = before.get("vllm:spec_decode_num_accepted_tokens_per_pos", [])
    run.accepted_per_position = [
        int(v - (per_pos_before[i] if i < len(per_pos_before) else 0)) for i, v in enumerate(per_pos_after)
    ]
    run.kv_cache_layout = llm.collective_rpc(kv_cache_layout)[0]
    run.runner_class = llm.collective_rpc(model_runner_class)[0]
    run.dynamic_ranks = llm.collective_rpc(_dynamic_stats)
    run.dynamic = run.dynamic_ranks[0]
    from ascend_spec.e2e.cpu_v2 import runner_in_use

    run.runner = llm.collective_rpc(runner_in_use)[0]
    run.block_slot_calls = llm.collective_rpc(block_slot_calls)[0]
    state = llm.collective_rpc(gdn_state_per_request)[0]
    if state is not None:
        run.gdn_state_bytes_per_request, run.gdn_slots_per_request = state
        run.gdn_flushed_requests, run.gdn_recorded_slots = llm.collective_rpc(gdn_records_state)[0]


def engine_error(exc: Exception) -> str:
    last = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__}: {exc} ({Path(last.filename).name}:{last.lineno})"


def shutdown_engine(llm) -> None:  # noqa: ANN001
    from vllm.distributed import cleanup_dist_env_and_memory

    if llm is not None:
        engine = getattr(llm, "llm_engine", None)
        shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
        if callable(shutdown):
            shutdown()
        del llm
    gc.collect()
    cleanup_dist_env_and_memory()


def run_engine(
    spec: EngineSpec,
    prompts: list[list[int]],
    *,
    max_tokens: int | list[int],
    logprobs: bool = False,
    temperature: float = 0.0,
    seed: int | None = None,
    warmup: bool = True,
    repeats: int = 1,
) -> EngineRun:
    """Start the engine, decode ``prompts`` (token ids) and shut it down; an engine error is returned, not raised."""
    _select_runner(spec)
    from vllm.inputs import TokensPrompt

    lengths = max_tokens if isinstance(max_tokens, list) else [max_tokens] * len(prompts)
    sampling = engine_sampling(lengths, temperature=temperature, seed=seed)
    run = EngineRun()
    llm = None
    try:
        llm = start_engine(spec, prompts, warmup=warmup)
        before = _metric_values(llm)
        token_prompts = [TokensPrompt(prompt_token_ids=p) for p in prompts]
        outs, run.seconds, run.cpu_seconds = timed_generate(llm, token_prompts, sampling)
        after = _metric_values(llm)
        for _ in range(repeats - 1):  # best of ``repeats`` timings (a shared machine is noisy); same tokens
            again, seconds, cpu_seconds = timed_generate(llm, token_prompts, sampling)
            run.seconds = min(run.seconds, seconds)
            run.cpu_seconds = min(run.cpu_seconds, cpu_seconds)
            if temperature == 0.0 and [list(o.outputs[0].token_ids) for o in again] != [
                list(o.outputs[0].token_ids) for o in outs
            ]:
                raise RuntimeError("greedy decoding gave different tokens on a repeated run")
        run.tokens = [list(out.outputs[0].token_ids) for out in outs]
        run.request_drafts = request_drafts(outs)
        if logprobs:  # a second pass: vLLM's CPU logprobs path is slow and must not enter the timing
            with_logprobs = engine_sampling(lengths, temperature=temperature, seed=seed, logprobs=True)
            for out in llm.generate(token_prompts, with_logprobs, use_tqdm=False):
                run.top2.append([_top2(lp) for lp in out.outputs[0].logprobs])
        collect_counters(llm, run, before, after)
    except Exception as exc:  # an engine that fails is a result to report (upstream's GDN spec path crashes)
        run.error = engine_error(exc)
    finally:
        shutdown_engine(llm)
    return run


def _top2(position_logprobs: dict) -> tuple[float, float]:  # noqa: ANN001 - {token_id: Logprob}
    ranked = sorted(position_logprobs.values(), key=lambda lp: lp.logprob, reverse=True)
    first = ranked[0].logprob
    second = ranked[1].logprob if len(ranked) > 1 else float("-inf")
    return first, second


def _forkable(spec: EngineSpec) -> bool:
    """Engines of one process (no tensor-parallel workers) can be forked from a fork server."""
    return (
        int(spec.extra.get("tensor_parallel_size", 1)) == 1
        and int(spec.extra.get("pipeline_parallel_size", 1)) == 1
    )


def engine_cache_root(work: Path) -> Path:
    """``VLLM_CACHE_ROOT`` for an engine started in ``work``: a folder of its own (start-up cost profiles, compile
    caches) whose ``modelinfos`` is vLLM's default one. Without that cache vLLM inspects each model class in a
    fresh subprocess that imports torch and vLLM (10-25 s on 2 cores); its entries are keyed by the class's
    source hash, so sharing them is what vLLM does for every engine that keeps its default cache root."""
    root = Path(work) / "vllm_cache"
    root.mkdir(parents=True, exist_ok=True)
    link = root / "modelinfos"
    if not link.exists() and not link.is_symlink():
        # vLLM's VLLM_CACHE_ROOT default, as an engine started from this environment would see it
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        shared = Path(xdg) / "vllm" / "modelinfos"
        shared.mkdir(parents=True, exist_ok=True)
        link.symlink_to(shared, target_is_directory=True)
    return root


def engine_child_env(work: Path, env: dict[str, str] | None) -> dict[str, str]:
    """This process's environment for an engine child working in ``work`` (whose ``tmp`` exists), ``env`` on top:
    caches and TMPDIR there, the engine in-process, and vLLM's usage reporter off (its thread runs a py-cpuinfo
    subprocess beside the engine)."""
    child_env = dict(os.environ)
    if "VLLM_CACHE_ROOT" not in child_env:
        child_env["VLLM_CACHE_ROOT"] = str(engine_cache_root(work))
    child_env.setdefault("VLLM_NO_USAGE_STATS", "1")
    child_env["TMPDIR"] = str(work / "tmp")
    child_env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    child_env.update(env or {})
    return child_env


def run_isolated(
    spec: EngineSpec,
    prompts: list[list[int]],
    *,
    work_dir: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 900.0,
    **kwargs: Any,
) -> EngineRun:
    """:func:`run_engine` in a fresh child process (module docstring); ``env`` adds environment variables."""
    work = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="ascend_spec_e2e_"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "tmp").mkdir(exist_ok=True)
    request = work / f"request_{os.getpid()}_{time.monotonic_ns()}.json"
    result = request.with_name(request.name.replace("request_", "result_"))
    spec_dict = dataclasses.asdict(spec)
    spec_dict["target"] = str(spec.target)
    request.write_text(json.dumps({"spec": spec_dict, "prompts": prompts, "kwargs": kwargs}))
    child_env = engine_child_env(work, env)
    code, tail = fork_server.run_python(
        ["-m", "ascend_spec.e2e.engine", str(request), str(result)],
        child_env,
        work=work,
        runner=spec.runner,
        fork=_forkable(spec),
        timeout=timeout,
    )
    if not result.exists():
        return EngineRun(error=f"engine process exited with {code}: {tail}")
    data = json.loads(result.read_text())
    data["top2"] = [[tuple(x) for x in row] for row in data["top2"]]
    return EngineRun(**data)


def _main(request: str, result: str) -> None:
    data = json.loads(Path(request).read_text())
    spec = data["spec"]
    spec["target"] = Path(spec["target"])
    run = run_engine(EngineSpec(**spec), data["prompts"], **data["kwargs"])
    Path(result).write_text(json.dumps(dataclasses.asdict(run)))


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
