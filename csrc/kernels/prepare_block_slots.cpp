// prepare_block_slots: input ids, rope positions and paged-cache slots of B x Q block-drafter query tokens (plus
// the context tokens injected into the drafter cache) in one launch. Semantics: ascend_spec/ops/prepare_block_slots/.
//
// Work split: vector core c owns padded requests [c * reqsPerCore, (c + 1) * reqsPerCore); every output range a
// core writes is contiguous and disjoint from the other cores' ranges. Values are computed by the scalar unit into
// UB tiles (page lookups are data-dependent gathers) and leave with one DataCopyPad per tile and output.
// A position that cannot be placed (negative, past the block table, on a negative page id) gets slot -1.
#include "kernel_operator.h"
#include "kernel_utils.h"
#include "prepare_block_slots_tiling.h"

namespace {

using namespace ascend_spec::kernel;  // kernel_utils.h

constexpr int64_t kTile = 1024;  // elements per UB tile (8 KiB of int64)

template <typename IdT>
class PrepareBlockSlots {
public:
    __aicore__ inline PrepareBlockSlots() {}

    __aicore__ inline void Init(GM_ADDR anchorIds, GM_ADDR anchorPos, GM_ADDR ropePos, GM_ADDR blockTable,
                                GM_ADDR ctxStart, GM_ADDR inputIds, GM_ADDR positions, GM_ADDR slotMapping,
                                GM_ADDR queryStartLoc, GM_ADDR seqLens, GM_ADDR sampleIndices, GM_ADDR ctxSlots,
                                GM_ADDR ctxPositions, const PrepareBlockSlotsTiling &tiling, AscendC::TPipe *pipe) {
        t_ = tiling;
        const int64_t b = t_.numReqs, r = t_.numPaddedReqs, q = t_.numQueryTokens;
        const int64_t outRows = t_.ropeRows == 3 ? 3 : 1;
        const int64_t samplesPerReq = t_.sampleFromAnchor ? q : q - 1;
        anchorIds_.SetGlobalBuffer((__gm__ IdT *)anchorIds, b);
        anchorPos_.SetGlobalBuffer((__gm__ int64_t *)anchorPos, b);
        if (t_.ropeRows > 0) ropePos_.SetGlobalBuffer((__gm__ int64_t *)ropePos, t_.ropeRows * b);
        blockTable_.SetGlobalBuffer((__gm__ int32_t *)blockTable, b * t_.maxPages);
        ctxStart_.SetGlobalBuffer((__gm__ int32_t *)ctxStart, b + 1);
        inputIds_.SetGlobalBuffer((__gm__ IdT *)inputIds, r * q);
        positions_.SetGlobalBuffer((__gm__ int64_t *)positions, outRows * r * q);
        slotMapping_.SetGlobalBuffer((__gm__ int64_t *)slotMapping, r * q);
        queryStartLoc_.SetGlobalBuffer((__gm__ int32_t *)queryStartLoc, r + 1);
        seqLens_.SetGlobalBuffer((__gm__ int32_t *)seqLens, r);
        sampleIndices_.SetGlobalBuffer((__gm__ int64_t *)sampleIndices, b * samplesPerReq);
        ctxSlots_.SetGlobalBuffer((__gm__ int64_t *)ctxSlots, t_.totalContext);
        ctxPositions_.SetGlobalBuffer((__gm__ int64_t *)ctxPositions, outRows * t_.totalContext);
        pipe->InitBuffer(idBuf_, kTile * sizeof(IdT));
        pipe->InitBuffer(i64Buf_, kTile * sizeof(int64_t));
        pipe->InitBuffer(i32Buf_, kTile * sizeof(int32_t));
        outRows_ = outRows;
        samplesPerReq_ = samplesPerReq;
    }

    __aicore__ inline void Process() {
        const int64_t begin = AscendC::GetBlockIdx() * t_.reqsPerCore;
        int64_t end = begin + t_.reqsPerCore;
        if (end > t_.numPaddedReqs) end = t_.numPaddedReqs;
        if (begin >= end) return;
        const int64_t realEnd = end < t_.numReqs ? end : t_.numReqs;
        QueryRows(begin, end);
        RequestRows(begin, end);
        if (begin < realEnd) {
            SampleRows(begin, realEnd);
            ContextRows(begin, realEnd);
        }
    }

private:
    __aicore__ inline int64_t Rope(int64_t req, int64_t row) const {
        if (t_.ropeRows == 0) return anchorPos_.GetValue(req);
        return ropePos_.GetValue((t_.ropeRows == 3 ? row : 0) * t_.numReqs + req);
    }

    __aicore__ inline int64_t Slot(int64_t req, int64_t pos) const {
        if (pos < 0) return -1;
        const int64_t page = pos / t_.blockSize;
        if (page >= t_.maxPages) return -1;
        const int64_t id = blockTable_.GetValue(req * t_.maxPages + page);
        if (id < 0) return -1;
        return id * t_.blockSize + pos % t_.blockSize;
    }

