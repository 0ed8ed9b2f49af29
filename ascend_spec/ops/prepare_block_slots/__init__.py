"""Block-drafter input preparation: ids, rope positions and paged-cache slots of a whole draft block.

DFlash and DSpark draft a block of Q positions per request in one forward pass, so before that pass the engine
needs, for B requests at once, the block's input ids ``[anchor, mask, ..., mask]``, its rope positions and the
paged KV-cache slot of every position, and the slots of the context tokens whose target hidden states are
injected into the drafter cache this step. :func:`prepare_block_slots` builds all of it without a per-request
loop; the Triton and AscendC backends do it in one kernel launch.

Semantics (every backend produces exactly the same tensors):

* Query token ``i`` (``0 <= i < Q``) of request ``b`` sits at logical position ``p_b + i`` (``p_b`` =
  ``anchor_positions[b]``, the anchor is token 0) and at flat row ``b * Q + i``. Its slot is
  ``block_table[b, (p_b + i) // bs] * bs + (p_b + i) % bs``; its rope position is ``rope_b + i`` on every
  rope row (``rope_b`` = ``rope_positions[..., b]``, or ``p_b`` when ``rope_positions`` is None).
* Padding rows ``B <= r < R`` (graph replay): input id ``mask_token_id``, position 0 (every rope row), slot
  -1 (write nothing), ``seq_lens[r] = 0``. ``query_start_loc = [0, Q, 2Q, ..., RQ]`` covers them too,
  because the flat outputs have R*Q rows and the replayed graph runs all of them.
* ``sample_indices`` lists, request by request, the flat rows whose outputs give candidates: rows
  ``bQ+1 .. bQ+Q-1`` (the masks), or ``bQ .. bQ+Q-1`` with ``sample_from_anchor`` (DSpark reads its first
  candidate at the anchor). Padding rows give no candidates and are not listed: the tensor has
  ``B * (Q - 1)`` or ``B * Q`` rows.
* Context tokens of request ``b`` are the ``n_b = context_lens[b]`` tokens at logical positions
  ``p_b - n_b .. p_b - 1`` (the anchor itself is query token 0, not context). They are laid out flat, request
  by request, in ``[context_start_loc[b], context_start_loc[b + 1])`` where ``context_start_loc`` ([B+1],
  int32) is the exclusive prefix sum of ``context_lens``. Context token ``j`` (``0 <= j < n_b``) sits at
  position ``p_b - n_b + j``; its slot comes from the same block table and formula (the drafter cache is
  paged like the block); its rope position is ``rope_b - n_b + j`` on every rope row: context tokens are
  tokens the target just produced (generated text), and text advances every mrope row by one per token.
  Padding rows have no context: the context outputs cover the B real requests only. ``context_lens=None``
  means no context (empty outputs, ``context_start_loc`` all zeros).
* Any position a kernel cannot place (negative, on a page past the table, or on a negative page id) gets
  slot -1, with checks on or off: a wrong slot would corrupt another request's cache, -1 writes nothing.

Output dtypes: ``input_ids`` has the dtype of ``anchor_token_ids``; positions, slots and ``sample_indices``
are int64; ``query_start_loc``, ``seq_lens`` and ``context_start_loc`` are int32.

The context outputs have ``sum(context_lens)`` rows, a size only the device knows; reading it costs the one
host sync of this op (none when ``context_lens`` is None). Value checks (``ASCEND_SPEC_CHECKS``) add one
more.

This package holds the contract (:class:`BlockSlots`, :class:`BlockSlotsArgs`), the argument and value checks
and the dispatch; ``reference.py``, ``triton.py`` and ``ascendc.py`` next to it implement the op, each as
``prepare_block_slots(args, out)``. Derivations and measurements: docs/prepare_block_slots.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ascend_spec.backend import dispatch, value_checks_enabled
from ascend_spec.checks import INDEX_DTYPES, Layout, check_int, check_outputs, check_tensor, empty_outputs

OP = "prepare_block_slots"
INT32_MAX = 2**31 - 1
_ID_LIMITS = {torch.int32: 2**31 - 1, torch.int64: 2**63 - 1}


@dataclass(frozen=True)
class BlockSlots:
    """Everything the drafter's block pass needs; R = padded requests, B = real requests, Q = block length."""

    input_ids: torch.Tensor  # [R*Q], dtype of anchor_token_ids
    positions: torch.Tensor  # [R*Q] or [3, R*Q] int64 rope positions
    slot_mapping: torch.Tensor  # [R*Q] int64, -1 = write nothing
    query_start_loc: torch.Tensor  # [R+1] int32
    seq_lens: torch.Tensor  # [R] int32, p_b + Q (0 for padding rows)
    sample_indices: torch.Tensor  # [B*(Q-1)] or [B*Q] int64 flat rows giving candidates
    context_slot_mapping: torch.Tensor  # [N] int64, N = sum(context_lens)
    context_positions: torch.Tensor  # [N] or [3, N] int64 rope positions
    context_start_loc: torch.Tensor  # [B+1] int32

    @property
    def num_reqs(self) -> int:
        return self.context_start_loc.numel() - 1

    @property
    def num_padded_reqs(self) -> int:
        return self.seq_lens.numel()


