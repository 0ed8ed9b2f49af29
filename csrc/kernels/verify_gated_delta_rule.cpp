// verify_gated_delta_rule: commit each row's pending tokens into its GDN state slot by replaying the records of its
// previous call, write the committed state once, then run the gated delta rule over this call's tokens and record
// them (k, g into the other bank, u). Also the flush of the GDN records (kModeFlush: replay and store, no tokens).
// Semantics: ascend_spec/gdn/verify_gated_delta_rule/ (the reference is the oracle); design: docs/verify_gated_delta_rule.md.
//
// Work split: a unit is (row, value head hv, value tile); vector core c owns units [c * unitsPerCore, ...). A unit
// keeps the state tile S[slot, hv, :, v0:v0+tileV] ([Dk, tileV] fp32, 64 KiB at 128 x 128) in the Unified Buffer
// for the whole unit: one state read, one state write (only when something was pending).
// Ownership: u records of (slot, hv, tile) are read and rewritten only by this unit; every replay load precedes
// (MTE2 -> V -> MTE3 events) the stores of this call's u. k (per k-head) and g (per value head) are shared by
// several units, so this call writes them into bank 1 - bank[slot], which no unit of the launch reads, and only
// one unit writes each (tile 0 of the first value head of a group for k, tile 0 for g). bank[slot] and
// num_recorded[slot] are read by every unit of a row: the second kernel (GdnMeta, launched after on the same
// stream) flips the bank and sets the count; stream order replaces a grid-wide barrier.
//
// Arithmetic per token on the vector unit, state rows of tileV floats: S *= exp(g) (one Muls over the tile);
// pred = sum_i k_i S[i,:] and o = sum_i q_i S[i,:] as Dk Axpy row accumulations each; u = beta (v - pred);
// S[i,:] += k_i u (Dk Axpy). The replay runs the same decay and rank-1 updates with the recorded k, g, u.
#include "kernel_operator.h"
#include "kernel_utils.h"
#include "verify_gated_delta_rule_tiling.h"

namespace {

using namespace ascend_spec::kernel;  // kernel_utils.h

template <typename TX>
class VerifyGdn {
public:
    __aicore__ inline VerifyGdn() {}

    __aicore__ inline void Init(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR g, GM_ADDR beta, GM_ADDR o, GM_ADDR cu,
                                GM_ADDR idx, GM_ADDR pending, GM_ADDR pool, GM_ADDR recK, GM_ADDR recG, GM_ADDR recU,
                                GM_ADDR bank, GM_ADDR numRecorded, const VerifyGdnTiling &tiling,
                                AscendC::TPipe *pipe) {
        t_ = tiling;
        const int64_t tt = t_.numTokens, b = t_.numRows, h = t_.numHeads, hv = t_.numVHeads, s = t_.numSlots;
        const int64_t l = t_.maxTokens, dk = t_.dk, dv = t_.dv;
        if (t_.mode == kModeVerify) {
            q_.SetGlobalBuffer((__gm__ TX *)q, tt * h * dk);
            k_.SetGlobalBuffer((__gm__ TX *)k, tt * h * dk);
            v_.SetGlobalBuffer((__gm__ TX *)v, tt * hv * dv);
            o_.SetGlobalBuffer((__gm__ TX *)o, tt * hv * dv);
            g_.SetGlobalBuffer((__gm__ float *)g, tt * hv);
            beta_.SetGlobalBuffer((__gm__ float *)beta, tt * hv);
            cu_.SetGlobalBuffer((__gm__ int32_t *)cu, b + 1);
        }
        idx_.SetGlobalBuffer((__gm__ int32_t *)idx, b);
        pending_.SetGlobalBuffer((__gm__ int32_t *)pending, b);
        pool_.SetGlobalBuffer((__gm__ float *)pool, (s - 1) * t_.poolStride + hv * dk * dv);
        recK_.SetGlobalBuffer((__gm__ float *)recK, s * 2 * l * h * dk);
        recG_.SetGlobalBuffer((__gm__ float *)recG, s * 2 * l * hv);
        recU_.SetGlobalBuffer((__gm__ float *)recU, s * l * hv * dv);
        bank_.SetGlobalBuffer((__gm__ int32_t *)bank, s);
        numRecorded_.SetGlobalBuffer((__gm__ int32_t *)numRecorded, s);

        const int64_t tv = t_.tileV, ct = t_.tileT, dkP = t_.dkP, wide = dkP > tv ? dkP : tv;
        pipe->InitBuffer(stateBuf_, static_cast<uint32_t>(dk * tv * 4));
        pipe->InitBuffer(qBuf_, static_cast<uint32_t>(ct * dkP * 4));
        pipe->InitBuffer(kBuf_, static_cast<uint32_t>(ct * dkP * 4));
        pipe->InitBuffer(vBuf_, static_cast<uint32_t>(ct * tv * 4));
        pipe->InitBuffer(uBuf_, static_cast<uint32_t>(ct * tv * 4));
        pipe->InitBuffer(oBuf_, static_cast<uint32_t>(ct * tv * 4));
        pipe->InitBuffer(qRawBuf_, static_cast<uint32_t>(ct * dkP * sizeof(TX)));
        pipe->InitBuffer(kRawBuf_, static_cast<uint32_t>(ct * dkP * sizeof(TX)));
        pipe->InitBuffer(vRawBuf_, static_cast<uint32_t>(ct * tv * sizeof(TX)));
        pipe->InitBuffer(oRawBuf_, static_cast<uint32_t>(ct * tv * sizeof(TX)));
        pipe->InitBuffer(gRawBuf_, static_cast<uint32_t>(ct * 8 * 4));
        pipe->InitBuffer(gExpBuf_, static_cast<uint32_t>(ct * 8 * 4));
        pipe->InitBuffer(tmpBuf_, static_cast<uint32_t>(wide * 4));
        pipe->InitBuffer(workBuf_, static_cast<uint32_t>(wide * 4));
        pipe->InitBuffer(redBuf_, 64);
        s_ = stateBuf_.Get<float>();
        qF_ = qBuf_.Get<float>();
        kF_ = kBuf_.Get<float>();
        vF_ = vBuf_.Get<float>();
        uF_ = uBuf_.Get<float>();
        oF_ = oBuf_.Get<float>();
        gRaw_ = gRawBuf_.Get<float>();
        gExp_ = gExpBuf_.Get<float>();
        tmp_ = tmpBuf_.Get<float>();
        work_ = workBuf_.Get<float>();
        red_ = redBuf_.Get<float>();
    }

