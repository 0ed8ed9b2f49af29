// verify_causal_conv1d: commit each row's pending tokens into its conv state slot, then run the depthwise causal
// conv over this call's tokens and record them for the next commit. Also the flush of the conv records.
// Semantics: ascend_spec/gdn/verify_causal_conv1d/ (the reference is the oracle); design: docs/verify_causal_conv1d.md.
//
// Work split: a unit is (channel tile, row); vector core c owns units [c * unitsPerCore, (c + 1) * unitsPerCore),
// tile-major so consecutive units reuse the tile's weights. A unit owns the channel slice of BOTH its slot's conv
// state and its slot's records (slots are distinct within a call), so no core can overwrite records another core
// still has to replay. Within a unit every GM read of the old state/records precedes (through the event chain)
// every write of them. num_recorded is read by every tile of a row, so the second kernel (ConvCounts, launched
// after on the same stream) updates it; stream order replaces a grid-wide barrier.
//
// Layout in UB: token-major rows of tileC channels (fp32 window [W-1+tileT rows] = committed state rows followed
// by the chunk's tokens); each output row is sum_j w_j * window row (t + j) on the vector unit. A pool slot holds
// the state either channel-major ([C, W-1] dense; vLLM's "DS" conv layout), whose W-1 state rows are transposed
// with vector Gathers (byte offsets computed once per launch) on the way in (only when fewer than W-1 tokens are
// pending) and on the way out (only when pending > 0), or token-major ([W-1, C] dense, viewed [C, W-1]: vLLM's
// default "SD" layout, vllm-ascend's), whose rows are the window's rows: one strided DMA each way. Slots lie
// poolStride elements apart.
#include "kernel_operator.h"
#include "kernel_utils.h"
#include "verify_causal_conv1d_tiling.h"

namespace {

using namespace ascend_spec::kernel;  // kernel_utils.h

template <typename TX, typename TR, typename TP>
class VerifyConv1d {
public:
    __aicore__ inline VerifyConv1d() {}

