// Schemas of torch.ops._C_ascend_spec, shared by the NPU binding (csrc/torch_binding.cpp) and the Meta-only
// test build (tests/test_meta_impls.py), so the Meta implementations are checked against the real schemas.
#pragma once

#include <torch/library.h>

namespace ascend_spec {

inline void DefineSchemas(torch::Library &ops) {
    ops.def(
        "npu_prepare_block_slots(Tensor anchor_token_ids, Tensor anchor_positions, Tensor? rope_positions, "
        "Tensor block_table, Tensor context_start_loc, int total_context, int block_size, int num_query_tokens, "
        "int mask_token_id, bool sample_from_anchor, int num_padded_reqs) -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
}

}  // namespace ascend_spec
