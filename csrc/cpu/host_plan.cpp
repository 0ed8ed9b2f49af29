// The controller's per-step host arithmetic on [B, K] survivals (ascend_spec/graph/host_plan.py): what a
// synchronous engine step computes on the host between the one survival read and the draft lengths, as one
// call instead of ~20 NumPy calls (each ~1 us warm, ~5 us right after a forward has evicted the caches).
//
//   mode 0, bounds:      out[0] = min over b, i of s[b, i] * f_i    (f = 1 without factors: min of s[:, K-1])
//                        out[1] = sum over i of f_i * sum over b of s[b, i]
//   mode 1, factors:     predicted *= decay, observed *= decay, factors = (observed + prior) / (predicted + prior)
//   mode 2, accumulate:  predicted[i] += sum of s[n, i] over rows with i < verified[n],
//                        observed[i] += count of rows with i < accepted[n]
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
  int64_t out;  // [2] fp64 (mode 0)
  double decay, prior;
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

void accumulate(const HostPlanArgs& a) {
  const float* s = reinterpret_cast<const float*>(a.survival);
  const int64_t* ver = reinterpret_cast<const int64_t*>(a.verified);
  const int64_t* acc = reinterpret_cast<const int64_t*>(a.accepted);
  double* p = reinterpret_cast<double*>(a.predicted);
  double* o = reinterpret_cast<double*>(a.observed);
  const int64_t k = a.max_drafts;
  for (int64_t n = 0; n < a.num_rows; ++n) {
    const int64_t v = ver[n] < k ? ver[n] : k;
    for (int64_t i = 0; i < v; ++i) p[i] += static_cast<double>(s[n * k + i]);
    const int64_t c = acc[n] < k ? acc[n] : k;
    for (int64_t i = 0; i < c; ++i) o[i] += 1.0;
  }
}

}  // namespace

extern "C" {

uint64_t host_plan_args_bytes() { return sizeof(HostPlanArgs); }

int host_plan_cpu(const HostPlanArgs* args) {
  const HostPlanArgs& a = *args;
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
      accumulate(a);
      return 0;
    default:
      return 2;
  }
}

}  // extern "C"
