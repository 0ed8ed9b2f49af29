// Output allocation of every op, shared by the NPU binding (csrc/torch_binding.cpp) and the Meta
// implementations (csrc/torch_binding_meta.cpp): the shapes graph capture traces are the shapes the kernels
// fill, by construction. tests/test_meta_impls.py checks them against the PyTorch reference.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <tuple>
#include <vector>

namespace ascend_spec {

using BlockSlotsOutputs =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// input_ids, positions ([3, R*Q] for mrope), slot_mapping, query_start_loc, seq_lens, sample_indices,
// context slots and context positions ([3, N] for mrope).
inline BlockSlotsOutputs EmptyBlockSlots(const at::Tensor &anchor_token_ids, const at::Tensor &anchor_positions,
                                         bool mrope, int64_t total_context, int64_t num_query_tokens,
                                         bool sample_from_anchor, int64_t num_padded_reqs) {
    const int64_t b = anchor_positions.size(0), r = num_padded_reqs, q = num_query_tokens;
    const auto i64 = anchor_positions.options().dtype(at::kLong);
    const auto i32 = anchor_positions.options().dtype(at::kInt);
    auto rows = [&](int64_t n) { return mrope ? std::vector<int64_t>{3, n} : std::vector<int64_t>{n}; };
    return {at::empty({r * q}, anchor_token_ids.options()), at::empty(rows(r * q), i64), at::empty({r * q}, i64),
            at::empty({r + 1}, i32), at::empty({r}, i32), at::empty({b * (sample_from_anchor ? q : q - 1)}, i64),
            at::empty({total_context}, i64), at::empty(rows(total_context), i64)};
}

// row_max, row_sumexp.
inline std::tuple<at::Tensor, at::Tensor> EmptyMaxSoftmaxPartials(const at::Tensor &logits) {
    const auto f32 = logits.options().dtype(at::kFloat);
    return {at::empty({logits.size(0)}, f32), at::empty({logits.size(0)}, f32)};
}

// num_drafts, query_lens, query_start_loc, draft_index (min(max_budget, B*K) entries).
inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> EmptyVerifyAllocation(const at::Tensor &survival,
                                                                                        int64_t max_budget) {
    const int64_t b = survival.size(0), k = survival.size(1);
    const auto i32 = survival.options().dtype(at::kInt);
    return {at::empty({b}, i32), at::empty({b}, i32), at::empty({b + 1}, i32),
            at::empty({std::min(max_budget, b * k)}, i32)};
}

// The outputs of the GDN and conv verify ops: contiguous tensors shaped like v and x.
inline at::Tensor EmptyLike(const at::Tensor &t) { return at::empty_like(t, at::MemoryFormat::Contiguous); }

}  // namespace ascend_spec
