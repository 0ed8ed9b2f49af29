// The controller's per-step host arithmetic on [B, K] survivals (ascend_spec/graph/host_plan.py): what a
// synchronous engine step computes on the host between the one survival read and the draft lengths, as one
// call instead of ~20 NumPy calls (each ~1 us warm, ~5 us right after a forward has evicted the caches).
//
//   mode 0, bounds:      out[0] = min over b, i of s[b, i] * f_i    (f = 1 without factors: min of s[:, K-1])
//                        out[1] = sum over i of f_i * sum over b of s[b, i]
//   mode 1, factors:     predicted *= decay, observed *= decay, factors = (observed + prior) / (predicted + prior)
//   mode 2, accumulate:  predicted[i] += sum of s[n, i] over rows with i < verified[n],
//                        observed[i] += count of rows with i < accepted[n]
//   mode 3, step:        one planned engine step in one call, in this order: the scorer (a native kernel
//                        int f(const Args*) that writes the survivals, e.g. max_softmax_partials' confidence +
//                        survival; optional), the previous step's bookkeeping (mode 2 on pending_rows [P, K],
//                        verified, accepted; P = num_pending, may be 0) before anything overwrites those rows,
//                        the survivals copied to `ring` (the rows a later step's bookkeeping reads; optional),
//                        the decayed factors (mode 1, when predicted is set), the bounds (mode 0, with those
//                        factors) and decision = 1 when out[0] > full_above (verify every draft), 2 when
//                        out[1] < plain_below (plain decoding), else 0 (the caller searches)
//
// Survivals are fp32 and contiguous (the host copy of survival_probs), sums and factors fp64, counts int64;
// the NumPy forms in host_plan.py are the oracle (same arithmetic, sums accumulated in double here).
#include "cpu_common.h"

namespace {

struct HostPlanArgs {
  int64_t mode, survival, num_rows, max_drafts;
  int64_t factors;  // mode 0: 0 or [K] fp64 in; mode 1: [K] fp64 out
  int64_t predicted, observed;  // [K] fp64 (modes 1 and 2)
  int64_t verified, accepted;  // [N] int64 (mode 2)
  int64_t out;  // [2] fp64 (modes 0 and 3)
  int64_t scorer_fn, scorer_args;  // mode 3: int (*)(const void*) and its arguments, or 0
  int64_t pending_rows, num_pending;  // mode 3: [P, K] fp32 rows of the bookkeeping (verified, accepted: [P])
  int64_t ring;  // mode 3: [B, K] fp32 copy of the survivals, or 0
  int64_t decision;  // mode 3, out: 0 search, 1 full blocks, 2 plain decoding
  double decay, prior;
  double full_above, plain_below;  // mode 3
};

void bounds(const HostPlanArgs& a) {
  const float* s = reinterpret_cast<const float*>(a.survival);
  const double* f = reinterpret_cast<const double*>(a.factors);
  double* out = reinterpret_cast<double*>(a.out);
  const int64_t k = a.max_drafts;
  double smallest = 0.0, bound = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    float col_min = s[i];
    double col_sum = 0.0;
    for (int64_t b = 0; b < a.num_rows; ++b) {
      const float v = s[b * k + i];
      col_min = v < col_min ? v : col_min;
      col_sum += v;
    }
    const double fi = f != nullptr ? f[i] : 1.0;
    const double m = static_cast<double>(col_min) * fi;
    smallest = (i == 0 || m < smallest) ? m : smallest;
    bound += col_sum * fi;
  }
  out[0] = smallest;
  out[1] = bound;
}

void factors(const HostPlanArgs& a) {
  double* p = reinterpret_cast<double*>(a.predicted);
  double* o = reinterpret_cast<double*>(a.observed);
  double* f = reinterpret_cast<double*>(a.factors);
  for (int64_t i = 0; i < a.max_drafts; ++i) {
    p[i] *= a.decay;
    o[i] *= a.decay;
    f[i] = (o[i] + a.prior) / (p[i] + a.prior);
  }
}

void accumulate(const HostPlanArgs& a, int64_t rows_ptr, int64_t num_rows) {
  const float* s = reinterpret_cast<const float*>(rows_ptr);
  const int64_t* ver = reinterpret_cast<const int64_t*>(a.verified);
  const int64_t* acc = reinterpret_cast<const int64_t*>(a.accepted);
  double* p = reinterpret_cast<double*>(a.predicted);
  double* o = reinterpret_cast<double*>(a.observed);
  const int64_t k = a.max_drafts;
  for (int64_t n = 0; n < num_rows; ++n) {
    const int64_t v = ver[n] < k ? ver[n] : k;
    for (int64_t i = 0; i < v; ++i) p[i] += static_cast<double>(s[n * k + i]);
    const int64_t c = acc[n] < k ? acc[n] : k;
    for (int64_t i = 0; i < c; ++i) o[i] += 1.0;
  }
}

int step(HostPlanArgs& a) {
  if (a.scorer_fn != 0) {
    using Scorer = int (*)(const void*);
    const int status = reinterpret_cast<Scorer>(a.scorer_fn)(reinterpret_cast<const void*>(a.scorer_args));
    if (status != 0) return 16 + status;
  }
  if (a.num_pending > 0) accumulate(a, a.pending_rows, a.num_pending);
  if (a.ring != 0) {
    const float* s = reinterpret_cast<const float*>(a.survival);
    float* r = reinterpret_cast<float*>(a.ring);
    for (int64_t j = 0; j < a.num_rows * a.max_drafts; ++j) r[j] = s[j];
  }
  if (a.predicted != 0) factors(a);
  bounds(a);
  const double* out = reinterpret_cast<const double*>(a.out);
  a.decision = out[0] > a.full_above ? 1 : (out[1] < a.plain_below ? 2 : 0);
  return 0;
}

}  // namespace

extern "C" {

uint64_t host_plan_args_bytes() { return sizeof(HostPlanArgs); }

int host_plan_cpu(HostPlanArgs* args) {
  HostPlanArgs& a = *args;
  if (a.max_drafts < 1 || a.num_rows < 0) return 1;
  switch (a.mode) {
    case 0:
      if (a.num_rows < 1) return 1;
      bounds(a);
      return 0;
    case 1:
      factors(a);
      return 0;
    case 2:
      accumulate(a, a.survival, a.num_rows);
      return 0;
    case 3:
      if (a.num_rows < 1 || a.num_pending < 0) return 1;
      return step(a);
    default:
      return 2;
  }
}

}  // extern "C"
