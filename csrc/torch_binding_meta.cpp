// Meta implementations: output shapes and dtypes only, so torch.compile / graph capture can trace the ops
// without running them. They allocate through csrc/ops_outputs.h, as the NPU binding does.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "ops_outputs.h"

namespace ascend_spec {
namespace meta {

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
npu_prepare_block_slots(const at::Tensor &anchor_token_ids, const at::Tensor &anchor_positions,
                        const c10::optional<at::Tensor> &rope_positions, const at::Tensor &block_table,
                        const at::Tensor &context_start_loc, int64_t total_context, int64_t block_size,
                        int64_t num_query_tokens, int64_t mask_token_id, bool sample_from_anchor,
                        int64_t num_padded_reqs) {
    const bool mrope = rope_positions.has_value() && rope_positions->dim() == 2;
    return EmptyBlockSlots(anchor_token_ids, anchor_positions, mrope, total_context, num_query_tokens,
                           sample_from_anchor, num_padded_reqs);
}

std::tuple<at::Tensor, at::Tensor> npu_max_softmax_partials(const at::Tensor &logits, double inv_temperature) {
    return EmptyMaxSoftmaxPartials(logits);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> npu_allocate_verify_budget(
    const at::Tensor &survival, const c10::optional<at::Tensor> &capacities, const c10::optional<at::Tensor> &budget,
    int64_t budget_value, int64_t max_budget) {
    return EmptyVerifyAllocation(survival, max_budget);
}

at::Tensor npu_verify_gated_delta_rule(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                       const at::Tensor &g, const at::Tensor &beta, const at::Tensor &cu_seqlens,
                                       const at::Tensor &state_indices, const at::Tensor &pending,
                                       at::Tensor &state_pool, at::Tensor &rec_k, at::Tensor &rec_g,
                                       at::Tensor &rec_u, at::Tensor &bank, at::Tensor &num_recorded, double scale,
                                       bool use_qk_l2norm) {
    return EmptyLike(v);
}

void npu_flush_gated_delta_rule(const at::Tensor &state_indices, const at::Tensor &pending, at::Tensor &state_pool,
                                const at::Tensor &rec_k, const at::Tensor &rec_g, const at::Tensor &rec_u,
                                const at::Tensor &bank, at::Tensor &num_recorded) {}

at::Tensor npu_verify_causal_conv1d(const at::Tensor &x, const at::Tensor &weight_t,
                                    const c10::optional<at::Tensor> &bias, const at::Tensor &cu_seqlens,
                                    at::Tensor &conv_state_pool, const at::Tensor &state_indices, at::Tensor &rec_x,
                                    at::Tensor &num_recorded, const at::Tensor &pending, bool silu) {
    return EmptyLike(x);
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
