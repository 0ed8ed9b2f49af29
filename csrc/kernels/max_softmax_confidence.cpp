// max_softmax_partials: per row of [N, V] logits, the max logit m and s = sum_v exp((z_v - m) / T), reading the
// logits once. Semantics, non-finite rules: ascend_spec/ops/max_softmax_confidence/ (the reference is the oracle).
//
// Work split: vector core c owns rows [c * rowsPerCore, (c + 1) * rowsPerCore). A row is walked in tiles of tileV
// elements (GM -> UB by DataCopyPad, double-buffered through a depth-2 TQue so tile t+1 loads while tile t
// computes). Per tile, in fp32 on the vector unit: m_t = ReduceMax, x - m_t (0 instead of -inf for an all -inf
// tile), * 1/T, Exp, s_t = TreeSum (pairwise). The per-tile pairs (m_t, s_t) of a row are combined at its end,
// again on the vector unit: M = max_t m_t, S = sum_t s_t * exp((m_t - M) / T). So no N x V buffer exists anywhere, and
// the only scalar reads are two per tile. bf16/fp16 tiles are upcast by Cast before any arithmetic.
#include "kernel_operator.h"
#include "kernel_utils.h"
#include "max_softmax_confidence_tiling.h"

namespace {

using namespace ascend_spec::kernel;  // kernel_utils.h

constexpr float kNegInf = -__builtin_inff();
constexpr int32_t kTreeLeaf = 64;  // one fp32 vector repeat: the leaves TreeSum hands to ReduceSum

template <typename T>
class MaxSoftmaxPartials {
public:
    __aicore__ inline MaxSoftmaxPartials() {}

    __aicore__ inline void Init(GM_ADDR logits, GM_ADDR rowMax, GM_ADDR rowSum, const MaxSoftmaxTiling &tiling,
                                AscendC::TPipe *pipe) {
        t_ = tiling;
        x_.SetGlobalBuffer((__gm__ T *)logits, (t_.numRows - 1) * t_.rowStride + t_.vocab);
        outMax_.SetGlobalBuffer((__gm__ float *)rowMax, t_.numRows);
        outSum_.SetGlobalBuffer((__gm__ float *)rowSum, t_.numRows);
        const uint32_t tileBytesF = static_cast<uint32_t>(t_.tileAlloc * sizeof(float));
        pipe->InitBuffer(inQ_, 2, static_cast<uint32_t>(t_.tileAlloc * sizeof(T)));
        if constexpr (!SameType<T, float>::value) pipe->InitBuffer(workBuf_, tileBytesF);
        // Reduce workspace: as many elements as the operand, above what ReduceMax/ReduceSum document needing.
        pipe->InitBuffer(tmpBuf_, tileBytesF);
        pipe->InitBuffer(redBuf_, 32);
        const uint32_t tilesBytes = static_cast<uint32_t>(t_.tilesPad * sizeof(float));
        pipe->InitBuffer(tileMaxBuf_, tilesBytes);
        pipe->InitBuffer(tileSumBuf_, tilesBytes);
        pipe->InitBuffer(combBuf_, tilesBytes);
        pipe->InitBuffer(outMaxBuf_, static_cast<uint32_t>(t_.rowsPerFlush * sizeof(float)));
        pipe->InitBuffer(outSumBuf_, static_cast<uint32_t>(t_.rowsPerFlush * sizeof(float)));
        tmp_ = tmpBuf_.Get<float>();
        red_ = redBuf_.Get<float>();
        tileMax_ = tileMaxBuf_.Get<float>();
        tileSum_ = tileSumBuf_.Get<float>();
        comb_ = combBuf_.Get<float>();
        rowMaxUb_ = outMaxBuf_.Get<float>();
        rowSumUb_ = outSumBuf_.Get<float>();
    }

