"""The register's points of Model Runner V2."""

from __future__ import annotations

from ascend_spec.vllm.patch_point import V2, V2_BLOCK_SLOTS, V2_DYNAMIC, V2_RUNNER, PatchPoint

V2_POINTS: tuple[PatchPoint, ...] = (
    PatchPoint(
        name="v2_runner_init",
        target="vllm.v1.worker.gpu.model_runner.GPUModelRunner.__init__",
        what="reads additional_config['ascend_spec'], refuses what V2's hooks do not serve (gdn_verify with "
        "async scheduling; dynamic verification with V2's own adaptive verification or without a block "
        "drafter), registers the plugin's GDN layer before the model is built, hooks that runner",
        why="V2's runner does not inherit from V1's (runner_init never runs there) and has no per-engine hook; "
        "the CPU worker's V2 runner (vllm/v1/worker/cpu/model_runner.py) calls it through super()",
        how="function wrapper installed once by register() on a release listed in V2_RELEASES; without the key "
        "it only calls the original",
        remove_when="vLLM offers a per-engine runner hook",
        runner=V2_RUNNER,
        releases=V2,
    ),
    PatchPoint(
        name="v2_gdn_layer",
        target="vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn.QwenGatedDeltaNetAttention",
        what="the gdn_layer subclass on V2: num_speculative_blocks = 0 (V2 sizes block tables, warm-up "
        "reservations and its hybrid model state from the spec), speculative rows from V2's hybrid model state "
        "(each decode row's scheduled drafts, zero included; per-request accepted counts on the device) "
        "verified with ragged lengths",
        why="upstream V2 keeps 1 + K GDN state slots per request (MambaSpec.num_speculative_blocks = K)",
        how="PluggableLayer.register_oot by v2_runner_init (the layer is the same class as on V1; on "
        "vllm-ascend's V2 runner the NPU layer of npu_gdn_layer)",
        remove_when="as gdn_layer",
        runner=V2_RUNNER,
        releases=V2,
    ),
    PatchPoint(
        name="v2_gdn_flush",
        target="GPUModelRunner.finish_requests / _remove_request (V2, per runner instance)",
        what="commits the pending GDN/conv records of requests that leave V2's request states (finished, "
        "preempted, a streaming input's re-add) before V2 forgets their request slots; forgets the layers' "
        "per-step row cache (finish_requests opens every real step)",
        why="deferred commit: a slot's state is complete only after its pending records are replayed; V2 has "
        "no persistent batch, so removal from its request states is where a request leaves",
        how="instance attributes wrapping the bound methods; state slots (block_tables, the mamba group's "
        "column 0, or in align mode the running block's column) and accepted counts (model_state.num_accepted_tokens_gpu) gathered on the device, one "
        "flush_pending per GDN layer per step; finish_requests' requests in one batch; on vLLM 0.30.0 (whose "
        "hybrid state runs a decode without drafts through the plain kernels) also the requests scheduled "
        "without drafts",
        remove_when="the GDN verify lands in vLLM with its own request-lifecycle hook",
        runner=V2_RUNNER,
        releases=V2,
    ),
    PatchPoint(
        name="v2_gdn_align_moves",
        target="MambaHybridModelState.preprocess_state / postprocess_state (V2, per model-state instance)",
        what="with prefix caching (mamba_cache_mode 'align'): before the forward, the running block's column "
        "from V2's own counts, a request whose column changes committing its records and continuing from the "
        "new block's slot; after sampling, the state at each block boundary the accepted tokens reached "
        "(inside an accepted draft or not) committed from the records into the boundary block's slot",
        why="V2 moves align-mode states with fused Triton kernels that pick one of 1+K per-token states; the "
        "plugin keeps one state and records, so the boundary state exists only once the records are committed "
        "up to it",
        how="instance attributes on the model state, installed after load_model (ascend_spec/vllm/v2/"
        "gdn_align.py); V2's postprocess_state still scatters the accepted counts (its fused boundary copy is "
        "skipped); one read a step for the requests that move",
        remove_when="vLLM's align mode takes a ragged one-slot GDN verify (upstream #56466 on #49887)",
        runner=V2_RUNNER,
        releases=V2,
    ),
    PatchPoint(
        name="v2_dflash_inputs",
        target="vllm.v1.worker.gpu.spec_decode.dflash.speculator.prepare_dflash_inputs (module global, while an "
        "enabled runner's DFlash / DSpark speculator's propose runs)",
        what="the block's ids, positions and query slots and the accepted context's slots come from "
        "prepare_block_slots; V2's query_start_loc, seq_lens, sampling rows and sampling state are written as "
        "V2's kernel writes them (equal buffers at every draft step, tested); cp_size > 1 runs the kernel the "
        "global held (on vllm-ascend's V2 runner its own Triton kernel, rebound in set_attn)",
        why="one op and one contract for block inputs across V1, V2 and vllm-ascend instead of each runner's "
        "own expansion kernel (on the CPU harness V2's interpreted kernel is most of a DFlash step)",
        how="instance attribute wrapping the speculator's propose: the global is swapped in for the call and "
        "restored after (DSparkSpeculator subclasses DFlashSpeculator and uses the same global)",
        remove_when="V2 takes block inputs from prepare_block_slots",
        runner=V2_RUNNER,
        releases=V2_BLOCK_SLOTS,
    ),
    PatchPoint(
        name="v2_dynamic_manager",
        target="GPUModelRunner.adaptive_verification (V2, per runner instance; set by a wrapper of its "
        "execute_model at the first real step)",
        what="the plugin's DeviceBudgetManager answers V2's adaptive-verification calls (get_num_tokens, "
        "compact_batch, reallocate_drafts, record_confidences, add_request): the total T on the host from the "
        "newest survivals already staged to the host (never a wait), planned by BudgetController on the cost "
        "profiles measured with V2's dummy runs; the per-request split on the device by allocate_verify_budget "
        "on the current drafts' survivals; T = 0 (no-draft option) possible",
        why="V2's AdaptiveVerificationManager needs full CUDA graphs, builds its cost tables only in "
        "capture_model, is created only with enable_adaptive_verification, refuses GDN targets and never plans "
        "plain decoding",
        how="instance attribute set after V2's initialize_kv_cache and capture_model ran without it (so V2's "
        "graph modes stay its own); the cost profiles are measured (or read) first, before the step's inputs "
        "(ascend_spec/vllm/v2/budget_manager.py, dynamic_hooks.py)",
        remove_when="V2's manager takes current-step confidences, a device split without graphs, measured "
        "costs and a plain-decoding option",
        runner=V2_RUNNER,
        releases=V2_DYNAMIC,
    ),
    PatchPoint(
        name="v2_dynamic_confidence",
        target="DFlashSpeculator._maybe_predict_acceptance / DSpark's model.compute_confidence and "
        "DSparkSpeculator.use_confidence_head (V2, per speculator instance)",
        what="the drafter writes its run's confidences into draft_token_confidence_probs: DFlash "
        "max_softmax_confidence of its [B*K, V] draft logits, DSpark head_confidence of its confidence head "
        "(a checkpoint without one is refused)",
        why="V2 computes confidences only with enable_adaptive_verification (which brings V2's own manager): "
        "DSpark's head then, DFlash never (an online estimator instead)",
        how="instance attributes set after load_model (ascend_spec/vllm/v2/dynamic_hooks.py)",
        remove_when="with v2_dynamic_manager",
        runner=V2_RUNNER,
        releases=V2_DYNAMIC,
    ),
    PatchPoint(
        name="v2_dynamic_take_drafts",
        target="V2 runner.take_draft_token_ids (instance; sync scheduling)",
        what="after the drafter: one wait for the run's staged survivals, the host plan, each request's "
        "placeholder list cut to its length before the scheduler takes it (0 for all: a plain step)",
        why="V2 hands the scheduler K placeholders per request: the scheduler, its KV slots and vLLM's "
        "spec-decode counters would count K whatever the device split verified",
        how="instance attribute wrapping the bound method; the manager then verifies the scheduled drafts as "
        "they are (no second plan); async scheduling keeps the in-step split",
        remove_when="V2's manager plans before the scheduler",
        runner=V2_RUNNER,
        releases=V2_DYNAMIC,
    ),
    PatchPoint(
        name="v2_dynamic_skip_drafter",
        target="the speculator's propose (V2, per speculator instance: DFlash, DSpark, ngram, MTP, EAGLE / "
        "EAGLE-3, draft_model)",
        what="after a plan of plain decoding the drafter's real runs are skipped for the back-off stretch "
        "(zero drafts, which the next plan never verifies); dummy runs always draft",
        why="the no-draft option: a step planned as plain decoding should cost V(B), not D + V(B)",
        how="instance attribute wrapping the bound method (outermost, around v2_dflash_inputs' wrapper)",
        remove_when="with v2_dynamic_manager",
        runner=V2_RUNNER,
        releases=V2_DYNAMIC,
    ),
    PatchPoint(
        name="v2_dynamic_estimate",
        target="the speculator's propose (V2, per speculator instance; the same wrapper as "
        "v2_dynamic_skip_drafter) and, for NgramGPUSpeculator, its draft_token_confidence_probs",
        what="when the plan scores by the acceptance estimate (ngram and ngram_gpu, both V2's NgramGPUSpeculator; "
        "MTP, EAGLE / EAGLE-3, draft_model; DFlash "
        "/ DSpark with estimate 'combine'): before the drafter, the step's verdict per row from the device "
        "counts V2 hands propose (accepted = num_sampled - 1, verified = accepted + num_rejected) updates the "
        "estimate of the row's request slot (idx_mapping); after it, the rows' estimate is written into "
        "draft_token_confidence_probs (combined: the drafter's confidences there rescaled), which V2 hands "
        "the manager's record_confidences; the manager's add_request resets the slot. ngram's speculator gets "
        "that buffer (it has none)",
        why="V2 computes confidences only for drafters with logits and only with its own estimator and manager "
        "(enable_adaptive_verification); ngram has no logits, and the plan needs a per-request score with no "
        "host read",
        how="inside the propose wrapper; the estimate over V2's request slots (max_num_reqs + 1: a masked row "
        "-1 lands in the spare slot) is built with the manager (ascend_spec/vllm/v2/estimate_wiring.py)",
        remove_when="V2's adaptive verification estimates per-request acceptance for every speculator on the "
        "device",
        runner=V2_RUNNER,
        releases=V2_DYNAMIC,
    ),
    PatchPoint(
        name="v2_startup_log",
        target="GPUModelRunner.load_model (V2, per runner instance)",
        what="one log line saying what the plugin switched on on V2 (GDN layers verified, speculator)",
        why="the layers exist only after the model is built; V2 builds its model state there too",
        how="instance attribute wrapping the bound method; it also keeps the runner's GDN layers for the flush",
        remove_when="with v2_runner_init",
        runner=V2_RUNNER,
        releases=V2,
    ),
    # -- the vllm-ascend adapter (ascend_spec/vllm/ascend/): NPUModelRunner, on Ascend NPUs only -------------
)
