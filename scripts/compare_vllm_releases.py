"""Compare what the plugin touches in two vLLM source trees: each target's AST, same or differs.

How a release that cannot run here is checked (docs/vllm.md, version matrix): unpack both wheels
(``pip download --no-deps vllm==X``; ``unzip -q X.whl 'vllm/*.py' -d DIR``) and run

    python scripts/compare_vllm_releases.py OLD/vllm NEW/vllm

A target whose body differs is printed with a unified diff of its source (``--diff``) for a person to read:
a difference only matters where it changes what the hook relies on.
"""

from __future__ import annotations

import argparse
import ast
import difflib
from pathlib import Path

# (file under vllm/, qualified name): every method the V1 hooks wrap or call, the classes they subclass.
TARGETS: tuple[tuple[str, str], ...] = (
    ("config/vllm.py", "VllmConfig.__post_init__"),
    ("config/vllm.py", "VllmConfig._get_v1_model_runner_unsupported_features"),
    ("v1/worker/gpu_model_runner.py", "GPUModelRunner.__init__"),
    ("v1/worker/gpu_model_runner.py", "GPUModelRunner._update_states"),
    ("v1/worker/gpu_model_runner.py", "GPUModelRunner.propose_draft_token_ids"),
    ("v1/worker/gpu_model_runner.py", "GPUModelRunner.take_draft_token_ids"),
    ("v1/worker/gpu_model_runner.py", "GPUModelRunner._input_fits_in_drafter"),
    ("v1/worker/gpu_model_runner.py", "GPUModelRunner._sample"),
    ("v1/worker/gpu_model_runner.py", "GPUModelRunner._calc_spec_decode_metadata"),
    ("v1/worker/gpu_model_runner.py", "GPUModelRunner._copy_draft_token_ids_to_cpu"),
    ("v1/worker/gpu_model_runner.py", "GPUModelRunner.sample_tokens"),
    ("v1/worker/gpu_model_runner.py", "GPUModelRunner.execute_model"),
    ("v1/worker/gpu_model_runner.py", "GPUModelRunner.load_model"),
    ("v1/worker/gpu_model_runner.py", "GPUModelRunner._dummy_run"),
    ("v1/spec_decode/dflash.py", "DFlashProposer.__init__"),
    ("v1/spec_decode/dflash.py", "DFlashProposer.set_inputs_first_pass"),
    ("v1/core/sched/async_scheduler.py", "AsyncScheduler._update_after_schedule"),
    ("v1/sample/rejection_sampler.py", "RejectionSampler.forward"),
    ("v1/sample/rejection_sampler.py", "expand_batch_to_tokens"),
    ("v1/sample/rejection_sampler.py", "_expand"),
    ("model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py", "QwenGatedDeltaNetAttention.__init__"),
    ("model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py", "QwenGatedDeltaNetAttention.forward"),
    ("model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py", "QwenGatedDeltaNetAttention._forward_core"),
    ("model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py", "QwenGatedDeltaNetAttention.get_state_shape"),
    (
        "model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py",
        "QwenGatedDeltaNetAttention.get_kv_cache_spec",
    ),
    ("v1/attention/backends/gdn_attn.py", "GDNAttentionMetadataBuilder.build"),
    ("v1/kv_cache_interface.py", "MambaSpec"),
    ("v1/outputs.py", "ModelRunnerOutput"),
    ("v1/outputs.py", "AsyncModelRunnerOutput"),
    ("model_executor/models/qwen3_dspark.py", "Qwen3DSparkForCausalLM.load_weights"),
)


def _source(root: Path, file: str, qualname: str) -> list[str] | None:
    path = root / file
    if not path.exists():
        return None
    text = path.read_text()
    node: ast.AST = ast.parse(text)
    for part in qualname.split("."):
        found = [
            c
            for c in ast.iter_child_nodes(node)
            if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and c.name == part
        ]
        if not found:
            return None
        node = found[-1]
    return (ast.get_source_segment(text, node) or "").splitlines()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="the vllm/ folder of the release the hooks were tested on")
    parser.add_argument("new", type=Path, help="the vllm/ folder of the release to check")
    parser.add_argument("--diff", action="store_true", help="print the source diff of each differing target")
    args = parser.parse_args()
    for file, qualname in TARGETS:
        old, new = _source(args.old, file, qualname), _source(args.new, file, qualname)
        if old is None and new is None:
            state = "absent in both (inherited)"
        elif old is None or new is None:
            state = "ABSENT in " + ("old" if old is None else "new")
        else:
            same = ast.dump(ast.parse("\n".join(_dedent(old)))) == ast.dump(
                ast.parse("\n".join(_dedent(new)))
            )
            state = "same" if same else "DIFFERS"
        print(f"{state:28} {file}::{qualname}")
        if args.diff and state == "DIFFERS":
            print("\n".join(difflib.unified_diff(old, new, lineterm="", n=1)))


def _dedent(lines: list[str]) -> list[str]:
    import textwrap

    return textwrap.dedent("\n".join(lines)).splitlines()


if __name__ == "__main__":
    main()
