// Host-side launchers of the AscendC kernels (defined next to each kernel in csrc/kernels/<op>.cpp). Each
// computes its tiling with the same header the host model uses, then launches `kernel<<<blockDim, nullptr,
// stream>>>`.
#pragma once

#include <cstdint>

namespace ascend_spec {

void prepare_block_slots_impl(void *stream, uint32_t vectorCores, bool idsAreInt64, void *anchorIds,
                              void *anchorPos, void *ropePos, void *blockTable, void *ctxStart, void *inputIds,
                              void *positions, void *slotMapping, void *queryStartLoc, void *seqLens,
                              void *sampleIndices, void *ctxSlots, void *ctxPositions, int64_t numReqs,
                              int64_t numPaddedReqs, int64_t numQueryTokens, int64_t blockSize, int64_t maxPages,
                              int64_t ropeRows, bool sampleFromAnchor, int64_t maskTokenId, int64_t totalContext);

}  // namespace ascend_spec
