// Registers the AscendC kernels as torch.ops._C_ascend_spec.npu_* for NPU tensors (PrivateUse1). Shapes and
// dtypes were validated by the Python wrappers (ascend_spec/**/_ascendc_*.py); this layer allocates outputs,
// reads the vector core count and launches on the current stream through OpCommand, as vllm-ascend does.
#include <torch/extension.h>
#include <torch/library.h>

#include <torch_npu/csrc/core/npu/NPUStream.h>
#include <torch_npu/csrc/framework/OpCommand.h>

#include "acl/acl.h"
#include "ops.h"
#include "ops_schema.h"

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
    const auto i64 = anchor_positions.options().dtype(at::kLong);
    const auto i32 = anchor_positions.options().dtype(at::kInt);
    std::vector<int64_t> posShape = ropeRows == 3 ? std::vector<int64_t>{3, r * q} : std::vector<int64_t>{r * q};
    std::vector<int64_t> ctxShape =
        ropeRows == 3 ? std::vector<int64_t>{3, total_context} : std::vector<int64_t>{total_context};
    at::Tensor input_ids = at::empty({r * q}, anchor_token_ids.options());
    at::Tensor positions = at::empty(posShape, i64);
    at::Tensor slot_mapping = at::empty({r * q}, i64);
    at::Tensor query_start_loc = at::empty({r + 1}, i32);
    at::Tensor seq_lens = at::empty({r}, i32);
    at::Tensor sample_indices = at::empty({b * (sample_from_anchor ? q : q - 1)}, i64);
    at::Tensor ctx_slots = at::empty({total_context}, i64);
    at::Tensor ctx_positions = at::empty(ctxShape, i64);
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
    aclrtStream stream = c10_npu::getCurrentNPUStream().stream();
    at_npu::native::OpCommand cmd;
    cmd.Name("prepare_block_slots");
    cmd.SetCustomHandler([=]() -> int {
        prepare_block_slots_impl(stream, VectorCoreNum(), idsAreInt64, ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4],
                                 ptrs[5], ptrs[6], ptrs[7], ptrs[8], ptrs[9], ptrs[10], ptrs[11], ptrs[12], b, r, q,
                                 block_size, maxPages, ropeRows, sample_from_anchor, mask_token_id, total_context);
        return 0;
    });
    cmd.Run();
    return {input_ids, positions, slot_mapping, query_start_loc, seq_lens, sample_indices, ctx_slots,
            ctx_positions};
}

}  // namespace ascend_spec

TORCH_LIBRARY(_C_ascend_spec, ops) {
    ascend_spec::DefineSchemas(ops);
    ops.impl("npu_prepare_block_slots", torch::kPrivateUse1, &ascend_spec::npu_prepare_block_slots);
}

PYBIND11_MODULE(_C_ascend_spec, m) { m.doc() = "ascend-spec AscendC kernels (torch.ops._C_ascend_spec)"; }
