"""The verify stats line of dynamic verification (``dynamic.log_every``; register: ``verify_stats_log``).

Every runner (Model Runner V1 under sync or async scheduling, Model Runner V2, vllm-ascend's NPU runner) hands its
steps to vLLM's engine-core ``Scheduler``, whose ``update_from_output`` sees per request the drafts the step
scheduled for verification (``scheduled_spec_decode_tokens``) and the tokens it sampled (accepted drafts + 1). So
the line is counted there, once and runner-independent: ``Scheduler.update_from_output`` is wrapped at class level
once per process (``AsyncScheduler`` inherits it); a scheduler whose engine does not enable dynamic verification
pays one dict lookup per step.

Per decode request-step (a request scheduled with drafts, or a decoding request scheduled one token without
drafts; prefill chunks are skipped) the verify length is the number of drafts scheduled (0 without), counted under
the request's class, decided by its acceptance before the step: ``new`` (nothing verified yet), ``high``
(accepted / verified >= 2/3), ``low`` (< 1/3), ``mid``. A plain-decoding step is a step with decode requests
where none verified a draft. Every ``log_every`` steps with decode requests, one INFO line::

    ascend-spec dynamic verification: steps 101-200: mean verify length high 5.42 (812 request-steps), mid 2.10
    (120), low 0.31 (300), new 6.00 (8); plain-decoding steps 23/100; acceptance 71.2%; K=7

(one line; classes without request-steps are left out; acceptance = accepted / verified drafts of the window).
Model Runner V2 under async scheduling schedules K placeholders per request and picks the verified drafts on the
device, out of the scheduler's sight: its line says the lengths are the scheduled ones.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from ascend_spec.vllm.config import parse_config
from ascend_spec.vllm.log import plugin_logger

#: Request classes in the order the line names them.
CLASSES = ("high", "mid", "low", "new")
_HIGH, _MID, _LOW, _NEW = range(4)

#: The scheduler attribute holding its :class:`VerifyStats` (None: this engine logs nothing).
ATTRIBUTE = "_ascend_spec_verify_stats"
_UNDECIDED = object()
_MARK = "_ascend_spec_verify_log"

V2_ASYNC_NOTE = "; lengths as scheduled (Model Runner V2 picks the verified drafts on the device)"


class VerifyStats:
    """One scheduler's counters: per-request accepted / verified totals (for the class) and the window's sums."""

    def __init__(self, log_every: int, num_speculative_tokens: int, note: str = "") -> None:
        self.log_every = log_every
        self.k = num_speculative_tokens
        self.note = note
        self.requests: dict[str, list[int]] = {}  # request id -> [accepted, verified] so far
        self.steps = 0  # steps with decode requests, since the engine started
        self._reset_window()

    def _reset_window(self) -> None:
        self.window_steps = 0
        self.plain_steps = 0
        self.request_steps = [0, 0, 0, 0]  # per class
        self.lengths = [0, 0, 0, 0]  # verify lengths summed per class
        self.accepted = 0
        self.verified = 0

    def record(self, scheduler, scheduler_output, model_runner_output) -> str | None:  # noqa: ANN001
        """Count one step (called before vLLM's ``update_from_output``, while each request's state is the one
        before the step); the stats line when this step closes a window, else None."""
        spec = scheduler_output.scheduled_spec_decode_tokens
        requests = scheduler.requests
        sampled = model_runner_output.sampled_token_ids
        index = model_runner_output.req_id_to_index
        per_step = getattr(scheduler, "num_sampled_tokens_per_step", 1)
        known = self.requests
        request_steps, lengths = self.request_steps, self.lengths
        total_accepted = total_verified = 0
        decode = verified_any = False
        for req_id, num_tokens in scheduler_output.num_scheduled_tokens.items():
            drafts = spec.get(req_id)
            request = requests.get(req_id)
            if request is None or request.num_stale_output_tokens or request.is_finished():
                continue  # vLLM drops (or discards) this output too
            if drafts:
                length = len(drafts)
            elif num_tokens == 1 and request.num_output_tokens:
                length = 0
            else:
                continue  # a prefill chunk
            decode = True
            counts = known.get(req_id)
            if counts is None:
                counts = known[req_id] = [0, 0]
            accepted, verified = counts
            if not verified:
                cls = _NEW
            elif 3 * accepted >= 2 * verified:
                cls = _HIGH
            elif 3 * accepted < verified:
                cls = _LOW
            else:
                cls = _MID
            request_steps[cls] += 1
            if length:
                verified_any = True
                lengths[cls] += length
                i = index.get(req_id)
                row_len = len(sampled[i]) if sampled and i is not None else 0
                if row_len or per_step == 0:  # as vLLM counts its own spec-decoding stats
                    n = row_len - per_step if row_len > per_step else 0
                    counts[0] = accepted + n
                    counts[1] = verified + length
                    total_accepted += n
                    total_verified += length
        self.accepted += total_accepted
        self.verified += total_verified
        if not decode:
            return None
        self.steps += 1
        self.window_steps += 1
        if not verified_any:
            self.plain_steps += 1
        if self.window_steps < self.log_every:
            return None
        line = self.line()
        self._reset_window()
        return line

    def line(self) -> str:
        """The window's stats line (format in the module docstring)."""
        parts = []
        for cls, name in enumerate(CLASSES):
            n = self.request_steps[cls]
            if n:
                unit = " request-steps" if not parts else ""
                parts.append(f"{name} {self.lengths[cls] / n:.2f} ({n}{unit})")
        acceptance = f"{100.0 * self.accepted / self.verified:.1f}%" if self.verified else "-"
        first = self.steps - self.window_steps + 1
        return (
            f"ascend-spec dynamic verification: steps {first}-{self.steps}: mean verify length "
            f"{', '.join(parts)}; plain-decoding steps {self.plain_steps}/{self.window_steps}; "
            f"acceptance {acceptance}; K={self.k}{self.note}"
        )

    def forget(self, req_ids: Iterable[str], live: dict) -> None:
        """Drop finished requests (``finished_req_ids``), and any request the scheduler no longer holds once the
        table outgrows it (aborts between steps), so the state stays bounded by the running batch."""
        known = self.requests
        for req_id in req_ids:
            known.pop(req_id, None)
        if len(known) > 2 * len(live) + 64:
            self.requests = {r: c for r, c in known.items() if r in live}