    __aicore__ inline void Init(GM_ADDR x, GM_ADDR weightT, GM_ADDR bias, GM_ADDR y, GM_ADDR pool, GM_ADDR rec,
                                GM_ADDR numRecorded, GM_ADDR cuSeqlens, GM_ADDR stateIndices, GM_ADDR pending,
                                const VerifyConv1dTiling &tiling, AscendC::TPipe *pipe) {
        t_ = tiling;
        const int64_t b = t_.numRows, c = t_.channels, w = t_.width, s = t_.numSlots, l = t_.maxTokens;
        wm1_ = w - 1;
        tc_ = t_.tileC;
        if (t_.mode == kModeVerify) {
            x_.SetGlobalBuffer((__gm__ TX *)x, t_.numTokens * c);
            y_.SetGlobalBuffer((__gm__ TX *)y, t_.numTokens * c);
            weightT_.SetGlobalBuffer((__gm__ float *)weightT, w * c);
            if (t_.hasBias) bias_.SetGlobalBuffer((__gm__ float *)bias, c);
            cu_.SetGlobalBuffer((__gm__ int32_t *)cuSeqlens, b + 1);
        }
        pool_.SetGlobalBuffer((__gm__ TP *)pool, (s - 1) * t_.poolStride + c * wm1_);
        rec_.SetGlobalBuffer((__gm__ TR *)rec, s * l * c);
        numRecorded_.SetGlobalBuffer((__gm__ int32_t *)numRecorded, s);
        idx_.SetGlobalBuffer((__gm__ int32_t *)stateIndices, b);
        pending_.SetGlobalBuffer((__gm__ int32_t *)pending, b);

        const int64_t tt = t_.tileT;
        int64_t stage = tt * static_cast<int64_t>(sizeof(TX));
        if (tt * static_cast<int64_t>(sizeof(TR)) > stage) stage = tt * sizeof(TR);
        if (wm1_ * static_cast<int64_t>(sizeof(TP)) > stage) stage = wm1_ * sizeof(TP);
        pipe->InitBuffer(stageBuf_, static_cast<uint32_t>(stage * tc_));
        pipe->InitBuffer(yOutBuf_, static_cast<uint32_t>(tt * tc_ * sizeof(TX)));
        pipe->InitBuffer(winBuf_, static_cast<uint32_t>((wm1_ + tt) * tc_ * 4));
        pipe->InitBuffer(yBuf_, static_cast<uint32_t>(tt * tc_ * 4));
        pipe->InitBuffer(tmpBuf_, static_cast<uint32_t>(tc_ * 4));
        pipe->InitBuffer(parBuf_, static_cast<uint32_t>((w + 1) * tc_ * 4));
        pipe->InitBuffer(poolFBuf_, static_cast<uint32_t>(wm1_ * tc_ * 4));
        pipe->InitBuffer(offInBuf_, static_cast<uint32_t>(wm1_ * tc_ * 4));
        pipe->InitBuffer(offOutBuf_, static_cast<uint32_t>(wm1_ * tc_ * 4));
        win_ = winBuf_.Get<float>();
        yF_ = yBuf_.Get<float>();
        tmp_ = tmpBuf_.Get<float>();
        par_ = parBuf_.Get<float>();
        poolF_ = poolFBuf_.Get<float>();
        // Transpose tables (byte offsets): [W-1, tileC] rows <- [tileC, W-1] pool layout, and back.
        offIn_ = offInBuf_.Get<uint32_t>();
        offOut_ = offOutBuf_.Get<uint32_t>();
        for (int64_t k = 0; k < wm1_; ++k) {
            for (int64_t c = 0; c < tc_; ++c) {
                offIn_.SetValue(static_cast<uint32_t>(k * tc_ + c), static_cast<uint32_t>((c * wm1_ + k) * 4));
                offOut_.SetValue(static_cast<uint32_t>(c * wm1_ + k), static_cast<uint32_t>((k * tc_ + c) * 4));
            }
        }
        Sync<AscendC::HardEvent::S_V>();
    }

    __aicore__ inline void Process() {
        const int64_t units = t_.numRows * t_.numTiles;
        const int64_t begin = AscendC::GetBlockIdx() * t_.unitsPerCore;
        const int64_t end = Min64(begin + t_.unitsPerCore, units);
        int64_t loadedTile = -1;
        for (int64_t u = begin; u < end; ++u) {
            const int64_t tile = u / t_.numRows, row = u % t_.numRows;
            const int64_t c0 = tile * tc_;
            const int64_t ct = Min64(tc_, t_.channels - c0);
            if (t_.mode == kModeVerify) {
                if (tile != loadedTile) {
                    LoadParams(c0, ct);
                    loadedTile = tile;
                }
                VerifyUnit(row, c0, ct);
            } else {
                FlushUnit(row, c0, ct);
            }
        }
    }

private:
    // `rows` GM rows of `ct` elements, `channels` apart <-> UB rows tileC apart.
    template <typename T>
    __aicore__ inline void CopyRowsIn(const AscendC::LocalTensor<T> &dst, const AscendC::GlobalTensor<T> &src,
                                      int64_t rows, int64_t ct) {
        LoadRows(dst, src, rows, ct, t_.channels, tc_);
    }

    template <typename T>
    __aicore__ inline void CopyRowsOut(const AscendC::GlobalTensor<T> &dst, const AscendC::LocalTensor<T> &src,
                                       int64_t rows, int64_t ct) {
        StoreRows(dst, src, rows, ct, t_.channels, tc_);
    }

