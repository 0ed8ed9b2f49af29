"""vLLM's Model Runner V2 on the CPU engine (ascend_spec.e2e.cpu_v2): the harness, and V2 against V1 plain decoding.

V2's Triton kernels run in Triton's interpreter here, so V2 steps are slow: a few short prompts. The oracle is V1
plain decoding of the same engine build and target (low-entropy targets: wide logit margins, exact match), and
every V2 run must report that the worker built V2 (V2 falls back to V1 silently where Triton is missing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from engine_helpers import ONE_OMP_THREAD, PROMPTS, run, speculative

from ascend_spec.e2e import cpu_v2
from ascend_spec.e2e.engine import EngineSpec

pytestmark = pytest.mark.slow

V2_PROMPTS = PROMPTS[:3]
V2_LENGTHS = [10, 8, 12]


def _fresh_process(code: str, tmp_path: Path) -> dict:
    """Run ``code`` in a new interpreter (the harness acts at import time) and return the JSON it prints last.
    From a file: Triton reads a kernel's source when it decorates it. Without the tests' ``TRITON_INTERPRET=1``
    (tests/conftest.py), as in a user's process."""
    script = tmp_path / f"script_{len(list(tmp_path.iterdir()))}.py"
    script.write_text(textwrap.dedent(code))
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "VLLM_USE_V2_MODEL_RUNNER")}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------------- harness


def test_the_stand_in_backend_is_registered_only_when_asked(tmp_path):
    out = _fresh_process(
        """
        import json, os
        import ascend_spec.e2e.cpu_v2 as cpu_v2
        import ascend_spec.vllm  # the plugin itself never enables the harness
        import triton.backends
        import vllm.triton_utils
        before = {"cpu": "cpu" in triton.backends.backends, "has_triton": vllm.triton_utils.HAS_TRITON,
                  "interpret": os.environ.get("TRITON_INTERPRET")}
        print(json.dumps({"before": before}))
        """,
        tmp_path,
    )
    assert out["before"] == {"cpu": False, "has_triton": False, "interpret": None}
    out = _fresh_process(
        """
        import json, os
        from ascend_spec.e2e.cpu_v2 import enable_cpu_model_runner_v2
        enable_cpu_model_runner_v2()
        enable_cpu_model_runner_v2()  # idempotent
        import triton.backends
        import vllm.triton_utils
        from vllm.config import VllmConfig
        print(json.dumps({"cpu": "cpu" in triton.backends.backends, "has_triton": vllm.triton_utils.HAS_TRITON,
                          "interpret": os.environ.get("TRITON_INTERPRET"),
                          "use_v2_env": os.environ.get("VLLM_USE_V2_MODEL_RUNNER")}))
        """,
        tmp_path,
    )
    assert out == {"cpu": True, "has_triton": True, "interpret": "1", "use_v2_env": None}


def test_refused_where_cuda_exists(monkeypatch):
    import torch
    import triton.backends

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cpu_v2, "_enabled", False)
    with pytest.raises(RuntimeError, match="CPU-only processes; this one has CUDA"):
        cpu_v2.enable_cpu_model_runner_v2()
    assert "cpu" not in triton.backends.backends


def test_refused_after_triton_or_vllm_decided_without_it(tmp_path):
    out = _fresh_process(
        """
        import json
        import triton
        from ascend_spec.e2e.cpu_v2 import enable_cpu_model_runner_v2
        try:
            enable_cpu_model_runner_v2()
            print(json.dumps({"error": None}))
        except RuntimeError as exc:
            print(json.dumps({"error": str(exc)}))
        """,
        tmp_path,
    )
    assert "must run before triton is imported" in out["error"]
    out = _fresh_process(
        """
        import json, os
        os.environ["TRITON_INTERPRET"] = "1"
        import vllm.triton_utils
        from ascend_spec.e2e.cpu_v2 import enable_cpu_model_runner_v2
        try:
            enable_cpu_model_runner_v2()
            print(json.dumps({"error": None}))
        except RuntimeError as exc:
            print(json.dumps({"error": str(exc)}))
        """,
        tmp_path,
    )
    assert "already decided HAS_TRITON=False" in out["error"]


