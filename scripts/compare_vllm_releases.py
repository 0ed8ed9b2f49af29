"""Compare what the plugin touches in two vLLM source trees: each target's AST, same or differs.

How a release that cannot run here is checked (docs/vllm.md, version matrix): unpack both wheels
(``pip download --no-deps vllm==X``; ``unzip -q X.whl 'vllm/*.py' -d DIR``) and run

    python scripts/compare_vllm_releases.py OLD/vllm NEW/vllm [--runner v1|v2|all] [--diff]

Each target belongs to Model Runner V1's hooks, V2's, or both (the GDN layer, its metadata, ``MambaSpec``);
``--runner`` picks the set (default ``all``). A line per target: its state, the file and the line where it starts
in the new tree, its name. A target whose body differs is printed with a unified diff of its source (``--diff``)
for a person to read: a difference only matters where it changes what the hook relies on. The exit status is 0
whatever differs (reading the differences is the check).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import functools
import textwrap
from dataclasses import dataclass
from pathlib import Path

_GDN_LAYER = "model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py"
_CPU_GDN_OPS = "model_executor/layers/mamba/ops/cpu/gdn_attention.py"
_GDN_ATTN = "v1/attention/backends/gdn_attn.py"
_V1_RUNNER = "v1/worker/gpu_model_runner.py"
_V2 = "v1/worker/gpu/"
_V2_RUNNER = _V2 + "model_runner.py"
_V2_HYBRID = _V2 + "model_states/mamba_hybrid.py"
_V2_DFLASH = _V2 + "spec_decode/dflash/speculator.py"
_V2_DSPARK = _V2 + "spec_decode/dspark/speculator.py"
_V2_ADAPTIVE = _V2 + "spec_decode/adaptive_verification.py"

# (runner, file under vllm/, qualified name): every method the hooks wrap or call, every class they subclass or
# whose fields they read, every function they replace. "both": the runners share it.
TARGETS: tuple[tuple[str, str, str], ...] = (
    # the config gate (both runners) and what picks the runner
    ("both", "config/vllm.py", "VllmConfig.__post_init__"),
    ("v1", "config/vllm.py", "VllmConfig._get_v1_model_runner_unsupported_features"),
    ("v2", "config/vllm.py", "VllmConfig.use_v2_model_runner"),
    # Model Runner V1
    ("v1", _V1_RUNNER, "GPUModelRunner.__init__"),
    ("v1", _V1_RUNNER, "GPUModelRunner._update_states"),
    ("v1", _V1_RUNNER, "GPUModelRunner.propose_draft_token_ids"),
    ("v1", _V1_RUNNER, "GPUModelRunner.take_draft_token_ids"),
    ("v1", _V1_RUNNER, "GPUModelRunner._input_fits_in_drafter"),
    ("v1", _V1_RUNNER, "GPUModelRunner._sample"),
    ("v1", _V1_RUNNER, "GPUModelRunner._calc_spec_decode_metadata"),
    ("v1", _V1_RUNNER, "GPUModelRunner._copy_draft_token_ids_to_cpu"),
    ("v1", _V1_RUNNER, "GPUModelRunner.sample_tokens"),
    ("v1", _V1_RUNNER, "GPUModelRunner.execute_model"),
    ("v1", _V1_RUNNER, "GPUModelRunner.load_model"),
    ("v1", _V1_RUNNER, "GPUModelRunner._dummy_run"),
    ("v1", "v1/spec_decode/dflash.py", "DFlashProposer.__init__"),
    ("v1", "v1/spec_decode/dflash.py", "DFlashProposer.set_inputs_first_pass"),
    ("v1", "v1/core/sched/async_scheduler.py", "AsyncScheduler._update_after_schedule"),
    ("v1", "v1/sample/rejection_sampler.py", "RejectionSampler.forward"),
    ("v1", "v1/sample/rejection_sampler.py", "expand_batch_to_tokens"),
    ("v1", "v1/sample/rejection_sampler.py", "_expand"),
    ("v1", "v1/outputs.py", "ModelRunnerOutput"),
    ("v1", "v1/outputs.py", "AsyncModelRunnerOutput"),
    ("v1", "model_executor/models/qwen3_dspark.py", "Qwen3DSparkForCausalLM.load_weights"),
    # the GDN layer the plugin's subclasses (gdn_layer.py), the CPU kernels it calls, its metadata and spec
    ("both", "model_executor/layers/mamba/gdn/base.py", "GatedDeltaNetAttention.__init__"),
    ("both", _GDN_LAYER, "QwenGatedDeltaNetAttention.__init__"),
    ("both", _GDN_LAYER, "QwenGatedDeltaNetAttention.forward"),
    ("both", _GDN_LAYER, "QwenGatedDeltaNetAttention._forward_core"),
    ("both", _GDN_LAYER, "QwenGatedDeltaNetAttention._output_projection"),
    ("both", _GDN_LAYER, "QwenGatedDeltaNetAttention.fix_query_key_value_ordering"),
    ("both", _GDN_LAYER, "QwenGatedDeltaNetAttention.get_state_shape"),
    ("both", _GDN_LAYER, "QwenGatedDeltaNetAttention.get_kv_cache_spec"),
    ("both", _GDN_LAYER, "QwenGatedDeltaNetAttention.create_qkvz_proj"),  # the [q, k, v, z] split
    ("both", _GDN_LAYER, "QwenGatedDeltaNetAttention.create_ba_proj"),
    ("both", _GDN_LAYER, "QwenGatedDeltaNetAttention.forward_cpu"),  # what the plugin's forward stands in for
    ("both", "model_executor/layers/mamba/abstract.py", "MambaBase.get_kv_cache_spec"),
    ("both", _CPU_GDN_OPS, "_cpu_gdn_attention_nonspec"),
    ("both", _CPU_GDN_OPS, "_spec_aware_nonspec_subset"),
    ("both", _CPU_GDN_OPS, "_conv_buffer_view"),
    ("both", _CPU_GDN_OPS, "_ssm_state_view"),
    ("both", _GDN_ATTN, "GDNAttentionMetadata"),
    ("both", _GDN_ATTN, "GDNAttentionMetadataBuilder.__init__"),
    ("both", _GDN_ATTN, "GDNAttentionMetadataBuilder.build"),
    ("both", "v1/attention/backends/utils.py", "mamba_get_block_table_tensor"),  # state slot = column 0
    ("both", "v1/kv_cache_interface.py", "MambaSpec"),
    # Model Runner V2 (ascend_spec/vllm/v2/): the runner methods wrapped or read
    ("v2", _V2_RUNNER, "GPUModelRunner.__init__"),
    ("v2", _V2_RUNNER, "GPUModelRunner.load_model"),
    ("v2", _V2_RUNNER, "GPUModelRunner.get_kv_cache_spec"),
    ("v2", _V2_RUNNER, "GPUModelRunner.finish_requests"),
    ("v2", _V2_RUNNER, "GPUModelRunner._remove_request"),
    ("v2", _V2_RUNNER, "GPUModelRunner.add_requests"),
    ("v2", _V2_RUNNER, "GPUModelRunner.prepare_inputs"),  # adaptive verification's budget and compaction
    ("v2", _V2 + "states.py", "RequestState.__init__"),
    ("v2", _V2 + "states.py", "RequestState.remove_request"),
    ("v2", _V2 + "block_table.py", "BlockTables.__init__"),
    ("v2", _V2 + "buffer_utils.py", "StagedWriteTensor.__init__"),  # block_tables[g].gpu
    ("v2", _V2 + "cpu/model_runner.py", "CPUModelRunner"),  # absent on purpose: see _ALIASES
    # V2's hybrid model state: the GDN metadata's inputs and the accepted counts on the device
    ("v2", _V2 + "model_states/__init__.py", "init_model_state"),
    ("v2", _V2 + "model_states/__init__.py", "resolve_model_state_cls"),
    ("v2", _V2 + "attn_utils.py", "build_attn_metadata"),
    ("v2", _V2_HYBRID, "MambaHybridAttnMetadata"),
    ("v2", _V2_HYBRID, "MambaHybridModelState.__init__"),
    ("v2", _V2_HYBRID, "MambaHybridModelState.add_request"),
    ("v2", _V2_HYBRID, "MambaHybridModelState.initialize_kv_cache"),
    ("v2", _V2_HYBRID, "MambaHybridModelState.prepare_attn"),
    ("v2", _V2_HYBRID, "MambaHybridModelState.postprocess_state"),
    ("v2", _V2_HYBRID, "MambaHybridModelState.preprocess_state"),  # replaced in align mode (v2/gdn_align.py)
    ("v2", _V2_HYBRID, "MambaHybridModelState._get_mamba_group_info"),
    ("v2", _V2_HYBRID, "_scatter_num_accepted_kernel"),
    ("v2", _V2_HYBRID, "_fill_num_accepted_kernel"),
    # DFlash / DSpark block inputs (v2_dflash_inputs)
    ("v2", _V2_DFLASH, "DFlashSpeculator.propose"),
    ("v2", _V2_DFLASH, "prepare_dflash_inputs"),
    ("v2", _V2_DFLASH, "_prepare_dflash_inputs_kernel"),
    ("v2", _V2_DFLASH, "_pad_dflash_inputs"),
    ("v2", _V2_DSPARK, "DSparkSpeculator.__init__"),
    ("v2", _V2_DSPARK, "DSparkSpeculator._generate_draft"),
    # V2's adaptive verification (the dynamic-verification seam)
    ("v2", _V2_ADAPTIVE, "AdaptiveVerificationManager"),
    ("v2", _V2_ADAPTIVE, "maybe_create_adaptive_verification_manager"),
    # the acceptance estimate on V2 (v2_dynamic_estimate): propose's arguments, where the runner calls it and
    # record_confidences, what num_sampled / num_rejected count, ngram's speculator (no confidence buffer)
    ("v2", _V2_RUNNER, "GPUModelRunner.sample_tokens"),
    ("v2", _V2 + "spec_decode/speculator.py", "BaseSpeculator.propose"),
    ("v2", _V2 + "input_batch.py", "_get_num_sampled_and_rejected_kernel"),
    ("v2", _V2 + "spec_decode/ngram/speculator.py", "NgramGPUSpeculator.propose"),
)

# The CPU build's V2 runner lives outside v1/worker/gpu/.
_ALIASES = {_V2 + "cpu/model_runner.py": "v1/worker/cpu/model_runner.py"}


@dataclass(frozen=True)
class Found:
    """A target's source lines and the line it starts at."""

    lines: list[str]
    line: int


