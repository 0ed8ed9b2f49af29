"""The references' fixed-K path (every row owns its slot, rows of one length back to back: views, no gathers)
against their ragged path on the same steps.

Appending a padding row (state index -1, no tokens) changes nothing a call computes but sends it down the ragged
path (``uniform_row_length`` is 0), so every output, state and record must agree between the two runs. Both
paths are also compared with fla / transformers / float64 in the ops' own session tests; this pins that the
CPU engine's usual step (fixed K) is not a path only those sessions reach by chance.
"""

from __future__ import annotations

import pytest
import torch

from ascend_spec.gdn import (
    allocate_conv_records,
    allocate_records,
    verify_causal_conv1d,
    verify_gated_delta_rule,
)
from ascend_spec.gdn.protocol import uniform_row_length

S, H, HV, DK, DV, C, W, L = 9, 1, 2, 16, 8, 24, 4, 4


def _with_padding_row(slots: torch.Tensor, cu: torch.Tensor, pending: torch.Tensor):
    pad_slot = torch.cat((slots, slots.new_tensor([-1])))
    return pad_slot, torch.cat((cu, cu[-1:])), torch.cat((pending, pending.new_zeros(1)))


@pytest.mark.parametrize("slots", [[2, 3, 4], [7, 0, 5]], ids=["consecutive", "scattered"])
def test_delta_rule_fixed_k_path_equals_ragged_path(slots):
    g = torch.Generator().manual_seed(0)
    slots = torch.tensor(slots)
    b = len(slots)
    pools = [torch.randn(S, HV, DK, DV, generator=g) for _ in range(2)]
    pools[1].copy_(pools[0])
    records = [allocate_records(S, L, HV, DK, DV, num_k_heads=H) for _ in range(2)]
    pending = torch.zeros(b, dtype=torch.int32)
    for step in range(4):
        t = b * L
        q, k = torch.randn(t, H, DK, generator=g), torch.randn(t, H, DK, generator=g)
        v = torch.randn(t, HV, DV, generator=g)
        gate = -torch.rand(t, HV, generator=g) * 2
        beta = torch.rand(t, HV, generator=g)
        cu = torch.arange(0, t + 1, L)
        calls = [(slots, cu, pending), _with_padding_row(slots, cu, pending)]
        assert uniform_row_length(cu, slots, t, S) == L
        assert uniform_row_length(calls[1][1], calls[1][0], t, S) == 0
        outs = [
            verify_gated_delta_rule(
                q,
                k,
                v,
                gate,
                beta,
                cu_seqlens=c,
                state_pool=pool,
                state_indices=s,
                records=rec,
                pending=p,
                use_qk_l2norm=True,
                backend="reference",
            )  # fmt: skip
            for (s, c, p), pool, rec in zip(calls, pools, records)
        ]
        torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(pools[0], pools[1], rtol=1e-5, atol=1e-5)
        for a, c in zip(records[0].tensors(), records[1].tensors()):
            torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-5)
        pending = torch.randint(1, L + 1, (b,), generator=g, dtype=torch.int32)
        if step == 2:
            pending[0] = 0  # one row commits nothing: the partial-commit branch
    assert not torch.equal(pools[0], torch.zeros_like(pools[0]))


@pytest.mark.parametrize("slots", [[2, 3, 4], [7, 0, 5]], ids=["consecutive", "scattered"])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_fixed_k_path_equals_ragged_path(slots, bias):
    g = torch.Generator().manual_seed(1)
    slots = torch.tensor(slots)
    b = len(slots)
    weight = torch.randn(C, W, generator=g)
    bias_t = torch.randn(C, generator=g) if bias else None
    pools = [torch.randn(S, C, W - 1, generator=g) for _ in range(2)]
    pools[1].copy_(pools[0])
    records = [allocate_conv_records(S, L, C, W, dtype=torch.float32) for _ in range(2)]
    pending = torch.zeros(b, dtype=torch.int32)
    for _ in range(4):
        t = b * L
        x = torch.randn(t, C, generator=g)
        cu = torch.arange(0, t + 1, L)
        calls = [(slots, cu, pending), _with_padding_row(slots, cu, pending)]
        outs = [
            verify_causal_conv1d(
                x,
                weight,
                bias_t,
                cu_seqlens=c,
                conv_state_pool=pool,
                state_indices=s,
                records=rec,
                pending=p,
                backend="reference",
            )  # fmt: skip
            for (s, c, p), pool, rec in zip(calls, pools, records)
        ]
        torch.testing.assert_close(outs[0], outs[1], rtol=1e-6, atol=1e-6)
        assert torch.equal(pools[0], pools[1])  # the commit is a pure copy on both paths
        assert torch.equal(records[0].x, records[1].x)
        assert torch.equal(records[0].num_recorded, records[1].num_recorded)
        pending = torch.randint(0, L + 1, (b,), generator=g, dtype=torch.int32)
