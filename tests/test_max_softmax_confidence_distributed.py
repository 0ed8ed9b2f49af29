"""vocab_parallel_max_softmax_confidence with 2 gloo processes on the CPU against the unsharded result."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ascend_spec.backend import BACKENDS
from ascend_spec.ops import max_softmax_confidence, vocab_parallel_max_softmax_confidence

WORLD = 2
N, V = 9, 1003
SPLIT = 600  # uneven shards: rank 0 holds 600 columns, rank 1 holds 403
TEMPERATURE = 0.9

# host-model ReduceSum adds sequentially; cpu sums a vectorised exp (Cephes polynomial, within 2 ulp)
RTOL = {"reference": 2e-6, "triton": 2e-6, "ascendc": 3e-5, "cpu": 4e-6}


def make_logits() -> torch.Tensor:
    x = torch.randn(N, V, generator=torch.Generator().manual_seed(0)) * 3
    x[0, 700] = 40.0  # the winning token lives on rank 1
    x[1, :SPLIT] = float("-inf")  # rank 0's shard of this row is entirely masked
    x[2, SPLIT:] = float("-inf")  # rank 1's shard of this row is entirely masked (padded vocab tail)
    x[3, 10] = float("nan")  # broken on rank 0 only: confidence 0 everywhere, other rows untouched
    x[4, 900] = float("inf")  # broken on rank 1 only
    x[5] = 2.0  # constant row: 1 / V
    return x


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, out_dir: str) -> None:
    os.environ["TRITON_INTERPRET"] = "1"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        x = make_logits()
        shard = x[:, :SPLIT] if rank == 0 else x[:, SPLIT:]
        for backend in BACKENDS:
            got = vocab_parallel_max_softmax_confidence(shard, temperature=TEMPERATURE, backend=backend)
            torch.save(got, Path(out_dir) / f"rank{rank}_{backend}.pt")
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_match_unsharded(tmp_path: Path) -> None:
    mp.spawn(_worker, args=(_free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    x = make_logits()
    want = max_softmax_confidence(x, temperature=TEMPERATURE, backend="reference")
    x64 = x.double()
    exact = 1.0 / torch.exp((x64 - x64.amax(-1, keepdim=True)) / TEMPERATURE).sum(-1)
    for rank in range(WORLD):
        for backend in BACKENDS:
            got = torch.load(tmp_path / f"rank{rank}_{backend}.pt")
            torch.testing.assert_close(got, want, rtol=RTOL[backend], atol=0)
            assert got[3] == 0 and got[4] == 0
            assert float(got[0]) > 0.99
            assert float(got[5]) == pytest.approx(1.0 / V, rel=RTOL[backend])
            ok = torch.ones(N, dtype=torch.bool)
            ok[3:5] = False
            torch.testing.assert_close(got[ok].double(), exact[ok], rtol=RTOL[backend], atol=0)