    __aicore__ inline void Process() {
        const int64_t perRow = t_.numVHeads * t_.numVTiles;
        const int64_t units = t_.numRows * perRow;
        const int64_t begin = AscendC::GetBlockIdx() * t_.unitsPerCore;
        const int64_t end = Min64(begin + t_.unitsPerCore, units);
        for (int64_t u = begin; u < end; ++u) {
            const int64_t row = u / perRow, hv = (u % perRow) / t_.numVTiles, tile = u % t_.numVTiles;
            Unit(row, hv, tile * t_.tileV, Min64(t_.tileV, t_.dv - tile * t_.tileV), tile == 0);
        }
    }

private:
    __aicore__ inline void Unit(int64_t row, int64_t hv, int64_t v0, int64_t tv, bool firstTile) {
        const int64_t raw = idx_.GetValue(row);
        const bool valid = raw >= 0;
        const int64_t slot = valid ? raw : 0;
        int64_t bos = 0, n = 0;
        if (t_.mode == kModeVerify) {
            bos = cu_.GetValue(row);
            n = cu_.GetValue(row + 1) - bos;
        }
        if (!valid) {  // graph padding: zero outputs, no state, record or metadata access
            for (int64_t c0 = 0; c0 < n; c0 += t_.tileT) ZeroOutputs(bos + c0, Min64(t_.tileT, n - c0), hv, v0, tv);
            return;
        }
        if (t_.mode == kModeVerify && n <= 0) return;  // absent this step: state and records untouched
        const int64_t bank = bank_.GetValue(slot);
        int64_t nRep = Min64(pending_.GetValue(row), numRecorded_.GetValue(slot));
        nRep = Max64(Min64(nRep, t_.maxTokens), 0);
        if (t_.mode == kModeFlush && nRep == 0) return;  // flush: nothing pending
        const int64_t h = hv / (t_.numVHeads / t_.numHeads);
        const uint64_t stateOff = static_cast<uint64_t>(slot * t_.poolStride + hv * t_.dk * t_.dv + v0);

        Sync<AscendC::HardEvent::V_MTE2>();     // the previous unit's vector ops are done with the state tile
        Sync<AscendC::HardEvent::MTE3_MTE2>();  // and its stores have left it
        LoadRows(s_, pool_[stateOff], t_.dk, tv, t_.dv, t_.tileV);
        Sync<AscendC::HardEvent::MTE2_V>();
        for (int64_t c0 = 0; c0 < nRep; c0 += t_.tileT) ReplayChunk(slot, bank, h, hv, v0, tv, c0, Min64(t_.tileT, nRep - c0));
        if (nRep > 0) {
            Sync<AscendC::HardEvent::V_MTE3>();
            StoreRows(pool_[stateOff], s_, t_.dk, tv, t_.dv, t_.tileV);  // the committed state, written once
            Sync<AscendC::HardEvent::MTE3_V>();
        }
        if (t_.mode != kModeVerify) return;
        const bool ownK = firstTile && (hv % (t_.numVHeads / t_.numHeads) == 0);
        for (int64_t c0 = 0; c0 < n; c0 += t_.tileT) {
            TokenChunk(slot, 1 - bank, h, hv, v0, tv, bos, c0, Min64(t_.tileT, n - c0), ownK, firstTile);
        }
    }

