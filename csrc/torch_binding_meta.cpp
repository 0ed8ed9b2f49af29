// Meta implementations: output shapes and dtypes only, so torch.compile / graph capture can trace the ops
// without running them. Each mirrors the allocation in csrc/torch_binding.cpp.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>

namespace ascend_spec {
namespace meta {

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
npu_prepare_block_slots(const at::Tensor &anchor_token_ids, const at::Tensor &anchor_positions,
                        const c10::optional<at::Tensor> &rope_positions, const at::Tensor &block_table,
                        const at::Tensor &context_start_loc, int64_t total_context, int64_t block_size,
                        int64_t num_query_tokens, int64_t mask_token_id, bool sample_from_anchor,
                        int64_t num_padded_reqs) {
    const int64_t b = anchor_positions.size(0), r = num_padded_reqs, q = num_query_tokens;
    const bool mrope = rope_positions.has_value() && rope_positions->dim() == 2;
    const auto i64 = anchor_positions.options().dtype(at::kLong);
    const auto i32 = anchor_positions.options().dtype(at::kInt);
    auto shape = [&](int64_t n) { return mrope ? std::vector<int64_t>{3, n} : std::vector<int64_t>{n}; };
    return {at::empty({r * q}, anchor_token_ids.options()), at::empty(shape(r * q), i64),
            at::empty({r * q}, i64), at::empty({r + 1}, i32), at::empty({r}, i32),
            at::empty({b * (sample_from_anchor ? q : q - 1)}, i64), at::empty({total_context}, i64),
            at::empty(shape(total_context), i64)};
}

std::tuple<at::Tensor, at::Tensor> npu_max_softmax_partials(const at::Tensor &logits, double inv_temperature) {
    const auto f32 = logits.options().dtype(at::kFloat);
    return {at::empty({logits.size(0)}, f32), at::empty({logits.size(0)}, f32)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> npu_allocate_verify_budget(
    const at::Tensor &survival, const c10::optional<at::Tensor> &capacities, const c10::optional<at::Tensor> &budget,
    int64_t budget_value, int64_t max_budget) {
    const int64_t b = survival.size(0), k = survival.size(1);
    const auto i32 = survival.options().dtype(at::kInt);
    return {at::empty({b}, i32), at::empty({b}, i32), at::empty({b + 1}, i32),
            at::empty({std::min(max_budget, b * k)}, i32)};
}

at::Tensor npu_verify_gated_delta_rule(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                       const at::Tensor &g, const at::Tensor &beta, const at::Tensor &cu_seqlens,
                                       const at::Tensor &state_indices, const at::Tensor &pending,
                                       at::Tensor &state_pool, at::Tensor &rec_k, at::Tensor &rec_g,
                                       at::Tensor &rec_u, at::Tensor &bank, at::Tensor &num_recorded, double scale,
                                       bool use_qk_l2norm) {
    return at::empty_like(v, at::MemoryFormat::Contiguous);
}

void npu_flush_gated_delta_rule(const at::Tensor &state_indices, const at::Tensor &pending, at::Tensor &state_pool,
                                const at::Tensor &rec_k, const at::Tensor &rec_g, const at::Tensor &rec_u,
                                const at::Tensor &bank, at::Tensor &num_recorded) {}

at::Tensor npu_verify_causal_conv1d(const at::Tensor &x, const at::Tensor &weight_t,
                                    const c10::optional<at::Tensor> &bias, const at::Tensor &cu_seqlens,
                                    at::Tensor &conv_state_pool, const at::Tensor &state_indices, at::Tensor &rec_x,
                                    at::Tensor &num_recorded, const at::Tensor &pending, bool silu) {
    return at::empty_like(x, at::MemoryFormat::Contiguous);
}

void npu_flush_conv_pending(at::Tensor &conv_state_pool, const at::Tensor &state_indices, const at::Tensor &rec_x,
                            at::Tensor &num_recorded, at::Tensor &pending, bool reset_pending) {}

}  // namespace meta
}  // namespace ascend_spec

TORCH_LIBRARY_IMPL(_C_ascend_spec, Meta, ops) {
    ops.impl("npu_prepare_block_slots", &ascend_spec::meta::npu_prepare_block_slots);
    ops.impl("npu_max_softmax_partials", &ascend_spec::meta::npu_max_softmax_partials);
    ops.impl("npu_allocate_verify_budget", &ascend_spec::meta::npu_allocate_verify_budget);
    ops.impl("npu_verify_gated_delta_rule", &ascend_spec::meta::npu_verify_gated_delta_rule);
    ops.impl("npu_flush_gated_delta_rule", &ascend_spec::meta::npu_flush_gated_delta_rule);
    ops.impl("npu_verify_causal_conv1d", &ascend_spec::meta::npu_verify_causal_conv1d);
    ops.impl("npu_flush_conv_pending", &ascend_spec::meta::npu_flush_conv_pending);
}
