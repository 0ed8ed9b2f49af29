"""The verify stats line (verify_stats_log): classes, means, plain-decoding steps and the exact line on a stand-in
scheduler with known drafts and accepted counts, then on vLLM's own Scheduler and AsyncScheduler; engines without
dynamic verification (or with log_every 0) get no line and no state. The engine check is in test_vllm_dynamic.py."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm", reason="the line is counted in vLLM's engine-core scheduler")

from ascend_spec.vllm import verify_log  # noqa: E402
from ascend_spec.vllm.log import LOGGER_NAME  # noqa: E402
from ascend_spec.vllm.verify_log import ATTRIBUTE, VerifyStats, wrap_update_from_output  # noqa: E402

PREFIX = "ascend-spec dynamic verification: "


@pytest.fixture
def lines(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """The plugin logger's INFO lines (vLLM's ``vllm`` logger does not propagate to caplog's root handler)."""
    monkeypatch.setattr(logging.getLogger("vllm"), "propagate", True)
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)

    def read() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == LOGGER_NAME and r.getMessage().startswith(PREFIX)
        ]

    return read


# -------------------------------------------------------------------------------- a stand-in scheduler


class _Request:
    def __init__(self, outputs: int = 0) -> None:
        self.num_output_tokens = outputs
        self.num_stale_output_tokens = 0
        self.finished = False

    def is_finished(self) -> bool:
        return self.finished


class _Scheduler:
    """What the wrapper reads of vLLM's Scheduler; its update appends the sampled tokens and drops finished
    requests, as vLLM's does."""

    def __init__(self, additional_config: object, k: int = 4) -> None:
        self.vllm_config = SimpleNamespace(
            additional_config=additional_config,
            speculative_config=SimpleNamespace(num_speculative_tokens=k),
            scheduler_config=SimpleNamespace(async_scheduling=False),
        )
        self.num_sampled_tokens_per_step = 1
        self.requests: dict[str, _Request] = {}
        self.updates = 0

    def update_from_output(self, scheduler_output, model_runner_output):  # noqa: ANN001, ANN201
        self.updates += 1
        for req_id, i in model_runner_output.req_id_to_index.items():
            self.requests[req_id].num_output_tokens += len(model_runner_output.sampled_token_ids[i])
        return {"step": self.updates}


_Scheduler.update_from_output = wrap_update_from_output(_Scheduler.update_from_output)


def _step(
    scheduler: _Scheduler, rows: dict[str, tuple[int, int, int]], finished: tuple[str, ...] = ()
) -> dict:
    """One step: ``rows`` = request -> (tokens scheduled, drafts scheduled, tokens sampled)."""
    for req_id in finished:
        scheduler.requests.pop(req_id)
    ids = list(rows)
    so = SimpleNamespace(
        num_scheduled_tokens={r: n for r, (n, _, _) in rows.items()},
        scheduled_spec_decode_tokens={r: [-1] * d for r, (_, d, _) in rows.items() if d},
        finished_req_ids=set(finished),
    )
    out = SimpleNamespace(
        req_id_to_index={r: i for i, r in enumerate(ids)},
        sampled_token_ids=[[7] * s for (_, _, s) in rows.values()],
    )
    return scheduler.update_from_output(so, out)


def _enabled(log_every: int) -> dict:
    return {"ascend_spec": {"dynamic": {"mode": "sync", "log_every": log_every}}}


def test_classes_means_plain_steps_and_the_exact_line(lines) -> None:  # noqa: ANN001
    """a, b, c decode from step 1, p prefills in two chunks; c finishes before step 4. Classes by acceptance
    before the step: a 4/4 then 5/6 (high); b 0/3 (low), then 2/6 (exactly 1/3: mid); c 1/3 (mid); p new."""
    s = _Scheduler(_enabled(4))
    s.requests = {"a": _Request(1), "b": _Request(1), "c": _Request(1), "p": _Request(0)}
    assert _step(s, {"a": (5, 4, 5), "b": (4, 3, 1), "c": (1, 0, 1), "p": (8, 0, 0)}) == {"step": 1}
    _step(s, {"a": (3, 2, 2), "b": (4, 3, 3), "c": (4, 3, 2), "p": (4, 0, 1)})  # p's last chunk
    _step(s, {"a": (1, 0, 1), "b": (1, 0, 1), "c": (1, 0, 1), "p": (1, 0, 1)})  # plain decoding
    assert lines() == []
    _step(s, {"a": (5, 4, 1), "b": (1, 0, 1), "p": (3, 2, 3)}, finished=("c",))
    # high: a 2, 0, 4; mid: b 0, c 0, b 0; low: b 3; new: a 4, b 3, c 0 (step 1), c 3, p 0, p 2;
    # accepted 4+0 + 1+2+1 + 0+2 = 10 of 7 + 8 + 6 = 21 verified
    assert lines() == [
        PREFIX + "steps 1-4: mean verify length high 2.00 (3 request-steps), mid 0.00 (3), low 3.00 (1), "
        "new 2.00 (6); plain-decoding steps 1/4; acceptance 47.6%; K=4"
    ]
    stats = s.__dict__[ATTRIBUTE]
    assert set(stats.requests) == {"a", "b", "p"}  # c dropped with finished_req_ids
    assert stats.requests["a"] == [5, 10] and stats.requests["p"] == [2, 2]
    _step(s, {"p": (6, 0, 0)})  # a step with only a prefill chunk is not a step of the line
    for _ in range(4):
        _step(s, {"a": (1, 0, 1)})
    assert lines()[1] == (
        PREFIX
        + "steps 5-8: mean verify length mid 0.00 (4 request-steps); plain-decoding steps 4/4; acceptance -; K=4"
    )
    assert stats.steps == 8