    // The scalar unit filled a UB tile; the DMA (MTE3) must wait for it, and the scalar unit must wait for the DMA
    // before refilling the tile.
    template <typename T>
    __aicore__ inline void Flush(AscendC::GlobalTensor<T> dst, const AscendC::LocalTensor<T> &tile, int64_t count) {
        Sync<AscendC::HardEvent::S_MTE3>();
        AscendC::DataCopyExtParams params{1, static_cast<uint32_t>(count * sizeof(T)), 0, 0, 0};
        AscendC::DataCopyPad(dst, tile, params);
        Sync<AscendC::HardEvent::MTE3_S>();
    }

    __aicore__ inline void QueryRows(int64_t begin, int64_t end) {
        const int64_t q = t_.numQueryTokens;
        AscendC::LocalTensor<IdT> ids = idBuf_.Get<IdT>();
        AscendC::LocalTensor<int64_t> vals = i64Buf_.Get<int64_t>();
        for (int64_t lo = begin * q; lo < end * q; lo += kTile) {
            const int64_t n = (end * q - lo) < kTile ? (end * q - lo) : kTile;
            for (int64_t k = 0; k < n; ++k) {
                const int64_t req = (lo + k) / q, i = (lo + k) % q;
                IdT id = static_cast<IdT>(t_.maskTokenId);
                if (i == 0 && req < t_.numReqs) id = anchorIds_.GetValue(req);
                ids.SetValue(k, id);
            }
            Flush(inputIds_[lo], ids, n);
            for (int64_t k = 0; k < n; ++k) {
                const int64_t req = (lo + k) / q, i = (lo + k) % q;
                vals.SetValue(k, req < t_.numReqs ? Slot(req, anchorPos_.GetValue(req) + i) : -1);
            }
            Flush(slotMapping_[lo], vals, n);
            for (int64_t row = 0; row < outRows_; ++row) {
                for (int64_t k = 0; k < n; ++k) {
                    const int64_t req = (lo + k) / q, i = (lo + k) % q;
                    vals.SetValue(k, req < t_.numReqs ? Rope(req, row) + i : 0);
                }
                Flush(positions_[row * t_.numPaddedReqs * q + lo], vals, n);
            }
        }
    }

    __aicore__ inline void RequestRows(int64_t begin, int64_t end) {
        AscendC::LocalTensor<int32_t> vals = i32Buf_.Get<int32_t>();
        for (int64_t lo = begin; lo < end; lo += kTile) {
            const int64_t n = (end - lo) < kTile ? (end - lo) : kTile;
            for (int64_t k = 0; k < n; ++k) {
                const int64_t req = lo + k;
                int64_t len = req < t_.numReqs ? anchorPos_.GetValue(req) + t_.numQueryTokens : 0;
                vals.SetValue(k, static_cast<int32_t>(len));
            }
            Flush(seqLens_[lo], vals, n);
            // query_start_loc[req + 1] = (req + 1) * Q: n entries, so a full tile never spills past its end.
            for (int64_t k = 0; k < n; ++k) {
                vals.SetValue(k, static_cast<int32_t>((lo + k + 1) * t_.numQueryTokens));
            }
            Flush(queryStartLoc_[lo + 1], vals, n);
        }
        if (begin == 0) {  // the leading 0, once
            vals.SetValue(0, 0);
            Flush(queryStartLoc_[0], vals, 1);
        }
    }

    __aicore__ inline void SampleRows(int64_t begin, int64_t realEnd) {
        const int64_t s = samplesPerReq_, skip = t_.sampleFromAnchor ? 0 : 1;
        if (s == 0) return;
        AscendC::LocalTensor<int64_t> vals = i64Buf_.Get<int64_t>();
        for (int64_t lo = begin * s; lo < realEnd * s; lo += kTile) {
            const int64_t n = (realEnd * s - lo) < kTile ? (realEnd * s - lo) : kTile;
            for (int64_t k = 0; k < n; ++k) {
                const int64_t req = (lo + k) / s, j = (lo + k) % s;
                vals.SetValue(k, req * t_.numQueryTokens + j + skip);
            }
            Flush(sampleIndices_[lo], vals, n);
        }
    }

    __aicore__ inline void ContextRows(int64_t begin, int64_t realEnd) {
        const int64_t ctxLo = ctxStart_.GetValue(begin), ctxHi = ctxStart_.GetValue(realEnd);
        if (ctxHi <= ctxLo) return;
        AscendC::LocalTensor<int64_t> vals = i64Buf_.Get<int64_t>();
        for (int64_t row = -1; row < outRows_; ++row) {  // row -1: slots; rows 0..: rope positions
            int64_t req = begin;
            int64_t reqEnd = ctxStart_.GetValue(req + 1);
            for (int64_t lo = ctxLo; lo < ctxHi; lo += kTile) {
                const int64_t n = (ctxHi - lo) < kTile ? (ctxHi - lo) : kTile;
                for (int64_t k = 0; k < n; ++k) {
                    const int64_t c = lo + k;
                    while (c >= reqEnd) {
                        ++req;
                        reqEnd = ctxStart_.GetValue(req + 1);
                    }
                    const int64_t back = reqEnd - c;  // n_b - j: 1..n_b
                    const int64_t v = row < 0 ? Slot(req, anchorPos_.GetValue(req) - back) : Rope(req, row) - back;
                    vals.SetValue(k, v);
                }
                if (row < 0) {
                    Flush(ctxSlots_[lo], vals, n);
                } else {
                    Flush(ctxPositions_[row * t_.totalContext + lo], vals, n);
                }
            }
        }
    }