def test_bad_runner_names_the_argument():
    with pytest.raises(ValueError, match=r"EngineSpec.runner must be one of \('v1', 'v2'\), got 'v3'"):
        EngineSpec(target="unused", runner="v3")
    with pytest.raises(ValueError, match=r"runner must be one of \('v1', 'v2'\), got 'V2'"):
        cpu_v2.select_model_runner("V2")


def test_interpreter_gaps_are_closed_against_torch(tmp_path):
    """The ngram finalize mask pattern (a scalar int32 load compared and and-ed into a vector mask) gathers what
    torch gathers, and top-k/top-p gives vLLM's PyTorch implementation's logits."""
    out = _fresh_process(
        """
        import json
        from ascend_spec.e2e.cpu_v2 import enable_cpu_model_runner_v2
        enable_cpu_model_runner_v2()
        import torch
        from vllm.triton_utils import tl, triton

        @triton.jit
        def gather(src_ptr, count_ptr, out_ptr, n_avail, K: tl.constexpr):
            count = tl.load(count_ptr)
            has = n_avail > 0
            ok = (count > 0) & has
            k = tl.arange(0, K).to(tl.int64)
            valid = (k < n_avail) & ok & (k < K)
            got = tl.load(src_ptr + k, mask=valid, other=-1)
            tl.store(out_ptr + k, got)

        src = torch.arange(10, 18, dtype=torch.int64)
        rows = []
        for count, n_avail in ((1, 3), (0, 3), (2, 0), (5, 8)):
            out = torch.empty(8, dtype=torch.int64)
            gather[(1,)](src, torch.tensor([count], dtype=torch.int32), out, n_avail, K=8)
            want = torch.where((torch.arange(8) < n_avail) & (count > 0), src, -1)
            rows.append(out.tolist() == want.tolist())

        from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p, apply_top_k_top_p_pytorch
        g = torch.Generator().manual_seed(0)
        logits = torch.randn(4, 64, generator=g)
        k = torch.tensor([1, 5, 64, 10])
        p = torch.tensor([1.0, 0.5, 0.9, 0.2])
        got = apply_top_k_top_p(logits.clone(), k, p)
        want = apply_top_k_top_p_pytorch(logits.clone(), k, p)
        kept = (got > float("-inf")).sum(-1).tolist()
        print(json.dumps({"gather": rows, "topk_equal": torch.equal(got, want), "kept": kept}))
        """,
        tmp_path,
    )
    assert out["gather"] == [True, True, True, True]
    assert out["topk_equal"]
    assert out["kept"][0] == 1 and all(1 <= n <= 64 for n in out["kept"])


def test_kv_blocks_are_zeroed_as_vllms_kernel_zeroes_them(tmp_path):
    """The harness's memset (cpu_v2._zero_kv_blocks_with_memset) against vLLM's zeroing kernel, interpreted, on
    segments of different block strides and page sizes (one page past the kernel's 1024-element chunk, one
    short of it): the same int32s cleared, every other one kept; installed as vllm.v1.worker.utils is imported."""
    out = _fresh_process(
        """
        import json
        from ascend_spec.e2e.cpu_v2 import enable_cpu_model_runner_v2
        enable_cpu_model_runner_v2()
        import torch
        from vllm.v1.worker import utils

        def segments(buffers):
            # (buffer, block stride, page size) in int32 elements, as KVBlockZeroer's table holds them
            return [(buffers[0], 1536, 1300), (buffers[1], 700, 700), (buffers[1][350:], 700, 300)]

        def meta(buffers):
            segs = segments(buffers)
            addrs = torch.tensor([b.data_ptr() for b, _, _ in segs], dtype=torch.uint64)
            strides = torch.tensor([s for _, s, _ in segs], dtype=torch.int64)
            pages = torch.tensor([p for _, _, p in segs], dtype=torch.int64)
            return addrs, strides, pages

        def buffers():
            g = torch.Generator().manual_seed(0)
            return [torch.randint(1, 2**30, (n,), generator=g, dtype=torch.int32) for n in (1536 * 6, 700 * 6)]

        block_ids = [4, 0, 2]
        by_kernel = buffers()
        addrs, strides, pages = meta(by_kernel)
        chunks = (int(pages.max()) + 1023) // 1024
        utils._zero_kv_blocks_kernel[(len(block_ids), len(addrs), chunks)](
            addrs, strides, pages, torch.tensor(block_ids, dtype=torch.int64), BLOCK_SIZE=1024
        )
        by_memset = buffers()
        zeroer = utils.KVBlockZeroer.__new__(utils.KVBlockZeroer)
        zeroer._meta = (*meta(by_memset), chunks, 1024, 3)
        zeroer.zero_block_ids(block_ids)
        untouched = buffers()
        print(json.dumps({
            "equal": all(torch.equal(a, b) for a, b in zip(by_kernel, by_memset)),
            "zeroed": sum(int((a != b).sum()) for a, b in zip(by_memset, untouched)),
            "replaced": utils.KVBlockZeroer.zero_block_ids.__module__,
        }))
        """,
        tmp_path,
    )
    assert out["replaced"] == "ascend_spec.e2e.cpu_v2"
    assert out["equal"]
    # 3 blocks x (1300 + 700 + 300) int32s; the third segment overlaps the second's blocks by its offset
    assert out["zeroed"] > 3 * 1300


