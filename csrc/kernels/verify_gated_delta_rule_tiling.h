// Arguments and tiling of verify_gated_delta_rule / the flush of its records. The arguments are filled by the NPU
// binding and, field for field, by the host-model runner (ascend_spec/gdn/verify_gated_delta_rule/ascendc.py, a
// ctypes mirror checked against sizeof at every launch); both derive the tiling from them, so the two launch the
// kernel identically. Global scope: CANN's launch-stub generator declares the kernels' structs there.
#pragma once

#include <cstdint>

#include "dtype_codes.h"
#include "kernel_modes.h"

struct VerifyGatedDeltaRuleArgs {
    void *q;              // [T, H, Dk] (nullptr in the flush modes, as are k, v, g, beta, o, cu)
    void *k;              // [T, H, Dk]
    void *v;              // [T, HV, Dv]
    void *g;              // [T, HV] fp32
    void *beta;           // [T, HV] fp32
    void *o;              // [T, HV, Dv] out, v's dtype
    void *cu;             // [B+1] int32 cu_seqlens
    void *idx;            // [B] int32 state_indices (-1 = padding row)
    void *pending;        // [B] int32
    void *pool;           // [S, HV, Dk, Dv] fp32 state pool (slots stored as valueMajor says)
    void *recK;           // GDNRecords (ascend_spec/gdn/records.py)
    void *recG;
    void *recU;
    void *bank;
    void *numRecorded;
    int64_t xType;        // q/k/v/o: 0 fp32, 1 bf16, 2 fp16
    int64_t numTokens;    // T
    int64_t numRows;      // B
    int64_t numHeads;     // H
    int64_t numVHeads;    // HV
    int64_t dk;
    int64_t dv;
    int64_t numSlots;     // S
    int64_t maxTokens;    // L: record capacity per slot and call
    int64_t poolStride;   // elements between state slots
    int64_t useL2norm;
    int64_t mode;         // KernelMode: kModeVerify or kModeFlush
    int64_t valueMajor;   // 0: slots [HV, Dk, Dv] dense; 1: slots stored [HV, Dv, Dk] dense (vLLM's and vllm-ascend's)
    int64_t ubBytes;      // Unified Buffer of one vector core
    float scale;
};

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
    int64_t mode;         // KernelMode: kModeVerify or kModeFlush
    int64_t valueMajor;   // slot layout, as in VerifyGatedDeltaRuleArgs
    float scale;
    uint32_t blockDim;    // vector cores launched
};

namespace ascend_spec {

// Floats of VerifyGdn's scratch tile: the per-row products of a state pass ([tileV, dkP]), the staging of the
// transposing state load/store of key-major slots ([Dk, tileV]; value-major slots need none, sized alike) and
// the squares of a chunk's q and k rows ([2 tileT, dkP]).
inline int64_t VerifyGdnTmpElems(int64_t dk, int64_t dkP, int64_t tileV, int64_t tileT) {
    int64_t n = tileV * dkP;
    if (dk * tileV > n) n = dk * tileV;
    if (2 * tileT * dkP > n) n = 2 * tileT * dkP;
    return n;
}

// Unified Buffer bytes VerifyGdn::Init carves (state tile, scratch tile, Gather offsets, fp32 chunks of q/k/beta k/
// v/u/o, raw staging, per-token g and beta rows and their broadcast blocks, the u broadcast, l2-norm scratch).
inline int64_t VerifyGdnUbBytes(int64_t dk, int64_t dkP, int64_t tileV, int64_t tileT, int64_t xBytes) {
    int64_t bytes = tileV * dkP * 4;                         // state tile [tileV, dkP] fp32
    bytes += VerifyGdnTmpElems(dk, dkP, tileV, tileT) * 4;   // scratch tile
    bytes += 16 * (dkP + tileV) * 4;                         // load / store transpose offsets (16 rows each)
    bytes += 3 * tileT * dkP * 4;                            // q, k, beta k chunk fp32
    bytes += 3 * tileT * tileV * 4;                          // v, u, o chunk fp32
    bytes += 2 * tileT * dkP * xBytes;                       // q, k raw staging
    bytes += 2 * tileT * tileV * xBytes;                     // v, o raw staging
    bytes += 4 * tileT * 8 * 4;                              // g, beta rows and their broadcast blocks
    bytes += (tileT + 7) / 8 * 64 * 4;                       // broadcast Gather offsets
    bytes += tileV * 8 * 4;                                  // u broadcast, one block per state row
    bytes += 2 * tileT * (1 + 8 + 1) * 4;                    // l2 norms, their blocks, multipliers
    return bytes + 22 * 32;                                  // alignment slack of the buffers
}

// xBytes: bytes of one q/k/v element (dtype_codes.h DtypeBytes(a.xType)).
inline VerifyGdnTiling ComputeVerifyGdnTiling(const VerifyGatedDeltaRuleArgs &a, int64_t xBytes,
                                              uint32_t vectorCores) {
    VerifyGdnTiling t{};
    const int64_t numRows = a.numRows, numVHeads = a.numVHeads, dk = a.dk, dv = a.dv, ubBytes = a.ubBytes;
    t.numTokens = a.numTokens;
    t.numRows = numRows;
    t.numHeads = a.numHeads;
    t.numVHeads = numVHeads;
    t.dk = dk;
    t.dv = dv;
    t.numSlots = a.numSlots;
    t.maxTokens = a.maxTokens;
    t.poolStride = a.poolStride;
    t.useL2norm = a.useL2norm ? 1 : 0;
    t.mode = a.mode;
    t.valueMajor = a.valueMajor ? 1 : 0;
    t.scale = a.scale;
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

// Unified Buffer bytes the launch of `a` carves per vector core; above a.ubBytes it cannot run (Dk too large
// for one [Dk, 16] state tile). Every launcher checks it: the NPU binding (an error naming state_pool), the NPU
// launcher (refuses, the chip would not) and the host model.
inline int64_t VerifyGdnLaunchUbBytes(const VerifyGatedDeltaRuleArgs &a, uint32_t vectorCores) {
    const int64_t xBytes = kernel::DtypeBytes(a.xType);
    const VerifyGdnTiling t = ComputeVerifyGdnTiling(a, xBytes, vectorCores);
    return VerifyGdnUbBytes(a.dk, t.dkP, t.tileV, t.tileT, xBytes);
}

}  // namespace ascend_spec
