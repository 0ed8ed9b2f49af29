// Host-side launchers of the AscendC kernels (defined next to each kernel in csrc/kernels/<op>.cpp). Each takes
// its op's arguments struct (csrc/kernels/<op>_tiling.h, the C++ mirror of the op's Python arguments object),
// computes the tiling from it with the same function the host model uses, then launches
// `kernel<<<blockDim, nullptr, stream>>>` on `stream`.
#pragma once

#include <cstdint>

#include "kernels/allocate_verify_budget_tiling.h"
#include "kernels/max_softmax_confidence_tiling.h"
#include "kernels/prepare_block_slots_tiling.h"
#include "kernels/verify_causal_conv1d_tiling.h"
#include "kernels/verify_gated_delta_rule_tiling.h"

namespace ascend_spec {

void prepare_block_slots_impl(void *stream, uint32_t vectorCores, const PrepareBlockSlotsArgs &args);

void max_softmax_partials_impl(void *stream, uint32_t vectorCores, const MaxSoftmaxConfidenceArgs &args);

void allocate_verify_budget_impl(void *stream, uint32_t vectorCores, const AllocateVerifyBudgetArgs &args);

// args.mode: kModeVerify or kModeFlush (csrc/kernels/kernel_modes.h). 0: launched; -1: refused, the tiling does
// not fit args.ubBytes (VerifyGdnLaunchUbBytes; the binding reports it before queueing the launch).
int verify_gated_delta_rule_impl(void *stream, uint32_t vectorCores, const VerifyGatedDeltaRuleArgs &args);

// args.mode: kModeVerify, kModeFlush or kModeFlushAndReset. 0: launched; -1: refused, the tiling does not fit
// args.ubBytes (VerifyConv1dLaunchUbBytes; the binding reports it before queueing the launch).
int verify_causal_conv1d_impl(void *stream, uint32_t vectorCores, const VerifyCausalConv1dArgs &args);

}  // namespace ascend_spec
