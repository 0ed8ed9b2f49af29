"""The cpu backend's native kernels (csrc/cpu/) at the CPU engine's shapes against the reference.

The ops' session tests run every backend (cpu included) against transformers / fla / float64 on small heads;
here: the engine's real layer shapes (GQA H = 2, HV = 4, Dk = Dv = 128: the kernels' 16-column register blocks
and 8-row blocks of [q; k] with their tails), q/k/v as the strided column views of the conv output the layer
passes, ragged and fixed-K steps with pending commits, both state layouts, one and two OpenMP threads; plus the
argument struct's size check.
"""

from __future__ import annotations

import pytest
import torch

from ascend_spec.cpu import native
from ascend_spec.gdn import (
    allocate_conv_records,
    allocate_records,
    flush_pending,
    verify_causal_conv1d,
    verify_gated_delta_rule,
)
from tests.helpers import assert_close

H, HV, D, W, S, CAP = 2, 4, 128, 4, 7, 6
C = 2 * H * D + HV * D


class Layer:
    """One GDN layer's conv + delta-rule state, driven step by step on one backend."""

    def __init__(self, backend: str, value_major: bool, gen: torch.Generator) -> None:
        self.backend = backend
        self.weight = torch.randn(C, W, generator=gen).bfloat16()
        self.bias = torch.randn(C, generator=gen).bfloat16()
        self.conv_pool = torch.randn(S, C, W - 1, generator=gen).bfloat16()
        state = torch.randn(S, HV, D, D, generator=gen) * 0.1
        self.pool = state.transpose(-1, -2).contiguous().transpose(-1, -2) if value_major else state
        self.rec = allocate_records(S, CAP, HV, D, D, num_k_heads=H)
        self.conv_rec = allocate_conv_records(S, CAP, C, W)

    def step(self, x, a, b, cu, slots, pending):
        y = verify_causal_conv1d(
            x, self.weight, self.bias, cu_seqlens=cu, conv_state_pool=self.conv_pool, state_indices=slots,
            records=self.conv_rec, pending=pending, backend=self.backend,
        )  # fmt: skip
        t = y.shape[0]
        q, k, v = y.split([H * D, H * D, HV * D], dim=-1)  # strided views, as the engine's layer passes them
        g = -torch.nn.functional.softplus(a.float())
        o = verify_gated_delta_rule(
            q.view(t, H, D), k.view(t, H, D), v.view(t, HV, D), g, b.float().sigmoid(), cu_seqlens=cu,
            state_pool=self.pool, state_indices=slots, records=self.rec, pending=pending, use_qk_l2norm=True,
            backend=self.backend,
        )  # fmt: skip
        return y, o


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("value_major", [False, True], ids=["key_major", "value_major"])
def test_engine_shaped_session_matches_reference(threads, value_major):
    gen = torch.Generator().manual_seed(threads * 10 + int(value_major))
    layers = [
        Layer(backend, value_major, torch.Generator().manual_seed(5)) for backend in ("cpu", "reference")
    ]
    steps = [  # (slots, lengths): fixed-K, ragged with a zero-length row and a padding row, 1-row, reordered
        ([0, 3, 5], [4, 4, 4]),
        ([3, 0, -1, 5], [2, 4, 0, 3]),
        ([5], [6]),
        ([5, 3, 0, 1], [1, 0, 4, 5]),
        ([1, 0, 3, 5], [4, 4, 4, 4]),
    ]
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        accepted: dict[int, int] = {}
        for slot_list, lens in steps:
            slots = torch.tensor(slot_list, dtype=torch.int32)
            cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
            pending = torch.tensor([accepted.get(s, 0) for s in slot_list], dtype=torch.int32)
            t = int(cu[-1])
            x = torch.randn(t, C, generator=gen).bfloat16()
            a, b = torch.randn(t, HV, generator=gen).bfloat16(), torch.randn(t, HV, generator=gen).bfloat16()
            (y_cpu, o_cpu), (y_ref, o_ref) = (layer.step(x, a, b, cu, slots, pending) for layer in layers)
            assert_close(y_cpu.float(), y_ref.float(), rtol=1e-2, atol=1e-2)  # bf16 outputs
            assert_close(o_cpu.float(), o_ref.float(), rtol=2e-2, atol=2e-3)
            assert_close(layers[0].pool, layers[1].pool, rtol=1e-4, atol=1e-5)
            assert torch.equal(layers[0].conv_pool, layers[1].conv_pool)  # the conv commit is a copy
            for s, n in zip(slot_list, lens):
                if s >= 0 and n > 0:
                    accepted[s] = int(torch.randint(1, n + 1, (1,), generator=gen))
        rows = torch.tensor(sorted(accepted), dtype=torch.int32)
        pend = torch.tensor([accepted[int(s)] for s in rows], dtype=torch.int32)
        for layer in layers:
            flush_pending(layer.pool, rows, layer.rec, pend.clone(), backend=layer.backend)
            flush_pending(layer.conv_pool, rows, layer.conv_rec, pend.clone(), backend=layer.backend)
        assert_close(layers[0].pool, layers[1].pool, rtol=1e-4, atol=1e-5)
        assert torch.equal(layers[0].conv_pool, layers[1].conv_pool)
        for got, want in zip(layers[0].rec.tensors()[3:], layers[1].rec.tensors()[3:]):
            assert torch.equal(got, want)  # bank and counts
    finally:
        torch.set_num_threads(saved)


