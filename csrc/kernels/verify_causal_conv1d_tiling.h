// Tiling of verify_causal_conv1d / flush of the conv records, computed on the host by both the NPU binding and the
// host-model entry, so the two launch the kernel identically.
#pragma once

#include <cstdint>

namespace ascend_spec {

struct VerifyConv1dTiling {
    int64_t numRows;      // B: rows of this call (state_indices entries)
    int64_t channels;     // C
    int64_t width;        // W (state holds W-1 inputs per channel)
    int64_t maxTokens;    // L: record capacity per slot
    int64_t numSlots;     // S
    int64_t tileC;        // channels per unit (multiple of 16, so every UB row is 32-byte aligned for 2-byte types)
    int64_t numTiles;     // ceil(C / tileC)
    int64_t tileT;        // tokens per chunk (>= W-1: a later chunk's taps never reach the committed state)
    int64_t unitsPerCore; // (row, channel tile) units per vector core
    int64_t hasBias;
    int64_t silu;
    int64_t mode;         // 0 verify; 1 flush; 2 flush and zero pending
    int64_t countRowsPerCore;  // rows per vector core of the count kernel
    uint32_t blockDim;         // vector cores launched (main kernel)
    uint32_t countBlockDim;    // vector cores launched (count kernel)
};

// Unified Buffer bytes the kernel carves for a channel tile of `tileC` (see VerifyConv1d::Init).
inline int64_t VerifyConv1dUbBytes(int64_t tileC, int64_t tileT, int64_t width, int64_t xBytes, int64_t recBytes,
                                   int64_t poolBytes) {
    const int64_t wm1 = width - 1;
    int64_t stageBytes = tileT * xBytes;
    if (recBytes * tileT > stageBytes) stageBytes = recBytes * tileT;
    if (poolBytes * wm1 > stageBytes) stageBytes = poolBytes * wm1;
    int64_t perChannel = stageBytes          // raw staging of x / records / pool rows
                         + tileT * xBytes     // y in x's dtype
                         + (wm1 + tileT) * 4  // fp32 window: committed state rows + this chunk's tokens
                         + tileT * 4          // fp32 outputs of the chunk
                         + 4                  // fp32 scratch row
                         + width * 4 + 4      // fp32 weights [W, tileC] and bias
                         + wm1 * 4            // fp32 pool tile in its [tileC, W-1] layout
                         + 2 * wm1 * 4;       // uint32 Gather offsets of the two transposes
    return perChannel * tileC + 10 * 32;      // alignment slack of the ten buffers
}

inline VerifyConv1dTiling ComputeVerifyConv1dTiling(int64_t numRows, int64_t channels, int64_t width,
                                                     int64_t maxTokens, int64_t numSlots, bool hasBias, bool silu,
                                                     int64_t mode, int64_t xBytes, int64_t recBytes,
                                                     int64_t poolBytes, int64_t ubBytes, uint32_t vectorCores) {
    VerifyConv1dTiling t{};
    t.numRows = numRows;
    t.channels = channels;
    t.width = width;
    t.maxTokens = maxTokens;
    t.numSlots = numSlots;
    t.hasBias = hasBias ? 1 : 0;
    t.silu = silu ? 1 : 0;
    t.mode = mode;
    t.tileT = width - 1 > 16 ? width - 1 : 16;
    const int64_t cPadded = (channels + 15) / 16 * 16;
    int64_t tileC = cPadded < 1024 ? cPadded : 1024;
    while (tileC > 16 && VerifyConv1dUbBytes(tileC, t.tileT, width, xBytes, recBytes, poolBytes) > ubBytes) {
        tileC -= 16;
    }
    t.tileC = tileC;  // the host checks VerifyConv1dUbBytes(tileC, ...) <= ubBytes before launching
    t.numTiles = (channels + tileC - 1) / tileC;
    int64_t units = numRows * t.numTiles;
    if (units < 1) units = 1;
    int64_t cores = vectorCores > 0 ? vectorCores : 1;
    t.unitsPerCore = (units + cores - 1) / cores;
    t.blockDim = static_cast<uint32_t>((units + t.unitsPerCore - 1) / t.unitsPerCore);
    const int64_t rows = numRows > 0 ? numRows : 1;
    t.countRowsPerCore = (rows + cores - 1) / cores;
    t.countBlockDim = static_cast<uint32_t>((rows + t.countRowsPerCore - 1) / t.countRowsPerCore);
    return t;
}

}  // namespace ascend_spec
