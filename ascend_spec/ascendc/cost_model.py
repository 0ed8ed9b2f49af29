"""An estimated Atlas A2 time for a host-model launch, from its instruction counts, and the same estimate for the
launch's analytical minimum, so a kernel's distance from what its arguments require is one ratio.

The host model counts what the kernel issues (``host_model.count_instructions``); :class:`CostModel` prices
each count in vector-core cycles and :func:`estimate_us` spreads them over the cores a launch keeps busy. The
figures are documented in docs/host_model.md ("Cost model"), each with its source or marked as assumed: they rank
kernels and catch regressions, they do not predict a measured time (that is ``ascend-spec bench`` on a device).
Every kernel's ``instruction_minimum`` (in its op folder's ``ascendc.py``) returns a :class:`Minimum`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

REPEAT_BYTES = 256  # one vector repeat: 256 bytes (8 blocks of 32 bytes)
MAX_REPEATS = 255  # repeat field of a vector instruction is 8 bits


@dataclass(frozen=True)
class CostModel:
    """Cycles per counted event on one vector core (docs/host_model.md says where each figure comes from)."""

    clock_ghz: float = 1.8  # assumed AI core clock of 910B
    cycles_per_vector_instruction: float = 8.0  # assumed issue / pipeline start of one instruction
    cycles_per_vector_repeat: float = 1.0  # one 256-byte repeat per cycle: the vector unit's width
    cycles_per_scalar_ub_access: float = 4.0  # assumed
    cycles_per_scalar_gm_access: float = 200.0  # assumed: an uncached GM round trip
    cycles_per_dma_burst: float = 40.0  # assumed setup of one DataCopy/DataCopyPad block
    mte2_bytes_per_cycle: float = 32.0  # assumed GM -> UB per core when every core streams
    mte3_bytes_per_cycle: float = 32.0  # assumed UB -> GM per core
    ub_copy_bytes_per_cycle: float = 128.0  # assumed UB -> UB

    def cycles(self, counts: Mapping[str, int]) -> float:
        """Cycles of everything ``counts`` holds (host_model.COUNTERS), pipes taken as serial (the kernels
        synchronise between stages, so their pipes overlap little)."""
        bursts = counts["mte2_bursts"] + counts["mte3_bursts"] + counts["ub_copy_bursts"]
        return (
            counts["vector_instructions"] * self.cycles_per_vector_instruction
            + counts["vector_repeats"] * self.cycles_per_vector_repeat
            + (counts["scalar_ub_reads"] + counts["scalar_ub_writes"]) * self.cycles_per_scalar_ub_access
            + (counts["scalar_gm_reads"] + counts["scalar_gm_writes"]) * self.cycles_per_scalar_gm_access
            + bursts * self.cycles_per_dma_burst
            + counts["mte2_bytes"] / self.mte2_bytes_per_cycle
            + counts["mte3_bytes"] / self.mte3_bytes_per_cycle
            + counts["ub_copy_bytes"] / self.ub_copy_bytes_per_cycle
        )


A2 = CostModel()


@dataclass(frozen=True)
class Minimum:
    """What a launch cannot do without, from its arguments: GM bytes each way, vector work (256-byte repeats and
    the instructions they need at most 255 repeats each) and the independent units its work splits into."""

    gm_read_bytes: int
    gm_write_bytes: int
    vector_repeats: int
    vector_instructions: int
    parallel_units: int

    def counts(self) -> dict[str, int]:
        """As host-model counts: one burst per direction, no scalar work."""
        return {
            "vector_instructions": self.vector_instructions, "vector_repeats": self.vector_repeats,
            "scalar_ub_reads": 0, "scalar_ub_writes": 0, "scalar_gm_reads": 0, "scalar_gm_writes": 0,
            "mte2_bursts": 1, "mte2_bytes": self.gm_read_bytes, "mte3_bursts": 1, "mte3_bytes": self.gm_write_bytes,
            "ub_copy_bursts": 0, "ub_copy_bytes": 0,
        }  # fmt: skip


def repeats_of(elements: int, element_bytes: int = 4) -> int:
    """256-byte repeats one pass over ``elements`` contiguous elements takes."""
    return math.ceil(elements * element_bytes / REPEAT_BYTES)


def instructions_of(repeats: int) -> int:
    """Instructions one pass of ``repeats`` repeats needs at least (at most 255 repeats each; 0 for no work)."""
    return math.ceil(repeats / MAX_REPEATS)


def estimate_us(counts: Mapping[str, int], cores: int, parallel_units: int, model: CostModel = A2) -> float:
    """Microseconds of ``counts`` spread evenly over ``min(cores, parallel_units)`` vector cores."""
    busy = max(1, min(cores, parallel_units))
    return model.cycles(counts) / busy / (model.clock_ghz * 1e3)


def report(
    counts: Mapping[str, int], minimum: Minimum, cores: int, model: CostModel = A2
) -> dict[str, float]:
    """The ``hm_*`` estimate metrics of a bench row: estimated and minimum A2 time, their ratio, and the vector
    instructions against their minimum."""
    est = estimate_us(counts, cores, counts["blocks"], model)
    low = estimate_us(minimum.counts(), cores, minimum.parallel_units, model)
    return {
        "hm_est_a2_us": est,
        "hm_min_a2_us": low,
        "hm_time_ratio": est / low if low > 0 else math.inf,
        "hm_min_vector_instructions": minimum.vector_instructions,
        "hm_vector_instruction_ratio": (
            counts["vector_instructions"] / minimum.vector_instructions
            if minimum.vector_instructions
            else math.inf
        ),
    }