    // m recorded tokens starting at c0: S = exp(g_t) S + k_t u_t^T.
    __aicore__ inline void ReplayChunk(int64_t slot, int64_t bank, int64_t h, int64_t hv, int64_t v0, int64_t tv,
                                       int64_t c0, int64_t m) {
        const int64_t hk = t_.numHeads * t_.dk, hvv = t_.numVHeads * t_.dv, tvp = t_.tileV;
        Sync<AscendC::HardEvent::V_MTE2>();  // the previous chunk's vector ops are done with kF/uF/gRaw
        Sync<AscendC::HardEvent::S_MTE2>();  // and its scalar reads of kF/gExp
        const uint64_t kOff = static_cast<uint64_t>(((slot * 2 + bank) * t_.maxTokens + c0) * hk + h * t_.dk);
        const uint64_t gOff = static_cast<uint64_t>(((slot * 2 + bank) * t_.maxTokens + c0) * t_.numVHeads + hv);
        const uint64_t uOff = static_cast<uint64_t>((slot * t_.maxTokens + c0) * hvv + hv * t_.dv + v0);
        LoadRows(kF_, recK_[kOff], m, t_.dk, hk, t_.dkP);
        LoadRows(uF_, recU_[uOff], m, tv, hvv, tvp);
        LoadRows(gRaw_, recG_[gOff], m, 1, t_.numVHeads, 8);
        Sync<AscendC::HardEvent::MTE2_V>();
        AscendC::Exp(gExp_, gRaw_, static_cast<int32_t>(m * 8));
        Sync<AscendC::HardEvent::V_S>();
        Sync<AscendC::HardEvent::MTE2_S>();
        const int32_t tile = static_cast<int32_t>(t_.dk * tvp);
        for (int64_t j = 0; j < m; ++j) {
            const float a = gExp_.GetValue(static_cast<uint32_t>(j * 8));
            AscendC::Muls(s_, s_, a, tile);
            RankOneUpdate(uF_[static_cast<uint32_t>(j * tvp)], j);
        }
    }

    // GM rows of q/k/v -> fp32 chunk rows (through the raw staging buffer and a Cast unless the inputs are fp32).
    __aicore__ inline void LoadAsFloat(const AscendC::LocalTensor<float> &dst, const AscendC::LocalTensor<TX> &raw,
                                       const AscendC::GlobalTensor<TX> &src, int64_t rows, int64_t cols,
                                       int64_t gmPitch, int64_t ubPitch) {
        if constexpr (SameType<TX, float>::value) {
            LoadRows(dst, src, rows, cols, gmPitch, ubPitch);
        } else {
            LoadRows(raw, src, rows, cols, gmPitch, ubPitch);
            Sync<AscendC::HardEvent::MTE2_V>();
            AscendC::Cast(dst, raw, AscendC::RoundMode::CAST_NONE, static_cast<uint32_t>(rows * ubPitch));
        }
    }

    // x <- x * mul / sqrt(sum(x^2) + 1e-6) over the first Dk elements of a row (mul: the q scale, or 1).
    __aicore__ inline void Normalize(const AscendC::LocalTensor<float> &x, float mul) {
        const int32_t dk = static_cast<int32_t>(t_.dk);
        AscendC::Mul(tmp_, x, x, dk);
        AscendC::ReduceSum(red_, tmp_, work_, dk);
        AscendC::Adds(red_, red_, 1e-6f, 1);
        AscendC::Sqrt(red_, red_, 1);
        Sync<AscendC::HardEvent::V_S>();
        const float inv = mul / red_.GetValue(0);
        Sync<AscendC::HardEvent::S_V>();
        AscendC::Muls(x, x, inv, dk);
    }

