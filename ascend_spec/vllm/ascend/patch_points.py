"""The register's points of vllm-ascend's NPUModelRunner (the adapter)."""

from __future__ import annotations

from ascend_spec.vllm.patch_point import NPU_V1_RUNNER, VLLM_ASCEND, PatchPoint

NPU_POINTS: tuple[PatchPoint, ...] = (
    PatchPoint(
        name="npu_config_key",
        target="vllm_ascend.ascend_config.AscendConfig.__init__",
        what="the keyword 'ascend_spec' is dropped before AscendConfig validates additional_config; the "
        "VllmConfig keeps it for the plugin; a config without it is passed on unchanged",
        why="AscendConfig forbids unknown keys (extra='forbid'): --additional-config '{\"ascend_spec\": ...}' "
        "failed while the engine config was built ('ascend_spec: Unexpected keyword argument'), in the engine "
        "process and again in every NPU worker",
        how="method wrapper installed by register() where vllm_ascend is importable, when vllm-ascend first "
        "imports ascend_config (a meta-path hook for that one module; ascend_spec/vllm/ascend/config_key.py)",
        remove_when="vllm-ascend lets plugins own additional_config keys (or strips unknown ones as it does "
        "for vLLM-Omni)",
        runner=NPU_V1_RUNNER,
        releases=VLLM_ASCEND,
    ),
    PatchPoint(
        name="npu_get_drafter",
        target="vllm_ascend.worker.model_runner_v1.NPUModelRunner._get_drafter",
        what="enabled NPU runners get the adapter's DFlash / DSpark proposers; other methods and runners keep "
        "vllm-ascend's",
        why="NPUModelRunner builds its drafter after vLLM's __init__ (in _set_up_drafter), outside runner_init",
        how="class-level function wrapper installed by runner_init on the first enabled NPU runner (after the "
        "vllm-ascend and vLLM versions are checked); without runner.ascend_spec it calls the original",
        remove_when="vllm-ascend offers a drafter factory hook",
        runner=NPU_V1_RUNNER,
        releases=VLLM_ASCEND,
    ),
    PatchPoint(
        name="npu_dflash_proposer",
        target="vllm_ascend.spec_decode.dflash_proposer.AscendDflashProposer",
        what="AscendSpecNPUDflashProposer: ascend-spec's verify scheduler as dynamic_spec, draft graphs on its "
        "own B x (K+1)",
        why="the runner type-checks its drafter (isinstance AscendDflashProposer), so the hooks live in a subclass",
        how="subclass built by npu_get_drafter",
        remove_when="vllm-ascend runs ascend-spec's scheduler and a separate draft dispatcher itself",
        runner=NPU_V1_RUNNER,
        releases=VLLM_ASCEND,
    ),
    PatchPoint(
        name="npu_block_slots",
        target="vllm_ascend.spec_decode.dflash_proposer.AscendDflashProposer.set_inputs_first_pass",
        what="DFlash block inputs (ids, positions, paged slots of block and context, sample rows) from "
        "prepare_block_slots on the adapter's backend; the context holds the accepted tokens only; the attention "
        "metadata rewritten as vllm-ascend does (block_slots on; with context parallelism vllm-ascend's own)",
        why="one op and one contract with vLLM's CPU/GPU proposer instead of vllm-ascend's "
        "copy_and_expand_dflash_and_dspark_inputs_kernel",
        how="the DFlash subclass overrides the method (ascend_spec/vllm/ascend/block_inputs.py)",
        remove_when="vllm-ascend adopts prepare_block_slots",
        runner=NPU_V1_RUNNER,
        releases=VLLM_ASCEND,
    ),
    PatchPoint(
        name="npu_dspark_proposer",
        target="vllm_ascend.spec_decode.dspark_proposer.AscendDSparkProposer",
        what="AscendSpecNPUDSparkProposer: the confidence head through head_confidence into ascend-spec's verify "
        "scheduler",
        why="_set_up_drafter asserts isinstance(drafter, AscendDSparkProposer) for DSpark",
        how="subclass built by npu_get_drafter (vllm-ascend runs DSpark eagerly on V1: no draft graphs)",
        remove_when="as npu_dflash_proposer",
        runner=NPU_V1_RUNNER,
        releases=VLLM_ASCEND,
    ),
    PatchPoint(
        name="npu_dynamic_spec",
        target="vllm_ascend.spec_decode.utils.DynamicSpecScheduler",
        what="dynamic_spec is AscendSpecDynamicSpec: max_softmax_confidence / head_confidence -> survival_probs "
        "-> BudgetController.plan -> allocate_verify_budget, one pinned copy of all lengths per step",
        why="vllm-ascend's scheduler builds an N x V softmax, keeps a threshold budget refreshed by .item() and "
        "the runner reads its device lengths one int() per request",
        how="instance attribute set in the proposer subclasses' __init__ ('dynamic' on); the runner's "
        "take_draft_token_ids reads num_verify_tokens, a host tensor",
        remove_when="vllm-ascend adopts the ops and the controller",
        runner=NPU_V1_RUNNER,
        releases=VLLM_ASCEND,
    ),
    PatchPoint(
        name="npu_dynamic_profiles",
        target="vllm_ascend.worker.model_runner_v1.NPUModelRunner.execute_model",
        what="before the first real step: the cost profiles of dynamic.profile (measured with the NPU runner's "
        "dummy target forward and the drafter's dummy run, cached; or a profile file) become the verify "
        "scheduler's BudgetController",
        why="the planner needs this model's costs on this device, measurable only once the KV cache exists",
        how="instance attribute set by runner_init (dynamic on); the drafter's scheduler is looked up per call "
        "(NPUModelRunner builds its drafter after super().__init__)",
        remove_when="vllm-ascend exposes a per-size step cost hook",
        runner=NPU_V1_RUNNER,
        releases=VLLM_ASCEND,
    ),
    PatchPoint(
        name="npu_dynamic_async_output",
        target="vllm_ascend.worker.model_runner_v1.NPUModelRunner.sample_tokens",
        what="under async scheduling the step's planned lengths ride on its output "
        "(ModelRunnerOutput.ascend_spec_draft_lengths, read where the output is handed over) to "
        "async_scheduler_lengths, which cuts each request's placeholder drafts",
        why="vLLM's engine core never calls take_draft_token_ids under async scheduling: without it every "
        "draft was verified at K",
        how="instance attribute set by runner_init (dynamic on, async scheduling); a ring of host slots keeps "
        "each step's lengths until its output is read",
        remove_when="vllm-ascend's async scheduler takes per-request draft counts",
        runner=NPU_V1_RUNNER,
        releases=VLLM_ASCEND,
    ),
    PatchPoint(
        name="npu_ngram_observe",
        target="vllm_ascend.worker.model_runner_v1.NPUModelRunner.execute_model / sample_tokens",
        what="ngram with dynamic on: the drafts each request verifies (the scheduler's output) and the accepted "
        "counts (the step's host output) update the acceptance estimate, kept on CPU tensors",
        why="vllm-ascend drafts ngram on the host and reports acceptance only to vLLM's scheduler",
        how="instance attributes set by runner_init (method ngram, dynamic on, sync scheduling)",
        remove_when="vllm-ascend reports per-request acceptance to a drafter hook",
        runner=NPU_V1_RUNNER,
        releases=VLLM_ASCEND,
    ),
    PatchPoint(
        name="npu_ngram_take",
        target="vllm_ascend.worker.model_runner_v1.NPUModelRunner.take_draft_token_ids",
        what="ngram's host drafts cut per request to the controller's plan on the estimate's survivals "
        "(capped at the drafts each request has) before the scheduler takes them",
        why="vllm-ascend's ngram path has no dynamic_spec: every proposed draft was verified",
        how="instance attribute set by runner_init (method ngram, dynamic on, sync scheduling)",
        remove_when="vllm-ascend takes per-request draft lengths from a drafter hook",
        runner=NPU_V1_RUNNER,
        releases=VLLM_ASCEND,
    ),
    PatchPoint(
        name="npu_draft_graph_dispatch",
        target="vllm_ascend.spec_decode.llm_base_proposer.AscendSpecDecodeBaseProposer._propose",
        what="the draft pass dispatches its ACL graph on its own B x Q (DraftGraphDispatcher), whatever the "
        "target's step shape",
        why="_propose asks runner.cudagraph_dispatcher (the target's): a ragged target step drops the drafter "
        "out of FULL graphs and pads it to the target's buckets",
        how="the subclass's _propose runs with runner.cudagraph_dispatcher set to a DraftBatchDispatcher, "
        "restored after",
        remove_when="vllm-ascend gives the drafter its own dispatcher (the separate dispatcher it measured +10%)",
        runner=NPU_V1_RUNNER,
        releases=VLLM_ASCEND,
    ),
    PatchPoint(
        name="npu_draft_graph_capture",
        target="vllm_ascend.spec_decode.dflash_proposer.AscendDflashProposer.dummy_run",
        what="draft graphs are captured at the drafter's descriptor for the runner's request count",
        why="the runner's capture passes the target's BatchDescriptor to drafter.dummy_run",
        how="the subclass's dummy_run maps num_reqs to the drafter's descriptor (FULL runs only)",
        remove_when="with npu_draft_graph_dispatch",
        runner=NPU_V1_RUNNER,
        releases=VLLM_ASCEND,
    ),
    PatchPoint(
        name="npu_draft_graph_params",
        target="vllm_ascend.compilation.acl_graph.get_draft_graph_params",
        what="the draft graph params (keyed by token count) get an entry per drafter size",
        why="set_draft_graph_params receives the target's capture sizes; FULL draft graphs update params by size",
        how="missing keys added to the GraphParams dicts before the first draft capture",
        remove_when="with npu_draft_graph_dispatch",
        runner=NPU_V1_RUNNER,
        releases=VLLM_ASCEND,
    ),
    PatchPoint(
        name="npu_gdn_layer",
        target="vllm_ascend.ops.gdn.AscendGatedDeltaNetAttention._forward_core",
        what="GDN speculative rows verified with verify_causal_conv1d + verify_gated_delta_rule on one state "
        "slot of vllm-ascend's value-major state (transposed view, which the AscendC kernels take in place; "
        "backend 'reference' on an NPU without the built extension), between the KV-pool hooks vllm-ascend's _forward_core calls (wait_for_kv_layer_from_"
        "connector and record_attention_compute_start before, maybe_save_kv_layer_to_connector after); rows "
        "without drafts run vllm-ascend's _forward_core",
        why="vllm-ascend keeps 1+K state slots per request and skips GDN sequences longer than 16",
        how="the gdn_layer OOT class is AscendSpecNPUGDNAttention on NPU, which overrides _forward_core (the "
        "method vllm-ascend's qwen_gdn_attention_core op calls)",
        remove_when="as gdn_layer",
        runner=NPU_V1_RUNNER,
        releases=VLLM_ASCEND,
    ),
)
