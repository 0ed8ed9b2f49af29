// Arguments and tiling of prepare_block_slots. The arguments are filled by the NPU binding
// (csrc/torch_binding.cpp) and, field for field, by the host-model runner (ascend_spec/ops/prepare_block_slots/
// ascendc.py, a ctypes mirror checked against sizeof at every launch); both compute the tiling from them with
// ComputePrepareBlockSlotsTiling, so the two launch the kernel identically. Both structs live at global scope:
// CANN's launch-stub generator declares the kernels' struct types there.
#pragma once

#include <cstdint>

struct PrepareBlockSlotsArgs {
    void *anchorIds;      // [B] int32 or int64 (idsAreInt64)
    void *anchorPos;      // [B] int64
    void *ropePos;        // nullptr, [B] or [3, B] int64
    void *blockTable;     // [B, M] int32, contiguous
    void *ctxStart;       // [B+1] int32 context_start_loc (an output the host fills before the launch)
    void *inputIds;       // outputs: see BlockSlots (ascend_spec/ops/prepare_block_slots/__init__.py)
    void *positions;
    void *slotMapping;
    void *queryStartLoc;
    void *seqLens;
    void *sampleIndices;
    void *ctxSlots;
    void *ctxPositions;
    int64_t idsAreInt64;
    int64_t numReqs;          // B: real requests
    int64_t numPaddedReqs;    // R >= B: rows the replayed graph runs
    int64_t numQueryTokens;   // Q
    int64_t blockSize;        // page size (tokens per page)
    int64_t maxPages;         // M: block_table columns
    int64_t ropeRows;         // 0: rope = logical position; 1: rope [B]; 3: mrope [3, B]
    int64_t sampleFromAnchor; // 1: every row gives a candidate (DSpark); 0: the mask rows only (DFlash)
    int64_t maskTokenId;
    int64_t totalContext;     // sum(context_lens): context output rows
};

struct PrepareBlockSlotsTiling {
    int64_t numReqs;
    int64_t numPaddedReqs;
    int64_t numQueryTokens;
    int64_t blockSize;
    int64_t maxPages;
    int64_t ropeRows;
    int64_t sampleFromAnchor;
    int64_t maskTokenId;
    int64_t totalContext;
    int64_t reqsPerCore;      // padded requests handled by one vector core
    uint32_t blockDim;        // vector cores launched
};

namespace ascend_spec {

inline PrepareBlockSlotsTiling ComputePrepareBlockSlotsTiling(const PrepareBlockSlotsArgs &a, uint32_t vectorCores) {
    PrepareBlockSlotsTiling t{};
    t.numReqs = a.numReqs;
    t.numPaddedReqs = a.numPaddedReqs;
    t.numQueryTokens = a.numQueryTokens;
    t.blockSize = a.blockSize;
    t.maxPages = a.maxPages;
    t.ropeRows = a.ropeRows;
    t.sampleFromAnchor = a.sampleFromAnchor ? 1 : 0;
    t.maskTokenId = a.maskTokenId;
    t.totalContext = a.totalContext;
    int64_t cores = vectorCores > 0 ? vectorCores : 1;
    int64_t rows = a.numPaddedReqs > 0 ? a.numPaddedReqs : 1;
    t.reqsPerCore = (rows + cores - 1) / cores;
    t.blockDim = static_cast<uint32_t>((rows + t.reqsPerCore - 1) / t.reqsPerCore);
    return t;
}

}  // namespace ascend_spec
