// Registers the AscendC kernels as torch.ops._C_ascend_spec.npu_* for NPU tensors (PrivateUse1). Shapes and
// dtypes were validated by the Python wrappers (ascend_spec/**/_ascendc_*.py); this layer allocates outputs,
// reads the vector core count and launches on the current stream through OpCommand, as vllm-ascend does.
#include <torch/extension.h>
#include <torch/library.h>

#include <algorithm>
#include <array>

#include <torch_npu/csrc/core/npu/NPUStream.h>
#include <torch_npu/csrc/framework/OpCommand.h>

#include "acl/acl.h"
#include "ops.h"
#include "ops_outputs.h"
#include "ops_schema.h"
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

// Runs `launch` on the current NPU stream through OpCommand (task queue aware), as vllm-ascend does.
template <typename F>
void RunOnStream(const char *name, F launch) {
    aclrtStream stream = c10_npu::getCurrentNPUStream().stream();
    at_npu::native::OpCommand cmd;
    cmd.Name(name);
    cmd.SetCustomHandler([stream, launch]() -> int {
        launch(stream);
        return 0;
    });
    cmd.Run();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
npu_prepare_block_slots(const at::Tensor &anchor_token_ids, const at::Tensor &anchor_positions,
                        const c10::optional<at::Tensor> &rope_positions, const at::Tensor &block_table,
                        const at::Tensor &context_start_loc, int64_t total_context, int64_t block_size,
                        int64_t num_query_tokens, int64_t mask_token_id, bool sample_from_anchor,
                        int64_t num_padded_reqs) {
    TORCH_CHECK(anchor_positions.scalar_type() == at::kLong, "anchor_positions must be int64");
    TORCH_CHECK(block_table.scalar_type() == at::kInt, "block_table must be int32");
    TORCH_CHECK(context_start_loc.scalar_type() == at::kInt, "context_start_loc must be int32");
    const int64_t b = anchor_positions.size(0), r = num_padded_reqs, q = num_query_tokens;
    const int64_t ropeRows = rope_positions.has_value() ? (rope_positions->dim() == 1 ? 1 : 3) : 0;
    auto [input_ids, positions, slot_mapping, query_start_loc, seq_lens, sample_indices, ctx_slots, ctx_positions] =
        EmptyBlockSlots(anchor_token_ids, anchor_positions, ropeRows == 3, total_context, q, sample_from_anchor, r);
    if (r == 0) {
        query_start_loc.zero_();
        return {input_ids, positions, slot_mapping, query_start_loc, seq_lens, sample_indices, ctx_slots,
                ctx_positions};
    }
    void *rope = rope_positions.has_value() ? rope_positions->data_ptr() : nullptr;
    const bool idsAreInt64 = anchor_token_ids.scalar_type() == at::kLong;
    void *ptrs[] = {anchor_token_ids.data_ptr(), anchor_positions.data_ptr(), rope, block_table.data_ptr(),
                    context_start_loc.data_ptr(), input_ids.data_ptr(), positions.data_ptr(),
                    slot_mapping.data_ptr(), query_start_loc.data_ptr(), seq_lens.data_ptr(),
                    sample_indices.data_ptr(), ctx_slots.data_ptr(), ctx_positions.data_ptr()};
    const int64_t maxPages = block_table.size(1);
    const uint32_t cores = VectorCoreNum();
    std::array<void *, 13> p;
    std::copy(std::begin(ptrs), std::end(ptrs), p.begin());
    RunOnStream("prepare_block_slots", [=](aclrtStream stream) {
        prepare_block_slots_impl(stream, cores, idsAreInt64, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8],
                                 p[9], p[10], p[11], p[12], b, r, q, block_size, maxPages, ropeRows,
                                 sample_from_anchor, mask_token_id, total_context);
    });
    return {input_ids, positions, slot_mapping, query_start_loc, seq_lens, sample_indices, ctx_slots,
            ctx_positions};
}

