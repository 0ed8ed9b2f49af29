// Native CPU kernel of max_softmax_partials (ascend_spec/ops/max_softmax_confidence/cpu.py): per row of [N, V]
// logits, the row max and sum exp((z - max) / T) in fp32, the partials max_softmax_confidence merges (also across
// vocab shards). Rows run in parallel; each row is read once into an fp32 buffer (any dtype and stride) and never
// copied whole: nothing of size N x V is allocated. NaN propagates as in torch.amax; an all -inf row is
// (-inf, 0), as the reference. With ``survival`` set (dynamic verification's CPU step), the same call also writes
// the survivals of the finalized confidences: rows are B requests x K drafts, request-major, and survival[b, i] is
// the cumulative product of confidence[b, 0..i], accumulated in double and rounded per entry, as torch.cumprod on
// fp32 CPU tensors does (survival_probs). With ``argmax`` set, the same pass over each row also writes the index of
// its largest logit, as torch.argmax picks it (the first maximum; the first NaN of a row with NaN; 0 for an all
// -inf row): a greedy drafter's draft tokens and their confidences from one read of the draft logits.
#include <limits>

#include "cpu_common.h"

using namespace ascend_spec_cpu;

namespace {

struct MaxSoftmaxArgs {
  int64_t logits, row_max, row_sumexp, confidence;  // confidence: 0, or [N] fp32 for the finalized top probability
  int64_t survival, block;  // survival: 0, or [N] fp32 (needs confidence); block: K, the rows of one request
  int64_t num_rows, vocab, s0, s1, dtype, threads;
  int64_t argmax;  // 0, or [N] int64: the index of each row's maximum (torch.argmax's choice)
  double inv_temperature;
};

constexpr int64_t kChunk = 4096;  // fp32 elements of one row converted at a time (16 KiB, in L1)

// The row's partials, or its confidence: 1 / sum on a valid row (sum >= 1), else 0 (NaN, +inf or all -inf rows:
// finalize_confidence's rule).
inline void store(const MaxSoftmaxArgs& a, int64_t row, float row_max, float sum) {
  if (a.confidence != 0) {
    reinterpret_cast<float*>(a.confidence)[row] = sum >= 1.f ? 1.f / sum : 0.f;
    return;
  }
  reinterpret_cast<float*>(a.row_max)[row] = row_max;
  reinterpret_cast<float*>(a.row_sumexp)[row] = sum;
}

void one_row(const MaxSoftmaxArgs& a, int64_t row, float* buf) {
  const void* base = reinterpret_cast<const void*>(a.logits);
  const float inv_t = static_cast<float>(a.inv_temperature);
  float m = -std::numeric_limits<float>::infinity();
  bool nan = false;
  int64_t at = 0, first_nan = 0;  // argmax: the first maximum so far, the first NaN
  const bool whole = a.vocab <= kChunk;  // a row that fits the buffer is read once for both passes
  for (int64_t c0 = 0; c0 < a.vocab; c0 += kChunk) {
    const int64_t nc = std::min(kChunk, a.vocab - c0);
    load_f32(base, a.dtype, row * a.s0 + c0 * a.s1, a.s1, nc, buf);
    float cm = m;
    int bad = 0;
#pragma omp simd reduction(max : cm) reduction(| : bad)
    for (int64_t i = 0; i < nc; ++i) {
      cm = buf[i] > cm ? buf[i] : cm;
      bad |= buf[i] != buf[i];
    }
    if (a.argmax != 0) {
      if (bad && !nan) {  // the row's first NaN
        for (int64_t i = 0; i < nc; ++i) {
          if (buf[i] != buf[i]) {
            first_nan = c0 + i;
            break;
          }
        }
      }
      if (cm > m) {  // a strictly larger maximum in this chunk: its first position
        for (int64_t i = 0; i < nc; ++i) {
          if (buf[i] == cm) {
            at = c0 + i;
            break;
          }
        }
      }
    }
    nan = nan || bad;
    m = cm;
  }
  if (a.argmax != 0) reinterpret_cast<int64_t*>(a.argmax)[row] = nan ? first_nan : at;
  if (nan) {
    store(a, row, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::quiet_NaN());
    return;
  }
  if (m == -std::numeric_limits<float>::infinity()) {  // no probability mass
    store(a, row, m, 0.f);
    return;
  }
  // Four vector accumulators per chunk (~128 additions per lane), chunks summed in double: rounding stays near
  // torch.sum's cascade even over a 256k vocabulary.
  double total = 0.0;
  for (int64_t c0 = 0; c0 < a.vocab; c0 += kChunk) {
    const int64_t nc = std::min(kChunk, a.vocab - c0);
    if (!whole) load_f32(base, a.dtype, row * a.s0 + c0 * a.s1, a.s1, nc, buf);
    v8 acc[4] = {v8{}, v8{}, v8{}, v8{}};
    int64_t i = 0;
    for (; i + 32 <= nc; i += 32) {
      for (int k = 0; k < 4; ++k) acc[k] += exp8((load8(buf + i + 8 * k) - m) * inv_t);
    }
    for (; i + 8 <= nc; i += 8) acc[0] += exp8((load8(buf + i) - m) * inv_t);
    double chunk = 0.0;
    for (; i < nc; ++i) chunk += std::exp((buf[i] - m) * inv_t);
    for (int k = 0; k < 8; ++k) chunk += static_cast<double>((acc[0][k] + acc[1][k]) + (acc[2][k] + acc[3][k]));
    total += chunk;
  }
  store(a, row, m, static_cast<float>(total));
}

}  // namespace

extern "C" {

uint64_t max_softmax_partials_args_bytes() { return sizeof(MaxSoftmaxArgs); }

int max_softmax_partials_cpu(const MaxSoftmaxArgs* args) {
  const MaxSoftmaxArgs& a = *args;
  parallel_for(a.num_rows, a.threads, [&](int64_t row) {
    one_row(a, row, scratch(static_cast<size_t>(kChunk)));
  });
  if (a.survival != 0) {
    const float* conf = reinterpret_cast<const float*>(a.confidence);
    float* surv = reinterpret_cast<float*>(a.survival);
    for (int64_t r0 = 0; r0 < a.num_rows; r0 += a.block) {
      double p = 1.0;
      for (int64_t i = r0; i < r0 + a.block; ++i) {
        p *= static_cast<double>(conf[i]);
        surv[i] = static_cast<float>(p);
      }
    }
  }
  return 0;
}

}  // extern "C"
