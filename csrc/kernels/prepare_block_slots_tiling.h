// Tiling of prepare_block_slots, computed on the host by both the NPU binding (csrc/torch_binding.cpp) and the
// host model entry, so the two launch the kernel identically.
#pragma once

#include <cstdint>

namespace ascend_spec {

struct PrepareBlockSlotsTiling {
    int64_t numReqs;          // B: real requests
    int64_t numPaddedReqs;    // R >= B: rows the replayed graph runs
    int64_t numQueryTokens;   // Q
    int64_t blockSize;        // page size (tokens per page)
    int64_t maxPages;         // M: block_table columns
    int64_t ropeRows;         // 0: rope = logical position; 1: rope [B]; 3: mrope [3, B]
    int64_t sampleFromAnchor; // 1: every row gives a candidate (DSpark); 0: the mask rows only (DFlash)
    int64_t maskTokenId;
    int64_t totalContext;     // sum(context_lens): context output rows
    int64_t reqsPerCore;      // padded requests handled by one vector core
    uint32_t blockDim;        // vector cores launched
};

inline PrepareBlockSlotsTiling ComputePrepareBlockSlotsTiling(int64_t numReqs, int64_t numPaddedReqs,
                                                               int64_t numQueryTokens, int64_t blockSize,
                                                               int64_t maxPages, int64_t ropeRows,
                                                               bool sampleFromAnchor, int64_t maskTokenId,
                                                               int64_t totalContext, uint32_t vectorCores) {
    PrepareBlockSlotsTiling t{};
    t.numReqs = numReqs;
    t.numPaddedReqs = numPaddedReqs;
    t.numQueryTokens = numQueryTokens;
    t.blockSize = blockSize;
    t.maxPages = maxPages;
    t.ropeRows = ropeRows;
    t.sampleFromAnchor = sampleFromAnchor ? 1 : 0;
    t.maskTokenId = maskTokenId;
    t.totalContext = totalContext;
    int64_t cores = vectorCores > 0 ? vectorCores : 1;
    int64_t rows = numPaddedReqs > 0 ? numPaddedReqs : 1;
    t.reqsPerCore = (rows + cores - 1) / cores;
    t.blockDim = static_cast<uint32_t>((rows + t.reqsPerCore - 1) / t.reqsPerCore);
    return t;
}

}  // namespace ascend_spec