@dataclass(frozen=True)
class BlockSlotsArgs:
    """The op's arguments after checks and normalisation: what every backend takes (csrc mirror:
    ``PrepareBlockSlotsArgs`` in csrc/kernels/prepare_block_slots_tiling.h)."""

    anchor_token_ids: torch.Tensor  # [B] int32/int64, contiguous
    anchor_positions: torch.Tensor  # [B] int64, contiguous
    block_table: torch.Tensor  # [B, M] int32
    rope_positions: torch.Tensor | None  # None, [B] or [3, B] int64, contiguous
    context_lens: torch.Tensor | None  # None or [B] int64, contiguous
    block_size: int
    num_query_tokens: int  # Q
    mask_token_id: int
    sample_from_anchor: bool
    num_padded_reqs: int  # R >= B
    total_context: int  # sum(context_lens), negatives counted as 0: the context outputs' rows

    @property
    def num_reqs(self) -> int:
        return self.anchor_positions.shape[0]

    @property
    def mrope(self) -> bool:
        return self.rope_positions is not None and self.rope_positions.dim() == 2


def block_slots_layout(
    num_reqs: int,
    *,
    num_query_tokens: int,
    sample_from_anchor: bool = False,
    num_padded_reqs: int | None = None,
    mrope: bool = False,
    total_context: int = 0,
    id_dtype: torch.dtype = torch.int64,
) -> Layout:
    """Shape and dtype of every :class:`BlockSlots` field (one definition for allocation and ``out=`` checks)."""
    b, q = num_reqs, num_query_tokens
    r = b if num_padded_reqs is None else num_padded_reqs
    lead = (3,) if mrope else ()
    i64, i32 = torch.int64, torch.int32
    return {
        "input_ids": ((r * q,), id_dtype),
        "positions": ((*lead, r * q), i64),
        "slot_mapping": ((r * q,), i64),
        "query_start_loc": ((r + 1,), i32),
        "seq_lens": ((r,), i32),
        "sample_indices": ((b * (q if sample_from_anchor else q - 1),), i64),
        "context_slot_mapping": ((total_context,), i64),
        "context_positions": ((*lead, total_context), i64),
        "context_start_loc": ((b + 1,), i32),
    }


def empty_block_slots(num_reqs: int, *, device: torch.device | str | None = None, **sizes: Any) -> BlockSlots:
    """Uninitialised outputs for ``prepare_block_slots(..., out=)``, allocated once and reused by the caller.

    ``sizes`` are :func:`block_slots_layout`'s keywords (``num_query_tokens``, ``sample_from_anchor``,
    ``num_padded_reqs``, ``mrope``, ``total_context``, ``id_dtype``); the context outputs have ``total_context``
    rows, so a reused ``out`` fits calls with that many context tokens.
    """
    return empty_outputs(BlockSlots, block_slots_layout(num_reqs, **sizes), device)  # type: ignore[return-value]


def _args_layout(args: BlockSlotsArgs) -> Layout:
    return block_slots_layout(
        args.num_reqs, num_query_tokens=args.num_query_tokens, sample_from_anchor=args.sample_from_anchor,
        num_padded_reqs=args.num_padded_reqs, mrope=args.mrope, total_context=args.total_context,
        id_dtype=args.anchor_token_ids.dtype,
    )  # fmt: skip