def test_struct_mirror_mismatch_is_refused():
    wrong = native.arguments_struct("TooShort", ("mode",))
    with pytest.raises(RuntimeError, match="no longer matches the C\\+\\+ struct"):
        native.entry("verify_causal_conv1d", wrong)


def test_builds_without_openmp_when_the_toolchain_lacks_it(tmp_path):
    """A failed build is reported with its command; the single-threaded fallback (simd pragmas only) builds a
    library with the same arguments struct."""
    import ctypes

    from ascend_spec.backend import host_compiler

    compiler = host_compiler()
    source = native.CPU_KERNELS_DIR / "verify_causal_conv1d.cpp"
    errors: list[str] = []
    assert not native._build(compiler, (*native.FLAGS, "-fno-such-flag"), source, tmp_path / "bad.so", errors)
    assert len(errors) == 1 and "-fno-such-flag" in errors[0]
    assert native.THREADING[-1] == ("-fopenmp-simd",)
    target = tmp_path / "simd.so"
    assert native._build(compiler, (*native.FLAGS, *native.THREADING[-1]), source, target, errors)
    lib = ctypes.CDLL(str(target))
    lib.verify_causal_conv1d_args_bytes.restype = ctypes.c_uint64
    from ascend_spec.gdn.verify_causal_conv1d.cpu import Arguments

    assert lib.verify_causal_conv1d_args_bytes() == ctypes.sizeof(Arguments)


# ------------------------------------------------------------- dynamic verification's one-call CPU step