def targets_for(runner: str) -> list[tuple[str, str, str]]:
    """The targets of ``runner`` (``v1``, ``v2`` or ``all``); shared ones belong to both runners."""
    if runner not in ("v1", "v2", "all"):
        raise ValueError(f"runner must be 'v1', 'v2' or 'all', got {runner!r}")
    return [t for t in TARGETS if runner == "all" or t[0] in (runner, "both")]


def find(root: Path, file: str, qualname: str) -> Found | None:
    """The source of ``qualname`` (classes and functions, dotted) in ``root/file``, or None."""
    path = root / _ALIASES.get(file, file)
    if not path.exists():
        return None
    text, node = _parsed(path)
    for part in qualname.split("."):
        found = [
            c
            for c in ast.iter_child_nodes(node)
            if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and c.name == part
        ]
        if not found:
            return None
        node = found[-1]
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    return Found((ast.get_source_segment(text, node) or "").splitlines(), start)


@functools.lru_cache(maxsize=64)
def _parsed(path: Path) -> tuple[str, ast.Module]:
    """A file's text and AST, parsed once per run (several targets share a file)."""
    text = path.read_text()
    return text, ast.parse(text)


def state(old: Found | None, new: Found | None) -> str:
    """``same``, ``DIFFERS`` (the ASTs differ; comments and formatting do not count) or where it is absent."""
    if old is None and new is None:
        return "absent in both"
    if old is None or new is None:
        return "ABSENT in " + ("old" if old is None else "new")
    return "same" if _ast(old.lines) == _ast(new.lines) else "DIFFERS"


