// Arguments and tiling of verify_causal_conv1d / the flushes of its records. The arguments are filled by the NPU
// binding and, field for field, by the host-model runner (ascend_spec/gdn/verify_causal_conv1d/ascendc.py, a
// ctypes mirror checked against sizeof at every launch); both derive the tiling from them, so the two launch the
// kernel identically. Global scope: CANN's launch-stub generator declares the kernels' structs there.
#pragma once

#include <cstdint>

#include "dtype_codes.h"
#include "kernel_modes.h"

struct VerifyCausalConv1dArgs {
    void *x;              // [T, C] (nullptr in the flush modes, as are weightT, bias, y, cu)
    void *weightT;        // [W, C] fp32
    void *bias;           // [C] fp32 or nullptr
    void *y;              // [T, C] out, x's dtype
    void *pool;           // [S, C, W-1] conv state pool (slots stored as tokenMajor says, poolStride apart)
    void *rec;            // ConvRecords.x [S, L, C]
    void *numRecorded;    // [S] int32
    void *cu;             // [B+1] int32 cu_seqlens
    void *idx;            // [B] int32 state_indices (-1 = padding row)
    void *pending;        // [B] int32
    int64_t xType;        // dtype codes: 0 fp32, 1 bf16, 2 fp16
    int64_t recType;
    int64_t poolType;
    int64_t numRows;      // B
    int64_t numTokens;    // T: rows of x and y (0 in the flush modes)
    int64_t channels;     // C
    int64_t width;        // W
    int64_t maxTokens;    // L
    int64_t numSlots;     // S
    int64_t hasBias;
    int64_t silu;
    int64_t mode;         // KernelMode
    int64_t poolStride;   // elements between state slots (>= C * (W-1))
    int64_t tokenMajor;   // 0: slots [C, W-1] dense; 1: slots stored [W-1, C] dense (vLLM's default conv layout)
    int64_t ubBytes;      // Unified Buffer of one vector core
};

struct VerifyConv1dTiling {
    int64_t numRows;      // B: rows of this call (state_indices entries)
    int64_t numTokens;    // T: rows of y; those outside [cu[0], cu[B]) are zeroed (outputs always complete)
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
    int64_t mode;         // KernelMode: verify, flush, or flush and zero pending
    int64_t poolStride;   // elements between state slots
    int64_t tokenMajor;   // slot layout, as in VerifyCausalConv1dArgs
    int64_t countRowsPerCore;  // rows per vector core of the count kernel
    uint32_t blockDim;         // vector cores launched (main kernel)
    uint32_t countBlockDim;    // vector cores launched (count kernel)
};

namespace ascend_spec {

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

// xBytes, recBytes, poolBytes: element bytes of x, records and pool (dtype_codes.h DtypeBytes of the codes).
inline VerifyConv1dTiling ComputeVerifyConv1dTiling(const VerifyCausalConv1dArgs &a, int64_t xBytes,
                                                     int64_t recBytes, int64_t poolBytes, uint32_t vectorCores) {
    VerifyConv1dTiling t{};
    const int64_t numRows = a.numRows, channels = a.channels, width = a.width, ubBytes = a.ubBytes;
    t.numRows = numRows;
    t.numTokens = a.numTokens;
    t.channels = channels;
    t.width = width;
    t.maxTokens = a.maxTokens;
    t.numSlots = a.numSlots;
    t.hasBias = a.hasBias ? 1 : 0;
    t.silu = a.silu ? 1 : 0;
    t.mode = a.mode;
    t.poolStride = a.poolStride;
    t.tokenMajor = a.tokenMajor ? 1 : 0;
    t.tileT = width - 1 > 16 ? width - 1 : 16;
    const int64_t cPadded = (channels + 15) / 16 * 16;
    int64_t tileC = cPadded < 1024 ? cPadded : 1024;
    while (tileC > 16 && VerifyConv1dUbBytes(tileC, t.tileT, width, xBytes, recBytes, poolBytes) > ubBytes) {
        tileC -= 16;
    }
    t.tileC = tileC;  // every launcher checks VerifyConv1dLaunchUbBytes(...) <= ubBytes before launching
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

// The tiling of `a` (element bytes from its dtype codes).
inline VerifyConv1dTiling ComputeVerifyConv1dLaunchTiling(const VerifyCausalConv1dArgs &a, uint32_t vectorCores) {
    return ComputeVerifyConv1dTiling(a, kernel::DtypeBytes(a.xType), kernel::DtypeBytes(a.recType),
                                     kernel::DtypeBytes(a.poolType), vectorCores);
}

// Unified Buffer bytes the launch of `a` carves per vector core; above a.ubBytes it cannot run (the width too
// large for a 16-channel tile). Every launcher checks it: the NPU binding (an error naming conv_state_pool), the
// NPU launcher (refuses, the chip would not) and the host model.
inline int64_t VerifyConv1dLaunchUbBytes(const VerifyCausalConv1dArgs &a, uint32_t vectorCores) {
    const VerifyConv1dTiling t = ComputeVerifyConv1dLaunchTiling(a, vectorCores);
    return VerifyConv1dUbBytes(t.tileC, t.tileT, a.width, kernel::DtypeBytes(a.xType),
                               kernel::DtypeBytes(a.recType), kernel::DtypeBytes(a.poolType));
}

}  // namespace ascend_spec
