// Tiling of verify_gated_delta_rule / flush of the GDN records, computed on the host by both the NPU binding and the
// host-model entry, so the two launch the kernel identically.
#pragma once

#include <cstdint>

namespace ascend_spec {

struct VerifyGdnTiling {
    int64_t numTokens;    // T
    int64_t numRows;      // B: rows of this call (state_indices entries)
    int64_t numHeads;     // H (q/k heads)
    int64_t numVHeads;    // HV (value heads, a multiple of H)
    int64_t dk;           // Dk
    int64_t dv;           // Dv
    int64_t numSlots;     // S
    int64_t maxTokens;    // L: record capacity per slot and call
    int64_t poolStride;   // elements between state slots (>= HV * Dk * Dv)
    int64_t dkP;          // UB row pitch of q/k rows: Dk rounded up to 16 (32-byte rows for 2- and 4-byte types)
    int64_t tileV;        // value columns per unit, a multiple of 16
    int64_t numVTiles;    // ceil(Dv / tileV)
    int64_t tileT;        // tokens per chunk
    int64_t unitsPerCore; // (row, value head, value tile) units per vector core
    int64_t useL2norm;
    int64_t mode;         // 0 verify; 1 flush
    float scale;
    uint32_t blockDim;    // vector cores launched
};

// Unified Buffer bytes VerifyGdn::Init carves (state tile, fp32 chunks of q/k/v/u/o, raw staging, g, scratch).
inline int64_t VerifyGdnUbBytes(int64_t dk, int64_t dkP, int64_t tileV, int64_t tileT, int64_t xBytes) {
    int64_t bytes = dk * tileV * 4;          // state tile [Dk, tileV] fp32
    bytes += 2 * tileT * dkP * 4;            // q, k chunk fp32
    bytes += 3 * tileT * tileV * 4;          // v, u, o chunk fp32
    bytes += 2 * tileT * dkP * xBytes;       // q, k raw staging
    bytes += 2 * tileT * tileV * xBytes;     // v, o raw staging
    bytes += 2 * tileT * 8 * 4;              // g raw and exp(g), one 32-byte block per token
    bytes += 2 * (dkP > tileV ? dkP : tileV) * 4;  // scratch row and reduction workspace
    bytes += 64;                             // reduction result
    return bytes + 14 * 32;                  // alignment slack of the buffers
}

inline VerifyGdnTiling ComputeVerifyGdnTiling(int64_t numTokens, int64_t numRows, int64_t numHeads,
                                              int64_t numVHeads, int64_t dk, int64_t dv, int64_t numSlots,
                                              int64_t maxTokens, int64_t poolStride, bool useL2norm, float scale,
                                              int64_t mode, int64_t xBytes, int64_t ubBytes,
                                              uint32_t vectorCores) {
    VerifyGdnTiling t{};
    t.numTokens = numTokens;
    t.numRows = numRows;
    t.numHeads = numHeads;
    t.numVHeads = numVHeads;
    t.dk = dk;
    t.dv = dv;
    t.numSlots = numSlots;
    t.maxTokens = maxTokens;
    t.poolStride = poolStride;
    t.useL2norm = useL2norm ? 1 : 0;
    t.mode = mode;
    t.scale = scale;
    t.dkP = (dk + 15) / 16 * 16;
    const int64_t dvP = (dv + 15) / 16 * 16;
    int64_t tileV = dvP < 128 ? dvP : 128;
    int64_t tileT = 16;
    // Shrink the chunk first (it only costs more DMA calls), then the value tile (it costs more units).
    while (VerifyGdnUbBytes(dk, t.dkP, tileV, tileT, xBytes) > ubBytes) {
        if (tileT > 4) {
            tileT /= 2;
        } else if (tileV > 16) {
            tileV -= 16;
        } else {
            break;  // the host refuses the launch: VerifyGdnUbBytes(...) > ubBytes
        }
    }
    t.tileV = tileV;
    t.tileT = tileT;
    t.numVTiles = (dv + tileV - 1) / tileV;
    int64_t units = numRows * numVHeads * t.numVTiles;
    if (units < 1) units = 1;
    int64_t cores = vectorCores > 0 ? vectorCores : 1;
    t.unitsPerCore = (units + cores - 1) / cores;
    t.blockDim = static_cast<uint32_t>((units + t.unitsPerCore - 1) / t.unitsPerCore);
    return t;
}

}  // namespace ascend_spec