@pytest.mark.parametrize(
    "additional_config",
    [None, {}, {"ascend_spec": {}}, {"ascend_spec": {"dynamic": False}}, _enabled(0)],
    ids=["no-config", "no-key", "plugin-without-dynamic", "dynamic-off", "log_every-0"],
)
def test_no_line_and_no_state_without_dynamic_verification_or_with_log_every_0(
    lines,
    additional_config: object,
) -> None:
    s = _Scheduler(additional_config)
    s.requests = {"a": _Request(1)}
    for _ in range(3):
        assert _step(s, {"a": (5, 4, 5)}) == {"step": s.updates}
    assert s.__dict__[ATTRIBUTE] is None and s.updates == 3
    assert lines() == []


def test_request_table_stays_bounded_by_the_scheduler() -> None:
    """Requests aborted between steps (never in a finished_req_ids this wrapper sees) go once the table
    outgrows the scheduler's own."""
    stats = VerifyStats(100, 4)
    stats.requests = {f"r{i}": [0, 0] for i in range(200)}
    stats.forget((), {"r1": None, "r2": None})
    assert set(stats.requests) == {"r1", "r2"}


def test_v2_under_async_scheduling_says_its_lengths_are_the_scheduled_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ascend_spec.vllm import releases

    s = _Scheduler(_enabled(1), k=3)
    s.vllm_config.scheduler_config.async_scheduling = True
    monkeypatch.setattr(releases, "runs_model_runner_v2", lambda config, version=None: True)
    stats = verify_log.build_stats(s)
    assert stats is not None and stats.line().endswith("K=3" + verify_log.V2_ASYNC_NOTE)
    s.vllm_config.scheduler_config.async_scheduling = False
    assert verify_log.build_stats(s).note == ""


# -------------------------------------------------------------------------------- vLLM's own schedulers


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """register()'s install as in a new process (vLLM's scheduler classes restored afterwards)."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    from ascend_spec.vllm import install as install_mod
    from ascend_spec.vllm.v1 import dynamic_async

    original = Scheduler.update_from_output
    while getattr(original, "_ascend_spec_verify_log", False):
        original = original.__wrapped__
    monkeypatch.setattr(Scheduler, "update_from_output", original)
    if "update_from_output" in AsyncScheduler.__dict__:  # left by an earlier test's restore
        monkeypatch.delattr(AsyncScheduler, "update_from_output")
    monkeypatch.setattr(AsyncScheduler, "schedule", AsyncScheduler.schedule)
    monkeypatch.setattr(dynamic_async, "_scheduler_installed", False)
    monkeypatch.setattr(install_mod, "_installed", False)
    monkeypatch.setattr(install_mod, "_install_error", None)
    monkeypatch.setattr(install_mod, "_v2_installed", False)
    monkeypatch.setattr(install_mod, "_v2_error", None)
    from vllm.config import VllmConfig
    from vllm.v1.worker import gpu_model_runner

    monkeypatch.setattr(VllmConfig, "__post_init__", VllmConfig.__post_init__)
    monkeypatch.setattr(
        VllmConfig,
        "_get_v1_model_runner_unsupported_features",
        VllmConfig._get_v1_model_runner_unsupported_features,
    )
    monkeypatch.setattr(gpu_model_runner.GPUModelRunner, "__init__", gpu_model_runner.GPUModelRunner.__init__)
    try:
        from vllm.v1.worker.gpu import model_runner as v2_model_runner

        monkeypatch.setattr(
            v2_model_runner.GPUModelRunner, "__init__", v2_model_runner.GPUModelRunner.__init__
        )
    except ImportError:
        pass
    install_mod.install()
    assert install_mod._install_error is None
    return original


def _scheduler(target, cls: type, additional_config: dict, k: int = 3):  # noqa: ANN001, ANN202
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, SpeculativeConfig, VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    model = ModelConfig(model=str(target), skip_tokenizer_init=True, dtype="bfloat16", max_model_len=512)
    vllm_config = VllmConfig(
        model_config=model,
        scheduler_config=SchedulerConfig(
            max_num_seqs=8, max_num_batched_tokens=512, max_model_len=512, is_encoder_decoder=False
        ),
        cache_config=CacheConfig(block_size=16, enable_prefix_caching=False),
        speculative_config=SpeculativeConfig(
            method="ngram", num_speculative_tokens=k, prompt_lookup_min=1, prompt_lookup_max=3
        ),
        additional_config=additional_config,
    )
    vllm_config.cache_config.num_gpu_blocks = 256
    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=16, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=256, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["l0"], spec)])
    return cls(vllm_config, kv, StructuredOutputManager(vllm_config), block_size=16)


def _add(scheduler, ids: list[str]) -> None:  # noqa: ANN001
    from vllm import SamplingParams
    from vllm.v1.request import Request

    for r in ids:
        scheduler.add_request(
            Request(r, list(range(1, 7)), SamplingParams(max_tokens=100, ignore_eos=True), None)
        )


def _output(so, accepted: dict[str, int]):  # noqa: ANN001, ANN202
    """The step's output: each request samples its accepted drafts + 1."""
    from vllm.v1.outputs import ModelRunnerOutput

    ids = list(so.num_scheduled_tokens)
    return ModelRunnerOutput(
        req_ids=ids,
        req_id_to_index={r: i for i, r in enumerate(ids)},
        sampled_token_ids=[[5] * (1 + accepted.get(r, 0)) for r in ids],
    )