    // GM rows (any dtype) -> fp32 window rows starting at `winRow`; raw copies stay in the staging buffer.
    template <typename T>
    __aicore__ inline void LoadRowsF(int64_t winRow, const AscendC::GlobalTensor<T> &src, int64_t rows, int64_t ct) {
        AscendC::LocalTensor<float> dst = win_[static_cast<uint32_t>(winRow * tc_)];
        if constexpr (SameType<T, float>::value) {
            CopyRowsIn(dst, src, rows, ct);
            Sync<AscendC::HardEvent::MTE2_V>();
        } else {
            AscendC::LocalTensor<T> stage = stageBuf_.Get<T>();
            Sync<AscendC::HardEvent::V_MTE2>();  // an earlier Cast may still read the staging buffer
            CopyRowsIn(stage, src, rows, ct);
            Sync<AscendC::HardEvent::MTE2_V>();
            AscendC::Cast(dst, stage, AscendC::RoundMode::CAST_NONE, static_cast<uint32_t>(rows * tc_));
        }
    }

    __aicore__ inline void LoadParams(int64_t c0, int64_t ct) {
        Sync<AscendC::HardEvent::V_MTE2>();  // the previous tile's vector ops are done with par_
        CopyRowsIn(par_, weightT_[static_cast<uint64_t>(c0)], t_.width, ct);
        if (t_.hasBias) CopyRowsIn(par_[static_cast<uint32_t>(t_.width * tc_)], bias_[static_cast<uint64_t>(c0)], 1, ct);
        Sync<AscendC::HardEvent::MTE2_V>();
    }

    // Pending tokens to commit for `row`: clamped to what the slot recorded (never stale records).
    __aicore__ inline int64_t Pending(int64_t row, int64_t slot) const {
        int64_t p = pending_.GetValue(row);
        const int64_t recorded = Min64(numRecorded_.GetValue(slot), t_.maxTokens);
        return Max64(0, Min64(p, recorded));
    }

