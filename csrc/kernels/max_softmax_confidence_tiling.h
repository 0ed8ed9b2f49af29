// Tiling of max_softmax_partials (csrc/kernels/max_softmax_confidence.cpp), computed on the host by both the NPU
// launcher and the host-model entry, so the two launch the kernel identically.
#pragma once

#include <cstdint>

namespace ascend_spec {

struct MaxSoftmaxTiling {
    int64_t numRows;     // N
    int64_t vocab;       // V (> 0)
    int64_t rowStride;   // elements between rows in GM (>= V; the vocabulary axis is contiguous)
    int64_t tileV;       // vocabulary elements per UB tile
    int64_t tileAlloc;   // tileV rounded up to 16 elements: DataCopyPad fills whole 32-byte blocks of UB
    int64_t numTiles;    // ceil(V / tileV)
    int64_t tilesPad;    // numTiles rounded up to 8 (one 32-byte block of fp32)
    int64_t rowsPerCore; // rows owned by one vector core
    int64_t rowsPerFlush;
    float invTemperature;
    uint32_t blockDim;
};

// 8192 elements per tile: two input buffers (double buffering), an fp32 work tile and the reduce workspace stay
// under 100 KiB of the 192 KiB Unified Buffer whatever the logits dtype.
constexpr int64_t kMaxSoftmaxTileV = 8192;
constexpr int64_t kMaxSoftmaxRowsPerFlush = 1024;

inline MaxSoftmaxTiling ComputeMaxSoftmaxTiling(int64_t numRows, int64_t vocab, int64_t rowStride,
                                                float invTemperature, uint32_t vectorCores) {
    MaxSoftmaxTiling t{};
    t.numRows = numRows;
    t.vocab = vocab;
    t.rowStride = rowStride;
    t.tileV = vocab < kMaxSoftmaxTileV ? vocab : kMaxSoftmaxTileV;
    t.tileAlloc = (t.tileV + 15) / 16 * 16;
    t.numTiles = (vocab + t.tileV - 1) / t.tileV;
    t.tilesPad = (t.numTiles + 7) / 8 * 8;
    t.invTemperature = invTemperature;
    const int64_t cores = vectorCores > 0 ? vectorCores : 1;
    const int64_t rows = numRows > 0 ? numRows : 1;
    t.rowsPerCore = (rows + cores - 1) / cores;
    t.blockDim = static_cast<uint32_t>((rows + t.rowsPerCore - 1) / t.rowsPerCore);
    t.rowsPerFlush = t.rowsPerCore < kMaxSoftmaxRowsPerFlush ? t.rowsPerCore : kMaxSoftmaxRowsPerFlush;
    return t;
}

}  // namespace ascend_spec