def build_stats(scheduler) -> VerifyStats | None:  # noqa: ANN001
    """The scheduler's counters, or None where its engine does not enable dynamic verification, sets
    ``log_every: 0`` or drafts nothing (no speculative config)."""
    vllm_config = getattr(scheduler, "vllm_config", None)
    settings = parse_config(getattr(vllm_config, "additional_config", None))
    if settings is None or not settings.dynamic.enabled or settings.dynamic.log_every == 0:
        return None
    spec = getattr(vllm_config, "speculative_config", None)
    k = getattr(spec, "num_speculative_tokens", None)
    if not k:
        return None
    note = ""
    scheduler_config = getattr(vllm_config, "scheduler_config", None)
    if getattr(scheduler_config, "async_scheduling", False):
        from ascend_spec.vllm.releases import runs_model_runner_v2

        if runs_model_runner_v2(vllm_config):
            note = V2_ASYNC_NOTE
    return VerifyStats(settings.dynamic.log_every, int(k), note)


def stats_of(scheduler) -> VerifyStats | None:  # noqa: ANN001
    """Decided once per scheduler and kept on it (an engine's settings do not change)."""
    stats = scheduler.__dict__.get(ATTRIBUTE, _UNDECIDED)
    if stats is _UNDECIDED:
        stats = build_stats(scheduler)
        setattr(scheduler, ATTRIBUTE, stats)
    return stats


def wrap_update_from_output(original: Callable[..., Any]) -> Callable[..., Any]:
    """``update_from_output`` counting the step first, then vLLM's own; the line logged after it."""

    @functools.wraps(original)
    def update_from_output(self, scheduler_output, model_runner_output):  # noqa: ANN001, ANN202
        stats = self.__dict__.get(ATTRIBUTE, _UNDECIDED)
        if stats is None:
            return original(self, scheduler_output, model_runner_output)
        if stats is _UNDECIDED:
            stats = stats_of(self)
            if stats is None:
                return original(self, scheduler_output, model_runner_output)
        line = stats.record(self, scheduler_output, model_runner_output)
        outputs = original(self, scheduler_output, model_runner_output)
        stats.forget(getattr(scheduler_output, "finished_req_ids", ()), self.requests)
        if line is not None:
            plugin_logger().info(line)
        return outputs

    setattr(update_from_output, _MARK, True)
    return update_from_output


def install_verify_log() -> None:
    """Wrap ``Scheduler.update_from_output`` once per process. Installed before V1's ``AsyncScheduler`` hooks
    (``async_scheduler_lengths``), which take the method ``AsyncScheduler`` inherits: this wrapper, so async
    engines count their steps here too."""
    from vllm.v1.core.sched.scheduler import Scheduler

    if getattr(Scheduler.update_from_output, _MARK, False):
        return
    Scheduler.update_from_output = wrap_update_from_output(Scheduler.update_from_output)