    // Window rows 0..W-2 <- entries p .. p+W-2 of (old pool state ++ recorded x), as fp32.
    __aicore__ inline void Committed(int64_t slot, int64_t p, int64_t c0, int64_t ct) {
        const int64_t poolRows = Max64(0, wm1_ - p);
        if (poolRows > 0 && t_.tokenMajor) {  // state rows p .. W-2 straight into window rows 0..
            LoadRowsF(0, pool_[static_cast<uint64_t>(slot * t_.poolStride + p * t_.channels + c0)], poolRows, ct);
        } else if (poolRows > 0) {
            const uint64_t off = static_cast<uint64_t>(slot * t_.poolStride + c0 * wm1_);
            const uint32_t count = static_cast<uint32_t>(ct * wm1_);
            AscendC::DataCopyExtParams params{1, static_cast<uint32_t>(count * sizeof(TP)), 0, 0, 0};
            if constexpr (SameType<TP, float>::value) {
                AscendC::DataCopyPad(poolF_, pool_[off], params,
                                     AscendC::DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
                Sync<AscendC::HardEvent::MTE2_V>();
            } else {
                AscendC::LocalTensor<TP> stage = stageBuf_.Get<TP>();
                AscendC::DataCopyPad(stage, pool_[off], params,
                                     AscendC::DataCopyPadExtParams<TP>{false, 0, 0, static_cast<TP>(0)});
                Sync<AscendC::HardEvent::MTE2_V>();
                AscendC::Cast(poolF_, stage, AscendC::RoundMode::CAST_NONE, count);
            }
            // yF_ (free until the first chunk) <- the state as rows [W-1, tileC]; window rows <- rows p...
            // (columns past ct hold garbage of the tile's padding and are never stored)
            AscendC::Gather(yF_, poolF_, offIn_, static_cast<uint32_t>(0), static_cast<uint32_t>(wm1_ * tc_));
            for (int64_t k = 0; k < poolRows; ++k) {
                AscendC::Adds(win_[static_cast<uint32_t>(k * tc_)], yF_[static_cast<uint32_t>((p + k) * tc_)], 0.0f,
                              static_cast<int32_t>(ct));
            }
        }
        const int64_t recRows = wm1_ - poolRows;
        if (recRows > 0) {
            const int64_t first = p - recRows;  // recorded token feeding window row poolRows
            const uint64_t off = static_cast<uint64_t>((slot * t_.maxTokens + first) * t_.channels + c0);
            LoadRowsF(poolRows, rec_[off], recRows, ct);
        }
    }

    // Pool slot <- window rows 0..W-2 (token-major: row by row; channel-major: gathered back into its layout).
    __aicore__ inline void StorePool(int64_t slot, int64_t c0, int64_t ct) {
        if (t_.tokenMajor) {
            StoreRowsF(pool_[static_cast<uint64_t>(slot * t_.poolStride + c0)], win_, stageBuf_.Get<TP>(), wm1_, ct);
            Drain();
            return;
        }
        const uint64_t off = static_cast<uint64_t>(slot * t_.poolStride + c0 * wm1_);
        const uint32_t count = static_cast<uint32_t>(ct * wm1_);
        // Window rows came from DMA (already waited for with MTE2_V) or from vector ops (same pipe).
        AscendC::Gather(poolF_, win_, offOut_, static_cast<uint32_t>(0), count);
        AscendC::DataCopyExtParams params{1, static_cast<uint32_t>(count * sizeof(TP)), 0, 0, 0};
        if constexpr (SameType<TP, float>::value) {
            Sync<AscendC::HardEvent::V_MTE3>();
            AscendC::DataCopyPad(pool_[off], poolF_, params);
        } else {
            AscendC::LocalTensor<TP> stage = stageBuf_.Get<TP>();
            AscendC::Cast(stage, poolF_, AscendC::RoundMode::CAST_RINT, count);
            Sync<AscendC::HardEvent::V_MTE3>();
            AscendC::DataCopyPad(pool_[off], stage, params);
        }
        Drain();
    }

    // Every DMA-out finished before any buffer is rewritten; every vector read finished before a DMA-in.
    __aicore__ inline void Drain() {
        Sync<AscendC::HardEvent::MTE3_V>();
        Sync<AscendC::HardEvent::MTE3_S>();
        Sync<AscendC::HardEvent::MTE3_MTE2>();
        Sync<AscendC::HardEvent::V_MTE2>();
    }

    // fp32 rows -> GM rows of T, `channels` apart (through `stage` and a Cast unless T is fp32).
    template <typename T>
    __aicore__ inline void StoreRowsF(const AscendC::GlobalTensor<T> &dst, const AscendC::LocalTensor<float> &src,
                                      const AscendC::LocalTensor<T> &stage, int64_t rows, int64_t ct) {
        if constexpr (SameType<T, float>::value) {
            Sync<AscendC::HardEvent::V_MTE3>();
            CopyRowsOut(dst, src, rows, ct);
        } else {
            AscendC::Cast(stage, src, AscendC::RoundMode::CAST_RINT, static_cast<uint32_t>(rows * tc_));
            Sync<AscendC::HardEvent::V_MTE3>();
            CopyRowsOut(dst, stage, rows, ct);
        }
    }

    __aicore__ inline void StoreY(int64_t tok, int64_t rows, int64_t c0, int64_t ct) {
        StoreRowsF(y_[static_cast<uint64_t>(tok * t_.channels + c0)], yF_, yOutBuf_.Get<TX>(), rows, ct);
    }

    // Output rows [tok0, tok1) of this channel slice <- zeros (padding rows, tokens no row covers).
    __aicore__ inline void ZeroY(int64_t tok0, int64_t tok1, int64_t c0, int64_t ct) {
        const int64_t tt = t_.tileT;
        if (tok1 <= tok0) return;
        AscendC::Duplicate(yF_, 0.0f, static_cast<int32_t>(tt * tc_));
        for (int64_t t0 = tok0; t0 < tok1; t0 += tt) {
            StoreY(t0, Min64(tt, tok1 - t0), c0, ct);
            Drain();
        }
    }

    // cu_seqlens[i] clamped into [0, T] (value checks off): no row reads x or writes y outside their T rows.
    __aicore__ inline int64_t Token(int64_t i) const { return Max64(0, Min64(cu_.GetValue(i), t_.numTokens)); }

    // A state index outside [0, S) is a padding row (value checks off): nothing of any slot is read or written.
    __aicore__ inline bool OwnsSlot(int64_t raw) const { return raw >= 0 && raw < t_.numSlots; }

    __aicore__ inline void VerifyUnit(int64_t row, int64_t c0, int64_t ct) {
        const int64_t bos = Token(row);
        const int64_t n = Token(row + 1) - bos;
        // Outputs are complete: the first row's units zero the tokens before cu[0], the last row's those from cu[B].
        if (row == 0) ZeroY(0, bos, c0, ct);
        if (row == t_.numRows - 1) ZeroY(Token(row + 1), t_.numTokens, c0, ct);
        if (n <= 0) return;
        const int64_t raw = idx_.GetValue(row);
        const int64_t tt = t_.tileT;
        if (!OwnsSlot(raw)) {  // graph padding row: zeros out, no state, no records
            ZeroY(bos, bos + n, c0, ct);
            return;
        }
        const int64_t slot = raw;
        const int64_t p = Pending(row, slot);
        Committed(slot, p, c0, ct);
        if (p > 0) StorePool(slot, c0, ct);
        const int32_t cnt = static_cast<int32_t>(ct);
        for (int64_t t0 = 0; t0 < n; t0 += tt) {
            const int64_t m = Min64(tt, n - t0);
            const uint64_t xOff = static_cast<uint64_t>((bos + t0) * t_.channels + c0);
            LoadRowsF(wm1_, x_[xOff], m, ct);
            const int64_t mr = Min64(m, t_.maxTokens - t0);  // records never grow past their capacity
            if (mr > 0) {
                const uint64_t rOff = static_cast<uint64_t>((slot * t_.maxTokens + t0) * t_.channels + c0);
                if constexpr (SameType<TR, TX>::value) {
                    if constexpr (SameType<TX, float>::value) {
                        Sync<AscendC::HardEvent::MTE2_MTE3>();
                        CopyRowsOut(rec_[rOff], win_[static_cast<uint32_t>(wm1_ * tc_)], mr, ct);
                    } else {
                        Sync<AscendC::HardEvent::MTE2_MTE3>();
                        CopyRowsOut(rec_[rOff], stageBuf_.Get<TX>(), mr, ct);
                    }
                } else {  // fp32 records of a 16-bit x: the converted window rows are exact
                    Sync<AscendC::HardEvent::V_MTE3>();
                    CopyRowsOut(rec_[rOff], win_[static_cast<uint32_t>(wm1_ * tc_)], mr, ct);
                }
            }
            for (int64_t i = 0; i < m; ++i) {
                AscendC::LocalTensor<float> acc = yF_[static_cast<uint32_t>(i * tc_)];
                AscendC::Mul(acc, win_[static_cast<uint32_t>(i * tc_)], par_, cnt);
                for (int64_t j = 1; j < t_.width; ++j) {
                    AscendC::Mul(tmp_, win_[static_cast<uint32_t>((i + j) * tc_)], par_[static_cast<uint32_t>(j * tc_)], cnt);
                    AscendC::Add(acc, acc, tmp_, cnt);
                }
                if (t_.hasBias) AscendC::Add(acc, acc, par_[static_cast<uint32_t>(t_.width * tc_)], cnt);
                if (t_.silu) {  // y * sigmoid(y) = y / (1 + exp(-y))
                    AscendC::Muls(tmp_, acc, -1.0f, cnt);
                    AscendC::Exp(tmp_, tmp_, cnt);
                    AscendC::Adds(tmp_, tmp_, 1.0f, cnt);
                    AscendC::Div(acc, acc, tmp_, cnt);
                }
            }
            StoreY(bos + t0, m, c0, ct);
            if (t0 + m < n) {  // slide: the chunk's last W-1 inputs become the next chunk's left context
                AscendC::Adds(win_, win_[static_cast<uint32_t>(m * tc_)], 0.0f, static_cast<int32_t>(wm1_ * tc_));
            }
            Drain();
        }
    }

    __aicore__ inline void FlushUnit(int64_t row, int64_t c0, int64_t ct) {
        const int64_t raw = idx_.GetValue(row);
        if (!OwnsSlot(raw)) return;
        const int64_t p = Pending(row, raw);
        if (p == 0) return;
        Committed(raw, p, c0, ct);
        StorePool(raw, c0, ct);
    }

    VerifyConv1dTiling t_;
    int64_t wm1_ = 1, tc_ = 16;
    AscendC::GlobalTensor<TX> x_, y_;
    AscendC::GlobalTensor<float> weightT_, bias_;
    AscendC::GlobalTensor<TP> pool_;
    AscendC::GlobalTensor<TR> rec_;
    AscendC::GlobalTensor<int32_t> numRecorded_, cu_, idx_, pending_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> stageBuf_, yOutBuf_, winBuf_, yBuf_, tmpBuf_, parBuf_, poolFBuf_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> offInBuf_, offOutBuf_;
    AscendC::LocalTensor<float> win_, yF_, tmp_, par_, poolF_;
    AscendC::LocalTensor<uint32_t> offIn_, offOut_;
};

// After the main kernel: num_recorded[slot] = row length (verify) or 0 (flush); flush may also zero pending.
// Rows are split over the vector cores (each row is one 4-byte DMA to a scattered slot).
class ConvCounts {
public:
    __aicore__ inline ConvCounts() {}

