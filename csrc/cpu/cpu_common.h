// Shared pieces of the native CPU kernels (csrc/cpu/*.cpp, loaded by ascend_spec/cpu/native.py).
//
// Every kernel takes its arguments as one struct of int64 fields (pointers, sizes, element strides, dtype
// codes) and converts float inputs to fp32 working rows once, so the arithmetic loops are dense fp32 loops the
// compiler vectorises. Dtype codes follow csrc/kernels/dtype_codes.h: 0 fp32, 1 bf16, 2 fp16; index codes
// 0 int32, 1 int64.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace ascend_spec_cpu {

enum DtypeCode : int64_t { kF32 = 0, kBf16 = 1, kF16 = 2 };
enum IndexCode : int64_t { kI32 = 0, kI64 = 1 };

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {  // round to nearest even, as torch's .to(torch.bfloat16)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1fu) {
    u = sign | 0x7f800000u | (man << 13);  // inf / NaN
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal half: normalise
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    u = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_f16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past the largest half: inf
  if (abs >= 0x38800000u) {  // normal half
    uint32_t v = abs - (112u << 23);
    v += 0xfffu + ((v >> 13) & 1u);
    return static_cast<uint16_t>(sign | (v >> 13));
  }
  if (abs < 0x33000000u) return sign;  // below half the smallest subnormal: +-0
  // subnormal half: shift the 24-bit significand, round to nearest even
  const uint32_t e = abs >> 23;
  const uint32_t man = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14 .. 24
  uint32_t v = man >> shift;
  const uint32_t rem = man & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (v & 1u))) ++v;
  return static_cast<uint16_t>(sign | v);
}

// n elements of a float tensor (element stride `stride`) into a dense fp32 row.
inline void load_f32(const void* base, int64_t dtype, int64_t offset, int64_t stride, int64_t n, float* dst) {
  if (dtype == kF32) {
    const float* p = static_cast<const float*>(base) + offset;
    if (stride == 1) {
      std::memcpy(dst, p, static_cast<size_t>(n) * 4);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = p[i * stride];
    }
    return;
  }
  const uint16_t* p = static_cast<const uint16_t*>(base) + offset;
  if (dtype == kBf16) {
    if (stride == 1) {  // a shift per element: the compiler vectorises the dense case
      uint32_t* d = reinterpret_cast<uint32_t*>(dst);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<uint32_t>(p[i]) << 16;
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(p[i * stride]);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(p[i * stride]);
  }
}

// A dense fp32 row into n elements of a float tensor (element stride `stride`), rounding to its dtype.
inline void store_f32(void* base, int64_t dtype, int64_t offset, int64_t stride, int64_t n, const float* src) {
  if (dtype == kF32) {
    float* p = static_cast<float*>(base) + offset;
    if (stride == 1) {
      std::memcpy(p, src, static_cast<size_t>(n) * 4);
    } else {
      for (int64_t i = 0; i < n; ++i) p[i * stride] = src[i];
    }
    return;
  }
  uint16_t* p = static_cast<uint16_t*>(base) + offset;
  if (dtype == kBf16) {
    if (stride == 1) {
      const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t u = s[i];
        const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        p[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x40u) : rounded);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) p[i * stride] = f32_to_bf16(src[i]);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) p[i * stride] = f32_to_f16(src[i]);
  }
}

inline float load_one(const void* base, int64_t dtype, int64_t offset) {
  float v;
  load_f32(base, dtype, offset, 1, 1, &v);
  return v;
}

// Eight floats / int32s (GCC vector extensions: AVX, AVX-512 halves, NEON pairs); aligned(4): loads and
// stores may be unaligned (rows of strided tensors, scratch buffers).
typedef float v8 __attribute__((vector_size(32), aligned(4)));
typedef int32_t v8i __attribute__((vector_size(32), aligned(4)));

