"""prepare_block_slots: every backend against a per-request Python oracle, the talk's example, bad inputs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_spec.ops import BlockSlots, prepare_block_slots

FIELDS = (
    "input_ids",
    "positions",
    "slot_mapping",
    "query_start_loc",
    "seq_lens",
    "sample_indices",
    "context_slot_mapping",
    "context_positions",
    "context_start_loc",
)
DTYPES = {
    "positions": torch.int64,
    "slot_mapping": torch.int64,
    "query_start_loc": torch.int32,
    "seq_lens": torch.int32,
    "sample_indices": torch.int64,
    "context_slot_mapping": torch.int64,
    "context_positions": torch.int64,
    "context_start_loc": torch.int32,
}
# monkeypatch only sets a constant env var here, so sharing it across examples is safe
HYPOTHESIS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def oracle(ids, pos, table, *, bs, q, mask, sfa, rope, ctx, r) -> dict[str, list]:
    """The contract, one request and one token at a time, in plain Python ints."""
    b_count, num_pages = len(pos), (len(table[0]) if table else 0)

    def slot(b: int, x: int) -> int:
        if x < 0 or x // bs >= num_pages or table[b][x // bs] < 0:
            return -1
        return table[b][x // bs] * bs + x % bs

    rope_rows = [pos] if rope is None else ([rope] if not isinstance(rope[0], list) else rope)
    ctx = [0] * b_count if ctx is None else [max(n, 0) for n in ctx]
    out: dict[str, list] = {k: [] for k in ("input_ids", "slot_mapping", "seq_lens", "sample_indices")}
    out["positions"] = [[] for _ in rope_rows]
    out["context_positions"] = [[] for _ in rope_rows]
    out["context_slot_mapping"], out["context_start_loc"] = [], [0]
    for b in range(r):
        real = b < b_count
        for i in range(q):
            out["input_ids"].append(ids[b] if real and i == 0 else mask)
            out["slot_mapping"].append(slot(b, pos[b] + i) if real else -1)
            for row, base in zip(out["positions"], rope_rows):
                row.append(base[b] + i if real else 0)
            if real and (sfa or i > 0):
                out["sample_indices"].append(b * q + i)
        out["seq_lens"].append(pos[b] + q if real else 0)
    for b in range(b_count):
        for j in range(ctx[b]):
            out["context_slot_mapping"].append(slot(b, pos[b] - ctx[b] + j))
            for row, base in zip(out["context_positions"], rope_rows):
                row.append(base[b] - ctx[b] + j)
        out["context_start_loc"].append(out["context_start_loc"][-1] + ctx[b])
    out["query_start_loc"] = [i * q for i in range(r + 1)]
    if rope is None or not isinstance(rope[0], list):
        out["positions"], out["context_positions"] = out["positions"][0], out["context_positions"][0]
    return out


def run(backend, ids, pos, table, *, rope=None, ctx=None, r=None, id_dtype=torch.int64, **kw) -> BlockSlots:
    return prepare_block_slots(
        torch.tensor(ids, dtype=id_dtype),
        torch.tensor(pos, dtype=torch.int64),
        torch.tensor(table, dtype=torch.int32).reshape(len(pos), -1),
        rope_positions=None if rope is None else torch.tensor(rope),
        context_lens=None if ctx is None else torch.tensor(ctx),
        num_padded_reqs=r,
        backend=backend,
        **kw,
    )


def assert_matches(out: BlockSlots, want: dict[str, list], id_dtype: torch.dtype) -> None:
    for name in FIELDS:
        got = getattr(out, name)
        assert got.dtype == DTYPES.get(name, id_dtype), name
        assert got.tolist() == want[name], name


@st.composite
def block_cases(draw, *, valid: bool = True):
    """Random batches: shuffled physical pages, blocks near page boundaries, mrope, contexts, padding."""
    bs = draw(st.sampled_from([4, 16, 128]))
    sfa = draw(st.booleans())
    k = draw(st.integers(1, 16))
    q = k if sfa else k + 1  # DSpark: Q = K; DFlash: Q = K + 1
    b = draw(st.integers(1, 5))
    pad = draw(st.integers(0, 3))
    num_pages = draw(st.integers(1, 6)) + (2 * q + 2 * bs - 1) // bs
    physical = draw(st.permutations(range(b * num_pages + 3)))
    table = [list(physical[i * num_pages : (i + 1) * num_pages]) for i in range(b)]
    with_ctx = draw(st.booleans())
    ctx, pos = [], []
    for i in range(b):
        n = draw(st.integers(0, q))
        hi = num_pages * bs - q  # last anchor whose block still fits
        lo = n
        if valid or not draw(st.booleans()):
            boundary = draw(st.integers(1, num_pages - 1)) * bs  # make the block straddle a page boundary
            p = draw(st.one_of(st.integers(lo, hi), st.integers(boundary - q + 1, boundary)))
            p = min(max(p, lo), hi)
        else:  # checks off: blocks past the table, contexts reaching below position 0
            p = draw(st.integers(0, num_pages * bs + 2))
        pos.append(p)
        ctx.append(n if with_ctx else 0)
        # pages no token touches may hold -1 (unallocated tail, freed head); touched ones must not when valid
        first, last = max(p - ctx[-1], 0) // bs, (p + q - 1) // bs
        for j in range(num_pages):
            touched = first <= j <= last
            if (not touched or not valid) and draw(st.integers(0, 4)) == 0:
                table[i][j] = -1
    rope_mode = draw(st.sampled_from(["none", "flat", "mrope"]))
    rope = None
    if rope_mode == "flat":
        rope = [p + draw(st.integers(-min(p, 3), 50)) for p in pos]
    elif rope_mode == "mrope":  # image tokens make rope rows lag the logical position, differently per row
        rope = [[draw(st.integers(ctx[i] if valid else 0, 2 * bs + 40)) for i in range(b)] for _ in range(3)]
    if rope is not None and valid:
        flat = rope if rope_mode == "flat" else None
        if flat is not None:
            rope = [max(x, ctx[i]) for i, x in enumerate(flat)]
    ids = draw(st.lists(st.integers(0, 150_000), min_size=b, max_size=b))
    return dict(
        ids=ids,
        pos=pos,
        table=[x for row in table for x in row],
        rope=rope,
        ctx=ctx if with_ctx else None,
        r=b + pad,
        bs=bs,
        q=q,
        mask=draw(st.integers(0, 150_000)),
        sfa=sfa,
        id_dtype=draw(st.sampled_from([torch.int32, torch.int64])),
    )


def _check_case(backend: str, case: dict) -> None:
    b = len(case["pos"])
    table = [
        case["table"][i * (len(case["table"]) // b) : (i + 1) * (len(case["table"]) // b)] for i in range(b)
    ]
    want = oracle(
        case["ids"],
        case["pos"],
        table,
        bs=case["bs"],
        q=case["q"],
        mask=case["mask"],
        sfa=case["sfa"],
        rope=case["rope"],
        ctx=case["ctx"],
        r=case["r"],
    )
    out = run(
        backend,
        case["ids"],
        case["pos"],
        case["table"],
        rope=case["rope"],
        ctx=case["ctx"],
        r=case["r"],
        id_dtype=case["id_dtype"],
        block_size=case["bs"],
        num_query_tokens=case["q"],
        mask_token_id=case["mask"],
        sample_from_anchor=case["sfa"],
    )
    assert_matches(out, want, case["id_dtype"])


@HYPOTHESIS
@given(case=block_cases())
def test_backends_match_oracle(backend: str, case: dict) -> None:
    """Every backend equals the per-request oracle exactly, hence every backend equals every other."""
    _check_case(backend, case)


@HYPOTHESIS
@given(case=block_cases(valid=False))
def test_checks_off_never_write_a_wrong_slot(backend: str, case: dict, monkeypatch) -> None:
    """Unplaceable positions (past the table, negative page ids, negative positions) get slot -1."""
    monkeypatch.setenv("ASCEND_SPEC_CHECKS", "0")
    _check_case(backend, case)


def test_talk_example(backend: str) -> None:
    """From the talk: page size 4, positions 4..7 -> slots 28..31 (physical page 7), position 8 -> slot 4 (page 1)."""
    out = run(backend, [11], [4], [3, 7, 1, 5], block_size=4, num_query_tokens=5, mask_token_id=99)
    assert out.slot_mapping.tolist() == [28, 29, 30, 31, 4]
    assert out.positions.tolist() == [4, 5, 6, 7, 8]
    assert out.input_ids.tolist() == [11, 99, 99, 99, 99]
    assert out.seq_lens.tolist() == [9]
    assert out.query_start_loc.tolist() == [0, 5]
    assert out.sample_indices.tolist() == [1, 2, 3, 4]


def test_literal_padding_mrope_context(backend: str) -> None:
    """Hand-worked: DSpark (Q = K = 3), mrope rows unlike p_b, contexts crossing pages, 2 padding rows."""
    out = run(
        backend,
        [11, 12],
        [4, 7],
        [[3, 7, 1], [2, 0, 6]],
        rope=[[4, 100], [5, 200], [6, 300]],
        ctx=[3, 5],
        r=4,
        block_size=4,
        num_query_tokens=3,
        mask_token_id=9,
        sample_from_anchor=True,
    )
    assert out.input_ids.tolist() == [11, 9, 9, 12, 9, 9, 9, 9, 9, 9, 9, 9]
    assert out.slot_mapping.tolist() == [28, 29, 30, 3, 24, 25] + [-1] * 6
    assert out.positions.tolist() == [
        [4, 5, 6, 100, 101, 102] + [0] * 6,
        [5, 6, 7, 200, 201, 202] + [0] * 6,
        [6, 7, 8, 300, 301, 302] + [0] * 6,
    ]
    assert out.seq_lens.tolist() == [7, 10, 0, 0]
    assert out.query_start_loc.tolist() == [0, 3, 6, 9, 12]
    assert out.sample_indices.tolist() == [0, 1, 2, 3, 4, 5]
    # request 0: positions 1..3 on page 0 -> physical 3; request 1: positions 2..6 on pages 0, 1 -> 2, 0
    assert out.context_slot_mapping.tolist() == [13, 14, 15, 10, 11, 0, 1, 2]
    assert out.context_positions.tolist() == [
        [1, 2, 3, 95, 96, 97, 98, 99],
        [2, 3, 4, 195, 196, 197, 198, 199],
        [3, 4, 5, 295, 296, 297, 298, 299],
    ]
    assert out.context_start_loc.tolist() == [0, 3, 8]
    assert (out.num_reqs, out.num_padded_reqs) == (2, 4)


def test_strided_inputs_and_all_padding(backend: str) -> None:
    """A column-sliced block table and int32 positions work; B = 0 with R = 2 gives only padding rows."""
    wide = torch.arange(24, dtype=torch.int32).reshape(2, 12)
    table = wide[:, ::3]  # non-contiguous: pages 0,3,6,9 / 12,15,18,21
    out = prepare_block_slots(
        torch.tensor([5, 6], dtype=torch.int32),
        torch.tensor([3, 6], dtype=torch.int32),
        table,
        block_size=4,
        num_query_tokens=2,
        mask_token_id=1,
        backend=backend,
    )
    assert out.slot_mapping.tolist() == [3, 12, 62, 63]
    assert out.input_ids.dtype == torch.int32
    empty = prepare_block_slots(
        torch.zeros(0, dtype=torch.int64),
        torch.zeros(0, dtype=torch.int64),
        torch.zeros(0, 3, dtype=torch.int32),
        block_size=4,
        num_query_tokens=2,
        mask_token_id=7,
        num_padded_reqs=2,
        context_lens=torch.zeros(0, dtype=torch.int64),
        backend=backend,
    )
    assert empty.input_ids.tolist() == [7, 7, 7, 7]
    assert empty.slot_mapping.tolist() == [-1] * 4
    assert empty.seq_lens.tolist() == [0, 0]
    assert empty.query_start_loc.tolist() == [0, 2, 4]
    assert empty.sample_indices.numel() == 0 and empty.context_start_loc.tolist() == [0]


def _good(**over):
    args = dict(
        anchor_token_ids=torch.tensor([1, 2]),
        anchor_positions=torch.tensor([4, 9]),
        block_table=torch.tensor([[3, 7, 1, 5], [2, 0, 6, 4]], dtype=torch.int32),
        block_size=4,
        num_query_tokens=4,
        mask_token_id=0,
    )
    args.update(over)
    return args


BAD_VALUES = [
    ({"anchor_positions": torch.tensor([4, 13])}, r"request 1: .*anchor_positions\[1\] = 13 .* position 16"),
    (
        {"block_table": torch.tensor([[3, 7, 1, 5], [2, 0, -1, 4]], dtype=torch.int32)},
        r"request 1: block_table\[1, 2\] = -1 is a negative page id, but position 9 \(query token\)",
    ),
    (
        {
            "block_table": torch.tensor([[3, -4, 1, 5], [2, 0, 6, 4]], dtype=torch.int32),
            "context_lens": torch.tensor([1, 0]),
            "anchor_positions": torch.tensor([8, 9]),
        },
        r"request 0: block_table\[0, 1\] = -4 is a negative page id, but position 7 \(context token\)",
    ),
    ({"anchor_positions": torch.tensor([-1, 9])}, r"request 0: anchor_positions\[0\] = -1 is negative"),
    ({"anchor_token_ids": torch.tensor([1, -5])}, r"anchor_token_ids\[1\] = -5 is negative"),
    ({"context_lens": torch.tensor([0, -2])}, r"request 1: context_lens\[1\] = -2 is negative"),
    (
        {"context_lens": torch.tensor([5, 0])},
        r"request 0: context_lens\[0\] = 5 exceeds anchor_positions\[0\] = 4",
    ),
    ({"rope_positions": torch.tensor([4, -3])}, r"request 1: rope_positions\[1\] = -3 is negative"),
    (
        {"rope_positions": torch.tensor([[4, 9], [4, 9], [4, 1]]), "context_lens": torch.tensor([0, 2])},
        r"request 1: rope_positions\[2, 1\] = 1 is smaller than context_lens\[1\] = 2",
    ),
]


@pytest.mark.parametrize(("over", "match"), BAD_VALUES)
def test_bad_values_name_request_and_value(over: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        prepare_block_slots(**_good(**over))


def test_value_checks_follow_env(monkeypatch) -> None:
    """With ASCEND_SPEC_CHECKS=0 the same bad input is not read on the host; its slots come out -1."""
    monkeypatch.setenv("ASCEND_SPEC_CHECKS", "0")
    out = prepare_block_slots(**_good(anchor_positions=torch.tensor([4, 14])))
    assert out.slot_mapping.tolist()[4:] == [18, 19, -1, -1]


BAD_ARGS = [
    (
        {"anchor_positions": torch.tensor([[4, 9]])},
        r"anchor_positions must have 1 dimensions; got shape \(1, 2\)",
    ),
    (
        {"anchor_positions": torch.tensor([4.0, 9.0])},
        r"anchor_positions must have dtype in .*got torch.float32",
    ),
    ({"anchor_token_ids": torch.tensor([1, 2, 3])}, r"anchor_token_ids must have shape \[2\]; got \[3\]"),
    ({"anchor_token_ids": torch.tensor([1, 2], dtype=torch.int16)}, r"anchor_token_ids must have dtype"),
    (
        {"block_table": torch.zeros(3, 4, dtype=torch.int32)},
        r"block_table must have shape \[2, \*\]; got \[3, 4\]",
    ),
    ({"block_table": torch.zeros(2, 4, dtype=torch.int64)}, r"block_table must have dtype in \(int32\)"),
    ({"block_table": torch.zeros(2, 4, dtype=torch.int32, device="meta")}, r"block_table is on meta"),
    ({"rope_positions": torch.zeros(2, 2, dtype=torch.int64)}, r"rope_positions must have shape \[3, 2\]"),
    ({"rope_positions": torch.zeros(3)}, r"rope_positions must have dtype"),
    ({"context_lens": torch.zeros(3, dtype=torch.int64)}, r"context_lens must have shape \[2\]; got \[3\]"),
    ({"block_size": 0}, r"block_size must be >= 1; got 0"),
    ({"num_query_tokens": 1}, r"num_query_tokens must be >= 2 without sample_from_anchor.*got 1"),
    ({"num_query_tokens": 2.0}, r"num_query_tokens must be an int; got 2.0"),
    ({"mask_token_id": -1}, r"mask_token_id must be an int in \[0, .*got -1"),
    (
        {"mask_token_id": 2**31, "anchor_token_ids": torch.tensor([1, 2], dtype=torch.int32)},
        r"got 2147483648$",
    ),
    ({"sample_from_anchor": 1}, r"sample_from_anchor must be a bool; got 1"),
    ({"num_padded_reqs": 1}, r"num_padded_reqs must be an int >= the number of requests \(2\); got 1"),
    ({"backend": "cuda"}, r"backend must be one of"),
]


@pytest.mark.parametrize(("over", "match"), BAD_ARGS)
def test_bad_arguments_always_raise(over: dict, match: str, monkeypatch) -> None:
    """Shape, dtype, device and argument errors do not depend on value checks."""
    monkeypatch.setenv("ASCEND_SPEC_CHECKS", "0")
    with pytest.raises(ValueError, match=match):
        prepare_block_slots(**_good(**over))


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_bench_case_quick(backend: str) -> None:
    """The bench case runs (it asserts the op equals its per-request loop baseline) and reports bytes."""
    from ascend_spec.bench.cases import prepare_block_slots as case
    from ascend_spec.bench.core import BenchContext

    rows = case.run(
        BenchContext(device=torch.device("cpu"), warmup=0, repeats=1, quick=True, backend=backend)
    )
    assert [row.case for row in rows] == ["B=1 Q=16 page=128", "B=4 Q=16 page=128"]
    for row, b in zip(rows, (1, 4)):
        assert row.impl == backend and row.time_ms > 0 and row.baseline_ms > 0
        r, n_ctx = b + case.PADDING, row.metrics["tokens"] - (b + case.PADDING) * case.Q
        # ids + positions + slots (8 B each per row), qsl, seq_lens, samples, context slots + positions, ctx loc
        want = r * case.Q * 24 + (r + 1) * 4 + r * 4 + b * (case.Q - 1) * 8 + n_ctx * 16 + (b + 1) * 4
        assert row.metrics["bytes_written"] == want


def test_reference_reads_no_device_values_without_context(monkeypatch) -> None:
    """Graph capture needs sync-free ops: on meta tensors any host read fails, so with value checks off (the
    default off CPU) and no ``context_lens`` the op must read nothing; with it, the one documented read sizes
    the context outputs."""
    monkeypatch.setenv("ASCEND_SPEC_CHECKS", "0")
    meta = dict(dtype=torch.int64, device="meta")
    args = (
        torch.zeros(3, **meta),
        torch.zeros(3, **meta),
        torch.zeros(3, 5, dtype=torch.int32, device="meta"),
    )
    kw = dict(block_size=4, num_query_tokens=4, mask_token_id=1, backend="reference")
    out = prepare_block_slots(*args, num_padded_reqs=5, rope_positions=torch.zeros(3, 3, **meta), **kw)
    assert out.positions.shape == (3, 20) and out.slot_mapping.shape == (20,)
    assert out.sample_indices.shape == (9,) and out.context_positions.shape == (3, 0)
    with pytest.raises(RuntimeError, match="item"):
        prepare_block_slots(*args, context_lens=torch.zeros(3, **meta), **kw)


def test_empty_block_table(backend: str, monkeypatch) -> None:
    """M = 0 pages: nothing can be placed; checks on name the request, checks off write -1 everywhere."""
    args = (torch.tensor([5]), torch.tensor([3]), torch.zeros(1, 0, dtype=torch.int32))
    kw = dict(
        block_size=4, num_query_tokens=3, mask_token_id=1, context_lens=torch.tensor([2]), backend=backend
    )
    with pytest.raises(ValueError, match=r"request 0: the block runs past the block table.*0 pages"):
        prepare_block_slots(*args, **kw)
    monkeypatch.setenv("ASCEND_SPEC_CHECKS", "0")
    out = prepare_block_slots(*args, **kw)
    assert out.slot_mapping.tolist() == [-1, -1, -1] and out.context_slot_mapping.tolist() == [-1, -1]
    assert out.positions.tolist() == [3, 4, 5] and out.context_positions.tolist() == [1, 2]