    __aicore__ inline void Init(GM_ADDR numRecorded, GM_ADDR cuSeqlens, GM_ADDR stateIndices, GM_ADDR pending,
                                const VerifyConv1dTiling &tiling, AscendC::TPipe *pipe) {
        t_ = tiling;
        numRecorded_.SetGlobalBuffer((__gm__ int32_t *)numRecorded, t_.numSlots);
        if (t_.mode == kModeVerify) cu_.SetGlobalBuffer((__gm__ int32_t *)cuSeqlens, t_.numRows + 1);
        idx_.SetGlobalBuffer((__gm__ int32_t *)stateIndices, t_.numRows);
        pending_.SetGlobalBuffer((__gm__ int32_t *)pending, t_.numRows);
        pipe->InitBuffer(buf_, kRows * 32);
    }

    __aicore__ inline void Process() {  // block c owns rows [c * countRowsPerCore, ...): one small DMA per row
        const int64_t begin = AscendC::GetBlockIdx() * t_.countRowsPerCore;
        const int64_t end = Min64(begin + t_.countRowsPerCore, t_.numRows);
        AscendC::LocalTensor<int32_t> tile = buf_.Get<int32_t>();
        for (int64_t lo = begin; lo < end; lo += kRows) {
            const int64_t m = Min64(kRows, end - lo);
            for (int64_t i = 0; i < m; ++i) {  // one 32-byte block per row: DataCopyPad needs aligned UB sources
                int64_t v = 0;
                if (t_.mode == kModeVerify) v = Min64(Token(lo + i + 1) - Token(lo + i), t_.maxTokens);
                tile.SetValue(static_cast<uint32_t>(i * 8), static_cast<int32_t>(v));
            }
            Sync<AscendC::HardEvent::S_MTE3>();
            for (int64_t i = 0; i < m; ++i) {
                const int64_t slot = idx_.GetValue(lo + i);
                if (slot < 0 || slot >= t_.numSlots) continue;  // padding, or out of range with checks off
                if (t_.mode == kModeVerify && tile.GetValue(static_cast<uint32_t>(i * 8)) <= 0) continue;
                AscendC::DataCopyExtParams one{1, 4, 0, 0, 0};
                AscendC::DataCopyPad(numRecorded_[static_cast<uint64_t>(slot)], tile[static_cast<uint32_t>(i * 8)], one);
            }
            Sync<AscendC::HardEvent::MTE3_S>();
            if (t_.mode == kModeFlushAndReset) {
                Sync<AscendC::HardEvent::MTE3_V>();
                Sync<AscendC::HardEvent::S_V>();
                AscendC::Duplicate(tile, static_cast<int32_t>(0), static_cast<int32_t>(m));
                Sync<AscendC::HardEvent::V_MTE3>();
                AscendC::DataCopyExtParams zeros{1, static_cast<uint32_t>(m * 4), 0, 0, 0};
                AscendC::DataCopyPad(pending_[static_cast<uint64_t>(lo)], tile, zeros);
                Sync<AscendC::HardEvent::MTE3_S>();
                Sync<AscendC::HardEvent::V_S>();
            }
        }
    }

private:
    // cu_seqlens[i] clamped into [0, T], as the main kernel reads it.
    __aicore__ inline int64_t Token(int64_t i) const { return Max64(0, Min64(cu_.GetValue(i), t_.numTokens)); }

