// Registers the AscendC kernels as torch.ops._C_ascend_spec.npu_* for NPU tensors (PrivateUse1). Shapes and
// dtypes were validated by the Python wrappers (ascend_spec/<pkg>/<op>/ascendc.py); this layer sets the tensors'
// device (an NPU device guard, as vllm-ascend wraps its ops: core count, UB size, outputs and stream all belong to
// the inputs' device, not to whichever device is current), allocates outputs, refuses a tiling that does not fit
// the Unified Buffer (the chip would not) and launches on that device's current stream through OpCommand.
#include <torch/extension.h>
#include <torch/library.h>

#include <torch_npu/csrc/core/npu/NPUGuard.h>
#include <torch_npu/csrc/core/npu/NPUStream.h>
#include <torch_npu/csrc/framework/OpCommand.h>

#include "acl/acl.h"
#include "ops.h"
#include "ops_outputs.h"
#include "ops_schema.h"
#include "kernels/ub_fit.h"
#include "tiling/platform/platform_ascendc.h"

namespace ascend_spec {

uint32_t VectorCoreNum() {
    int32_t device = 0;
    TORCH_CHECK(aclrtGetDevice(&device) == ACL_SUCCESS, "aclrtGetDevice failed");
    int64_t cores = 0;
    TORCH_CHECK(aclGetDeviceCapability(device, ACL_DEVICE_INFO_VECTOR_CORE_NUM, &cores) == ACL_SUCCESS,
                "aclGetDeviceCapability(VECTOR_CORE_NUM) failed");
    TORCH_CHECK(cores > 0, "the NPU reports no vector cores");
    return static_cast<uint32_t>(cores);
}

int64_t UbBytes() {
    uint64_t ub = 0;
    platform_ascendc::PlatformAscendCManager::GetInstance()->GetCoreMemSize(platform_ascendc::CoreMemType::UB, ub);
    TORCH_CHECK(ub > 0, "the platform reports no Unified Buffer");
    return static_cast<int64_t>(ub);
}

int64_t DtypeCode(const at::Tensor &t, const char *name) {
    switch (t.scalar_type()) {
        case at::kFloat: return 0;
        case at::kBFloat16: return 1;
        case at::kHalf: return 2;
        default: TORCH_CHECK(false, name, " must be float32, bfloat16 or float16; got ", t.scalar_type());
    }
    return -1;
}

void *PtrOrNull(const c10::optional<at::Tensor> &t) { return t.has_value() ? t->data_ptr() : nullptr; }

// Runs `launch` (0: launched) on the current stream of `device` through OpCommand (task queue aware), as
// vllm-ascend does. Call it under the op's device guard.
template <typename F>
void RunOnStream(const char *name, const at::Device &device, F launch) {
    aclrtStream stream = c10_npu::getCurrentNPUStream(device.index()).stream();
    at_npu::native::OpCommand cmd;
    cmd.Name(name);
    cmd.SetCustomHandler([stream, launch]() -> int { return launch(stream); });
    cmd.Run();
}

// A launch whose tiling does not fit the Unified Buffer fails here, naming the argument, before it is queued.
void CheckUbFit(const std::string &unfit) { TORCH_CHECK(unfit.empty(), unfit); }

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
npu_prepare_block_slots(const at::Tensor &anchor_token_ids, const at::Tensor &anchor_positions,
                        const c10::optional<at::Tensor> &rope_positions, const at::Tensor &block_table,
                        const at::Tensor &context_start_loc, int64_t total_context, int64_t block_size,
                        int64_t num_query_tokens, int64_t mask_token_id, bool sample_from_anchor,
                        int64_t num_padded_reqs) {
    const c10_npu::OptionalNPUGuard device_guard(anchor_token_ids.device());
    TORCH_CHECK(anchor_positions.scalar_type() == at::kLong, "anchor_positions must be int64");
    TORCH_CHECK(block_table.scalar_type() == at::kInt, "block_table must be int32");
    TORCH_CHECK(context_start_loc.scalar_type() == at::kInt, "context_start_loc must be int32");
    const int64_t ropeRows = rope_positions.has_value() ? (rope_positions->dim() == 1 ? 1 : 3) : 0;
    auto outs = EmptyBlockSlots(anchor_token_ids, anchor_positions, ropeRows == 3, total_context, num_query_tokens,
                                sample_from_anchor, num_padded_reqs);
    auto &[input_ids, positions, slot_mapping, query_start_loc, seq_lens, sample_indices, ctx_slots, ctx_positions] =
        outs;
    if (num_padded_reqs == 0) {
        query_start_loc.zero_();
        return outs;
    }
    PrepareBlockSlotsArgs a{};
    a.anchorIds = anchor_token_ids.data_ptr();
    a.anchorPos = anchor_positions.data_ptr();
    a.ropePos = PtrOrNull(rope_positions);
    a.blockTable = block_table.data_ptr();
    a.ctxStart = context_start_loc.data_ptr();
    a.inputIds = input_ids.data_ptr();
    a.positions = positions.data_ptr();
    a.slotMapping = slot_mapping.data_ptr();
    a.queryStartLoc = query_start_loc.data_ptr();
    a.seqLens = seq_lens.data_ptr();
    a.sampleIndices = sample_indices.data_ptr();
    a.ctxSlots = ctx_slots.data_ptr();
    a.ctxPositions = ctx_positions.data_ptr();
    a.idsAreInt64 = anchor_token_ids.scalar_type() == at::kLong;
    a.numReqs = anchor_positions.size(0);
    a.numPaddedReqs = num_padded_reqs;
    a.numQueryTokens = num_query_tokens;
    a.blockSize = block_size;
    a.maxPages = block_table.size(1);
    a.ropeRows = ropeRows;
    a.sampleFromAnchor = sample_from_anchor;
    a.maskTokenId = mask_token_id;
    a.totalContext = total_context;
    const uint32_t cores = VectorCoreNum();
    RunOnStream("prepare_block_slots", anchor_token_ids.device(), [=](aclrtStream stream) {
        prepare_block_slots_impl(stream, cores, a);
        return 0;
    });
    return outs;
}

std::tuple<at::Tensor, at::Tensor> npu_max_softmax_partials(const at::Tensor &logits, double inv_temperature) {
    const c10_npu::OptionalNPUGuard device_guard(logits.device());
    TORCH_CHECK(logits.dim() == 2 && logits.stride(1) == 1, "logits must be [N, V] with a contiguous vocab axis");
    auto [row_max, row_sum] = EmptyMaxSoftmaxPartials(logits);
    const int64_t n = logits.size(0), v = logits.size(1);
    if (n == 0) return {row_max, row_sum};
    MaxSoftmaxConfidenceArgs a{};
    a.logits = logits.data_ptr();
    a.rowMax = row_max.data_ptr();
    a.rowSum = row_sum.data_ptr();
    a.dtype = DtypeCode(logits, "logits");
    a.numRows = n;
    a.vocab = v;
    a.rowStride = n > 1 ? logits.stride(0) : v;
    a.invTemperature = static_cast<float>(inv_temperature);
    const uint32_t cores = VectorCoreNum();
    RunOnStream("max_softmax_partials", logits.device(), [=](aclrtStream stream) {
        max_softmax_partials_impl(stream, cores, a);
        return 0;
    });
    return {row_max, row_sum};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> npu_allocate_verify_budget(
    const at::Tensor &survival, const c10::optional<at::Tensor> &capacities, const c10::optional<at::Tensor> &budget,
    int64_t budget_value, int64_t max_budget) {
    const c10_npu::OptionalNPUGuard device_guard(survival.device());
    TORCH_CHECK(survival.scalar_type() == at::kFloat && survival.is_contiguous(), "survival must be contiguous fp32");
    auto [num_drafts, query_lens, query_start_loc, draft_index] = EmptyVerifyAllocation(survival, max_budget);
    AllocateVerifyBudgetArgs a{};
    a.survival = survival.data_ptr();
    a.capacities = PtrOrNull(capacities);
    a.budget = PtrOrNull(budget);
    a.numDrafts = num_drafts.data_ptr();
    a.queryLens = query_lens.data_ptr();
    a.queryStartLoc = query_start_loc.data_ptr();
    a.draftIndex = draft_index.data_ptr();
    a.numReqs = survival.size(0);
    a.numPos = survival.size(1);
    a.maxBudget = max_budget;
    a.budgetValue = budget_value;
    a.budgetInMemory = budget.has_value();
    a.hasCap = capacities.has_value();
    const uint32_t cores = VectorCoreNum();
    RunOnStream("allocate_verify_budget", survival.device(), [=](aclrtStream stream) {
        allocate_verify_budget_impl(stream, cores, a);
        return 0;
    });
    return {num_drafts, query_lens, query_start_loc, draft_index};
}

// The state, records and row tensors both GDN ops pass; the token inputs stay null in the flush.
VerifyGatedDeltaRuleArgs GdnStateArgs(const at::Tensor &state_indices, const at::Tensor &pending,
                                      at::Tensor &state_pool, const at::Tensor &rec_k, const at::Tensor &rec_g,
                                      const at::Tensor &rec_u, const at::Tensor &bank, at::Tensor &num_recorded,
                                      int64_t mode) {
    VerifyGatedDeltaRuleArgs a{};
    a.idx = state_indices.data_ptr();
    a.pending = pending.data_ptr();
    a.pool = state_pool.data_ptr();
    a.recK = rec_k.data_ptr();
    a.recG = rec_g.data_ptr();
    a.recU = rec_u.data_ptr();
    a.bank = bank.data_ptr();
    a.numRecorded = num_recorded.data_ptr();
    a.numRows = state_indices.size(0);
    a.numHeads = rec_k.size(3);
    a.numVHeads = state_pool.size(1);
    a.dk = state_pool.size(2);
    a.dv = state_pool.size(3);
    a.numSlots = state_pool.size(0);
    a.maxTokens = rec_k.size(2);
    a.poolStride = state_pool.stride(0);
    // The slot layout from the view's strides: [HV, Dk, Dv] dense, or the transpose of dense [HV, Dv, Dk] slots
    // (vllm-ascend's state viewed as [S, HV, Dk, Dv]); anything else would be read wrongly.
    const bool headDense = state_pool.stride(1) == a.dk * a.dv;
    const bool keyMajor = headDense && state_pool.stride(2) == a.dv && state_pool.stride(3) == 1;
    const bool valueMajor = headDense && state_pool.stride(2) == 1 && state_pool.stride(3) == a.dk;
    TORCH_CHECK(keyMajor || valueMajor,
                "state_pool slots must be [HV, Dk, Dv] contiguous or the transpose of [HV, Dv, Dk] contiguous slots "
                "for the NPU kernel; got strides ",
                state_pool.strides());
    a.valueMajor = keyMajor ? 0 : 1;
    a.mode = mode;
    a.ubBytes = UbBytes();
    a.scale = 1.0f;
    return a;
}

at::Tensor npu_verify_gated_delta_rule(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                       const at::Tensor &g, const at::Tensor &beta, const at::Tensor &cu_seqlens,
                                       const at::Tensor &state_indices, const at::Tensor &pending,
                                       at::Tensor &state_pool, at::Tensor &rec_k, at::Tensor &rec_g,
                                       at::Tensor &rec_u, at::Tensor &bank, at::Tensor &num_recorded, double scale,
                                       bool use_qk_l2norm) {
    const c10_npu::OptionalNPUGuard device_guard(state_pool.device());
    TORCH_CHECK(cu_seqlens.scalar_type() == at::kInt && state_indices.scalar_type() == at::kInt &&
                    pending.scalar_type() == at::kInt && cu_seqlens.is_contiguous() &&
                    state_indices.is_contiguous() && pending.is_contiguous(),
                "cu_seqlens, state_indices and pending must be contiguous int32 for the NPU kernel");
    at::Tensor o = EmptyLike(v);
    if (state_indices.size(0) == 0) return o.zero_();  // no row covers any token
    if (q.size(0) == 0) return o;
    VerifyGatedDeltaRuleArgs a =
        GdnStateArgs(state_indices, pending, state_pool, rec_k, rec_g, rec_u, bank, num_recorded, kModeVerify);
    a.q = q.data_ptr();
    a.k = k.data_ptr();
    a.v = v.data_ptr();
    a.g = g.data_ptr();
    a.beta = beta.data_ptr();
    a.o = o.data_ptr();
    a.cu = cu_seqlens.data_ptr();
    a.xType = DtypeCode(v, "v");
    a.numTokens = q.size(0);
    a.useL2norm = use_qk_l2norm;
    a.scale = static_cast<float>(scale);
    const uint32_t cores = VectorCoreNum();
    CheckUbFit(VerifyGdnUbFitError(a, cores));
    RunOnStream("verify_gated_delta_rule", state_pool.device(),
                [=](aclrtStream stream) { return verify_gated_delta_rule_impl(stream, cores, a); });
    return o;
}

void npu_flush_gated_delta_rule(const at::Tensor &state_indices, const at::Tensor &pending, at::Tensor &state_pool,
                                const at::Tensor &rec_k, const at::Tensor &rec_g, const at::Tensor &rec_u,
                                const at::Tensor &bank, at::Tensor &num_recorded) {
    const c10_npu::OptionalNPUGuard device_guard(state_pool.device());
    if (state_indices.size(0) == 0) return;
    VerifyGatedDeltaRuleArgs a =
        GdnStateArgs(state_indices, pending, state_pool, rec_k, rec_g, rec_u, bank, num_recorded, kModeFlush);
    const uint32_t cores = VectorCoreNum();
    CheckUbFit(VerifyGdnUbFitError(a, cores));
    RunOnStream("flush_gated_delta_rule", state_pool.device(),
                [=](aclrtStream stream) { return verify_gated_delta_rule_impl(stream, cores, a); });
}

// The state, records and row tensors both conv ops pass; the token inputs stay null in the flushes.
VerifyCausalConv1dArgs ConvStateArgs(at::Tensor &conv_state_pool, const at::Tensor &state_indices,
                                     const at::Tensor &rec_x, at::Tensor &num_recorded, const at::Tensor &pending,
                                     int64_t mode) {
    VerifyCausalConv1dArgs a{};
    a.pool = conv_state_pool.data_ptr();
    a.rec = rec_x.data_ptr();
    a.numRecorded = num_recorded.data_ptr();
    a.idx = state_indices.data_ptr();
    a.pending = pending.data_ptr();
    a.xType = a.recType = DtypeCode(rec_x, "records.x");
    a.poolType = DtypeCode(conv_state_pool, "conv_state_pool");
    a.numRows = state_indices.size(0);
    a.channels = conv_state_pool.size(1);
    a.width = conv_state_pool.size(2) + 1;
    a.maxTokens = rec_x.size(1);
    a.numSlots = conv_state_pool.size(0);
    // The slot layout from the view's strides: [C, W-1] dense, or the [C, W-1] view of dense [W-1, C] slots
    // (vLLM's default conv layout, vllm-ascend's); slots may lie apart in a wider buffer.
    const int64_t channels = a.channels, wm1 = a.width - 1;
    const bool channelMajor = conv_state_pool.stride(1) == wm1 && conv_state_pool.stride(2) == 1;
    const bool tokenMajor = conv_state_pool.stride(1) == 1 && conv_state_pool.stride(2) == channels;
    TORCH_CHECK(channelMajor || tokenMajor,
                "conv_state_pool slots must be [C, W-1] contiguous or the transpose of [W-1, C] contiguous slots "
                "for the NPU kernel; got strides ",
                conv_state_pool.strides());
    a.poolStride = conv_state_pool.stride(0);
    a.tokenMajor = channelMajor ? 0 : 1;
    a.mode = mode;
    a.ubBytes = UbBytes();
    return a;
}

at::Tensor npu_verify_causal_conv1d(const at::Tensor &x, const at::Tensor &weight_t,
                                    const c10::optional<at::Tensor> &bias, const at::Tensor &cu_seqlens,
                                    at::Tensor &conv_state_pool, const at::Tensor &state_indices, at::Tensor &rec_x,
                                    at::Tensor &num_recorded, const at::Tensor &pending, bool silu) {
    const c10_npu::OptionalNPUGuard device_guard(conv_state_pool.device());
    TORCH_CHECK(cu_seqlens.scalar_type() == at::kInt && state_indices.scalar_type() == at::kInt &&
                    cu_seqlens.is_contiguous() && state_indices.is_contiguous(),
                "cu_seqlens and state_indices must be contiguous int32 for the NPU kernel");
    at::Tensor xc = x.contiguous();
    at::Tensor y = EmptyLike(xc);
    if (state_indices.size(0) == 0) return y.zero_();  // no row covers any token
    VerifyCausalConv1dArgs a = ConvStateArgs(conv_state_pool, state_indices, rec_x, num_recorded, pending, kModeVerify);
    a.x = xc.data_ptr();
    a.weightT = weight_t.data_ptr();
    a.bias = PtrOrNull(bias);
    a.y = y.data_ptr();
    a.cu = cu_seqlens.data_ptr();
    a.xType = DtypeCode(xc, "x");
    a.numTokens = xc.size(0);
    a.hasBias = bias.has_value();
    a.silu = silu;
    const uint32_t cores = VectorCoreNum();
    CheckUbFit(VerifyConv1dUbFitError(a, cores));
    RunOnStream("verify_causal_conv1d", conv_state_pool.device(),
                [=](aclrtStream stream) { return verify_causal_conv1d_impl(stream, cores, a); });
    return y;
}

void npu_flush_conv_pending(at::Tensor &conv_state_pool, const at::Tensor &state_indices, const at::Tensor &rec_x,
                            at::Tensor &num_recorded, at::Tensor &pending, bool reset_pending) {
    const c10_npu::OptionalNPUGuard device_guard(conv_state_pool.device());
    TORCH_CHECK(pending.is_contiguous(), "pending must be contiguous for the NPU kernel");
    if (state_indices.size(0) == 0) return;
    VerifyCausalConv1dArgs a = ConvStateArgs(conv_state_pool, state_indices, rec_x, num_recorded, pending,
                                             reset_pending ? kModeFlushAndReset : kModeFlush);
    const uint32_t cores = VectorCoreNum();
    CheckUbFit(VerifyConv1dUbFitError(a, cores));
    RunOnStream("flush_conv_pending", conv_state_pool.device(),
                [=](aclrtStream stream) { return verify_causal_conv1d_impl(stream, cores, a); });
}

}  // namespace ascend_spec

TORCH_LIBRARY(_C_ascend_spec, ops) {
    ascend_spec::DefineSchemas(ops);
    ops.impl("npu_prepare_block_slots", torch::kPrivateUse1, &ascend_spec::npu_prepare_block_slots);
    ops.impl("npu_max_softmax_partials", torch::kPrivateUse1, &ascend_spec::npu_max_softmax_partials);
    ops.impl("npu_allocate_verify_budget", torch::kPrivateUse1, &ascend_spec::npu_allocate_verify_budget);
    ops.impl("npu_verify_gated_delta_rule", torch::kPrivateUse1, &ascend_spec::npu_verify_gated_delta_rule);
    ops.impl("npu_flush_gated_delta_rule", torch::kPrivateUse1, &ascend_spec::npu_flush_gated_delta_rule);
    ops.impl("npu_verify_causal_conv1d", torch::kPrivateUse1, &ascend_spec::npu_verify_causal_conv1d);
    ops.impl("npu_flush_conv_pending", torch::kPrivateUse1, &ascend_spec::npu_flush_conv_pending);
}

PYBIND11_MODULE(_C_ascend_spec, m) { m.doc() = "ascend-spec AscendC kernels (torch.ops._C_ascend_spec)"; }