std::tuple<at::Tensor, at::Tensor> npu_max_softmax_partials(const at::Tensor &logits, double inv_temperature) {
    TORCH_CHECK(logits.dim() == 2 && logits.stride(1) == 1, "logits must be [N, V] with a contiguous vocab axis");
    const int64_t dtype = DtypeCode(logits, "logits");
    const int64_t n = logits.size(0), v = logits.size(1);
    const int64_t stride = n > 1 ? logits.stride(0) : v;
    auto [row_max, row_sum] = EmptyMaxSoftmaxPartials(logits);
    if (n == 0) return {row_max, row_sum};
    void *x = logits.data_ptr(), *mx = row_max.data_ptr(), *sm = row_sum.data_ptr();
    const uint32_t cores = VectorCoreNum();
    const float invT = static_cast<float>(inv_temperature);
    RunOnStream("max_softmax_partials", [=](aclrtStream stream) {
        max_softmax_partials_impl(stream, cores, dtype, x, mx, sm, n, v, stride, invT);
    });
    return {row_max, row_sum};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> npu_allocate_verify_budget(
    const at::Tensor &survival, const c10::optional<at::Tensor> &capacities, const c10::optional<at::Tensor> &budget,
    int64_t budget_value, int64_t max_budget) {
    TORCH_CHECK(survival.scalar_type() == at::kFloat && survival.is_contiguous(), "survival must be contiguous fp32");
    const int64_t b = survival.size(0), k = survival.size(1);
    auto [num_drafts, query_lens, query_start_loc, draft_index] = EmptyVerifyAllocation(survival, max_budget);
    void *s = survival.data_ptr(), *cap = PtrOrNull(capacities), *bud = PtrOrNull(budget);
    void *nd = num_drafts.data_ptr(), *ql = query_lens.data_ptr(), *qsl = query_start_loc.data_ptr();
    void *di = draft_index.data_ptr();
    const bool inMemory = budget.has_value(), hasCap = capacities.has_value();
    const uint32_t cores = VectorCoreNum();
    RunOnStream("allocate_verify_budget", [=](aclrtStream stream) {
        allocate_verify_budget_impl(stream, cores, s, cap, bud, nd, ql, qsl, di, b, k, max_budget, budget_value,
                                    inMemory, hasCap);
    });
    return {num_drafts, query_lens, query_start_loc, draft_index};
}

at::Tensor npu_verify_gated_delta_rule(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                       const at::Tensor &g, const at::Tensor &beta, const at::Tensor &cu_seqlens,
                                       const at::Tensor &state_indices, const at::Tensor &pending,
                                       at::Tensor &state_pool, at::Tensor &rec_k, at::Tensor &rec_g,
                                       at::Tensor &rec_u, at::Tensor &bank, at::Tensor &num_recorded, double scale,
                                       bool use_qk_l2norm) {
    const int64_t xType = DtypeCode(v, "v");
    at::Tensor o = EmptyLike(v);
    const int64_t rows = state_indices.size(0);
    if (rows == 0 || q.size(0) == 0) return o;
    const int64_t t = q.size(0), h = rec_k.size(3), hv = state_pool.size(1), dk = state_pool.size(2);
    const int64_t dv = state_pool.size(3), slots = state_pool.size(0), maxTok = rec_k.size(2);
    const int64_t poolStride = state_pool.stride(0);
    void *ptr[] = {q.data_ptr(), k.data_ptr(), v.data_ptr(), g.data_ptr(), beta.data_ptr(), o.data_ptr(),
                   cu_seqlens.data_ptr(), state_indices.data_ptr(), pending.data_ptr(), state_pool.data_ptr(),
                   rec_k.data_ptr(), rec_g.data_ptr(), rec_u.data_ptr(), bank.data_ptr(), num_recorded.data_ptr()};
    std::array<void *, 15> p;
    std::copy(std::begin(ptr), std::end(ptr), p.begin());
    const uint32_t cores = VectorCoreNum();
    const int64_t ub = UbBytes();
    const float sc = static_cast<float>(scale);
    RunOnStream("verify_gated_delta_rule", [=](aclrtStream stream) {
        verify_gated_delta_rule_impl(stream, cores, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9],
                                     p[10], p[11], p[12], p[13], p[14], xType, t, rows, h, hv, dk, dv, slots,
                                     maxTok, poolStride, use_qk_l2norm, sc, /*mode=*/0, ub);
    });
    return o;
}