def prepare_block_slots(
    anchor_token_ids: torch.Tensor,
    anchor_positions: torch.Tensor,
    block_table: torch.Tensor,
    *,
    block_size: int,
    num_query_tokens: int,
    mask_token_id: int,
    sample_from_anchor: bool = False,
    rope_positions: torch.Tensor | None = None,
    context_lens: torch.Tensor | None = None,
    num_padded_reqs: int | None = None,
    backend: str = "auto",
    out: BlockSlots | None = None,
) -> BlockSlots:
    """Prepare the drafter's block inputs for B requests of Q query tokens (semantics: module docstring).

    ``anchor_token_ids [B]``, ``anchor_positions [B]`` (int32/int64), ``block_table [B, M]`` int32,
    ``rope_positions`` None / ``[B]`` / ``[3, B]`` (mrope), ``context_lens`` None / ``[B]``;
    ``num_query_tokens`` is K+1 for DFlash, K for DSpark (``sample_from_anchor=True``); ``num_padded_reqs``
    R >= B pads for graph replay. ``out`` (from :func:`empty_block_slots`, shapes of this call) receives every
    output and is returned; without it the outputs are allocated. Shape/dtype/device errors always raise
    ValueError; value errors (a block past the table, a negative page id under a token, negative positions or
    lengths) raise ValueError naming the request when :func:`~ascend_spec.backend.value_checks_enabled`.
    """
    check_tensor("anchor_positions", anchor_positions, ndim=1, dtypes=INDEX_DTYPES)
    device = anchor_positions.device
    num_reqs = anchor_positions.shape[0]
    check_tensor("anchor_token_ids", anchor_token_ids, dtypes=INDEX_DTYPES, device=device, shape=(num_reqs,))
    check_tensor("block_table", block_table, dtypes=(torch.int32,), device=device, shape=(num_reqs, None))
    block_size = check_int("block_size", block_size, minimum=1)
    q = check_int("num_query_tokens", num_query_tokens, minimum=1)
    if not isinstance(sample_from_anchor, bool):
        raise ValueError(f"sample_from_anchor must be a bool; got {sample_from_anchor!r}")
    if q < 2 and not sample_from_anchor:
        raise ValueError(
            "num_query_tokens must be >= 2 without sample_from_anchor (the anchor row gives no candidate); "
            f"got {q}"
        )
    limit = _ID_LIMITS[anchor_token_ids.dtype]
    try:
        mask = check_int("mask_token_id", mask_token_id)
    except ValueError:
        mask = None
    if mask is None or not 0 <= mask <= limit:
        raise ValueError(
            f"mask_token_id must be an int in [0, {limit}] (input_ids are {anchor_token_ids.dtype}); "
            f"got {mask_token_id!r}"
        )
    mask_token_id = mask
    if num_padded_reqs is None:
        num_padded_reqs = num_reqs
    else:
        try:
            num_padded_reqs = check_int("num_padded_reqs", num_padded_reqs, minimum=num_reqs)
        except ValueError:
            raise ValueError(
                f"num_padded_reqs must be an int >= the number of requests ({num_reqs}); got {num_padded_reqs!r}"
            ) from None
    if rope_positions is not None:
        check_tensor("rope_positions", rope_positions, ndim=(1, 2), dtypes=INDEX_DTYPES, device=device)
        want = (num_reqs,) if rope_positions.dim() == 1 else (3, num_reqs)
        check_tensor("rope_positions", rope_positions, shape=want)
        rope_positions = rope_positions.to(torch.int64).contiguous()
    if context_lens is not None:
        check_tensor("context_lens", context_lens, dtypes=INDEX_DTYPES, device=device, shape=(num_reqs,))
        context_lens = context_lens.to(torch.int64).contiguous()
    anchor_positions = anchor_positions.to(torch.int64).contiguous()
    anchor_token_ids = anchor_token_ids.contiguous()

    run = dispatch(OP, backend, device)
    sums, total = _context_sums(context_lens, num_reqs)
    args = BlockSlotsArgs(
        anchor_token_ids=anchor_token_ids, anchor_positions=anchor_positions, block_table=block_table,
        rope_positions=rope_positions, context_lens=context_lens, block_size=block_size, num_query_tokens=q,
        mask_token_id=mask_token_id, sample_from_anchor=sample_from_anchor, num_padded_reqs=num_padded_reqs,
        total_context=total,
    )  # fmt: skip
    if value_checks_enabled(device):
        _check_values(args)
    layout = _args_layout(args)
    if out is None:
        out = empty_outputs(BlockSlots, layout, device)  # type: ignore[assignment]
    else:
        check_outputs(out, BlockSlots, layout, device)
    assert out is not None
    out.context_start_loc[0] = 0
    if sums is None:
        out.context_start_loc.zero_()
    else:
        out.context_start_loc[1:] = sums
    if num_padded_reqs == 0:  # nothing for a kernel to do: every output but the offsets is empty
        out.query_start_loc.zero_()
        return out
    run(args, out)
    return out


def _context_sums(context_lens: torch.Tensor | None, num_reqs: int) -> tuple[torch.Tensor | None, int]:
    """Inclusive prefix sums [B] of the context lengths (negative ones count as 0) and their total.

    The total sizes the context outputs, so it is the op's one host read.
    """
    if context_lens is None or num_reqs == 0:
        return None, 0
    sums = torch.cumsum(context_lens.clamp_min(0), 0)
    total = int(sums[-1])
    if total > INT32_MAX:
        raise ValueError(f"context_lens sum to {total} tokens, more than int32 context_start_loc can index")
    return sums, total