    __aicore__ inline void TokenChunk(int64_t slot, int64_t newBank, int64_t h, int64_t hv, int64_t v0, int64_t tv,
                                      int64_t bos, int64_t c0, int64_t m, bool ownK, bool ownG) {
        const int64_t hk = t_.numHeads * t_.dk, hvv = t_.numVHeads * t_.dv, tvp = t_.tileV, dkP = t_.dkP;
        const int64_t tok = bos + c0;
        Sync<AscendC::HardEvent::V_MTE2>();   // the previous chunk's vector ops are done with the buffers
        Sync<AscendC::HardEvent::MTE3_MTE2>();  // and its record/output stores have read them
        Sync<AscendC::HardEvent::MTE3_V>();
        Sync<AscendC::HardEvent::S_MTE2>();
        const AscendC::LocalTensor<TX> qRaw = qRawBuf_.Get<TX>(), kRaw = kRawBuf_.Get<TX>(), vRaw = vRawBuf_.Get<TX>();
        const uint64_t qkOff = static_cast<uint64_t>(tok * hk + h * t_.dk);
        const uint64_t vOff = static_cast<uint64_t>(tok * hvv + hv * t_.dv + v0);
        LoadAsFloat(qF_, qRaw, q_[qkOff], m, t_.dk, hk, dkP);
        LoadAsFloat(kF_, kRaw, k_[qkOff], m, t_.dk, hk, dkP);
        LoadAsFloat(vF_, vRaw, v_[vOff], m, tv, hvv, tvp);
        LoadRows(gRaw_, g_[static_cast<uint64_t>(tok * t_.numVHeads + hv)], m, 1, t_.numVHeads, 8);
        Sync<AscendC::HardEvent::MTE2_V>();
        AscendC::Exp(gExp_, gRaw_, static_cast<int32_t>(m * 8));
        const float scale = t_.scale;
        for (int64_t j = 0; j < m; ++j) {
            AscendC::LocalTensor<float> qj = qF_[static_cast<uint32_t>(j * dkP)];
            AscendC::LocalTensor<float> kj = kF_[static_cast<uint32_t>(j * dkP)];
            if (t_.useL2norm) {
                Normalize(qj, scale);
                Normalize(kj, 1.0f);
            } else {
                AscendC::Muls(qj, qj, scale, static_cast<int32_t>(t_.dk));
            }
        }
        Sync<AscendC::HardEvent::V_S>();
        Sync<AscendC::HardEvent::MTE2_S>();
        const int32_t tile = static_cast<int32_t>(t_.dk * tvp), cols = static_cast<int32_t>(tvp);
        for (int64_t j = 0; j < m; ++j) {
            const float a = gExp_.GetValue(static_cast<uint32_t>(j * 8));
            const float b = beta_.GetValue(static_cast<uint64_t>((tok + j) * t_.numVHeads + hv));
            const AscendC::LocalTensor<float> uj = uF_[static_cast<uint32_t>(j * tvp)];
            const AscendC::LocalTensor<float> oj = oF_[static_cast<uint32_t>(j * tvp)];
            AscendC::Muls(s_, s_, a, tile);
            RowCombination(uj, kF_, j);  // uj = S^T k_j
            AscendC::Sub(uj, vF_[static_cast<uint32_t>(j * tvp)], uj, cols);
            AscendC::Muls(uj, uj, b, cols);
            RankOneUpdate(uj, j);
            RowCombination(oj, qF_, j);  // oj = S^T (scale q_j)
        }
        WriteOutputs(tok, m, hv, v0, tv);
        const int64_t nRec = Min64(m, t_.maxTokens - c0);  // only past the capacity with value checks off
        if (nRec > 0) {
            const uint64_t uOff = static_cast<uint64_t>((slot * t_.maxTokens + c0) * hvv + hv * t_.dv + v0);
            StoreRows(recU_[uOff], uF_, nRec, tv, hvv, tvp);
            if (ownK) {
                const uint64_t kOff = static_cast<uint64_t>(((slot * 2 + newBank) * t_.maxTokens + c0) * hk + h * t_.dk);
                StoreRows(recK_[kOff], kF_, nRec, t_.dk, hk, dkP);
            }
            if (ownG) {
                const uint64_t gOff =
                    static_cast<uint64_t>(((slot * 2 + newBank) * t_.maxTokens + c0) * t_.numVHeads + hv);
                StoreRows(recG_[gOff], gRaw_, nRec, 1, t_.numVHeads, 8);
            }
        }
    }