inline v8 load8(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void store8(float* p, v8 v) { std::memcpy(p, &v, sizeof(v)); }

// e^x of eight floats (Cephes' expf: range reduction by ln 2 in two parts, degree-6 polynomial, 2^n from the
// exponent bits; within 2 ulp of expf over its range): 0 below -87.3 (e^x would be subnormal; -inf included),
// inputs above 88.376 clamped there, NaN stays NaN.
inline v8 exp8(v8 x) {
  const v8 hi = v8{} + 88.3762626647949f, lo = v8{} - 87.3365447504f;
  const v8i under = x < lo;
  x = x > hi ? hi : x;
  x = x < lo ? lo : x;
  v8 fx = x * 1.44269504088896341f + 0.5f;
  v8i n = __builtin_convertvector(fx, v8i);  // toward zero, then floor
  v8 fn = __builtin_convertvector(n, v8);
  const v8i one = v8i{} + 1;
  n = fn > fx ? n - one : n;
  fn = __builtin_convertvector(n, v8);
  const v8 r = x - fn * 0.693359375f + fn * 2.12194440e-4f;
  v8 p = v8{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const v8 y = p * r * r + r + 1.f;
  const v8i bits = (n + 127) << 23;
  v8 scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return under ? v8{} : y * scale;
}

// x * sigmoid(x) = x / (1 + e^-x) in place (vLLM's and torch's SiLU).
inline void silu_inplace(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const v8 v = load8(x + i);
    store8(x + i, v / (1.f + exp8(-v)));
  }
  for (; i < n; ++i) x[i] = x[i] / (1.f + std::exp(-x[i]));
}

// Element i of an int32 / int64 index tensor with element stride `stride`.
inline int64_t load_index(const void* base, int64_t code, int64_t i, int64_t stride) {
  return code == kI64 ? static_cast<const int64_t*>(base)[i * stride]
                      : static_cast<int64_t>(static_cast<const int32_t*>(base)[i * stride]);
}

// The rows of one GDN-pair call: row b's state slot (owned when in [0, S); other indices are padding) and, in a
// verify call (cu_seqlens given), its tokens [start, start + len) with cu_seqlens clamped to the T tokens.
// all_written(): the owned rows cover every output row back to back (else a kernel zeroes its outputs first,
// as the reference does, so uncovered and padding rows read zeros).
class RowScan {
 public:
  struct Span {
    int64_t slot, start, len;
    bool owned;
  };

  RowScan(int64_t idx, int64_t idx_dtype, int64_t idx_s0, int64_t num_slots, int64_t cu, int64_t cu_dtype,
          int64_t cu_s0, int64_t num_tokens)
      : idx_(reinterpret_cast<const void*>(idx)), idx_dtype_(idx_dtype), idx_s0_(idx_s0), num_slots_(num_slots),
        cu_(reinterpret_cast<const void*>(cu)), cu_dtype_(cu_dtype), cu_s0_(cu_s0), num_tokens_(num_tokens) {}

  Span at(int64_t b) {
    const int64_t slot = load_index(idx_, idx_dtype_, b, idx_s0_);
    Span span{slot, 0, 0, slot >= 0 && slot < num_slots_};
    if (cu_ != nullptr) {
      span.start = clamp_token(load_index(cu_, cu_dtype_, b, cu_s0_));
      const int64_t end = clamp_token(load_index(cu_, cu_dtype_, b + 1, cu_s0_));
      span.len = end - span.start;
      covered_ = covered_ && span.start == expect_ && span.len >= 0 && (span.owned || span.len == 0);
      expect_ = end > expect_ ? end : expect_;
    }
    return span;
  }

  bool all_written() const { return covered_ && expect_ == num_tokens_; }

 private:
  int64_t clamp_token(int64_t t) const { return t < 0 ? 0 : (t > num_tokens_ ? num_tokens_ : t); }

  const void* idx_;
  int64_t idx_dtype_, idx_s0_, num_slots_;
  const void* cu_;
  int64_t cu_dtype_, cu_s0_, num_tokens_;
  bool covered_ = true;
  int64_t expect_ = 0;
};

// min(max(pending, 0), recorded clamped to [0, capacity]): the records a commit may replay (never stale ones).
inline int64_t replay_count(int64_t pending, int64_t recorded, int64_t capacity) {
  const int64_t rec = recorded < 0 ? 0 : (recorded > capacity ? capacity : recorded);
  return pending < 0 ? 0 : (pending < rec ? pending : rec);
}

// A row a GDN-pair kernel works on: its slot, its tokens [start, start + len) (verify calls), its pending count
// and the records it replays (replay_count).
struct WorkRow {
  int64_t slot, start, len, pending, replay;
};

// The call's owned rows a kernel works on, in row order: with tokens in a verify call, those `keep_flush`
// accepts in a flush. `scan` keeps the coverage (RowScan::all_written) of what it read.
template <typename KeepFlush>
std::vector<WorkRow> work_rows(RowScan& scan, int64_t num_rows, bool verify, const int32_t* pending,
                               int64_t pending_s0, const int32_t* recorded, int64_t capacity, KeepFlush keep_flush) {
  std::vector<WorkRow> rows;
  rows.reserve(static_cast<size_t>(num_rows));
  for (int64_t b = 0; b < num_rows; ++b) {
    const RowScan::Span span = scan.at(b);
    if (!span.owned) continue;
    const int64_t p = pending[b * pending_s0];
    const WorkRow row{span.slot, span.start, span.len, p, replay_count(p, recorded[span.slot], capacity)};
    if (verify ? row.len > 0 : keep_flush(row)) rows.push_back(row);
  }
  return rows;
}

// One parallel loop over `n` independent work items on `threads` threads (no region for a single thread).
template <typename F>
inline void parallel_for(int64_t n, int64_t threads, F&& body) {
#if defined(_OPENMP)
  if (threads > 1 && n > 1) {
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(threads))
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) body(i);
}

// Growing per-thread fp32 work buffers (kept across calls: no allocation on the hot path); two, so a kernel can
// hold a second one while the first is in use.
inline float* scratch(size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

inline float* scratch_aux(size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace ascend_spec_cpu
