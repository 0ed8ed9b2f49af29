// Host model: the launcher that replaces `kernel<<<blockDim, nullptr, stream>>>(args...)`, and the C entry
// points the Python runner uses to configure a launch. Blocks run one after another on the calling thread.
#pragma once

#include <cstdio>

#include "hm_pipe.h"

namespace AscendC {
namespace host_model {

// Runs `kernel` once per block index and checks what the chip would have enforced. Returns 0, or -1 with the
// message in GetState().lastError (read by the Python side through ascend_spec_hm_last_error()).
template <typename... Params, typename... Args>
int Launch(uint32_t blockDim, void (*kernel)(Params...), Args... args) {
    State &s = GetState();
    s.lastError.clear();
    if (blockDim == 0) {
        s.lastError = "launch with blockDim = 0";
        return -1;
    }
    s.blockNum = blockDim;
    for (uint32_t i = 0; i < blockDim; ++i) {
        s.counters.blocks += 1;
        s.blockIdx = s.reverseBlocks ? int64_t(blockDim - 1 - i) : int64_t(i);
        s.deferredError.clear();
        try {
            kernel(args...);
        } catch (const std::exception &e) {
            s.lastError = "block " + std::to_string(s.blockIdx) + ": " + e.what();
        }
        if (s.lastError.empty() && !s.deferredError.empty()) {
            s.lastError = "block " + std::to_string(s.blockIdx) + ": " + s.deferredError;
        }
        if (!s.lastError.empty()) return -1;
    }
    return 0;
}

}  // namespace host_model
}  // namespace AscendC

// C entry points, defined once per kernel library (each library is one translation unit).
#define ASCEND_SPEC_HOST_MODEL_RUNTIME                                                                       \
    extern "C" void ascend_spec_hm_configure(uint64_t ubBytes, int reverseBlocks) {                          \
        AscendC::host_model::GetState().ubBytes = ubBytes;                                                   \
        AscendC::host_model::GetState().reverseBlocks = reverseBlocks != 0;                                  \
        AscendC::host_model::GetState().counters = AscendC::host_model::Counters{};                          \
    }                                                                                                        \
    extern "C" void ascend_spec_hm_register_gm(void *ptr, uint64_t bytes) {                                  \
        auto begin = reinterpret_cast<uintptr_t>(ptr);                                                       \
        AscendC::host_model::GetState().gm.push_back({begin, begin + bytes});                                \
    }                                                                                                        \
    extern "C" void ascend_spec_hm_clear_gm() { AscendC::host_model::GetState().gm.clear(); }                \
    extern "C" int32_t ascend_spec_hm_counters(int64_t *out, int32_t n) {                                     \
        const AscendC::host_model::Counters &c = AscendC::host_model::GetState().counters;                   \
        const int64_t values[] = {c.vectorInstructions, c.vectorRepeats, c.scalarUbReads, c.scalarUbWrites,   \
                                  c.scalarGmReads,      c.scalarGmWrites, c.mte2Bursts,  c.mte2Bytes,         \
                                  c.mte3Bursts,         c.mte3Bytes,     c.ubCopyBursts, c.ubCopyBytes,       \
                                  c.blocks};                                                                   \
        for (int32_t i = 0; i < n && i < AscendC::host_model::kCounterFields; ++i) out[i] = values[i];        \
        return AscendC::host_model::kCounterFields;                                                           \
    }                                                                                                        \
    extern "C" const char *ascend_spec_hm_last_error() {                                                     \
        return AscendC::host_model::GetState().lastError.c_str();                                            \
    }