    // dst[0:tileV] = sum_i x[j, i] * S[i, :]  (Dk Axpy instructions of one state row each)
    __aicore__ inline void RowCombination(const AscendC::LocalTensor<float> &dst, const AscendC::LocalTensor<float> &x,
                                          int64_t j) {
        const int64_t tvp = t_.tileV;
        const int32_t cols = static_cast<int32_t>(tvp);
        AscendC::Duplicate(dst, 0.0f, cols);
        for (int64_t i = 0; i < t_.dk; ++i) {
            const float xi = x.GetValue(static_cast<uint32_t>(j * t_.dkP + i));
            AscendC::Axpy(dst, s_[static_cast<uint32_t>(i * tvp)], xi, cols);
        }
    }

    // S[i, :] += k[j, i] * u  for every state row i (k in kF_ row j)
    __aicore__ inline void RankOneUpdate(const AscendC::LocalTensor<float> &u, int64_t j) {
        const int64_t tvp = t_.tileV;
        const int32_t cols = static_cast<int32_t>(tvp);
        for (int64_t i = 0; i < t_.dk; ++i) {
            const float ki = kF_.GetValue(static_cast<uint32_t>(j * t_.dkP + i));
            AscendC::LocalTensor<float> si = s_[static_cast<uint32_t>(i * tvp)];
            AscendC::Axpy(si, u, ki, cols);
        }
    }

    __aicore__ inline void WriteOutputs(int64_t tok, int64_t m, int64_t hv, int64_t v0, int64_t tv) {
        const int64_t hvv = t_.numVHeads * t_.dv, tvp = t_.tileV;
        const uint64_t off = static_cast<uint64_t>(tok * hvv + hv * t_.dv + v0);
        if constexpr (SameType<TX, float>::value) {
            Sync<AscendC::HardEvent::V_MTE3>();
            StoreRows(o_[off], oF_, m, tv, hvv, tvp);
        } else {
            AscendC::LocalTensor<TX> oRaw = oRawBuf_.Get<TX>();
            AscendC::Cast(oRaw, oF_, AscendC::RoundMode::CAST_RINT, static_cast<uint32_t>(m * tvp));
            Sync<AscendC::HardEvent::V_MTE3>();
            StoreRows(o_[off], oRaw, m, tv, hvv, tvp);
        }
    }

    __aicore__ inline void ZeroOutputs(int64_t tok, int64_t m, int64_t hv, int64_t v0, int64_t tv) {
        Sync<AscendC::HardEvent::MTE3_V>();  // an earlier store may still read oF/oRaw
        AscendC::Duplicate(oF_, 0.0f, static_cast<int32_t>(m * t_.tileV));
        WriteOutputs(tok, m, hv, v0, tv);
        Sync<AscendC::HardEvent::MTE3_V>();
    }

    VerifyGdnTiling t_;
    AscendC::GlobalTensor<TX> q_, k_, v_, o_;
    AscendC::GlobalTensor<float> g_, beta_, pool_, recK_, recG_, recU_;
    AscendC::GlobalTensor<int32_t> cu_, idx_, pending_, bank_, numRecorded_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> stateBuf_, qBuf_, kBuf_, vBuf_, uBuf_, oBuf_, qRawBuf_, kRawBuf_,
        vRawBuf_, oRawBuf_, gRawBuf_, gExpBuf_, tmpBuf_, workBuf_, redBuf_;
    AscendC::LocalTensor<float> s_, qF_, kF_, vF_, uF_, oF_, gRaw_, gExp_, tmp_, work_, red_;
};

// After the main kernel: verify flips bank[slot] and sets num_recorded[slot] = min(len, L) for rows with tokens;
// flush sets num_recorded[slot] = 0 for every non-padding row. One block; rows have distinct slots.
class GdnMeta {
public:
    __aicore__ inline GdnMeta() {}