@pytest.mark.matrix  # every supported release CI installs
def test_vllms_scheduler_counts_what_it_scheduled_and_drops_finished_requests(
    installed,
    dense_low_entropy,
    lines,  # noqa: ANN001
) -> None:
    """Sync scheduling: the drafts handed to vLLM's Scheduler (update_draft_token_ids, as the engine core does)
    are what it schedules and what the line counts. r0 verifies 3 (all accepted), then 2 (none; class high),
    r1 none, then 3 (1 accepted; still new); step 3 verifies nothing (both mid: 3/5, 1/3)."""
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.outputs import DraftTokenIds
    from vllm.v1.request import RequestStatus

    s = _scheduler(dense_low_entropy.target, Scheduler, _enabled(3))
    _add(s, ["r0", "r1"])
    plan = [  # (drafts handed before the step, accepted in the step)
        ({}, {}),  # prefill
        ({"r0": 3, "r1": 0}, {"r0": 3}),
        ({"r0": 2, "r1": 3}, {"r0": 0, "r1": 1}),
        ({"r0": 0, "r1": 0}, {}),
    ]
    for drafts, accepted in plan:
        if drafts:
            s.update_draft_token_ids(DraftTokenIds(list(drafts), [[9] * n for n in drafts.values()]))
        so = s.schedule()
        assert {r: len(d) for r, d in so.scheduled_spec_decode_tokens.items()} == {
            r: n for r, n in drafts.items() if n
        }
        s.update_from_output(so, _output(so, accepted))
    assert lines() == [
        PREFIX + "steps 1-3: mean verify length high 2.00 (1 request-steps), mid 0.00 (2), new 2.00 (3); "
        "plain-decoding steps 1/3; acceptance 50.0%; K=3"
    ]
    stats = s.__dict__[ATTRIBUTE]
    assert stats.requests == {"r0": [3, 5], "r1": [1, 3]}
    s.finish_requests("r1", RequestStatus.FINISHED_ABORTED)
    so = s.schedule()
    assert "r1" in so.finished_req_ids
    s.update_from_output(so, _output(so, {}))
    assert set(stats.requests) == {"r0"} and stats.steps == 4


@pytest.mark.matrix  # every supported release CI installs
def test_vllms_async_scheduler_reaches_the_line_through_its_own_wrapper(
    installed,
    dense_low_entropy,
    lines,  # noqa: ANN001
) -> None:
    """register() wraps Scheduler.update_from_output before V1's AsyncScheduler hooks take the inherited method,
    so async engines count their steps too: two batches in flight, V1's K placeholders (mode sync), every draft
    accepted."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    assert AsyncScheduler.update_from_output.__wrapped__ is Scheduler.update_from_output
    assert Scheduler.update_from_output.__wrapped__ is installed
    s = _scheduler(dense_low_entropy.target, AsyncScheduler, _enabled(2))
    _add(s, ["r0", "r1"])
    in_flight = [s.schedule()]
    for _ in range(3):  # outputs of the prefill and two decode steps
        in_flight.append(s.schedule())
        done = in_flight.pop(0)
        s.update_from_output(
            done, _output(done, {r: len(d) for r, d in done.scheduled_spec_decode_tokens.items()})
        )
    assert lines() == [
        PREFIX
        + "steps 1-2: mean verify length high 3.00 (2 request-steps), new 3.00 (2); plain-decoding steps "
        "0/2; acceptance 100.0%; K=3"
    ]


def test_an_engine_without_the_key_keeps_vllms_scheduler_as_it_is(
    installed, dense_low_entropy, lines
) -> None:  # noqa: ANN001
    from vllm.v1.core.sched.scheduler import Scheduler

    s = _scheduler(dense_low_entropy.target, Scheduler, {})
    _add(s, ["r0"])
    for _ in range(3):
        so = s.schedule()
        s.update_from_output(so, _output(so, {}))
    assert s.__dict__[ATTRIBUTE] is None and lines() == []
