// Arguments and tiling of max_softmax_partials (csrc/kernels/max_softmax_confidence.cpp). The arguments are filled
// by the NPU binding and, field for field, by the host-model runner (ascend_spec/ops/max_softmax_confidence/
// ascendc.py, a ctypes mirror checked against sizeof at every launch); both derive the tiling from them, so the two
// launch the kernel identically. Global scope: CANN's launch-stub generator declares the kernels' structs there.
#pragma once

#include <cstdint>

struct MaxSoftmaxConfidenceArgs {
    void *logits;         // [N, V], vocabulary axis contiguous, row stride free
    void *rowMax;         // [N] fp32 out
    void *rowSum;         // [N] fp32 out
    int64_t dtype;        // logits: 0 fp32, 1 bf16, 2 fp16
    int64_t numRows;      // N
    int64_t vocab;        // V
    int64_t rowStride;    // elements between rows
    float invTemperature;
};

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

namespace ascend_spec {

// 8192 elements per tile: two input buffers (double buffering), an fp32 work tile and the reduce workspace stay
// under 100 KiB of the 192 KiB Unified Buffer whatever the logits dtype.
constexpr int64_t kMaxSoftmaxTileV = 8192;
constexpr int64_t kMaxSoftmaxRowsPerFlush = 1024;

inline MaxSoftmaxTiling ComputeMaxSoftmaxTiling(const MaxSoftmaxConfidenceArgs &a, uint32_t vectorCores) {
    MaxSoftmaxTiling t{};
    const int64_t numRows = a.numRows, vocab = a.vocab;
    t.numRows = numRows;
    t.vocab = vocab;
    t.rowStride = a.rowStride;
    t.tileV = vocab < kMaxSoftmaxTileV ? vocab : kMaxSoftmaxTileV;
    t.tileAlloc = (t.tileV + 15) / 16 * 16;
    t.numTiles = (vocab + t.tileV - 1) / t.tileV;
    t.tilesPad = (t.numTiles + 7) / 8 * 8;
    t.invTemperature = a.invTemperature;
    const int64_t cores = vectorCores > 0 ? vectorCores : 1;
    const int64_t rows = numRows > 0 ? numRows : 1;
    t.rowsPerCore = (rows + cores - 1) / cores;
    t.blockDim = static_cast<uint32_t>((rows + t.rowsPerCore - 1) / t.rowsPerCore);
    t.rowsPerFlush = t.rowsPerCore < kMaxSoftmaxRowsPerFlush ? t.rowsPerCore : kMaxSoftmaxRowsPerFlush;
    return t;
}

}  // namespace ascend_spec