    __aicore__ inline void Init(GM_ADDR cu, GM_ADDR idx, GM_ADDR bank, GM_ADDR numRecorded,
                                const VerifyGdnTiling &tiling, AscendC::TPipe *pipe) {
        t_ = tiling;
        if (t_.mode == kModeVerify) cu_.SetGlobalBuffer((__gm__ int32_t *)cu, t_.numRows + 1);
        idx_.SetGlobalBuffer((__gm__ int32_t *)idx, t_.numRows);
        bank_.SetGlobalBuffer((__gm__ int32_t *)bank, t_.numSlots);
        numRecorded_.SetGlobalBuffer((__gm__ int32_t *)numRecorded, t_.numSlots);
        pipe->InitBuffer(buf_, kRows * 8 * 2 * 4);
    }

    __aicore__ inline void Process() {
        AscendC::LocalTensor<int32_t> counts = buf_.Get<int32_t>();
        AscendC::LocalTensor<int32_t> banks = counts[kRows * 8];
        AscendC::DataCopyExtParams one{1, 4, 0, 0, 0};
        for (int64_t lo = 0; lo < t_.numRows; lo += kRows) {
            const int64_t m = Min64(kRows, t_.numRows - lo);
            for (int64_t i = 0; i < m; ++i) {
                const int64_t slot = idx_.GetValue(lo + i);
                int64_t len = 0;
                if (t_.mode == kModeVerify) len = cu_.GetValue(lo + i + 1) - cu_.GetValue(lo + i);
                counts.SetValue(static_cast<uint32_t>(i * 8), static_cast<int32_t>(Min64(len, t_.maxTokens)));
                if (slot >= 0 && t_.mode == kModeVerify && len > 0) {
                    banks.SetValue(static_cast<uint32_t>(i * 8), 1 - bank_.GetValue(slot));
                }
            }
            Sync<AscendC::HardEvent::S_MTE3>();
            for (int64_t i = 0; i < m; ++i) {
                const int64_t slot = idx_.GetValue(lo + i);
                if (slot < 0) continue;
                if (t_.mode == kModeVerify) {
                    if (counts.GetValue(static_cast<uint32_t>(i * 8)) <= 0) continue;
                    AscendC::DataCopyPad(bank_[static_cast<uint64_t>(slot)], banks[static_cast<uint32_t>(i * 8)], one);
                }
                AscendC::DataCopyPad(numRecorded_[static_cast<uint64_t>(slot)], counts[static_cast<uint32_t>(i * 8)],
                                     one);
            }
            Sync<AscendC::HardEvent::MTE3_S>();
        }
    }

private:
    static constexpr int64_t kRows = 256;
    VerifyGdnTiling t_;
    AscendC::GlobalTensor<int32_t> cu_, idx_, bank_, numRecorded_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> buf_;
};

template <typename TX>
__aicore__ inline void RunTyped(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR g, GM_ADDR beta, GM_ADDR o, GM_ADDR cu,
                                GM_ADDR idx, GM_ADDR pending, GM_ADDR pool, GM_ADDR recK, GM_ADDR recG, GM_ADDR recU,
                                GM_ADDR bank, GM_ADDR numRecorded, const VerifyGdnTiling &tiling) {
    AscendC::TPipe pipe;
    VerifyGdn<TX> op;
    op.Init(q, k, v, g, beta, o, cu, idx, pending, pool, recK, recG, recU, bank, numRecorded, tiling, &pipe);
    op.Process();
}

}  // namespace

// xType: 0 fp32, 1 bf16, 2 fp16 (q/k/v/o). g and beta are fp32; cu_seqlens, state_indices, pending int32.
extern "C" __global__ __aicore__ void verify_gated_delta_rule(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR g,
                                                              GM_ADDR beta, GM_ADDR o, GM_ADDR cu, GM_ADDR idx,
                                                              GM_ADDR pending, GM_ADDR pool, GM_ADDR recK,
                                                              GM_ADDR recG, GM_ADDR recU, GM_ADDR bank,
                                                              GM_ADDR numRecorded, int64_t xType,
                                                              VerifyGdnTiling tiling) {
    if (xType == kDtypeBf16) {
        RunTyped<bfloat16_t>(q, k, v, g, beta, o, cu, idx, pending, pool, recK, recG, recU, bank, numRecorded, tiling);
    } else if (xType == kDtypeF16) {
        RunTyped<half>(q, k, v, g, beta, o, cu, idx, pending, pool, recK, recG, recU, bank, numRecorded, tiling);
    } else {
        RunTyped<float>(q, k, v, g, beta, o, cu, idx, pending, pool, recK, recG, recU, bank, numRecorded, tiling);
    }
}

