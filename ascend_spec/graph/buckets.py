"""Graph buckets: the token counts for which a captured graph exists.

A captured graph runs a fixed number of tokens, so every batch is padded up to the next captured size (seed: 184
and 160 tokens both run the 192 graph; 128 runs its own). Above the largest bucket the model runs eagerly.

Generated sizes (:meth:`GraphBuckets.for_engine`) follow the rule the engines use, documented in
docs/controller.md: start from ``1, 2, 4``, then every multiple of 8 below 256, then every multiple of 16, up to
``max_num_reqs * tokens_per_request``; round each size up to a multiple of ``tokens_per_request`` (a uniform
decode batch of ``r`` requests has exactly ``r * q`` tokens, so other sizes only add padding); always include the
largest size; and, when the platform limits the number of graphs (ACL graphs on Ascend are bounded by the
number of streams), keep ``max_graphs`` sizes spread evenly over the list, always keeping the smallest and the
largest.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from pathlib import Path

from ascend_spec.checks import check_int
from ascend_spec.graph.config_io import read_json, require_object


class GraphBuckets:
    """Sorted capture sizes (token counts); ``pad(n)`` is the graph that runs ``n`` tokens, None when eager."""

    __slots__ = ("_sizes",)

    def __init__(self, sizes: Iterable[int]) -> None:
        if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Iterable):
            raise ValueError(f"sizes must be an iterable of positive ints; got {sizes!r}")
        values = [check_int("sizes entry", s, minimum=1) for s in sizes]
        if not values:
            raise ValueError("sizes must not be empty: a GraphBuckets needs at least one capture size")
        seen: set[int] = set()
        for v in values:
            if v in seen:
                raise ValueError(f"sizes must not repeat a capture size; got {v} twice in {values}")
            seen.add(v)
        self._sizes: tuple[int, ...] = tuple(sorted(values))

    # -- basic container behaviour -------------------------------------------------------------------------
    @property
    def sizes(self) -> tuple[int, ...]:
        return self._sizes

    @property
    def largest(self) -> int:
        return self._sizes[-1]

    @property
    def smallest(self) -> int:
        return self._sizes[0]

    def __len__(self) -> int:
        return len(self._sizes)

    def __iter__(self) -> Iterator[int]:
        return iter(self._sizes)

    def __contains__(self, size: object) -> bool:
        return size in self._sizes

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GraphBuckets) and other._sizes == self._sizes

    def __hash__(self) -> int:
        return hash(self._sizes)

    def __repr__(self) -> str:
        return f"GraphBuckets({list(self._sizes)})"

    def to_list(self) -> list[int]:
        return list(self._sizes)

    # -- padding -------------------------------------------------------------------------------------------
    def pad(self, num_tokens: int) -> int | None:
        """The capture size that runs ``num_tokens`` (the smallest size >= it), or None above the largest."""
        n = check_int("num_tokens", num_tokens, minimum=1)
        i = bisect.bisect_left(self._sizes, n)
        return self._sizes[i] if i < len(self._sizes) else None

    def sizes_above(self, num_tokens: int) -> tuple[int, ...]:
        """Capture sizes strictly greater than ``num_tokens`` (the boundaries a budget search visits)."""
        i = bisect.bisect_right(self._sizes, num_tokens)
        return self._sizes[i:]

    # -- construction --------------------------------------------------------------------------------------
    @classmethod
    def for_engine(
        cls, max_num_reqs: int, tokens_per_request: int = 1, *, max_graphs: int | None = None
    ) -> GraphBuckets:
        """Capture sizes generated the way engines do (see the module docstring for the rule)."""
        max_num_reqs = check_int("max_num_reqs", max_num_reqs, minimum=1)
        q = check_int("tokens_per_request", tokens_per_request, minimum=1)
        if max_graphs is not None:
            max_graphs = check_int("max_graphs", max_graphs, minimum=1)
        limit = max_num_reqs * q
        base = [1, 2, 4, *range(8, 256, 8), *range(256, limit + 1, 16)]
        sizes = sorted({min(-(-s // q) * q, limit) for s in base if s <= limit} | {limit})
        if max_graphs is not None and len(sizes) > max_graphs:
            if max_graphs == 1:
                sizes = [sizes[-1]]
            else:
                step = (len(sizes) - 1) / (max_graphs - 1)
                sizes = sorted({sizes[round(i * step)] for i in range(max_graphs)})
        return cls(sizes)

    @classmethod
    def for_soc(cls, soc: str, part: str = "target") -> GraphBuckets:
        """Default capture sizes shipped in ``configs/buckets/<soc>.json`` for one model part."""
        data = load_soc_buckets(soc)
        if part not in ("target", "draft"):
            raise ValueError(f"part must be 'target' or 'draft'; got {part!r}")
        where = soc_bucket_files()[soc]
        if part not in data:
            raise ValueError(f"{where} has no {part!r} sizes")
        if not isinstance(data[part], list):
            raise ValueError(f"{where}: {part} must be an array of sizes; got {data[part]!r}")
        try:
            return cls(data[part])
        except ValueError as e:
            raise ValueError(f"{where}: {part}: {e}") from None


def soc_bucket_files() -> dict[str, Path]:
    """The SoC names with shipped bucket defaults, and their files."""
    from ascend_spec.paths import CONFIGS_DIR

    return {p.stem: p for p in sorted((CONFIGS_DIR / "buckets").glob("*.json"))}


def load_soc_buckets(soc: str) -> dict:
    files = soc_bucket_files()
    if soc not in files:
        raise ValueError(f"soc must be one of {sorted(files)} (configs/buckets/*.json); got {soc!r}")
    return dict(require_object(str(files[soc]), read_json(files[soc])))
