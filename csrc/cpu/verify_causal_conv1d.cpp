// Native CPU kernel of verify_causal_conv1d and its flushes (ascend_spec/gdn/verify_causal_conv1d/cpu.py).
//
// Same semantics as the reference (ascend_spec/gdn/verify_causal_conv1d/reference.py) in one call: per active
// row and channel block, the committed state (the last W-1 entries of pool state ++ recorded x[:pending]) is
// formed in fp32, each token's output is the weighted sum of its W sources (its row's earlier tokens, else the
// committed state) plus bias, then SiLU; the committed state is written to the pool once and this call's inputs
// become the slot's records. Rows without a slot in [0, S) write nothing and output zeros.
#include <algorithm>

#include "cpu_common.h"

using namespace ascend_spec_cpu;

namespace {

struct ConvArgs {
  int64_t mode;  // 0 verify, 1 flush, 2 flush and reset pending (KernelMode)
  int64_t x, weight, bias, cu_seqlens, state_indices, pending, pool, out, rec_x, rec_num;
  int64_t num_tokens, num_rows, num_slots, channels, width, capacity;
  int64_t x_s0, x_s1, w_s0, w_s1, bias_s0, p_s0, p_s1, p_s2, idx_s0, cu_s0, pending_s0;
  int64_t x_dtype, w_dtype, bias_dtype, pool_dtype, rec_dtype, cu_dtype, idx_dtype;
  int64_t silu, threads;
};

constexpr int64_t kChannelBlock = 512;

using Row = WorkRow;

// committed[k][c - c0] for k < W-1: entry replay + k of (pool[slot] ++ records.x[slot]).
void committed_state(const ConvArgs& a, const Row& r, int64_t c0, int64_t nc, float* committed) {
  const int64_t wm1 = a.width - 1;
  for (int64_t kk = 0; kk < wm1; ++kk) {
    const int64_t at = r.replay + kk;
    float* dst = committed + kk * nc;
    if (at < wm1) {
      load_f32(reinterpret_cast<const void*>(a.pool), a.pool_dtype, r.slot * a.p_s0 + c0 * a.p_s1 + at * a.p_s2,
               a.p_s1, nc, dst);
    } else {
      load_f32(reinterpret_cast<const void*>(a.rec_x), a.rec_dtype,
               (r.slot * a.capacity + (at - wm1)) * a.channels + c0, 1, nc, dst);
    }
  }
}

void store_committed(const ConvArgs& a, const Row& r, int64_t c0, int64_t nc, const float* committed) {
  for (int64_t kk = 0; kk < a.width - 1; ++kk) {
    store_f32(reinterpret_cast<void*>(a.pool), a.pool_dtype, r.slot * a.p_s0 + c0 * a.p_s1 + kk * a.p_s2, a.p_s1,
              nc, committed + kk * nc);
  }
}

// weights [W, C] and bias [C] in fp32, once per call (shared by every row).
struct Taps {
  std::vector<float> w, bias;
};

void verify_block(const ConvArgs& a, const Taps& taps, const Row& r, int64_t c0) {
  const int64_t nc = std::min(kChannelBlock, a.channels - c0);
  const int64_t wm1 = a.width - 1, width = a.width, len = r.len;
  float* buf = scratch(static_cast<size_t>((wm1 + len + 1) * nc));
  float* seq = buf;  // [W-1 + len, nc]: committed state, then this call's tokens
  float* acc = seq + (wm1 + len) * nc;
  committed_state(a, r, c0, nc, seq);
  for (int64_t t = 0; t < len; ++t) {
    load_f32(reinterpret_cast<const void*>(a.x), a.x_dtype, (r.start + t) * a.x_s0 + c0 * a.x_s1, a.x_s1, nc,
             seq + (wm1 + t) * nc);
  }
  const float* w = taps.w.data() + c0;  // row j at w + j * C
  const float* bias = taps.bias.data() + c0;
  const bool has_bias = a.bias != 0;
  for (int64_t t = 0; t < len; ++t) {
    const float* src = seq + t * nc;  // tap j of token t reads seq[t + j]
#pragma omp simd
    for (int64_t c = 0; c < nc; ++c) acc[c] = src[c] * w[c];
    for (int64_t j = 1; j < width; ++j) {
      const float* sj = src + j * nc;
      const float* wj = w + j * a.channels;
#pragma omp simd
      for (int64_t c = 0; c < nc; ++c) acc[c] += sj[c] * wj[c];
    }
    if (has_bias) {
#pragma omp simd
      for (int64_t c = 0; c < nc; ++c) acc[c] += bias[c];
    }
    if (a.silu) silu_inplace(acc, nc);
    store_f32(reinterpret_cast<void*>(a.out), a.x_dtype, (r.start + t) * a.channels + c0, 1, nc, acc);
  }
  store_committed(a, r, c0, nc, seq);
  const int64_t rec_len = std::min(len, a.capacity);
  for (int64_t t = 0; t < rec_len; ++t) {  // records hold the inputs exactly (their dtype holds x's)
    store_f32(reinterpret_cast<void*>(a.rec_x), a.rec_dtype, (r.slot * a.capacity + t) * a.channels + c0, 1, nc,
              seq + (wm1 + t) * nc);
  }
}

void flush_block(const ConvArgs& a, const Row& r, int64_t c0) {
  const int64_t nc = std::min(kChannelBlock, a.channels - c0);
  float* committed = scratch(static_cast<size_t>((a.width - 1) * nc));
  committed_state(a, r, c0, nc, committed);
  store_committed(a, r, c0, nc, committed);
}

int run(const ConvArgs& a) {
  int32_t* pending = reinterpret_cast<int32_t*>(a.pending);
  int32_t* recorded = reinterpret_cast<int32_t*>(a.rec_num);
  const bool verify = a.mode == 0;
  RowScan scan(a.state_indices, a.idx_dtype, a.idx_s0, a.num_slots, verify ? a.cu_seqlens : 0, a.cu_dtype,
               a.cu_s0, a.num_tokens);
  // A flush writes the committed state of every owned row with something pending (p > 0), as the reference.
  const std::vector<Row> rows = work_rows(scan, a.num_rows, verify, pending, a.pending_s0, recorded, a.capacity,
                                          [](const Row& r) { return r.pending > 0; });
  if (verify && !scan.all_written()) {
    std::memset(reinterpret_cast<void*>(a.out), 0,
                static_cast<size_t>(a.num_tokens * a.channels) * (a.x_dtype == kF32 ? 4 : 2));
  }
  const int64_t blocks = (a.channels + kChannelBlock - 1) / kChannelBlock;
  Taps taps;
  if (verify && !rows.empty()) {
    taps.w.resize(static_cast<size_t>(a.width * a.channels));
    for (int64_t j = 0; j < a.width; ++j) {
      load_f32(reinterpret_cast<const void*>(a.weight), a.w_dtype, j * a.w_s1, a.w_s0, a.channels,
               taps.w.data() + j * a.channels);
    }
    if (a.bias != 0) {
      taps.bias.resize(static_cast<size_t>(a.channels));
      load_f32(reinterpret_cast<const void*>(a.bias), a.bias_dtype, 0, a.bias_s0, a.channels, taps.bias.data());
    }
  }
  parallel_for(static_cast<int64_t>(rows.size()) * blocks, a.threads, [&](int64_t item) {
    const Row& r = rows[item / blocks];
    const int64_t c0 = (item % blocks) * kChannelBlock;
    if (verify) {
      verify_block(a, taps, r, c0);
    } else {
      flush_block(a, r, c0);
    }
  });
  if (verify) {
    for (const Row& r : rows) recorded[r.slot] = static_cast<int32_t>(std::min(r.len, a.capacity));
  } else {
    RowScan owners(a.state_indices, a.idx_dtype, a.idx_s0, a.num_slots, 0, 0, 0, 0);
    for (int64_t b = 0; b < a.num_rows; ++b) {
      const RowScan::Span span = owners.at(b);
      if (span.owned) recorded[span.slot] = 0;
      if (a.mode == 2) pending[b * a.pending_s0] = 0;
    }
  }
  return 0;
}

}  // namespace

extern "C" {

uint64_t verify_causal_conv1d_args_bytes() { return sizeof(ConvArgs); }

int verify_causal_conv1d_cpu(const ConvArgs* args) { return run(*args); }

}  // extern "C"