    __aicore__ inline void Process() {
        const int64_t begin = AscendC::GetBlockIdx() * t_.rowsPerCore;
        int64_t end = begin + t_.rowsPerCore;
        if (end > t_.numRows) end = t_.numRows;
        if (begin >= end) return;
        // Units are (row, tile) pairs in row-major order; the next unit's load is issued before this one computes.
        const int64_t firstUnit = begin * t_.numTiles, lastUnit = end * t_.numTiles;
        CopyIn(firstUnit);
        int64_t flushBase = begin;
        for (int64_t u = firstUnit; u < lastUnit; ++u) {
            if (u + 1 < lastUnit) CopyIn(u + 1);
            const int64_t row = u / t_.numTiles, tile = u % t_.numTiles;
            ComputeTile(tile);
            if (tile + 1 < t_.numTiles) continue;
            float m = 0.0f, s = 0.0f;
            CombineRow(m, s);
            rowMaxUb_.SetValue(static_cast<uint32_t>(row - flushBase), m);
            rowSumUb_.SetValue(static_cast<uint32_t>(row - flushBase), s);
            if (row + 1 - flushBase == t_.rowsPerFlush || row + 1 == end) {
                Flush(flushBase, row + 1 - flushBase);
                flushBase = row + 1;
            }
        }
    }

private:
    __aicore__ inline int64_t TileLen(int64_t tile) const {
        const int64_t left = t_.vocab - tile * t_.tileV;
        return left < t_.tileV ? left : t_.tileV;
    }

    __aicore__ inline void CopyIn(int64_t unit) {
        const int64_t row = unit / t_.numTiles, tile = unit % t_.numTiles;
        AscendC::LocalTensor<T> x = inQ_.AllocTensor<T>();
        AscendC::DataCopyExtParams params{1, static_cast<uint32_t>(TileLen(tile) * sizeof(T)), 0, 0, 0};
        AscendC::DataCopyPadExtParams<T> pad{false, 0, 0, static_cast<T>(0)};
        AscendC::DataCopyPad(x, x_[row * t_.rowStride + tile * t_.tileV], params, pad);
        inQ_.EnQue(x);
    }

    __aicore__ inline void ComputeTile(int64_t tile) {
        const int32_t n = static_cast<int32_t>(TileLen(tile));
        AscendC::LocalTensor<T> x = inQ_.DeQue<T>();
        AscendC::LocalTensor<float> xf;
        if constexpr (SameType<T, float>::value) {
            xf = x;  // fp32 logits are worked on in place
        } else {
            xf = workBuf_.Get<float>();
            AscendC::Cast(xf, x, AscendC::RoundMode::CAST_NONE, static_cast<uint32_t>(n));
        }
        AscendC::ReduceMax(red_, xf, tmp_, n);
        Sync<AscendC::HardEvent::V_S>();
        const float mt = red_.GetValue(0);
        const float shift = (mt == kNegInf) ? 0.0f : mt;  // all -inf tile: exp(-inf - 0) = 0, never NaN
        AscendC::Adds(xf, xf, -shift, n);
        if (t_.invTemperature != 1.0f) AscendC::Muls(xf, xf, t_.invTemperature, n);
        AscendC::Exp(xf, xf, n);
        const float st = TreeSum(xf, n);
        inQ_.FreeTensor(x);
        tileMax_.SetValue(static_cast<uint32_t>(tile), mt);
        tileSum_.SetValue(static_cast<uint32_t>(tile), st);
    }

    // Sum of x[0, n) as a pairwise tree on the vector unit: fold the upper half onto the lower one (the split
    // 32-byte aligned) until at most kTreeLeaf elements remain, then ReduceSum those. Each element passes through
    // about log2(n / kTreeLeaf) additions of like-sized partial sums, so the rounding error grows like log n, not
    // like n as in one running sum (V = 262144 logits within 1e-3 of the max: confidence 1.6e-5 off float64 with
    // a running sum per tile, 3.6e-7 with the tree). Clobbers x.
    __aicore__ inline float TreeSum(const AscendC::LocalTensor<float> &x, int32_t n) {
        while (n > kTreeLeaf) {
            const int32_t half = ((n + 1) / 2 + 7) / 8 * 8;  // >= n - half, so the two halves never overlap
            AscendC::Add(x, x, x[static_cast<uint32_t>(half)], n - half);
            n = half;
        }
        AscendC::ReduceSum(red_, x, tmp_, n);
        Sync<AscendC::HardEvent::V_S>();
        return red_.GetValue(0);
    }

