// Host-side launchers of the AscendC kernels (defined next to each kernel in csrc/kernels/<op>.cpp). Each
// computes its tiling with the same function the host model uses, then launches `kernel<<<blockDim, nullptr,
// stream>>>`. Dtype codes: 0 = fp32, 1 = bf16, 2 = fp16.
#pragma once

#include <cstdint>

namespace ascend_spec {

void prepare_block_slots_impl(void *stream, uint32_t vectorCores, bool idsAreInt64, void *anchorIds,
                              void *anchorPos, void *ropePos, void *blockTable, void *ctxStart, void *inputIds,
                              void *positions, void *slotMapping, void *queryStartLoc, void *seqLens,
                              void *sampleIndices, void *ctxSlots, void *ctxPositions, int64_t numReqs,
                              int64_t numPaddedReqs, int64_t numQueryTokens, int64_t blockSize, int64_t maxPages,
                              int64_t ropeRows, bool sampleFromAnchor, int64_t maskTokenId, int64_t totalContext);

void max_softmax_partials_impl(void *stream, uint32_t vectorCores, int64_t dtype, void *logits, void *rowMax,
                               void *rowSum, int64_t numRows, int64_t vocab, int64_t rowStride,
                               float invTemperature);

void allocate_verify_budget_impl(void *stream, uint32_t vectorCores, void *survival, void *capacities,
                                 void *budget, void *numDrafts, void *queryLens, void *queryStartLoc,
                                 void *draftIndex, int64_t numReqs, int64_t numPos, int64_t maxBudget,
                                 int64_t budgetValue, bool budgetInMemory, bool hasCap);

// mode 0: verify; 1: flush.
void verify_gated_delta_rule_impl(void *stream, uint32_t vectorCores, void *q, void *k, void *v, void *g,
                                  void *beta, void *o, void *cu, void *idx, void *pending, void *pool, void *recK,
                                  void *recG, void *recU, void *bank, void *numRecorded, int64_t xType,
                                  int64_t numTokens, int64_t numRows, int64_t numHeads, int64_t numVHeads,
                                  int64_t dk, int64_t dv, int64_t numSlots, int64_t maxTokens, int64_t poolStride,
                                  bool useL2norm, float scale, int64_t mode, int64_t ubBytes);

// mode 0: verify; 1: flush; 2: flush and zero pending.
void verify_causal_conv1d_impl(void *stream, uint32_t vectorCores, void *x, void *weightT, void *bias, void *y,
                               void *pool, void *rec, void *numRecorded, void *cu, void *idx, void *pending,
                               int64_t xType, int64_t recType, int64_t poolType, int64_t numRows,
                               int64_t channels, int64_t width, int64_t maxTokens, int64_t numSlots, bool hasBias,
                               bool silu, int64_t mode, int64_t ubBytes);

}  // namespace ascend_spec