    PrepareBlockSlotsTiling t_;
    int64_t outRows_ = 1;
    int64_t samplesPerReq_ = 0;
    AscendC::GlobalTensor<IdT> anchorIds_, inputIds_;
    AscendC::GlobalTensor<int64_t> anchorPos_, ropePos_, positions_, slotMapping_, sampleIndices_, ctxSlots_,
        ctxPositions_;
    AscendC::GlobalTensor<int32_t> blockTable_, ctxStart_, queryStartLoc_, seqLens_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> idBuf_, i64Buf_, i32Buf_;
};

}  // namespace

#define PREPARE_BLOCK_SLOTS_KERNEL(NAME, ID_T)                                                                   \
    extern "C" __global__ __aicore__ void NAME(                                                                  \
        GM_ADDR anchorIds, GM_ADDR anchorPos, GM_ADDR ropePos, GM_ADDR blockTable, GM_ADDR ctxStart,             \
        GM_ADDR inputIds, GM_ADDR positions, GM_ADDR slotMapping, GM_ADDR queryStartLoc, GM_ADDR seqLens,        \
        GM_ADDR sampleIndices, GM_ADDR ctxSlots, GM_ADDR ctxPositions, PrepareBlockSlotsTiling tiling) {         \
        AscendC::TPipe pipe;                                                                                     \
        PrepareBlockSlots<ID_T> op;                                                                              \
        op.Init(anchorIds, anchorPos, ropePos, blockTable, ctxStart, inputIds, positions, slotMapping,           \
                queryStartLoc, seqLens, sampleIndices, ctxSlots, ctxPositions, tiling, &pipe);                   \
        op.Process();                                                                                            \
    }

PREPARE_BLOCK_SLOTS_KERNEL(prepare_block_slots_i32, int32_t)
PREPARE_BLOCK_SLOTS_KERNEL(prepare_block_slots_i64, int64_t)

// Host-side launch: `<<<>>>` on the NPU; the host model's block-by-block launcher on the CPU. Both take the same
// PrepareBlockSlotsArgs and compute the same tiling from it.
#define PREPARE_BLOCK_SLOTS_GM(a)                                                                                \
    (GM_ADDR)(a).anchorIds, (GM_ADDR)(a).anchorPos, (GM_ADDR)(a).ropePos, (GM_ADDR)(a).blockTable,              \
        (GM_ADDR)(a).ctxStart, (GM_ADDR)(a).inputIds, (GM_ADDR)(a).positions, (GM_ADDR)(a).slotMapping,         \
        (GM_ADDR)(a).queryStartLoc, (GM_ADDR)(a).seqLens, (GM_ADDR)(a).sampleIndices, (GM_ADDR)(a).ctxSlots,    \
        (GM_ADDR)(a).ctxPositions

#ifdef ASCEND_SPEC_HOST_MODEL
extern "C" uint64_t prepare_block_slots_args_bytes() { return sizeof(PrepareBlockSlotsArgs); }

extern "C" int prepare_block_slots_host(uint32_t vectorCores, const PrepareBlockSlotsArgs *args) {
    const PrepareBlockSlotsArgs &a = *args;
    PrepareBlockSlotsTiling tiling = ascend_spec::ComputePrepareBlockSlotsTiling(a, vectorCores);
    if (a.idsAreInt64) {
        return AscendC::host_model::Launch(tiling.blockDim, prepare_block_slots_i64, PREPARE_BLOCK_SLOTS_GM(a),
                                           tiling);
    }
    return AscendC::host_model::Launch(tiling.blockDim, prepare_block_slots_i32, PREPARE_BLOCK_SLOTS_GM(a), tiling);
}
#else
namespace ascend_spec {
void prepare_block_slots_impl(void *stream, uint32_t vectorCores, const PrepareBlockSlotsArgs &a) {
    PrepareBlockSlotsTiling tiling = ComputePrepareBlockSlotsTiling(a, vectorCores);
    if (a.idsAreInt64) {
        prepare_block_slots_i64<<<tiling.blockDim, nullptr, stream>>>(PREPARE_BLOCK_SLOTS_GM(a), tiling);
    } else {
        prepare_block_slots_i32<<<tiling.blockDim, nullptr, stream>>>(PREPARE_BLOCK_SLOTS_GM(a), tiling);
    }
}
}  // namespace ascend_spec
#endif