    // M = max_t m_t (NaN tile maxima are skipped: such a tile's sum is NaN already, and NaN wins the sum).
    __aicore__ inline void CombineRow(float &m, float &s) {
        const int32_t nt = static_cast<int32_t>(t_.numTiles);
        float big = kNegInf;
        for (int32_t i = 0; i < nt; ++i) {
            const float v = tileMax_.GetValue(static_cast<uint32_t>(i));
            if (v > big) big = v;
        }
        const float shift = (big == kNegInf) ? 0.0f : big;
        Sync<AscendC::HardEvent::S_V>();  // the scalar unit wrote tileMax_/tileSum_
        AscendC::Adds(comb_, tileMax_, -shift, nt);
        if (t_.invTemperature != 1.0f) AscendC::Muls(comb_, comb_, t_.invTemperature, nt);
        AscendC::Exp(comb_, comb_, nt);
        AscendC::Mul(comb_, comb_, tileSum_, nt);
        m = big;
        s = TreeSum(comb_, nt);
    }

    __aicore__ inline void Flush(int64_t row0, int64_t count) {
        Sync<AscendC::HardEvent::S_MTE3>();
        AscendC::DataCopyExtParams params{1, static_cast<uint32_t>(count * sizeof(float)), 0, 0, 0};
        AscendC::DataCopyPad(outMax_[row0], rowMaxUb_, params);
        AscendC::DataCopyPad(outSum_[row0], rowSumUb_, params);
        Sync<AscendC::HardEvent::MTE3_S>();
    }

    MaxSoftmaxTiling t_;
    AscendC::GlobalTensor<T> x_;
    AscendC::GlobalTensor<float> outMax_, outSum_;
    AscendC::TQue<AscendC::TPosition::VECIN, 2> inQ_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> workBuf_, tmpBuf_, redBuf_, tileMaxBuf_, tileSumBuf_, combBuf_,
        outMaxBuf_, outSumBuf_;
    AscendC::LocalTensor<float> tmp_, red_, tileMax_, tileSum_, comb_, rowMaxUb_, rowSumUb_;
};

template <typename T>
__aicore__ inline void Run(GM_ADDR logits, GM_ADDR rowMax, GM_ADDR rowSum, const MaxSoftmaxTiling &tiling) {
    AscendC::TPipe pipe;
    MaxSoftmaxPartials<T> op;
    op.Init(logits, rowMax, rowSum, tiling, &pipe);
    op.Process();
}

}  // namespace

// dtype: 0 = float32, 1 = bfloat16, 2 = float16.
extern "C" __global__ __aicore__ void max_softmax_partials(GM_ADDR logits, GM_ADDR rowMax, GM_ADDR rowSum,
                                                           int64_t dtype, MaxSoftmaxTiling tiling) {
    if (dtype == kDtypeF32) {
        Run<float>(logits, rowMax, rowSum, tiling);
    } else if (dtype == kDtypeBf16) {
        Run<bfloat16_t>(logits, rowMax, rowSum, tiling);
    } else {
        Run<half>(logits, rowMax, rowSum, tiling);
    }
}

// Host-side launch: `<<<>>>` on the NPU; the host model's block-by-block launcher on the CPU. Both take the same
// MaxSoftmaxConfidenceArgs and compute the same tiling from it.
#define MAX_SOFTMAX_GM(a) (GM_ADDR)(a).logits, (GM_ADDR)(a).rowMax, (GM_ADDR)(a).rowSum, (a).dtype

#ifdef ASCEND_SPEC_HOST_MODEL
extern "C" uint64_t max_softmax_confidence_args_bytes() { return sizeof(MaxSoftmaxConfidenceArgs); }

extern "C" int max_softmax_partials_host(uint32_t vectorCores, const MaxSoftmaxConfidenceArgs *args) {
    MaxSoftmaxTiling tiling = ascend_spec::ComputeMaxSoftmaxTiling(*args, vectorCores);
    return AscendC::host_model::Launch(tiling.blockDim, max_softmax_partials, MAX_SOFTMAX_GM(*args), tiling);
}
#else
namespace ascend_spec {
void max_softmax_partials_impl(void *stream, uint32_t vectorCores, const MaxSoftmaxConfidenceArgs &a) {
    MaxSoftmaxTiling tiling = ComputeMaxSoftmaxTiling(a, vectorCores);
    max_softmax_partials<<<tiling.blockDim, nullptr, stream>>>(MAX_SOFTMAX_GM(a), tiling);
}
}  // namespace ascend_spec
#endif