    static constexpr int64_t kRows = 256;
    VerifyConv1dTiling t_;
    AscendC::GlobalTensor<int32_t> numRecorded_, cu_, idx_, pending_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> buf_;
};

// dtype codes: 0 fp32, 1 bf16, 2 fp16 (x/y, records, pool). Records are x's dtype or fp32.
template <typename TX, typename TR, typename TP>
__aicore__ inline void RunTyped(GM_ADDR x, GM_ADDR weightT, GM_ADDR bias, GM_ADDR y, GM_ADDR pool, GM_ADDR rec,
                                GM_ADDR numRecorded, GM_ADDR cu, GM_ADDR idx, GM_ADDR pending,
                                const VerifyConv1dTiling &tiling) {
    AscendC::TPipe pipe;
    VerifyConv1d<TX, TR, TP> op;
    op.Init(x, weightT, bias, y, pool, rec, numRecorded, cu, idx, pending, tiling, &pipe);
    op.Process();
}

template <typename TX, typename TR>
__aicore__ inline void RunPool(int64_t poolType, GM_ADDR x, GM_ADDR weightT, GM_ADDR bias, GM_ADDR y, GM_ADDR pool,
                               GM_ADDR rec, GM_ADDR numRecorded, GM_ADDR cu, GM_ADDR idx, GM_ADDR pending,
                               const VerifyConv1dTiling &tiling) {
    if (poolType == kDtypeF32) {
        RunTyped<TX, TR, float>(x, weightT, bias, y, pool, rec, numRecorded, cu, idx, pending, tiling);
    } else if (poolType == kDtypeBf16) {
        RunTyped<TX, TR, bfloat16_t>(x, weightT, bias, y, pool, rec, numRecorded, cu, idx, pending, tiling);
    } else {
        RunTyped<TX, TR, half>(x, weightT, bias, y, pool, rec, numRecorded, cu, idx, pending, tiling);
    }
}

template <typename TX>
__aicore__ inline void RunRec(bool recIsF32, int64_t poolType, GM_ADDR x, GM_ADDR weightT, GM_ADDR bias, GM_ADDR y,
                              GM_ADDR pool, GM_ADDR rec, GM_ADDR numRecorded, GM_ADDR cu, GM_ADDR idx,
                              GM_ADDR pending, const VerifyConv1dTiling &tiling) {
    if (recIsF32) {
        RunPool<TX, float>(poolType, x, weightT, bias, y, pool, rec, numRecorded, cu, idx, pending, tiling);
    } else {
        RunPool<TX, TX>(poolType, x, weightT, bias, y, pool, rec, numRecorded, cu, idx, pending, tiling);
    }
}

}  // namespace

extern "C" __global__ __aicore__ void verify_causal_conv1d(GM_ADDR x, GM_ADDR weightT, GM_ADDR bias, GM_ADDR y,
                                                           GM_ADDR pool, GM_ADDR rec, GM_ADDR numRecorded,
                                                           GM_ADDR cu, GM_ADDR idx, GM_ADDR pending,
                                                           int64_t xType, int64_t recType, int64_t poolType,
                                                           VerifyConv1dTiling tiling) {
    const bool recIsF32 = recType == kDtypeF32;
    if (xType == kDtypeF32) {
        RunRec<float>(true, poolType, x, weightT, bias, y, pool, rec, numRecorded, cu, idx, pending, tiling);
    } else if (xType == kDtypeBf16) {
        RunRec<bfloat16_t>(recIsF32, poolType, x, weightT, bias, y, pool, rec, numRecorded, cu, idx, pending, tiling);
    } else {
        RunRec<half>(recIsF32, poolType, x, weightT, bias, y, pool, rec, numRecorded, cu, idx, pending, tiling);
    }
}

extern "C" __global__ __aicore__ void verify_causal_conv1d_counts(GM_ADDR numRecorded, GM_ADDR cu, GM_ADDR idx,
                                                                  GM_ADDR pending, VerifyConv1dTiling tiling) {
    AscendC::TPipe pipe;
    ConvCounts op;
    op.Init(numRecorded, cu, idx, pending, tiling, &pipe);
    op.Process();
}

// Host-side launch: `<<<>>>` on the NPU; the host model's block-by-block launcher on the CPU. Both take the same
// VerifyCausalConv1dArgs and compute the same tiling from it (any KernelMode).
#define VERIFY_CONV1D_GM(a)                                                                                      \
    (GM_ADDR)(a).x, (GM_ADDR)(a).weightT, (GM_ADDR)(a).bias, (GM_ADDR)(a).y, (GM_ADDR)(a).pool,                 \
        (GM_ADDR)(a).rec, (GM_ADDR)(a).numRecorded, (GM_ADDR)(a).cu, (GM_ADDR)(a).idx, (GM_ADDR)(a).pending,    \
        (a).xType, (a).recType, (a).poolType
#define VERIFY_CONV1D_COUNTS_GM(a) (GM_ADDR)(a).numRecorded, (GM_ADDR)(a).cu, (GM_ADDR)(a).idx, (GM_ADDR)(a).pending

#ifdef ASCEND_SPEC_HOST_MODEL
#include "ub_fit.h"

extern "C" uint64_t verify_causal_conv1d_args_bytes() { return sizeof(VerifyCausalConv1dArgs); }

extern "C" int verify_causal_conv1d_host(uint32_t vectorCores, const VerifyCausalConv1dArgs *args) {
    const VerifyCausalConv1dArgs &a = *args;
    VerifyConv1dTiling tiling = ascend_spec::ComputeVerifyConv1dLaunchTiling(a, vectorCores);
    const std::string unfit = ascend_spec::VerifyConv1dUbFitError(a, vectorCores);
    if (!unfit.empty()) {
        AscendC::host_model::GetState().lastError = unfit;
        return -1;
    }
    int status = AscendC::host_model::Launch(tiling.blockDim, verify_causal_conv1d, VERIFY_CONV1D_GM(a), tiling);
    if (status != 0) return status;
    return AscendC::host_model::Launch(tiling.countBlockDim, verify_causal_conv1d_counts, VERIFY_CONV1D_COUNTS_GM(a),
                                       tiling);
}

// Channels per unit the tiling picks for `args` (pointers unused).
extern "C" int64_t verify_causal_conv1d_tile_channels(uint32_t vectorCores, const VerifyCausalConv1dArgs *args) {
    return ascend_spec::ComputeVerifyConv1dLaunchTiling(*args, vectorCores).tileC;
}
#else
namespace ascend_spec {
int verify_causal_conv1d_impl(void *stream, uint32_t vectorCores, const VerifyCausalConv1dArgs &a) {
    VerifyConv1dTiling tiling = ComputeVerifyConv1dLaunchTiling(a, vectorCores);
    if (VerifyConv1dLaunchUbBytes(a, vectorCores) > a.ubBytes) return -1;  // would overrun UB: never launched
    verify_causal_conv1d<<<tiling.blockDim, nullptr, stream>>>(VERIFY_CONV1D_GM(a), tiling);
    verify_causal_conv1d_counts<<<tiling.countBlockDim, nullptr, stream>>>(VERIFY_CONV1D_COUNTS_GM(a), tiling);
    return 0;
}
}  // namespace ascend_spec
#endif