def _draft_logits(b: int, k: int, v: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(b * k, v, generator=gen) * 3.0
    x[0, v // 2] += 40.0  # a sure draft
    x[-1] = 0.5  # a uniform one: 1 / V (the only row when B * K = 1)
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("b", "k", "v"), [(1, 1, 7), (4, 3, 512), (5, 4, 5000), (3, 2, 70_000)])
def test_draft_survival_is_the_two_ops_in_one_call(dtype, b, k, v) -> None:  # noqa: ANN001
    """DraftSurvival = survival_probs(max_softmax_confidence(logits).view(B, K)): bit-exact against the cpu
    backend's two ops (same kernel, torch.cumprod's double accumulation), within the op's bound of the
    reference; contiguous, row-strided and column-major logits."""
    from ascend_spec.ops import max_softmax_confidence, survival_probs
    from ascend_spec.ops.max_softmax_confidence.cpu import DraftSurvival

    conf, surv = torch.empty(b, k), torch.empty(b, k)
    fused = DraftSurvival(conf, surv)
    base = _draft_logits(b, k, v, dtype, seed=b * k)
    wide = torch.cat([base, base], dim=1)[:, ::2]  # column stride 2
    for x in (base, base.t().contiguous().t(), wide):
        got = fused(x)
        assert got.data_ptr() == surv.data_ptr()
        two_ops = survival_probs(max_softmax_confidence(x, backend="cpu").view(b, k))
        torch.testing.assert_close(got, two_ops, rtol=0, atol=0)
        torch.testing.assert_close(conf, max_softmax_confidence(x, backend="cpu").view(b, k), rtol=0, atol=0)
        want = survival_probs(max_softmax_confidence(x.contiguous(), backend="reference").view(b, k))
        torch.testing.assert_close(got, want, rtol=4e-6 * k, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("v", [7, 300, 4096, 9000])  # one chunk, its edge, several chunks of 4096
def test_draft_tokens_are_torch_argmax_from_the_scoring_pass(dtype, v) -> None:  # noqa: ANN001
    """DraftSurvival.draft_tokens = torch.argmax per row (first maximum; ties inside and across chunks, the
    first NaN, all -inf rows), and the same call's survivals equal the scoring call's; strided logits too."""
    from ascend_spec.ops.max_softmax_confidence.cpu import DraftSurvival

    b, k = 3, 4
    fused = DraftSurvival(torch.empty(b, k), torch.empty(b, k))
    gen = torch.Generator().manual_seed(v)
    x = (torch.randn(b * k, v, generator=gen) * 3).to(dtype)
    x[1, :] = 0.0  # every entry ties: index 0
    x[2, v // 3] = x[2, v - 1] = 50.0  # a tie in two places (two chunks when v > 4096)
    x[3, v - 1] = 60.0  # the maximum in the last chunk
    x[4, v // 2] = float("nan")
    x[4, v - 1] = float("nan")  # torch.argmax: the first NaN
    x[4, 0] = 90.0
    x[5, :] = float("-inf")  # index 0
    x[6, :] = float("-inf")
    x[6, v - 1] = float("inf")
    wide = torch.cat([x, x], dim=1)[:, ::2]  # column stride 2
    for logits in (x, x.t().contiguous().t(), wide):
        tokens = fused.draft_tokens(logits)
        assert tokens.dtype == torch.int64 and tokens.shape == (b * k,)
        assert tokens.tolist() == torch.argmax(logits, dim=-1).tolist()
        survivals = fused.survival.clone()
        torch.testing.assert_close(fused(logits), survivals, rtol=0, atol=0)


def test_draft_survival_zeroes_broken_rows_and_what_follows_them() -> None:
    from ascend_spec.ops.max_softmax_confidence.cpu import DraftSurvival

    b, k = 3, 3
    x = _draft_logits(b, k, 300, torch.float32, seed=3)
    clean = DraftSurvival(torch.empty(b, k), torch.empty(b, k))(x).clone()
    x[3, 7] = float("nan")  # request 1, draft 0
    x[8] = float("-inf")  # request 2, draft 2
    got = DraftSurvival(torch.empty(b, k), torch.empty(b, k))(x)
    assert got[1].tolist() == [0.0, 0.0, 0.0] and float(got[2, 2]) == 0.0
    torch.testing.assert_close(got[0], clean[0], rtol=0, atol=0)
    torch.testing.assert_close(got[2, :2], clean[2, :2], rtol=0, atol=0)


def test_draft_survival_refuses_what_it_was_not_built_for() -> None:
    from ascend_spec.ops.max_softmax_confidence.cpu import DraftSurvival

    fused = DraftSurvival(torch.empty(2, 3), torch.empty(2, 3))
    with pytest.raises(ValueError, match=r"shape \[6, V\] with V >= 1; got torch.float32 \[5, 9\]"):
        fused(torch.zeros(5, 9))
    with pytest.raises(ValueError, match=r"got torch.int64 \[6, 9\]"):
        fused(torch.zeros(6, 9, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"got torch.float32 \[6, 0\]"):
        fused(torch.zeros(6, 0))
    with pytest.raises(
        ValueError, match=r"survival must be a contiguous float32 CPU tensor .* got torch.float64"
    ):
        DraftSurvival(torch.empty(2, 3), torch.empty(2, 3, dtype=torch.float64))
    with pytest.raises(
        ValueError, match=r"confidence must be .* got torch.float32 \[2, 3\] on cpu"
    ):  # not contiguous
        DraftSurvival(torch.empty(3, 2).t(), torch.empty(2, 3))
