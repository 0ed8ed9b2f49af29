"""Replay records of the Gated DeltaNet recurrence: what a verify call keeps so a later call can commit a prefix.

Per state slot, a verify call records for each of its tokens ``t`` (heads ``h`` of k, ``hv`` of v):

* ``k_t`` ``[H, Dk]`` fp32 - the (l2-normalised) key, stored once per *k-head* (GQA shares it between the
  ``HV/H`` value heads of a group);
* ``g_t`` ``[HV]`` fp32 - the log decay;
* ``u_t`` ``[HV, Dv]`` fp32 - the delta-rule correction ``beta_t (v_t - S~_t^T k_t)`` where
  ``S~_t = exp(g_t) S_{t-1}``.

With them the state after the first ``n`` tokens is ``S_n = exp(G_n) S_0 + sum_{t<n} exp(G_n - G_t) k_t u_t^T``
(``G_t`` = inclusive prefix sum of ``g``): no ``q``, ``v`` or ``beta`` is needed and nothing depends on the
tokens after ``n``. That is ``4 (H Dk + HV Dv + HV)`` bytes per token instead of a full ``4 HV Dk Dv`` state.

Banks: a parallel verify kernel splits one request's state over several programs (value heads x value tiles).
``u`` of a tile is read (replayed) and rewritten only by the program that owns that state tile, so one copy
suffices. ``k`` and ``g`` are shared by the programs of a head group / head, so a program writing this call's
``k`` could overwrite a key another program has yet to replay; they therefore live in two banks: a call replays
from bank ``bank[slot]`` and records into ``1 - bank[slot]``. The bank flip and ``num_recorded`` are written
by a second tiny pass after every program has read them (stream order, no cross-program race).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ascend_spec.checks import check_int


@dataclass
class GDNRecords:
    """Replay records keyed by state slot (batch order may change between calls).

    ``k [S, 2, L, H, Dk]`` and ``g [S, 2, L, HV]`` are banked, ``u [S, L, HV, Dv]`` is not (see module doc);
    ``bank [S]`` int32 is the bank holding each slot's last call, ``num_recorded [S]`` int32 its token count.
    """

    k: torch.Tensor
    g: torch.Tensor
    u: torch.Tensor
    bank: torch.Tensor
    num_recorded: torch.Tensor

    @property
    def num_slots(self) -> int:
        return self.k.shape[0]

    @property
    def max_tokens_per_step(self) -> int:
        return self.k.shape[2]

    @property
    def num_k_heads(self) -> int:
        return self.k.shape[3]

    @property
    def head_k_dim(self) -> int:
        return self.k.shape[4]

    @property
    def num_v_heads(self) -> int:
        return self.u.shape[2]

    @property
    def head_v_dim(self) -> int:
        return self.u.shape[3]

    @property
    def device(self) -> torch.device:
        return self.k.device

    @property
    def nbytes(self) -> int:
        return sum(
            t.numel() * t.element_size() for t in (self.k, self.g, self.u, self.bank, self.num_recorded)
        )

    @property
    def bytes_per_slot(self) -> int:
        return self.nbytes // self.num_slots

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.k, self.g, self.u, self.bank, self.num_recorded)


def record_bytes_per_slot(
    max_tokens_per_step: int, num_k_heads: int, num_v_heads: int, head_k_dim: int, head_v_dim: int
) -> int:
    """Bytes :func:`allocate_records` uses per state slot (for memory planning without allocating)."""
    per_token_banked = 4 * (num_k_heads * head_k_dim + num_v_heads)
    per_token_owned = 4 * num_v_heads * head_v_dim
    return max_tokens_per_step * (2 * per_token_banked + per_token_owned) + 8


def allocate_records(
    num_slots: int,
    max_tokens_per_step: int,
    num_v_heads: int,
    head_k_dim: int,
    head_v_dim: int,
    *,
    num_k_heads: int | None = None,
    device: torch.device | str | None = None,
) -> GDNRecords:
    """Zeroed records for ``num_slots`` state slots and up to ``max_tokens_per_step`` tokens per row and call.

    ``num_k_heads`` (default ``num_v_heads``) must equal the ``H`` of the ``k`` passed to the verify op; with GQA
    (``H < HV``) pass it to store each key once per k-head. Memory per slot:
    ``4 L (2 (H Dk + HV) + HV Dv) + 8`` bytes (:func:`record_bytes_per_slot`).
    """
    num_slots = check_int("num_slots", num_slots, minimum=1)
    max_tokens_per_step = check_int("max_tokens_per_step", max_tokens_per_step, minimum=1)
    num_v_heads = check_int("num_v_heads", num_v_heads, minimum=1)
    head_k_dim = check_int("head_k_dim", head_k_dim, minimum=1)
    head_v_dim = check_int("head_v_dim", head_v_dim, minimum=1)
    if num_k_heads is None:
        num_k_heads = num_v_heads
    num_k_heads = check_int("num_k_heads", num_k_heads, minimum=1)
    if num_v_heads % num_k_heads:
        raise ValueError(f"num_v_heads ({num_v_heads}) must be a multiple of num_k_heads; got {num_k_heads}")
    f32 = torch.float32
    k = torch.zeros(num_slots, 2, max_tokens_per_step, num_k_heads, head_k_dim, dtype=f32, device=device)
    dev = k.device
    g = torch.zeros(num_slots, 2, max_tokens_per_step, num_v_heads, dtype=f32, device=dev)
    u = torch.zeros(num_slots, max_tokens_per_step, num_v_heads, head_v_dim, dtype=f32, device=dev)
    bank = torch.zeros(num_slots, dtype=torch.int32, device=dev)
    num_recorded = torch.zeros(num_slots, dtype=torch.int32, device=dev)
    return GDNRecords(k=k, g=g, u=u, bank=bank, num_recorded=num_recorded)