def _checked_fields(args: BlockSlotsArgs) -> tuple:
    """What the value checks read: positions, table, page size, Q, token ids, rope positions, context lengths."""
    return (
        args.anchor_positions, args.block_table, args.block_size, args.num_query_tokens, args.anchor_token_ids,
        args.rope_positions, args.context_lens,
    )  # fmt: skip


def _check_values(args: BlockSlotsArgs) -> None:
    """Value checks (host reads): one sync and few ops when all is well; else name the first bad request.

    Every rule is "some value < 0" (token id, context length, first context position, first context rope
    position, room left in the table and in int32 seq_lens) except the negative page ids under a token.
    """
    p, block_table, block_size, q, anchor_token_ids, rope_positions, context_lens = _checked_fields(args)
    b, num_pages = block_table.shape
    if b == 0:
        return
    lo = p if context_lens is None else p - context_lens
    parts = [anchor_token_ids.to(torch.int64), (min(num_pages * block_size, INT32_MAX + 1) - q) - p, lo]
    if context_lens is not None:
        parts.append(context_lens)
    if rope_positions is not None:
        parts.append((rope_positions if context_lens is None else rope_positions - context_lens).reshape(-1))
    cols = torch.arange(num_pages, device=p.device)
    neg_page = (
        (block_table < 0)
        & (cols >= (lo // block_size)[:, None])
        & (cols <= ((p + q - 1) // block_size)[:, None])
    )
    if bool((torch.cat(parts).min() < 0) | neg_page.any()):
        _raise_value_error(args)


def _raise_value_error(args: BlockSlotsArgs) -> None:
    """The slow path of :func:`_check_values`: find the first bad rule and request, and say what is wrong."""
    p, block_table, block_size, q, anchor_token_ids, rope_positions, context_lens = _checked_fields(args)
    b, num_pages = block_table.shape
    n = torch.zeros_like(p) if context_lens is None else context_lens
    rope = p if rope_positions is None else rope_positions
    rope = rope if rope.dim() == 2 else rope[None]
    last = p + (q - 1)
    capacity = num_pages * block_size
    first_page = (p - n).clamp_min(0) // block_size
    last_page = last.clamp_min(0) // block_size
    cols = torch.arange(num_pages, device=p.device)
    neg_page = (block_table < 0) & (cols >= first_page[:, None]) & (cols <= last_page[:, None])
    bad = [
        anchor_token_ids < 0,
        p < 0,
        n < 0,
        n > p,
        (rope < 0).any(0),
        (rope < n).any(0),
        last >= capacity,
        p + q > INT32_MAX,
        neg_page.any(1),
    ]
    flags = torch.stack(bad)
    if not bool(flags.any()):  # pragma: no cover - the fast path flagged something these rules cover
        return
    kind, req = (int(x) for x in flags.nonzero()[0])
    pv, nv = int(p[req]), int(n[req])
    if kind == 0:
        raise ValueError(f"anchor_token_ids[{req}] = {int(anchor_token_ids[req])} is negative")
    if kind == 1:
        raise ValueError(f"request {req}: anchor_positions[{req}] = {pv} is negative")
    if kind == 2:
        raise ValueError(f"request {req}: context_lens[{req}] = {nv} is negative")
    if kind == 3:
        raise ValueError(
            f"request {req}: context_lens[{req}] = {nv} exceeds anchor_positions[{req}] = {pv} "
            "(context positions would be negative)"
        )
    if kind in (4, 5):
        row = int(((rope[:, req] < 0) if kind == 4 else (rope[:, req] < nv)).nonzero()[0])
        if rope_positions is None:
            name = f"anchor_positions[{req}]"
        elif rope_positions.dim() == 1:
            name = f"rope_positions[{req}]"
        else:
            name = f"rope_positions[{row}, {req}]"
        value = int(rope[row, req])
        if kind == 4:
            raise ValueError(f"request {req}: {name} = {value} is negative")
        raise ValueError(
            f"request {req}: {name} = {value} is smaller than context_lens[{req}] = {nv} "
            "(context rope positions would be negative)"
        )
    if kind == 6:
        raise ValueError(
            f"request {req}: the block runs past the block table: anchor_positions[{req}] = {pv} + "
            f"{q} query tokens reaches position {pv + q - 1}, but {num_pages} pages x block_size "
            f"{block_size} hold positions 0..{capacity - 1}"
        )
    if kind == 7:
        raise ValueError(f"request {req}: seq_len anchor_positions[{req}] + {q} = {pv + q} overflows int32")
    page = int(neg_page[req].nonzero()[0])
    position = max(page * block_size, pv - nv)
    what = "context token" if position < pv else "query token"
    raise ValueError(
        f"request {req}: block_table[{req}, {page}] = {int(block_table[req, page])} is a negative page id, "
        f"but position {position} ({what}) lands on it"
    )
