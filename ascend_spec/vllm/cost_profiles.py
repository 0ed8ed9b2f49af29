"""Cost profiles of one engine's target and drafter, measured at engine start or read from a file.

The controller needs V(n) (the target running n tokens) and D(n) (the drafter running n = B x Q tokens) on this
device, with this dtype and these engine settings. At engine start (after the KV cache exists) the target is
timed with the runner's own dummy forward at every target bucket and the drafter with its own dummy run at every
draft bucket (:mod:`ascend_spec.vllm.graphs`), each through ``CostProfile.measure`` (CUDA/NPU events, the wall
clock on CPU). The result is cached as JSON keyed by everything the costs depend on (:func:`profile_key`); an
engine with the same key reuses it. ``dynamic.profile`` may name a file instead: read when it exists (a key that
differs from this engine's is logged), else measured and written there. The file is in the engine format
(``ascend-spec/engine-cost-profiles/v1``, what measuring writes, which ``ascend-spec plan --profile`` reads too); a
plan profile (``ascend-spec/plan-profile/v1``, a file or a shipped name in configs/profiles/) is read as well, its
target and the drafter named like the engine's speculative method. Measuring is bounded by
``dynamic.max_startup_s``: past the bound it stops with an error naming the key (nothing half-measured is kept).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ascend_spec.graph import BudgetController, CostProfile, GraphBuckets
from ascend_spec.graph.config_io import read_json
from ascend_spec.graph.cost_profile import STATISTICS
from ascend_spec.graph.plan_report import ENGINE_PROFILE_FORMAT, PLAN_PROFILE_FORMAT, load_plan_profile
from ascend_spec.vllm.config import DynamicConfig, _where
from ascend_spec.vllm.log import plugin_logger
from ascend_spec.vllm.rank_consistency import from_rank_zero

logger = plugin_logger()


@dataclass(frozen=True)
class EngineProfiles:
    """The target's and the drafter's profiles, where they came from and what measuring them cost."""

    target: CostProfile
    draft: CostProfile
    key: dict[str, Any] | None
    source: str  # "measured", "cache <path>" or "file <path>"
    startup_s: float  # seconds measuring added to engine start (0 when read)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": ENGINE_PROFILE_FORMAT,
            "key": self.key,
            "startup_s": self.startup_s,
            "target": self.target.to_dict(),
            "draft": self.draft.to_dict(),
        }


@torch.inference_mode()
def time_target_forward(runner, num_tokens: int, drafter, silenced: str) -> None:  # noqa: ANN001
    """The runner's dummy target forward over ``num_tokens`` plus their logits, with the drafter's ``silenced``
    method a no-op meanwhile (V1: ``dummy_run``; V2: the speculator's ``propose``): the target profile times the
    target alone."""
    saved = drafter.__dict__.get(silenced)
    setattr(drafter, silenced, lambda *args, **kwargs: None)
    try:
        hidden, _ = runner._dummy_run(num_tokens)
        runner.model.compute_logits(hidden[:num_tokens])
    finally:
        if saved is None:
            delattr(drafter, silenced)
        else:
            setattr(drafter, silenced, saved)


def controller_target_profile(profiles: EngineProfiles, graphs) -> CostProfile:  # noqa: ANN001
    """The target profile the controller plans with: as measured where the target runs graphs (a total is
    padded to its bucket), every token count where it runs eagerly (``CostProfile.per_token``: each verified
    token costs its share, so a total that fills a bucket is no longer free)."""
    return profiles.target if graphs.graphs else profiles.target.per_token()


def profile_key(vllm_config, device: torch.device, graphs, settings: DynamicConfig) -> dict[str, Any]:  # noqa: ANN001
    """Everything the measured costs depend on: models, device, dtype, engine settings, buckets, versions."""
    import vllm

    from ascend_spec import __version__

    spec = vllm_config.speculative_config
    mc = vllm_config.model_config
    name = device_name(device)
    return {
        "model": str(mc.model),
        "draft_model": str(getattr(spec, "model", None)),
        "method": spec.method,
        "num_speculative_tokens": spec.num_speculative_tokens,
        "device": name,
        "dtype": str(mc.dtype),
        "max_num_seqs": vllm_config.scheduler_config.max_num_seqs,
        "enforce_eager": bool(mc.enforce_eager),
        "tensor_parallel_size": vllm_config.parallel_config.tensor_parallel_size,
        "torch_threads": torch.get_num_threads(),
        "statistic": settings.statistic,
        "target_buckets": graphs.target.buckets.to_list(),
        "draft_buckets": graphs.draft.buckets.to_list(),
        "vllm": str(vllm.__version__),
        "ascend_spec": __version__,
    }


def device_name(device: torch.device) -> str:
    """The accelerator's name (e.g. the Ascend SoC or the GPU model), or the CPU model on CPU."""
    if device.type != "cpu":
        mod = getattr(torch, device.type, None)
        getter = getattr(mod, "get_device_name", None)
        return f"{device.type}:{getter(device)}" if getter is not None else device.type
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        model = ""
    return f"cpu:{model or platform.processor() or platform.machine()}"


def cache_path(key: dict[str, Any]) -> Path:
    from vllm import envs

    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return Path(envs.VLLM_CACHE_ROOT) / "ascend_spec" / "cost_profiles" / f"{digest}.json"


def load_engine_profiles(
    path: Path, key: dict[str, Any] | None = None, source: str | None = None
) -> EngineProfiles:
    data = read_json(path)
    where = str(path)
    if isinstance(data, dict) and data.get("format") == PLAN_PROFILE_FORMAT:
        return _from_plan_profile(path, key, source or f"file {where}")
    if not isinstance(data, dict) or data.get("format") != ENGINE_PROFILE_FORMAT:
        raise ValueError(
            f"{_where('dynamic')}['profile']: {where} is not a profile file (format must be "
            f"{ENGINE_PROFILE_FORMAT!r} or {PLAN_PROFILE_FORMAT!r}; got "
            f"{data.get('format') if isinstance(data, dict) else data!r})"
        )
    for part in ("target", "draft"):
        if part not in data:
            raise ValueError(f"{_where('dynamic')}['profile']: {where} has no {part!r} profile")
    stored = data.get("key")
    if key is not None and stored is not None and stored != key:
        diff = sorted(k for k in set(stored) | set(key) if stored.get(k) != key.get(k))
        logger.warning("ascend-spec: cost profile %s was measured with different %s", where, ", ".join(diff))
    return EngineProfiles(
        target=CostProfile.from_dict(data["target"], where=f"{where}: target"),
        draft=CostProfile.from_dict(data["draft"], where=f"{where}: draft"),
        key=stored,
        source=source or f"file {where}",
        startup_s=0.0,
    )


def _from_plan_profile(path: Path, key: dict[str, Any] | None, source: str) -> EngineProfiles:
    """A plan profile's target and the drafter named like this engine's method, at this engine's K."""
    plan = load_plan_profile(path)
    method = (key or {}).get("method")
    k = (key or {}).get("num_speculative_tokens")
    if method not in plan.drafters or not isinstance(k, int):
        raise ValueError(
            f"{_where('dynamic')}['profile']: {path} has no costs for the drafter {method!r}; it has "
            f"{', '.join(sorted(plan.drafters))}"
        )
    drafter = plan.drafters[method]
    return EngineProfiles(plan.target, drafter.cost_profile(k), None, source, 0.0)


def profile_path(profile: str, key: dict[str, Any]) -> tuple[Path, bool]:
    """Where ``dynamic.profile`` points (and whether it was given): the cache for ``measure``, an existing file,
    a shipped plan profile's name, else the path to measure into."""
    if profile == "measure":
        return cache_path(key), False
    path = Path(os.path.expanduser(profile))
    if not path.exists() and os.sep not in profile:
        from ascend_spec.paths import CONFIGS_DIR

        shipped = CONFIGS_DIR / "profiles" / (profile if profile.endswith(".json") else profile + ".json")
        if shipped.exists():
            return shipped, True
    return path, True


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def wrap(self, fn: Callable[[int], Any]) -> Callable[[int], Any]:
        def run(n: int) -> Any:
            if self.elapsed() > self.seconds:
                raise RuntimeError(
                    f"measuring the cost profiles took more than {_where('dynamic')}['max_startup_s'] = "
                    f"{self.seconds} s; raise it, lower 'repeats'/'warmup', or give a measured profile file "
                    "in 'profile'"
                )
            return fn(n)

        return run


def _interleaved(
    run_fn: Callable[[int], Any],
    buckets: GraphBuckets,
    settings: DynamicConfig,
    device: torch.device,
    part: str,
) -> CostProfile:
    """``CostProfile.measure`` in ``repeats`` rounds over all buckets, reduced per bucket by ``statistic``.

    Round by round rather than bucket by bucket: a burst of other work on a shared machine then slows one run of
    many buckets instead of every run of a few, and the minimum (the default statistic) discards it.
    """
    rounds = [
        CostProfile.measure(
            run_fn, buckets, warmup=settings.warmup if r == 0 else 0, repeats=1, device=device
        )
        for r in range(settings.repeats)
    ]
    reduce = STATISTICS[settings.statistic]
    costs: dict[int, float] = {}
    origins: dict[int, str] = {}
    running = 0.0
    for size in buckets:
        value = reduce([p.costs[size] for p in rounds])
        if value < running:  # a larger graph is never cheaper: noise, raised to the running maximum
            costs[size], origins[size] = running, "adjusted"
        else:
            costs[size], origins[size] = value, "measured"
            running = value
    source = (
        f"ascend-spec engine start on {device}: {settings.statistic} of {settings.repeats} rounds over all "
        f"buckets after {settings.warmup} warm-up"
    )
    return CostProfile(costs, part=part, origins=origins, source=source)


def measure_engine_profiles(
    run_target: Callable[[int], Any],
    run_draft: Callable[[int], Any],
    target_buckets: GraphBuckets,
    draft_buckets: GraphBuckets,
    settings: DynamicConfig,
    device: torch.device,
    key: dict[str, Any] | None = None,
    *,
    interleave_draft: bool = True,
) -> EngineProfiles:
    """Time both parts at their buckets within ``settings.max_startup_s`` (module docstring).

    ``interleave_draft=False`` times the drafter bucket after bucket (at least one warm-up call each): for a
    ``run_draft`` whose first call of a size prepares what the next calls of that size reuse (Model Runner V2's
    drafter needs a dummy step's inputs)."""
    deadline = _Deadline(settings.max_startup_s)
    target = _interleaved(deadline.wrap(run_target), target_buckets, settings, device, "target")
    if interleave_draft:
        draft = _interleaved(deadline.wrap(run_draft), draft_buckets, settings, device, "draft")
    else:
        draft = CostProfile.measure(
            deadline.wrap(run_draft),
            draft_buckets,
            warmup=max(1, settings.warmup),
            repeats=settings.repeats,
            device=device,
            part="draft",
            statistic=settings.statistic,
        )
    return EngineProfiles(target, draft, key, "measured", deadline.elapsed())


def engine_controller(
    runner,  # noqa: ANN001
    settings: DynamicConfig,
    graphs,  # noqa: ANN001 - ascend_spec.vllm.graphs.EngineGraphs
    run_target: Callable[[int], Any],
    run_draft: Callable[[int], Any],
    *,
    mode: str = "sync",
    backend: str = "auto",
    draft_tokens: int | None = None,
    model_runner: str | None = None,
    interleave_draft: bool = True,
    measuring: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> tuple[EngineProfiles, BudgetController]:
    """Every runner's start of dynamic verification: the profiles of ``settings.profile`` (read, or measured with
    the runner's ``run_target`` / ``run_draft`` at ``graphs``' buckets inside ``measuring()``) and the
    ``BudgetController`` planning on them (``draft_tokens``: the drafter's Q where it differs from the method's).
    ``model_runner`` joins the profile key where the runner changes what a dummy step costs."""
    device = torch.device(runner.device)
    key = profile_key(runner.vllm_config, device, graphs, settings)
    if model_runner is not None:
        key["model_runner"] = model_runner

    def measure() -> EngineProfiles:
        with measuring():
            return measure_engine_profiles(
                run_target,
                run_draft,
                graphs.target.buckets,
                graphs.draft.buckets,
                settings,
                device,
                key,
                interleave_draft=interleave_draft,
            )

    profiles = engine_profiles(settings, key, measure)
    controller = BudgetController(
        profiles.draft,
        controller_target_profile(profiles, graphs),
        max_drafts=graphs.num_spec_tokens,
        draft_tokens_per_request=draft_tokens or graphs.draft_tokens_per_request,
        mode=mode,
        backend=backend,
    )
    return profiles, controller


def engine_profiles(
    settings: DynamicConfig,
    key: dict[str, Any],
    measure: Callable[[], EngineProfiles],
) -> EngineProfiles:
    """Read the profile file or the cache when there is one, else measure (and write it); log what it cost."""
    path, explicit = profile_path(settings.profile, key)
    if path.exists():
        profiles = load_engine_profiles(path, key, source=f"{'file' if explicit else 'cache'} {path}")
        logger.info("ascend-spec: cost profiles from %s (0 s added to start-up)", profiles.source)
        return from_rank_zero(profiles)  # a file another rank's process may have rewritten meanwhile
    profiles = from_rank_zero(
        measure()
    )  # every rank measures (its forwards are collective), plans on rank 0's
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(profiles.to_dict(), indent=2) + "\n")
    tmp.replace(path)
    logger.info(
        "ascend-spec: measured cost profiles at %d target and %d draft token counts in %.2f s "
        "(bound %s s), cached in %s",
        len(profiles.target.buckets),
        len(profiles.draft.buckets),
        profiles.startup_s,
        settings.max_startup_s,
        path,
    )
    return profiles