extern "C" __global__ __aicore__ void verify_gated_delta_rule_meta(GM_ADDR cu, GM_ADDR idx, GM_ADDR bank,
                                                                   GM_ADDR numRecorded, VerifyGdnTiling tiling) {
    AscendC::TPipe pipe;
    GdnMeta op;
    op.Init(cu, idx, bank, numRecorded, tiling, &pipe);
    op.Process();
}

// Host-side launch: `<<<>>>` on the NPU; the host model's block-by-block launcher on the CPU. Both take the same
// VerifyGatedDeltaRuleArgs and compute the same tiling from it (kModeVerify or kModeFlush).
#define VERIFY_GDN_GM(a)                                                                                         \
    (GM_ADDR)(a).q, (GM_ADDR)(a).k, (GM_ADDR)(a).v, (GM_ADDR)(a).g, (GM_ADDR)(a).beta, (GM_ADDR)(a).o,          \
        (GM_ADDR)(a).cu, (GM_ADDR)(a).idx, (GM_ADDR)(a).pending, (GM_ADDR)(a).pool, (GM_ADDR)(a).recK,          \
        (GM_ADDR)(a).recG, (GM_ADDR)(a).recU, (GM_ADDR)(a).bank, (GM_ADDR)(a).numRecorded, (a).xType
#define VERIFY_GDN_META_GM(a) (GM_ADDR)(a).cu, (GM_ADDR)(a).idx, (GM_ADDR)(a).bank, (GM_ADDR)(a).numRecorded

#ifdef ASCEND_SPEC_HOST_MODEL
#include "ub_fit.h"

extern "C" uint64_t verify_gated_delta_rule_args_bytes() { return sizeof(VerifyGatedDeltaRuleArgs); }

extern "C" int verify_gated_delta_rule_host(uint32_t vectorCores, const VerifyGatedDeltaRuleArgs *args) {
    const VerifyGatedDeltaRuleArgs &a = *args;
    VerifyGdnTiling tiling = ascend_spec::ComputeVerifyGdnTiling(a, ascend_spec::kernel::DtypeBytes(a.xType), vectorCores);
    const std::string unfit = ascend_spec::VerifyGdnUbFitError(a, vectorCores);
    if (!unfit.empty()) {
        AscendC::host_model::GetState().lastError = unfit;
        return -1;
    }
    if (a.numRows == 0) return 0;
    int status = AscendC::host_model::Launch(tiling.blockDim, verify_gated_delta_rule, VERIFY_GDN_GM(a), tiling);
    if (status != 0) return status;
    return AscendC::host_model::Launch(1, verify_gated_delta_rule_meta, VERIFY_GDN_META_GM(a), tiling);
}

// The tiling the host model would launch with for `args` (pointers unused): {tileV, tileT, blockDim, UB bytes}.
extern "C" void verify_gated_delta_rule_tiling(uint32_t vectorCores, const VerifyGatedDeltaRuleArgs *args,
                                               int64_t *out) {
    VerifyGdnTiling t = ascend_spec::ComputeVerifyGdnTiling(*args, ascend_spec::kernel::DtypeBytes(args->xType), vectorCores);
    out[0] = t.tileV;
    out[1] = t.tileT;
    out[2] = t.blockDim;
    out[3] = ascend_spec::VerifyGdnLaunchUbBytes(*args, vectorCores);
}
#else
namespace ascend_spec {
int verify_gated_delta_rule_impl(void *stream, uint32_t vectorCores, const VerifyGatedDeltaRuleArgs &a) {
    VerifyGdnTiling tiling = ComputeVerifyGdnTiling(a, kernel::DtypeBytes(a.xType), vectorCores);
    if (VerifyGdnLaunchUbBytes(a, vectorCores) > a.ubBytes) return -1;  // would overrun UB: never launched
    if (a.numRows == 0) return 0;
    verify_gated_delta_rule<<<tiling.blockDim, nullptr, stream>>>(VERIFY_GDN_GM(a), tiling);
    verify_gated_delta_rule_meta<<<1, nullptr, stream>>>(VERIFY_GDN_META_GM(a), tiling);
    return 0;
}
}  // namespace ascend_spec
#endif
