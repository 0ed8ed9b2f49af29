// Host-side only (std::string): the error every launcher gives when a launch's tiling does not fit the Unified
// Buffer, naming the argument that makes it too large. Used by the NPU binding (csrc/torch_binding.cpp, before
// the launch is queued) and by the host-model launchers, over the same *LaunchUbBytes functions the NPU
// launchers check (the chip itself checks nothing: a tiling past UB corrupts memory there).
#pragma once

#include <cstdint>
#include <string>

#include "verify_causal_conv1d_tiling.h"
#include "verify_gated_delta_rule_tiling.h"

namespace ascend_spec {

inline std::string UbFitError(const char *op, const std::string &argument, int64_t need, int64_t have) {
    return std::string(op) + ": " + argument + " needs " + std::to_string(need) +
           " bytes of Unified Buffer on one vector core at the smallest tiling, above the " + std::to_string(have) +
           " the core has";
}

// "" when the launch fits.
inline std::string VerifyGdnUbFitError(const VerifyGatedDeltaRuleArgs &a, uint32_t vectorCores) {
    const int64_t need = VerifyGdnLaunchUbBytes(a, vectorCores);
    if (need <= a.ubBytes) return "";
    return UbFitError(a.mode == kModeVerify ? "verify_gated_delta_rule" : "flush_pending",
                      "state_pool: Dk = state_pool.shape[2] = " + std::to_string(a.dk), need, a.ubBytes);
}

inline std::string VerifyConv1dUbFitError(const VerifyCausalConv1dArgs &a, uint32_t vectorCores) {
    const int64_t need = VerifyConv1dLaunchUbBytes(a, vectorCores);
    if (need <= a.ubBytes) return "";
    return UbFitError(a.mode == kModeVerify ? "verify_causal_conv1d" : "flush_conv_pending",
                      "conv_state_pool: width = conv_state_pool.shape[2] + 1 = " + std::to_string(a.width), need,
                      a.ubBytes);
}

}  // namespace ascend_spec
