"""The GDN state moves prefix caching needs (vLLM's ``mamba_cache_mode="align"``), for every runner.

In align mode vLLM keeps one mamba state slot per cache block: the running state lives in the block of the
request's last scheduled token, and a block that fills keeps the state at its last token, which a later request
with the same prefix starts from. vLLM moves the state between blocks itself, picking one of ``1+K`` per-token
states; the plugin keeps one state and per-token records instead, so on an enabled runner both moves are these:

* before the forward (:func:`move_running_states`), a request whose running block changes commits its pending
  records in the old block's slot and copies the committed state (recurrent and conv) into the new block's slot,
  which holds no records;
* after sampling (:func:`boundary_reached`, :func:`write_boundary_states`), a request whose accepted tokens reach
  a block boundary gets that boundary's state in the boundary block's slot: the running slot's committed state
  and records copied there and committed up to the boundary, which may fall anywhere inside the accepted draft.

The runners' hooks (``v1/gdn_align.py``, ``v2/gdn_align.py``) decide which requests move; this module moves them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AlignStats:
    """What the align-mode moves did in one runner (``runner.ascend_spec_align``): the boundary states written
    after sampling, those whose boundary fell at an accepted draft token (after the step's first token), and
    those that committed only part of the step's records (tokens accepted past the boundary)."""

    boundary_writes: int = 0
    inside_draft: int = 0
    partial_commits: int = 0


@dataclass(frozen=True)
class Boundary:
    """A block boundary a request's accepted tokens reached in one step: the boundary block's column in the
    request's block table and the records to commit there (tokens past the running slot's committed state)."""

    column: int
    tokens: int
    inside_draft: bool
    partial: bool


@dataclass(frozen=True)
class BoundaryWrite:
    """One boundary state written after sampling: the request, its row in the runner's block table (V1: the
    batch row; V2: the request slot), the boundary block's column, and whether the boundary fell at an accepted
    draft token."""

    req_id: str
    row: int
    column: int
    inside_draft: bool


def boundary_reached(
    *, committed: int, running_tokens: int, accepted: int, block_size: int
) -> Boundary | None:
    """The last block boundary among a step's accepted tokens, or None. ``running_tokens``: the request's tokens
    through the step's first (``num_computed + scheduled - drafts``); ``accepted``: tokens the step produced
    (accepted drafts + 1); ``committed``: tokens in the running slot's committed state (records hold the rest)."""
    new_computed = running_tokens + accepted - 1
    aligned = new_computed // block_size * block_size
    if aligned < running_tokens:
        return None
    return Boundary(
        column=aligned // block_size - 1,
        tokens=aligned - committed,
        inside_draft=aligned > running_tokens,
        partial=aligned < new_computed,
    )


def move_running_states(layers: list, src: torch.Tensor, dst: torch.Tensor, accepted: torch.Tensor) -> None:
    """Before the forward: commit the records of slots ``src`` (their last call's ``accepted`` counts) and copy
    the committed states into ``dst`` (the requests' new running blocks), without records."""
    for layer in layers:
        layer.flush(src, accepted)
        layer.copy_slots(src, dst, records=False)


def write_boundary_states(layers: list, src: torch.Tensor, dst: torch.Tensor, tokens: torch.Tensor) -> None:
    """After sampling: the state at each boundary in its block's slot ``dst``: the running slot ``src``'s state
    and records copied there (where they differ), then ``tokens`` of the records committed."""
    moved = src != dst
    for layer in layers:
        if bool(moved.any()):
            layer.copy_slots(src[moved], dst[moved], records=True)
        layer.flush(dst, tokens)
