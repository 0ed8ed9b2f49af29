// Native CPU kernel of verify_gated_delta_rule and its flush (ascend_spec/gdn/verify_gated_delta_rule/cpu.py).
//
// Same math as the reference (ascend_spec/gdn/verify_gated_delta_rule/reference.py), in one call instead of
// ~200 PyTorch operators: per (row, value head), in one pass over the committed state, the pending records are
// replayed into it in closed form (S <- e^{G_n} S + sum_t e^{R_t} k_t u_t^T, R_t summed from the tail) and
// [q; k] are projected through it; this call's tokens then run in chunk form (forward substitution of the unit
// lower-triangular system over the tokens, decays D[t, s] summed directly). A verify call writes the committed
// state only where something is pending, this call's records into the other bank, then the slot's bank and
// count. Rows without a slot in [0, S) write nothing and output zeros; rows of length 0 touch nothing.
#include <algorithm>

#include "cpu_common.h"

using namespace ascend_spec_cpu;

namespace {

struct GdnArgs {
  int64_t mode;  // 0 verify, 1 flush (KernelMode)
  // tensors
  int64_t q, k, v, g, beta, cu_seqlens, state_indices, pending, pool, out;
  int64_t rec_k, rec_g, rec_u, rec_bank, rec_num;
  // sizes
  int64_t num_tokens, num_rows, num_slots, num_heads, num_v_heads, dk, dv, capacity;
  // element strides
  int64_t q_s0, q_s1, q_s2, k_s0, k_s1, k_s2, v_s0, v_s1, v_s2, g_s0, g_s1, b_s0, b_s1;
  int64_t p_s0, p_s1, p_s2, p_s3, idx_s0, cu_s0, pending_s0;
  // dtype codes
  int64_t qkv_dtype, g_dtype, beta_dtype, cu_dtype, idx_dtype;
  int64_t l2norm, threads;
  double scale;
};

using Row = WorkRow;

// The bank holding a slot's last call's records (flipped only after every work item ran).
inline int64_t bank_of(const GdnArgs& a, int64_t slot) {
  return reinterpret_cast<const int32_t*>(a.rec_bank)[slot] ? 1 : 0;
}

inline void l2normalise(float* x, int64_t n) {
  float ss = 0.f;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

inline float dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float acc = 0.f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

inline void axpy(float* __restrict y, float a, const float* __restrict x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// Replay weights of the first n records: lhs[t] = e^{R_t} k_t (R_t = g_{t+1} + ... + g_{n-1}), returns e^{G_n}.
float replay_lhs(const GdnArgs& a, const Row& r, int64_t h, int64_t hv, float* lhs) {
  const float* rk = reinterpret_cast<const float*>(a.rec_k);
  const float* rg = reinterpret_cast<const float*>(a.rec_g);
  const int64_t cap = a.capacity, bank = bank_of(a, r.slot);
  float tail = 0.f;  // g_{t+1} + ... + g_{n-1}
  for (int64_t t = r.replay - 1; t >= 0; --t) {
    const float w = std::exp(tail);
    const float* kt = rk + (((r.slot * 2 + bank) * cap + t) * a.num_heads + h) * a.dk;
    for (int64_t i = 0; i < a.dk; ++i) lhs[t * a.dk + i] = w * kt[i];
    tail += rg[((r.slot * 2 + bank) * cap + t) * a.num_v_heads + hv];
  }
  return std::exp(tail);
}

// kW floats: the register block of the key-major projection (64 bytes: one AVX-512 register, two AVX ones).
constexpr int64_t kW = 16;
typedef float vw __attribute__((vector_size(4 * kW), aligned(4)));

inline vw loadw(const float* p) {
  vw v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void storew(float* p, vw v) { std::memcpy(p, &v, sizeof(v)); }

// Key-major slot, kW value columns from j0: commit rows i of the state (if n > 0) and accumulate MB rows of
// x [m, Dk] against them (p[r][j0 .. j0+kW] = sum_i x[r][i] S[i][j0 ..]); the accumulators stay in registers.
// MB = 0: commit only.
template <int MB>
inline void project_block(float* s, int64_t row_stride, int64_t dk, int64_t dv, int64_t j0, bool commit,
                          const float* lhs, const vw* ub, int64_t n, float decay, const float* x, float* p) {
  vw acc[MB > 0 ? MB : 1];
  for (int r = 0; r < MB; ++r) acc[r] = vw{};
  for (int64_t i = 0; i < dk; ++i) {
    float* sp = s + i * row_stride + j0;
    vw sv = loadw(sp);
    if (commit) {
      sv *= decay;
      for (int64_t t = 0; t < n; ++t) sv += lhs[t * dk + i] * ub[t];
      storew(sp, sv);
    }
    for (int r = 0; r < MB; ++r) acc[r] += x[r * dk + i] * sv;
  }
  for (int r = 0; r < MB; ++r) storew(p + r * dv + j0, acc[r]);
}

template <int MB>
inline void project_rows(float* s, int64_t row_stride, int64_t dk, int64_t dv, int64_t j0, bool commit,
                         const float* lhs, const vw* ub, int64_t n, float decay, const float* x, float* p,
                         int64_t mb) {
  if constexpr (MB > 1) {
    if (mb < MB) {
      project_rows<MB - 1>(s, row_stride, dk, dv, j0, commit, lhs, ub, n, decay, x, p, mb);
      return;
    }
  }
  project_block<MB>(s, row_stride, dk, dv, j0, commit, lhs, ub, n, decay, x, p);
}

// Commit (if n > 0) the state of (row, hv) in place and project the m = 2L rows x = [q; k] through it into
// p = [S^T q; S^T k] (p [m, Dv]): one pass over the state; the key-major path blocks 8 value columns x 8 rows
// in registers (a small GEMM), the value-major one takes dot products along the contiguous key dim.
template <bool kValueMajor>
void commit_and_project(const GdnArgs& a, const Row& r, int64_t hv, const float* lhs, float decay,
                        const float* x, int64_t m, float* p) {
  float* s = reinterpret_cast<float*>(a.pool) + r.slot * a.p_s0 + hv * a.p_s1;
  const float* ru = reinterpret_cast<const float*>(a.rec_u);
  const int64_t u_step = a.num_v_heads * a.dv;  // between tokens of one slot's u records
  const float* u0 = ru + (r.slot * a.capacity * a.num_v_heads + hv) * a.dv;
  const int64_t dk = a.dk, dv = a.dv, n = r.replay;
  if (!kValueMajor) {  // slot [Dk, Dv]: row i of the state is contiguous over the value dim
    vw* ub = reinterpret_cast<vw*>(scratch_aux(static_cast<size_t>(kW * std::max<int64_t>(n, 1))));
    int64_t j0 = 0;
    for (; j0 + kW <= dv; j0 += kW) {
      for (int64_t t = 0; t < n; ++t) ub[t] = loadw(u0 + t * u_step + j0);
      if (m == 0) {
        project_block<0>(s, a.p_s2, dk, dv, j0, n > 0, lhs, ub, n, decay, nullptr, nullptr);
        continue;
      }
      for (int64_t rb = 0; rb < m; rb += 8) {
        project_rows<8>(s, a.p_s2, dk, dv, j0, n > 0 && rb == 0, lhs, ub, n, decay, x + rb * dk, p + rb * dv,
                        std::min<int64_t>(8, m - rb));
      }
    }
    for (; j0 < dv; ++j0) {  // value columns past the last multiple of kW
      for (int64_t rr = 0; rr < m; ++rr) p[rr * dv + j0] = 0.f;
      for (int64_t i = 0; i < dk; ++i) {
        float* sp = s + i * a.p_s2 + j0;
        if (n > 0) {
          float sv = *sp * decay;
          for (int64_t t = 0; t < n; ++t) sv += lhs[t * dk + i] * u0[t * u_step + j0];
          *sp = sv;
        }
        for (int64_t rr = 0; rr < m; ++rr) p[rr * dv + j0] += x[rr * dk + i] * *sp;
      }
    }
  } else {  // vLLM's GPU layout: slot [Dv, Dk], column j of the state contiguous over the key dim
    for (int64_t j = 0; j < dv; ++j) {
      float* col = s + j * a.p_s3;
      if (n > 0) {
#pragma omp simd
        for (int64_t i = 0; i < dk; ++i) col[i] *= decay;
        for (int64_t t = 0; t < n; ++t) axpy(col, u0[t * u_step + j], lhs + t * dk, dk);
      }
      for (int64_t rr = 0; rr < m; ++rr) p[rr * dv + j] = dot(x + rr * dk, col, dk);
    }
  }
}

template <bool kValueMajor>
void commit_only(const GdnArgs& a, const Row& r, int64_t hv, const float* lhs, float decay) {
  commit_and_project<kValueMajor>(a, r, hv, lhs, decay, nullptr, 0, nullptr);
}

// One (row, value head) of a verify call.
template <bool kValueMajor>
void verify_head(const GdnArgs& a, const Row& r, int64_t hv) {
  const int64_t dk = a.dk, dv = a.dv, len = r.len;
  const int64_t group = a.num_v_heads / a.num_heads;
  const int64_t h = hv / group;
  const int64_t n = r.replay;
  float* buf = scratch(static_cast<size_t>(n * dk + 2 * len * dk + 5 * len * dv + 3 * len + dv));
  float* lhs = buf;
  float* qn = lhs + n * dk;
  float* kn = qn + len * dk;
  float* vv = kn + len * dk;
  float* pq = vv + len * dv;
  float* pk = pq + len * dv;
  float* u = pk + len * dv;
  float* o = u + len * dv;
  float* gg = o + len * dv;
  float* bb = gg + len;
  float* gam = bb + len;
  float* tmp = gam + len;

  const float scale = static_cast<float>(a.scale);
  const void* q = reinterpret_cast<const void*>(a.q);
  const void* k = reinterpret_cast<const void*>(a.k);
  const void* v = reinterpret_cast<const void*>(a.v);
  float cum = 0.f;
  for (int64_t t = 0; t < len; ++t) {
    const int64_t tok = r.start + t;
    load_f32(q, a.qkv_dtype, tok * a.q_s0 + h * a.q_s1, a.q_s2, dk, qn + t * dk);
    load_f32(k, a.qkv_dtype, tok * a.k_s0 + h * a.k_s1, a.k_s2, dk, kn + t * dk);
    load_f32(v, a.qkv_dtype, tok * a.v_s0 + hv * a.v_s1, a.v_s2, dv, vv + t * dv);
    if (a.l2norm) {
      l2normalise(qn + t * dk, dk);
      l2normalise(kn + t * dk, dk);
    }
    for (int64_t i = 0; i < dk; ++i) qn[t * dk + i] *= scale;
    gg[t] = load_one(reinterpret_cast<const void*>(a.g), a.g_dtype, tok * a.g_s0 + hv * a.g_s1);
    bb[t] = load_one(reinterpret_cast<const void*>(a.beta), a.beta_dtype, tok * a.b_s0 + hv * a.b_s1);
    cum += gg[t];
    gam[t] = std::exp(cum);  // e^{Gamma_t}, Gamma_t = g_0 + ... + g_t
  }

  const float decay = n > 0 ? replay_lhs(a, r, h, hv, lhs) : 1.f;
  commit_and_project<kValueMajor>(a, r, hv, lhs, decay, qn, 2 * len, pq);  // kn, pk follow qn, pq

  // Chunk form over this call's tokens (forward substitution is the token order).
  for (int64_t t = 0; t < len; ++t) {
    float* ut = u + t * dv;
    float* ot = o + t * dv;
    const float* kt = kn + t * dk;
    const float* qt = qn + t * dk;
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) tmp[j] = vv[t * dv + j] - gam[t] * pk[t * dv + j];
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) ot[j] = gam[t] * pq[t * dv + j];
    float d = 0.f;  // D[t, s] = g_{s+1} + ... + g_t
    for (int64_t s = t - 1; s >= 0; --s) {
      d += gg[s + 1];
      const float e = std::exp(d);
      const float* ks = kn + s * dk;
      axpy(tmp, -e * dot(kt, ks, dk), u + s * dv, dv);
      axpy(ot, e * dot(qt, ks, dk), u + s * dv, dv);
    }
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) ut[j] = bb[t] * tmp[j];
    axpy(ot, dot(qt, kt, dk), ut, dv);  // s = t: e^{D[t, t]} = 1
    store_f32(reinterpret_cast<void*>(a.out), a.qkv_dtype, ((r.start + t) * a.num_v_heads + hv) * dv, 1, dv, ot);
  }

  // This call's records into the other bank (u has one copy, owned by this head).
  const int64_t cap = a.capacity;
  const int64_t nb = 1 - bank_of(a, r.slot);
  const int64_t rec_len = std::min(len, cap);
  float* rk = reinterpret_cast<float*>(a.rec_k);
  float* rg = reinterpret_cast<float*>(a.rec_g);
  float* ru = reinterpret_cast<float*>(a.rec_u);
  for (int64_t t = 0; t < rec_len; ++t) {
    if (hv % group == 0) {
      std::memcpy(rk + (((r.slot * 2 + nb) * cap + t) * a.num_heads + h) * dk, kn + t * dk, dk * 4);
    }
    rg[((r.slot * 2 + nb) * cap + t) * a.num_v_heads + hv] = gg[t];
    std::memcpy(ru + ((r.slot * cap + t) * a.num_v_heads + hv) * dv, u + t * dv, dv * 4);
  }
}

template <bool kValueMajor>
void flush_head(const GdnArgs& a, const Row& r, int64_t hv) {
  const int64_t h = hv / (a.num_v_heads / a.num_heads);
  float* lhs = scratch(static_cast<size_t>(r.replay * a.dk));
  const float decay = replay_lhs(a, r, h, hv, lhs);
  commit_only<kValueMajor>(a, r, hv, lhs, decay);
}

template <bool kValueMajor>
int run(const GdnArgs& a) {
  const int32_t* pending = reinterpret_cast<const int32_t*>(a.pending);
  int32_t* bank = reinterpret_cast<int32_t*>(a.rec_bank);
  int32_t* recorded = reinterpret_cast<int32_t*>(a.rec_num);
  const bool verify = a.mode == 0;
  RowScan scan(a.state_indices, a.idx_dtype, a.idx_s0, a.num_slots, verify ? a.cu_seqlens : 0, a.cu_dtype,
               a.cu_s0, a.num_tokens);
  // A flush commits the owned rows with records to replay; every owned slot's count is reset after (below).
  const std::vector<Row> rows = work_rows(scan, a.num_rows, verify, pending, a.pending_s0, recorded, a.capacity,
                                          [](const Row& r) { return r.replay > 0; });
  if (verify && !scan.all_written()) {
    std::memset(reinterpret_cast<void*>(a.out), 0,
                static_cast<size_t>(a.num_tokens * a.num_v_heads * a.dv) * (a.qkv_dtype == kF32 ? 4 : 2));
  }
  const int64_t items = static_cast<int64_t>(rows.size()) * a.num_v_heads;
  parallel_for(items, a.threads, [&](int64_t item) {
    const Row& r = rows[item / a.num_v_heads];
    const int64_t hv = item % a.num_v_heads;
    if (verify) {
      verify_head<kValueMajor>(a, r, hv);
    } else {
      flush_head<kValueMajor>(a, r, hv);
    }
  });
  if (verify) {
    for (const Row& r : rows) {
      bank[r.slot] = static_cast<int32_t>(1 - bank_of(a, r.slot));
      recorded[r.slot] = static_cast<int32_t>(std::min(r.len, a.capacity));
    }
  } else {
    RowScan owners(a.state_indices, a.idx_dtype, a.idx_s0, a.num_slots, 0, 0, 0, 0);
    for (int64_t b = 0; b < a.num_rows; ++b) {
      const RowScan::Span span = owners.at(b);
      if (span.owned) recorded[span.slot] = 0;
    }
  }
  return 0;
}

}  // namespace

extern "C" {

uint64_t verify_gated_delta_rule_args_bytes() { return sizeof(GdnArgs); }

int verify_gated_delta_rule_cpu(const GdnArgs* args) {
  const bool value_major = args->p_s3 != 1;
  return value_major ? run<true>(*args) : run<false>(*args);
}

}  // extern "C"
