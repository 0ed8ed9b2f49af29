"""Step costs measured while the engine runs: what the start-up profiles do not time, fed back to the controller.

The cost profiles time the target's and the drafter's forwards (dummy runs). A V1 step does more around them,
and more for a speculative step than for a plain one: the drafter's input preparation and its draft sampling
(V1's whole proposer step), the rejection sampler and the spec-decode metadata on the target side. On small
models that work is as large as the forwards (every fixed K of the tiny CPU models runs at about half of plain
decoding's speed while the profiles predict far less), so a controller on the profiles alone verifies drafts a
confident but wrong drafter does not deserve.

Per batch size B this keeps the last ``window`` residuals (wall time minus what the profiles predict, ms) of

* ``draft``: V1's whole proposer call (``propose_draft_token_ids``, without the plan that follows it) against
  D(B*Q);
* ``plain``: a decode step's target part (``execute_model`` + ``sample_tokens`` minus the proposer) without drafts,
  against V(B);
* ``verify``: the same with T > 0 drafts, against V(B+T);

and hands the controller, every ``refresh`` samples of a B, each window's ``statistic`` (the profiles' own:
``min`` by default, the uncontended cost; or ``median``) as two additive corrections
(:meth:`BudgetController.set_step_corrections`): plain decoding costs ``V(B) + plain``; a speculative step
``D + V(B+T) + plain + (verify - plain) + draft``. A part not measured yet counts 0 (``verify - plain`` needs
both); until then the profiles decide alone. The first sample of every (part, B, T) is dropped: the first run
of a new token count pays one-time work (oneDNN builds its primitives per shape, the allocator grows), which
would make a ragged total look dear exactly when the controller tries it. A short window follows a drifting
machine; its minimum ignores bursts of other work on a shared host (they only ever add time). Changes below ``tolerance`` x V(B) are not handed on (each one makes the
controller rebuild that batch size's tables); recording a sample is a dict lookup and an append.

Sampling: every decode step of a batch size until it has ``window`` samples, then one step in ``every``
(:meth:`sample_step`; the engine times only those), so the corrections are learnt at full speed and then
followed at a quarter of the host cost (on a tiny CPU model the recording was ~0.5 % of a step).
"""

from __future__ import annotations

import collections

from ascend_spec.checks import check_int
from ascend_spec.graph import BudgetController
from ascend_spec.graph.cost_profile import STATISTICS
from ascend_spec.vllm.rank_consistency import from_rank_zero

PARTS = ("draft", "plain", "verify")


class MeasuredStepCosts:
    """Residuals of the engine's measured step parts against the profiles, per batch size (module docstring)."""

    def __init__(
        self,
        controller: BudgetController,
        *,
        window: int = 15,
        refresh: int = 6,
        tolerance: float = 0.01,
        statistic: str = "min",
        every: int = 4,
    ) -> None:
        if statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}; got {statistic!r}")
        self.statistic = STATISTICS[statistic]
        self.controller = controller
        self.window = check_int("window", window, minimum=1)
        self.refresh = check_int("refresh", refresh, minimum=1)
        if (
            isinstance(tolerance, bool)
            or not isinstance(tolerance, (int, float))
            or not 0.0 <= tolerance < 1.0
        ):
            raise ValueError(f"tolerance must be a fraction of V(B) in [0, 1); got {tolerance!r}")
        self.tolerance = float(tolerance)
        self.every = check_int("every", every, minimum=1)
        self._sampled_steps: dict[int, int] = {}  # B -> decode steps sampled
        self._tick = 0
        # (part, B, T) -> (the profiles' prediction in ms, that part's window of residuals)
        self._slots: dict[tuple[str, int, int], tuple[float, collections.deque[float]]] = {}
        self._windows: dict[tuple[str, int], collections.deque[float]] = {}
        self._since_refresh: dict[int, int] = {}
        self._pushed: dict[int, tuple[float, float]] = {}
        self.samples: collections.Counter = collections.Counter()  # per part, for the stats

    def sample_step(self, num_reqs: int) -> bool:
        """Whether this decode step at B = ``num_reqs`` is timed (module docstring: the first ``window`` of each
        B, then one in ``every``)."""
        taken = self._sampled_steps.get(num_reqs, 0)
        if taken >= self.window:
            self._tick += 1
            if self._tick < self.every:
                return False
            self._tick = 0
        self._sampled_steps[num_reqs] = taken + 1
        return True

    def add(self, part: str, num_reqs: int, total_drafts: int, seconds: float) -> None:
        """One measured ``part`` of a step at B = ``num_reqs`` with ``total_drafts`` verified (draft: ignored)."""
        slot = self._slots.get((part, num_reqs, total_drafts))
        if slot is None:  # the first run of this token count: one-time work, not kept
            self._slot(part, num_reqs, total_drafts)
            return
        slot[1].append(seconds * 1e3 - slot[0])
        self.samples[part] += 1
        n = self._since_refresh.get(num_reqs, 0) + 1
        if n >= self.refresh:
            n = 0
            self._push(num_reqs)
        self._since_refresh[num_reqs] = n

    def _slot(self, part: str, b: int, t: int) -> tuple[float, collections.deque[float]]:
        if part not in PARTS:
            raise ValueError(f"part must be one of {', '.join(PARTS)}; got {part!r}")
        b = check_int("num_reqs", b, minimum=1)
        ctl = self.controller
        if part == "draft":
            predicted = ctl.draft_cost.cost(b * ctl.draft_tokens_per_request)
        else:
            predicted = ctl.verify_cost.cost(b + check_int("total_drafts", t, minimum=0))
        window = self._windows.get((part, b))
        if window is None:
            window = self._windows[(part, b)] = collections.deque(maxlen=self.window)
        slot = self._slots[(part, b, t)] = (predicted, window)
        return slot

    def residual(self, part: str, num_reqs: int) -> float | None:
        """The window's statistic of ``part``'s residuals (ms) at B = ``num_reqs``; None before any sample."""
        window = self._windows.get((part, num_reqs))
        return self.statistic(window) if window else None

    def corrections(self, num_reqs: int) -> tuple[float, float]:
        """(speculative, plain) ms to add to the controller's costs at B = ``num_reqs``."""
        draft, plain, verify = (self.residual(p, num_reqs) for p in PARTS)
        common = plain if plain is not None else (verify if verify is not None else 0.0)
        extra_verify = verify - plain if verify is not None and plain is not None else 0.0
        return common + extra_verify + (draft or 0.0), common

    def _push(self, num_reqs: int) -> None:
        ctl = self.controller
        # every rank reaches this refresh at the same step; each timed its own steps: rank 0's for all
        spec, plain = from_rank_zero(self.corrections(num_reqs))
        # A correction never makes a cost <= 0 (a profile measured high under load, then an idle machine).
        v = ctl.verify_cost.cost(num_reqs)
        d = ctl.draft_cost.cost(num_reqs * ctl.draft_tokens_per_request)
        plain = max(plain, -0.5 * v)
        spec = max(spec, -0.5 * (d + v))
        last = self._pushed.get(num_reqs)
        if last is not None and max(abs(spec - last[0]), abs(plain - last[1])) <= self.tolerance * v:
            return
        self._pushed[num_reqs] = (spec, plain)
        ctl.set_step_corrections(num_reqs, spec, plain)

    def as_dict(self) -> dict:
        """Samples per part and the corrections handed to the controller per batch size (ms)."""
        return {
            "samples": dict(self.samples),
            "corrections_ms": {str(b): [round(x, 4) for x in c] for b, c in sorted(self._pushed.items())},
        }