# ------------------------------------------------------------------------------------------------- engines


def _run(engine_dir, models, runner: str, method: str | None = None, env: dict | None = None):
    kwargs = {"speculative": speculative(method, models)} if method else {}
    return run(
        engine_dir,
        models,
        prompts=V2_PROMPTS,
        max_tokens=V2_LENGTHS,
        env={**ONE_OMP_THREAD, **(env or {})},
        runner=runner,
        **kwargs,
    )


@pytest.fixture(scope="module")
def v1_plain_dense(engine_dir, dense_low_entropy):
    result = _run(engine_dir, dense_low_entropy, "v1")
    assert result.runner == "v1"
    return result


@pytest.fixture(scope="module")
def v1_plain_hybrid(engine_dir, hybrid_low_entropy):
    result = _run(engine_dir, hybrid_low_entropy, "v1")
    assert result.runner == "v1"
    return result


def _assert_v2_matches(v1_plain, v2, method: str | None) -> None:
    assert v2.runner == "v2", f"the worker built {v2.runner}, not Model Runner V2"
    assert [len(t) for t in v2.tokens] == V2_LENGTHS
    assert v2.tokens == v1_plain.tokens
    if method is not None:  # drafts were made and verified, some accepted (low-entropy targets)
        assert v2.num_drafts > 0 and v2.num_accepted > 0, (v2.num_drafts, v2.num_accepted)


@pytest.mark.parametrize("method", [None, "ngram", "dflash"])
def test_v2_on_qwen3_matches_v1_plain(engine_dir, dense_low_entropy, v1_plain_dense, method):
    _assert_v2_matches(v1_plain_dense, _run(engine_dir, dense_low_entropy, "v2", method), method)


@pytest.mark.parametrize("method", [None, "ngram", "dflash", "mtp"])
def test_v2_on_qwen35_hybrid_matches_v1_plain(engine_dir, hybrid_low_entropy, v1_plain_hybrid, method):
    v2 = _run(engine_dir, hybrid_low_entropy, "v2", method)
    _assert_v2_matches(v1_plain_hybrid, v2, method)
    if method is not None:  # upstream V2's GDN layout: one state slot per request plus one per draft
        assert (
            v2.gdn_slots_per_request == 1 + speculative(method, hybrid_low_entropy)["num_speculative_tokens"]
        )


def test_v2_with_the_package_installed_is_v2_without_it(engine_dir, hybrid_low_entropy, v1_plain_hybrid):
    """The harness changes how vLLM runs, not what the package adds: with the plugin not enabled, V2 on the
    hybrid gives the tokens, KV-cache layout and acceptance of V2 with no vLLM plugin loaded."""
    installed = _run(engine_dir, hybrid_low_entropy, "v2", "ngram")
    absent = _run(engine_dir, hybrid_low_entropy, "v2", "ngram", env={"VLLM_PLUGINS": "none-of-them"})
    assert installed.runner == absent.runner == "v2"
    assert installed.tokens == absent.tokens == v1_plain_hybrid.tokens
    assert installed.kv_cache_layout == absent.kv_cache_layout
    assert (installed.num_drafts, installed.num_accepted) == (absent.num_drafts, absent.num_accepted)
