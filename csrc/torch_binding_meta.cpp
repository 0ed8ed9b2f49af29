// Meta implementations: output shapes and dtypes only, so torch.compile / graph capture can trace the ops
// without running them. Each mirrors the allocation in csrc/torch_binding.cpp.
#include <ATen/ATen.h>
#include <torch/library.h>

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

}  // namespace meta
}  // namespace ascend_spec

TORCH_LIBRARY_IMPL(_C_ascend_spec, Meta, ops) {
    ops.impl("npu_prepare_block_slots", &ascend_spec::meta::npu_prepare_block_slots);
}
