// Schemas of torch.ops._C_ascend_spec, shared by the NPU binding (csrc/torch_binding.cpp) and the Meta-only
// test build (tests/test_meta_impls.py), so the Meta implementations are checked against the real schemas.
// Integer index tensors arrive as int32 and float side inputs (g, beta, weights) as fp32: the Python wrappers
// (ascend_spec/<pkg>/<op>/ascendc.py) normalise them, as they do for the host model.
#pragma once

#include <torch/library.h>

namespace ascend_spec {

inline void DefineSchemas(torch::Library &ops) {
    ops.def(
        "npu_prepare_block_slots(Tensor anchor_token_ids, Tensor anchor_positions, Tensor? rope_positions, "
        "Tensor block_table, Tensor context_start_loc, int total_context, int block_size, int num_query_tokens, "
        "int mask_token_id, bool sample_from_anchor, int num_padded_reqs) -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
    ops.def("npu_max_softmax_partials(Tensor logits, float inv_temperature) -> (Tensor, Tensor)");
    ops.def(
        "npu_allocate_verify_budget(Tensor survival, Tensor? capacities, Tensor? budget, int budget_value, "
        "int max_budget) -> (Tensor, Tensor, Tensor, Tensor)");
    ops.def(
        "npu_verify_gated_delta_rule(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor cu_seqlens, "
        "Tensor state_indices, Tensor pending, Tensor(a!) state_pool, Tensor(b!) rec_k, Tensor(c!) rec_g, "
        "Tensor(d!) rec_u, Tensor(e!) bank, Tensor(f!) num_recorded, float scale, bool use_qk_l2norm) -> Tensor");
    ops.def(
        "npu_flush_gated_delta_rule(Tensor state_indices, Tensor pending, Tensor(a!) state_pool, Tensor rec_k, "
        "Tensor rec_g, Tensor rec_u, Tensor bank, Tensor(b!) num_recorded) -> ()");
    ops.def(
        "npu_verify_causal_conv1d(Tensor x, Tensor weight_t, Tensor? bias, Tensor cu_seqlens, "
        "Tensor(a!) conv_state_pool, Tensor state_indices, Tensor(b!) rec_x, Tensor(c!) num_recorded, "
        "Tensor pending, bool silu) -> Tensor");
    ops.def(
        "npu_flush_conv_pending(Tensor(a!) conv_state_pool, Tensor state_indices, Tensor rec_x, "
        "Tensor(b!) num_recorded, Tensor(c!) pending, bool reset_pending) -> ()");
}

}  // namespace ascend_spec
