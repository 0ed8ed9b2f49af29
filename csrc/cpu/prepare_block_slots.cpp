// Native CPU kernel of prepare_block_slots (ascend_spec/ops/prepare_block_slots/cpu.py).
//
// The drafter's block inputs in one call, exactly the reference's tensors (ascend_spec/ops/prepare_block_slots/
// reference.py): per request, the Q query rows (ids, rope positions, paged slots), seq_lens, the candidates'
// sample rows and the context tokens' slots and rope positions; padding rows get mask ids, position 0 and slot
// -1. A position that cannot be placed (negative, past the table, on a negative page id) gets slot -1.
#include "cpu_common.h"

using namespace ascend_spec_cpu;

namespace {

struct BlockSlotsArgs {
  int64_t anchor_ids, anchor_positions, block_table, rope, context_start;  // inputs (context_start: the op's sums)
  int64_t input_ids, positions, slot_mapping, query_start_loc, seq_lens, sample_indices;  // outputs
  int64_t context_slot_mapping, context_positions;
  int64_t num_reqs, num_padded_reqs, num_query, num_pages, block_size, mask_token_id, sample_from_anchor;
  int64_t total_context, rope_rows, ids_dtype, table_s0, table_s1;
};

inline int64_t slot_of(const BlockSlotsArgs& a, const int32_t* table, int64_t b, int64_t pos) {
  if (a.num_pages == 0) return -1;
  const int64_t bs = a.block_size;
  const int64_t page_idx = pos >= 0 ? pos / bs : -((-pos + bs - 1) / bs);  // floor division
  if (page_idx < 0 || page_idx >= a.num_pages) return -1;
  const int64_t page = table[b * a.table_s0 + page_idx * a.table_s1];
  if (page < 0) return -1;
  return page * bs + (pos - page_idx * bs);
}

int run(const BlockSlotsArgs& a) {
  const int64_t b_n = a.num_reqs, r_n = a.num_padded_reqs, q = a.num_query;
  const int32_t* table = reinterpret_cast<const int32_t*>(a.block_table);
  const int64_t* p = reinterpret_cast<const int64_t*>(a.anchor_positions);
  const int64_t* rope = a.rope ? reinterpret_cast<const int64_t*>(a.rope) : p;  // [rows, B]
  const int64_t rows = a.rope_rows;  // 1, or 3 (mrope)
  int64_t* positions = reinterpret_cast<int64_t*>(a.positions);  // [rows, R*Q]
  int64_t* slots = reinterpret_cast<int64_t*>(a.slot_mapping);
  int32_t* seq_lens = reinterpret_cast<int32_t*>(a.seq_lens);
  int32_t* qsl = reinterpret_cast<int32_t*>(a.query_start_loc);
  int64_t* sample = reinterpret_cast<int64_t*>(a.sample_indices);
  const int64_t first = a.sample_from_anchor ? 0 : 1;
  for (int64_t r = 0; r < r_n; ++r) {
    const bool real = r < b_n;
    for (int64_t i = 0; i < q; ++i) {
      const int64_t row = r * q + i;
      int64_t id = a.mask_token_id;
      if (real && i == 0) {
        id = a.ids_dtype == kI64 ? reinterpret_cast<const int64_t*>(a.anchor_ids)[r]
                                 : reinterpret_cast<const int32_t*>(a.anchor_ids)[r];
      }
      if (a.ids_dtype == kI64) {
        reinterpret_cast<int64_t*>(a.input_ids)[row] = id;
      } else {
        reinterpret_cast<int32_t*>(a.input_ids)[row] = static_cast<int32_t>(id);
      }
      for (int64_t k = 0; k < rows; ++k) positions[k * r_n * q + row] = real ? rope[k * b_n + r] + i : 0;
      slots[row] = real ? slot_of(a, table, r, p[r] + i) : -1;
    }
    seq_lens[r] = real ? static_cast<int32_t>(p[r] + q) : 0;
    qsl[r] = static_cast<int32_t>(r * q);
  }
  qsl[r_n] = static_cast<int32_t>(r_n * q);
  for (int64_t b = 0, at = 0; b < b_n; ++b) {
    for (int64_t i = first; i < q; ++i) sample[at++] = b * q + i;
  }
  if (a.total_context > 0) {
    const int32_t* start = reinterpret_cast<const int32_t*>(a.context_start);  // [B+1], exclusive prefix sums
    int64_t* ctx_slots = reinterpret_cast<int64_t*>(a.context_slot_mapping);
    int64_t* ctx_pos = reinterpret_cast<int64_t*>(a.context_positions);  // [rows, N]
    for (int64_t b = 0; b < b_n; ++b) {
      const int64_t s0 = start[b], n = start[b + 1] - start[b];
      for (int64_t j = 0; j < n; ++j) {
        const int64_t back = n - j;
        ctx_slots[s0 + j] = slot_of(a, table, b, p[b] - back);
        for (int64_t k = 0; k < rows; ++k) ctx_pos[k * a.total_context + s0 + j] = rope[k * b_n + b] - back;
      }
    }
  }
  return 0;
}

}  // namespace

extern "C" {

uint64_t prepare_block_slots_args_bytes() { return sizeof(BlockSlotsArgs); }

int prepare_block_slots_cpu(const BlockSlotsArgs* args) { return run(*args); }

}  // extern "C"