def compare(old_root: Path, new_root: Path, runner: str = "all", diff: bool = False) -> list[str]:
    """The report's lines: one per target, each differing target's diff after it when ``diff``."""
    out = []
    for _, file, qualname in targets_for(runner):
        old, new = find(old_root, file, qualname), find(new_root, file, qualname)
        s = state(old, new)
        where = f"{_ALIASES.get(file, file)}:{new.line}" if new is not None else _ALIASES.get(file, file)
        out.append(f"{s:16} {where}::{qualname}")
        if diff and s == "DIFFERS":
            out.extend(difflib.unified_diff(old.lines, new.lines, lineterm="", n=1))
    return out


def _ast(lines: list[str]) -> str:
    return ast.dump(ast.parse(textwrap.dedent("\n".join(lines))))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="the vllm/ folder of the release the hooks were tested on")
    parser.add_argument("new", type=Path, help="the vllm/ folder of the release to check")
    parser.add_argument(
        "--runner", default="all", choices=("v1", "v2", "all"), help="whose targets (default all)"
    )
    parser.add_argument("--diff", action="store_true", help="print the source diff of each differing target")
    args = parser.parse_args(argv)
    for root in (args.old, args.new):
        if not (root / "config").is_dir():
            parser.error(f"{root} is not a vllm/ source folder (no config/ in it)")
    print("\n".join(compare(args.old, args.new, args.runner, args.diff)))


if __name__ == "__main__":
    main()