void npu_flush_gated_delta_rule(const at::Tensor &state_indices, const at::Tensor &pending, at::Tensor &state_pool,
                                const at::Tensor &rec_k, const at::Tensor &rec_g, const at::Tensor &rec_u,
                                const at::Tensor &bank, at::Tensor &num_recorded) {
    const int64_t rows = state_indices.size(0);
    if (rows == 0) return;
    const int64_t h = rec_k.size(3), hv = state_pool.size(1), dk = state_pool.size(2), dv = state_pool.size(3);
    const int64_t slots = state_pool.size(0), maxTok = rec_k.size(2), poolStride = state_pool.stride(0);
    void *idx = state_indices.data_ptr(), *pend = pending.data_ptr(), *pool = state_pool.data_ptr();
    void *rk = rec_k.data_ptr(), *rg = rec_g.data_ptr(), *ru = rec_u.data_ptr(), *bk = bank.data_ptr();
    void *nr = num_recorded.data_ptr();
    const uint32_t cores = VectorCoreNum();
    const int64_t ub = UbBytes();
    RunOnStream("flush_gated_delta_rule", [=](aclrtStream stream) {
        verify_gated_delta_rule_impl(stream, cores, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                     idx, pend, pool, rk, rg, ru, bk, nr, /*xType=*/0, /*numTokens=*/0, rows, h,
                                     hv, dk, dv, slots, maxTok, poolStride, false, 1.0f, /*mode=*/1, ub);
    });
}

at::Tensor npu_verify_causal_conv1d(const at::Tensor &x, const at::Tensor &weight_t,
                                    const c10::optional<at::Tensor> &bias, const at::Tensor &cu_seqlens,
                                    at::Tensor &conv_state_pool, const at::Tensor &state_indices, at::Tensor &rec_x,
                                    at::Tensor &num_recorded, const at::Tensor &pending, bool silu) {
    TORCH_CHECK(conv_state_pool.is_contiguous(), "conv_state_pool must be contiguous for the NPU kernel");
    at::Tensor xc = x.contiguous();
    at::Tensor y = EmptyLike(xc);
    const int64_t rows = state_indices.size(0);
    if (rows == 0) return y;
    const int64_t xType = DtypeCode(xc, "x"), recType = DtypeCode(rec_x, "records.x");
    const int64_t poolType = DtypeCode(conv_state_pool, "conv_state_pool");
    const int64_t channels = conv_state_pool.size(1), width = conv_state_pool.size(2) + 1;
    const int64_t maxTok = rec_x.size(1), slots = conv_state_pool.size(0);
    void *p[] = {xc.data_ptr(), weight_t.data_ptr(), PtrOrNull(bias), y.data_ptr(), conv_state_pool.data_ptr(),
                 rec_x.data_ptr(), num_recorded.data_ptr(), cu_seqlens.data_ptr(), state_indices.data_ptr(),
                 pending.data_ptr()};
    std::array<void *, 10> a;
    std::copy(std::begin(p), std::end(p), a.begin());
    const bool hasBias = bias.has_value();
    const uint32_t cores = VectorCoreNum();
    const int64_t ub = UbBytes();
    RunOnStream("verify_causal_conv1d", [=](aclrtStream stream) {
        verify_causal_conv1d_impl(stream, cores, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], xType,
                                  recType, poolType, rows, channels, width, maxTok, slots, hasBias, silu,
                                  /*mode=*/0, ub);
    });
    return y;
}

void npu_flush_conv_pending(at::Tensor &conv_state_pool, const at::Tensor &state_indices, const at::Tensor &rec_x,
                            at::Tensor &num_recorded, at::Tensor &pending, bool reset_pending) {
    TORCH_CHECK(conv_state_pool.is_contiguous() && pending.is_contiguous(),
                "conv_state_pool and pending must be contiguous for the NPU kernel");
    const int64_t rows = state_indices.size(0);
    if (rows == 0) return;
    const int64_t recType = DtypeCode(rec_x, "records.x"), poolType = DtypeCode(conv_state_pool, "conv_state_pool");
    const int64_t channels = conv_state_pool.size(1), width = conv_state_pool.size(2) + 1;
    const int64_t maxTok = rec_x.size(1), slots = conv_state_pool.size(0);
    void *pool = conv_state_pool.data_ptr(), *rec = rec_x.data_ptr(), *nr = num_recorded.data_ptr();
    void *idx = state_indices.data_ptr(), *pend = pending.data_ptr();
    const uint32_t cores = VectorCoreNum();
    const int64_t ub = UbBytes();
    const int64_t mode = reset_pending ? 2 : 1;
    RunOnStream("flush_conv_pending", [=](aclrtStream stream) {
        verify_causal_conv1d_impl(stream, cores, nullptr, nullptr, nullptr, nullptr, pool, rec, nr, nullptr, idx, pend,
                                  recType, recType, poolType, rows, channels, width, maxTok, slots, false, false,
                                  mode, ub);
    });
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
