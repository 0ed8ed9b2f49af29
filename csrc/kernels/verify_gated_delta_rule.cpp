// verify_gated_delta_rule: commit each row's pending tokens into its GDN state slot by replaying the records of its
// previous call, write the committed state once, then run the gated delta rule over this call's tokens and record
// them (k, g into the other bank, u). Also the flush of the GDN records (kModeFlush: replay and store, no tokens).
// Semantics: ascend_spec/gdn/verify_gated_delta_rule/ (the reference is the oracle); design: docs/verify_gated_delta_rule.md.
//
// Work split: a unit is (row, value head hv, value tile); vector core c owns units [c * unitsPerCore, ...). A unit
// keeps the state tile S[slot, hv, :, v0:v0+tileV] in the Unified Buffer for the whole unit, as [tileV, dkP] (row v
// holds S[:, v]): one state read, one state write (only when something was pending). Key-major slots ([HV, Dk, Dv])
// arrive as tileV-wide pieces of Dk rows and Gather transposes them on load and store; value-major slots
// ([HV, Dv, Dk] stored, vllm-ascend's and vLLM's layout) already hold the tile's rows: one strided DMA each way.
// Ownership: u records of (slot, hv, tile) are read and rewritten only by this unit; every replay load precedes
// (MTE2 -> V -> MTE3 events) the stores of this call's u. k (per k-head) and g (per value head) are shared by
// several units, so this call writes them into bank 1 - bank[slot], which no unit of the launch reads, and only
// one unit writes each (tile 0 of the first value head of a group for k, tile 0 for g). bank[slot] and
// num_recorded[slot] are read by every unit of a row: the second kernel (GdnMeta, launched after on the same
// stream) flips the bank and sets the count; stream order replaces a grid-wide barrier.
//
// Arithmetic per token on the vector unit, all in repeat form over the [tileV, dkP] tile (one repeat = 64 floats
// of one state row; a K chunk of 64 columns per instruction, tileV repeats), with no scalar reads: exp(g) and
// beta arrive by DMA and are broadcast into 32-byte blocks (Gather), read with a stride-0 operand.
//   S *= exp(g)                                   Mul, src1 = the exp(g) block, stride 0
//   u = beta v - S^T (beta k)                     Mul + MulAddDst per K chunk, WholeReduceSum over each row, Sub
//   S[v, :] += u_v k                              Brcb(u) (one block per row), MulAddDst per K chunk
//   o = S^T (scale q)                             as the prediction
// q and k are l2-normalised for the whole chunk at once (row sums by WholeReduceSum, Brcb of the inverse norms).
// The replay runs the same decay and rank-1 updates with the recorded k, g, u.
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

        const int64_t tv = t_.tileV, ct = t_.tileT, dkP = t_.dkP;
        pipe->InitBuffer(stateBuf_, static_cast<uint32_t>(tv * dkP * 4));
        pipe->InitBuffer(tmpBuf_, static_cast<uint32_t>(ascend_spec::VerifyGdnTmpElems(dk, dkP, tv, ct) * 4));
        pipe->InitBuffer(offLoadBuf_, static_cast<uint32_t>(kTransposeRows * dkP * 4));
        pipe->InitBuffer(offStoreBuf_, static_cast<uint32_t>(kTransposeRows * tv * 4));
        pipe->InitBuffer(qkBuf_, static_cast<uint32_t>(2 * ct * dkP * 4));
        pipe->InitBuffer(kbBuf_, static_cast<uint32_t>(ct * dkP * 4));
        pipe->InitBuffer(vBuf_, static_cast<uint32_t>(ct * tv * 4));
        pipe->InitBuffer(uBuf_, static_cast<uint32_t>(ct * tv * 4));
        pipe->InitBuffer(oBuf_, static_cast<uint32_t>(ct * tv * 4));
        pipe->InitBuffer(qRawBuf_, static_cast<uint32_t>(ct * dkP * sizeof(TX)));
        pipe->InitBuffer(kRawBuf_, static_cast<uint32_t>(ct * dkP * sizeof(TX)));
        pipe->InitBuffer(vRawBuf_, static_cast<uint32_t>(ct * tv * sizeof(TX)));
        pipe->InitBuffer(oRawBuf_, static_cast<uint32_t>(ct * tv * sizeof(TX)));
        pipe->InitBuffer(gRawBuf_, static_cast<uint32_t>(ct * 8 * 4));
        pipe->InitBuffer(betaRawBuf_, static_cast<uint32_t>(ct * 8 * 4));
        pipe->InitBuffer(gBlkBuf_, static_cast<uint32_t>(ct * 8 * 4));
        pipe->InitBuffer(betaBlkBuf_, static_cast<uint32_t>(ct * 8 * 4));
        pipe->InitBuffer(blkOffBuf_, static_cast<uint32_t>((ct + 7) / 8 * 64 * 4));
        pipe->InitBuffer(uBlkBuf_, static_cast<uint32_t>(tv * 8 * 4));
        pipe->InitBuffer(normBuf_, static_cast<uint32_t>(2 * ct * 4));
        pipe->InitBuffer(normBlkBuf_, static_cast<uint32_t>(2 * ct * 8 * 4));
        pipe->InitBuffer(normMulBuf_, static_cast<uint32_t>(2 * ct * 4));
        s_ = stateBuf_.Get<float>();
        tmp_ = tmpBuf_.Get<float>();
        qF_ = qkBuf_.Get<float>();
        kF_ = qF_[static_cast<uint32_t>(ct * dkP)];
        kbF_ = kbBuf_.Get<float>();
        vF_ = vBuf_.Get<float>();
        uF_ = uBuf_.Get<float>();
        oF_ = oBuf_.Get<float>();
        gRaw_ = gRawBuf_.Get<float>();
        betaRaw_ = betaRawBuf_.Get<float>();
        gBlk_ = gBlkBuf_.Get<float>();
        betaBlk_ = betaBlkBuf_.Get<float>();
        uBlk_ = uBlkBuf_.Get<float>();
        norm_ = normBuf_.Get<float>();
        normBlk_ = normBlkBuf_.Get<float>();
        normMul_ = normMulBuf_.Get<float>();
        BuildOffsets();
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
    // cu_seqlens[i] clamped into [0, T] (value checks off): no row reads or writes outside the T tokens.
    __aicore__ inline int64_t Token(int64_t i) const { return Max64(0, Min64(cu_.GetValue(i), t_.numTokens)); }

    __aicore__ inline void Unit(int64_t row, int64_t hv, int64_t v0, int64_t tv, bool firstTile) {
        const int64_t raw = idx_.GetValue(row);
        const bool valid = raw >= 0 && raw < t_.numSlots;  // out of range (checks off): a padding row
        const int64_t slot = valid ? raw : 0;
        int64_t bos = 0, n = 0;
        if (t_.mode == kModeVerify) {
            bos = Token(row);
            n = Token(row + 1) - bos;
            // Outputs are complete: the first row's units zero the tokens before cu[0], the last row's those
            // from cu[B] on (value checks off), each its own (value head, value tile) slice.
            if (row == 0) ZeroRange(0, bos, hv, v0, tv);
            if (row == t_.numRows - 1) ZeroRange(Token(row + 1), t_.numTokens, hv, v0, tv);
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
        const uint64_t stateOff = StateOffset(slot, hv, v0);

        Sync<AscendC::HardEvent::V_MTE2>();     // the previous unit's vector ops are done with the state tile
        Sync<AscendC::HardEvent::MTE3_MTE2>();  // and its stores have left it
        LoadState(stateOff, tv);
        for (int64_t c0 = 0; c0 < nRep; c0 += t_.tileT) ReplayChunk(slot, bank, h, hv, v0, tv, c0, Min64(t_.tileT, nRep - c0));
        if (nRep > 0) {
            Sync<AscendC::HardEvent::V_MTE3>();
            StoreState(stateOff, tv);  // the committed state, written once
            Sync<AscendC::HardEvent::MTE3_V>();
        }
        if (t_.mode != kModeVerify) return;
        const bool ownK = firstTile && (hv % (t_.numVHeads / t_.numHeads) == 0);
        for (int64_t c0 = 0; c0 < n; c0 += t_.tileT) {
            TokenChunk(slot, 1 - bank, h, hv, v0, tv, bos, c0, Min64(t_.tileT, n - c0), ownK, firstTile);
        }
    }

    // Byte offsets of the Gathers, built once per block on the vector unit: the load transpose of kTransposeRows
    // state rows (S^T[v, i] <- staging[i, v]), the store transpose (staging[i, v] <- S^T[v, i]) and the 32-byte
    // broadcast of one float per token (g, beta: element j * 8 of their DMA rows). Then the l2-norm multipliers:
    // scale for the q rows, 1 for the k rows.
    __aicore__ inline void BuildOffsets() {
        const int64_t tv = t_.tileV, dkP = t_.dkP, ct = t_.tileT;
        AscendC::LocalTensor<int32_t> load = offLoadBuf_.Get<int32_t>();
        AscendC::LocalTensor<int32_t> store = offStoreBuf_.Get<int32_t>();
        AscendC::LocalTensor<int32_t> blk = blkOffBuf_.Get<int32_t>();
        AscendC::CreateVecIndex(load, static_cast<int32_t>(0), static_cast<uint32_t>(dkP));
        AscendC::Muls(load, load, static_cast<int32_t>(tv * 4), static_cast<int32_t>(dkP));
        for (int64_t r = 1; r < kTransposeRows; r *= 2) {  // rows [r, 2r) = rows [0, r) + r elements
            AscendC::Adds(load[static_cast<uint32_t>(r * dkP)], load, static_cast<int32_t>(r * 4),
                          static_cast<int32_t>(r * dkP));
        }
        AscendC::CreateVecIndex(store, static_cast<int32_t>(0), static_cast<uint32_t>(tv));
        AscendC::Muls(store, store, static_cast<int32_t>(dkP * 4), static_cast<int32_t>(tv));
        for (int64_t r = 1; r < kTransposeRows; r *= 2) {
            AscendC::Adds(store[static_cast<uint32_t>(r * tv)], store, static_cast<int32_t>(r * 4),
                          static_cast<int32_t>(r * tv));
        }
        AscendC::LocalTensor<int32_t> tokenOff = normBlkBuf_.Get<int32_t>();  // scratch until the first chunk
        AscendC::CreateVecIndex(tokenOff, static_cast<int32_t>(0), static_cast<uint32_t>(ct));
        AscendC::Muls(tokenOff, tokenOff, static_cast<int32_t>(32), static_cast<int32_t>(ct));
        AscendC::Brcb(blk, tokenOff, static_cast<uint8_t>((ct + 7) / 8), AscendC::BrcbRepeatParams(1, 8));
        AscendC::Duplicate(normMul_, 1.0f, static_cast<int32_t>(2 * ct));
        AscendC::Duplicate(normMul_, t_.scale, static_cast<int32_t>(ct));
        loadOff_ = offLoadBuf_.Get<uint32_t>();
        storeOff_ = offStoreBuf_.Get<uint32_t>();
        blkOff_ = blkOffBuf_.Get<uint32_t>();
    }

    // GM element where the state tile of (slot, hv) from value column v0 starts: in key-major slots column v0 of
    // the first of Dk rows of Dv; in value-major ones row v0 of Dv rows of Dk.
    __aicore__ inline uint64_t StateOffset(int64_t slot, int64_t hv, int64_t v0) const {
        return static_cast<uint64_t>(slot * t_.poolStride + hv * t_.dk * t_.dv + (t_.valueMajor ? v0 * t_.dk : v0));
    }

    // The state tile S[:, v0:v0+tv] -> s_ [tileV, dkP]: value-major, its tv GM rows of Dk straight into s_ rows;
    // key-major, the GM rows of Dv -> staging [Dk, tileV] -> s_ by Gather.
    __aicore__ inline void LoadState(uint64_t stateOff, int64_t tv) {
        const int64_t tvp = t_.tileV, dkP = t_.dkP;
        if (t_.valueMajor) {
            LoadRows(s_, pool_[stateOff], tv, t_.dk, t_.dk, dkP);
            Sync<AscendC::HardEvent::MTE2_V>();
            return;
        }
        LoadRows(tmp_, pool_[stateOff], t_.dk, tv, t_.dv, tvp);
        Sync<AscendC::HardEvent::MTE2_V>();
        for (int64_t v0 = 0; v0 < tvp; v0 += kTransposeRows) {
            AscendC::Gather(s_[static_cast<uint32_t>(v0 * dkP)], tmp_, loadOff_, static_cast<uint32_t>(v0 * 4),
                            static_cast<uint32_t>(kTransposeRows * dkP));
        }
    }

    // s_ [tileV, dkP] -> the state tile in GM: value-major, its first tv rows straight out; key-major, staging
    // [Dk, tileV] by Gather, then the GM rows of Dv.
    __aicore__ inline void StoreState(uint64_t stateOff, int64_t tv) {
        const int64_t tvp = t_.tileV;
        if (t_.valueMajor) {
            StoreRows(pool_[stateOff], s_, tv, t_.dk, t_.dk, t_.dkP);
            return;
        }
        for (int64_t i0 = 0; i0 < t_.dk; i0 += kTransposeRows) {
            const int64_t rows = Min64(kTransposeRows, t_.dk - i0);
            AscendC::Gather(tmp_[static_cast<uint32_t>(i0 * tvp)], s_, storeOff_, static_cast<uint32_t>(i0 * 4),
                            static_cast<uint32_t>(rows * tvp));
        }
        Sync<AscendC::HardEvent::V_MTE3>();
        StoreRows(pool_[stateOff], tmp_, t_.dk, tv, t_.dv, tvp);
    }

    // Strides of the repeat forms, in 32-byte blocks: one state row (dkP floats) or one value row (tileV floats).
    __aicore__ inline uint8_t RowBlocks() const { return static_cast<uint8_t>(t_.dkP / 8); }
    __aicore__ inline uint8_t VRowBlocks() const { return static_cast<uint8_t>(t_.tileV / 8); }
    // Width of K chunk c (64 floats = one repeat) within Dk.
    __aicore__ inline uint64_t ChunkWidth(int64_t c, int64_t n) const { return static_cast<uint64_t>(Min64(64, n - 64 * c)); }

    // S *= the broadcast block at `a` (8 equal floats): the whole tile, 255 repeats per instruction.
    __aicore__ inline void Decay(const AscendC::LocalTensor<float> &a) {
        const int64_t repeats = t_.tileV * t_.dkP / 64;
        for (int64_t r0 = 0; r0 < repeats; r0 += 255) {
            const uint8_t n = static_cast<uint8_t>(Min64(255, repeats - r0));
            AscendC::LocalTensor<float> part = s_[static_cast<uint32_t>(r0 * 64)];
            AscendC::Mul(part, part, a, 64, n, AscendC::BinaryRepeatParams(1, 1, 0, 8, 8, 0));
        }
    }

    // dst[v] = sum_i S[v, i] x[i] for every state row v (x: one dkP row): products per K chunk into tmp_ (the first
    // chunk by Mul, the others added onto it by MulAddDst), then one WholeReduceSum over the rows.
    __aicore__ inline void RowDots(const AscendC::LocalTensor<float> &dst, const AscendC::LocalTensor<float> &x) {
        const uint8_t rows = static_cast<uint8_t>(t_.tileV), rb = RowBlocks();
        AscendC::Mul(tmp_, s_, x, ChunkWidth(0, t_.dk), rows, AscendC::BinaryRepeatParams(1, 1, 1, rb, rb, 0));
        for (int64_t c = 1; 64 * c < t_.dk; ++c) {
            AscendC::MulAddDst(tmp_, s_[static_cast<uint32_t>(64 * c)], x[static_cast<uint32_t>(64 * c)],
                               ChunkWidth(c, t_.dk), rows, AscendC::BinaryRepeatParams(1, 1, 1, rb, rb, 0));
        }
        AscendC::WholeReduceSum(dst, tmp_, static_cast<int32_t>(ChunkWidth(0, t_.dk)), static_cast<int32_t>(t_.tileV), 1,
                                1, static_cast<int32_t>(rb));
    }

    // S[v, :] += u[v] k for every state row v: u broadcast one block per row (Brcb), then MulAddDst per K chunk.
    __aicore__ inline void RankOneUpdate(const AscendC::LocalTensor<float> &u, const AscendC::LocalTensor<float> &k) {
        const uint8_t rows = static_cast<uint8_t>(t_.tileV), rb = RowBlocks();
        AscendC::Brcb(uBlk_, u, static_cast<uint8_t>(t_.tileV / 8), AscendC::BrcbRepeatParams(1, 8));
        for (int64_t c = 0; 64 * c < t_.dk; ++c) {
            AscendC::LocalTensor<float> part = s_[static_cast<uint32_t>(64 * c)];
            AscendC::MulAddDst(part, uBlk_, k[static_cast<uint32_t>(64 * c)], ChunkWidth(c, t_.dk), rows,
                               AscendC::BinaryRepeatParams(1, 0, 1, rb, 1, 0));
        }
    }

    // rows x[j, 0:n] *= blk[j] (one broadcast block per row), `m` rows `pitch` floats apart.
    __aicore__ inline void ScaleRows(const AscendC::LocalTensor<float> &dst, const AscendC::LocalTensor<float> &x,
                                     const AscendC::LocalTensor<float> &blk, int64_t m, int64_t n, int64_t pitch) {
        const uint8_t pb = static_cast<uint8_t>(pitch / 8);
        for (int64_t c = 0; 64 * c < n; ++c) {
            AscendC::Mul(dst[static_cast<uint32_t>(64 * c)], x[static_cast<uint32_t>(64 * c)], blk, ChunkWidth(c, n),
                         static_cast<uint8_t>(m), AscendC::BinaryRepeatParams(1, 1, 0, pb, pb, 1));
        }
    }

    // g rows (one float per 32-byte DMA row) -> exp(g) broadcast blocks; likewise beta (no exp).
    __aicore__ inline void BroadcastPerToken(const AscendC::LocalTensor<float> &blk, const AscendC::LocalTensor<float> &raw,
                                             int64_t m) {
        AscendC::Gather(blk, raw, blkOff_, static_cast<uint32_t>(0), static_cast<uint32_t>(m * 8));
    }

    // m recorded tokens starting at c0: S = exp(g_t) S + k_t u_t^T.
    __aicore__ inline void ReplayChunk(int64_t slot, int64_t bank, int64_t h, int64_t hv, int64_t v0, int64_t tv,
                                       int64_t c0, int64_t m) {
        const int64_t hk = t_.numHeads * t_.dk, hvv = t_.numVHeads * t_.dv, tvp = t_.tileV;
        Sync<AscendC::HardEvent::V_MTE2>();  // the previous chunk's vector ops are done with kF/uF/gRaw
        const uint64_t kOff = static_cast<uint64_t>(((slot * 2 + bank) * t_.maxTokens + c0) * hk + h * t_.dk);
        const uint64_t gOff = static_cast<uint64_t>(((slot * 2 + bank) * t_.maxTokens + c0) * t_.numVHeads + hv);
        const uint64_t uOff = static_cast<uint64_t>((slot * t_.maxTokens + c0) * hvv + hv * t_.dv + v0);
        LoadRows(kF_, recK_[kOff], m, t_.dk, hk, t_.dkP);
        LoadRows(uF_, recU_[uOff], m, tv, hvv, tvp);
        LoadRows(gRaw_, recG_[gOff], m, 1, t_.numVHeads, 8);
        Sync<AscendC::HardEvent::MTE2_V>();
        BroadcastPerToken(gBlk_, gRaw_, m);
        AscendC::Exp(gBlk_, gBlk_, static_cast<int32_t>(m * 8));
        for (int64_t j = 0; j < m; ++j) {
            Decay(gBlk_[static_cast<uint32_t>(j * 8)]);
            RankOneUpdate(uF_[static_cast<uint32_t>(j * tvp)], kF_[static_cast<uint32_t>(j * t_.dkP)]);
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

    // Every q and k row of the chunk (2 tileT rows; rows past m are unused): x <- x * mul / sqrt(sum(x^2) + 1e-6)
    // over its first Dk elements (mul: the q scale for q rows, 1 for k rows).
    __aicore__ inline void NormalizeChunk() {
        const int64_t rows = 2 * t_.tileT, dk = t_.dk, dkP = t_.dkP;
        const uint8_t rb = RowBlocks();
        AscendC::Mul(tmp_, qF_, qF_, static_cast<int32_t>(rows * dkP));
        for (int64_t c = 1; 64 * c < dk; ++c) {
            AscendC::Add(tmp_, tmp_, tmp_[static_cast<uint32_t>(64 * c)], ChunkWidth(c, dk), static_cast<uint8_t>(rows),
                         AscendC::BinaryRepeatParams(1, 1, 1, rb, rb, rb));
        }
        AscendC::WholeReduceSum(norm_, tmp_, static_cast<int32_t>(ChunkWidth(0, dk)), static_cast<int32_t>(rows), 1, 1,
                                static_cast<int32_t>(rb));
        AscendC::Adds(norm_, norm_, 1e-6f, static_cast<int32_t>(rows));
        AscendC::Sqrt(norm_, norm_, static_cast<int32_t>(rows));
        AscendC::Div(norm_, normMul_, norm_, static_cast<int32_t>(rows));
        AscendC::Brcb(normBlk_, norm_, static_cast<uint8_t>(rows / 8), AscendC::BrcbRepeatParams(1, 8));
        ScaleRows(qF_, qF_, normBlk_, rows, dk, dkP);
    }

    __aicore__ inline void TokenChunk(int64_t slot, int64_t newBank, int64_t h, int64_t hv, int64_t v0, int64_t tv,
                                      int64_t bos, int64_t c0, int64_t m, bool ownK, bool ownG) {
        const int64_t hk = t_.numHeads * t_.dk, hvv = t_.numVHeads * t_.dv, tvp = t_.tileV, dkP = t_.dkP;
        const int64_t tok = bos + c0;
        Sync<AscendC::HardEvent::V_MTE2>();   // the previous chunk's vector ops are done with the buffers
        Sync<AscendC::HardEvent::MTE3_MTE2>();  // and its record/output stores have read them
        Sync<AscendC::HardEvent::MTE3_V>();
        const AscendC::LocalTensor<TX> qRaw = qRawBuf_.Get<TX>(), kRaw = kRawBuf_.Get<TX>(), vRaw = vRawBuf_.Get<TX>();
        const uint64_t qkOff = static_cast<uint64_t>(tok * hk + h * t_.dk);
        const uint64_t vOff = static_cast<uint64_t>(tok * hvv + hv * t_.dv + v0);
        LoadAsFloat(qF_, qRaw, q_[qkOff], m, t_.dk, hk, dkP);
        LoadAsFloat(kF_, kRaw, k_[qkOff], m, t_.dk, hk, dkP);
        LoadAsFloat(vF_, vRaw, v_[vOff], m, tv, hvv, tvp);
        LoadRows(gRaw_, g_[static_cast<uint64_t>(tok * t_.numVHeads + hv)], m, 1, t_.numVHeads, 8);
        LoadRows(betaRaw_, beta_[static_cast<uint64_t>(tok * t_.numVHeads + hv)], m, 1, t_.numVHeads, 8);
        Sync<AscendC::HardEvent::MTE2_V>();
        BroadcastPerToken(gBlk_, gRaw_, m);
        AscendC::Exp(gBlk_, gBlk_, static_cast<int32_t>(m * 8));
        BroadcastPerToken(betaBlk_, betaRaw_, m);
        if (t_.useL2norm) {
            NormalizeChunk();
        } else {
            AscendC::Muls(qF_, qF_, t_.scale, static_cast<int32_t>(m * dkP));
        }
        ScaleRows(kbF_, kF_, betaBlk_, m, t_.dk, dkP);  // beta k: the prediction comes out scaled by beta
        ScaleRows(vF_, vF_, betaBlk_, m, tvp, tvp);     // beta v
        for (int64_t j = 0; j < m; ++j) {
            const AscendC::LocalTensor<float> uj = uF_[static_cast<uint32_t>(j * tvp)];
            Decay(gBlk_[static_cast<uint32_t>(j * 8)]);
            RowDots(uj, kbF_[static_cast<uint32_t>(j * dkP)]);  // uj = beta S^T k_j
            AscendC::Sub(uj, vF_[static_cast<uint32_t>(j * tvp)], uj, static_cast<int32_t>(tvp));  // beta (v - S^T k)
            RankOneUpdate(uj, kF_[static_cast<uint32_t>(j * dkP)]);
            RowDots(oF_[static_cast<uint32_t>(j * tvp)], qF_[static_cast<uint32_t>(j * dkP)]);  // S^T (scale q_j)
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

    __aicore__ inline void ZeroRange(int64_t tok0, int64_t tok1, int64_t hv, int64_t v0, int64_t tv) {
        for (int64_t c0 = tok0; c0 < tok1; c0 += t_.tileT) ZeroOutputs(c0, Min64(t_.tileT, tok1 - c0), hv, v0, tv);
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
    static constexpr int64_t kTransposeRows = 16;  // state rows per transposing Gather (a power of 2)
    AscendC::TBuf<AscendC::TPosition::VECCALC> stateBuf_, tmpBuf_, offLoadBuf_, offStoreBuf_, qkBuf_, kbBuf_, vBuf_,
        uBuf_, oBuf_, qRawBuf_, kRawBuf_, vRawBuf_, oRawBuf_, gRawBuf_, betaRawBuf_, gBlkBuf_, betaBlkBuf_, blkOffBuf_,
        uBlkBuf_, normBuf_, normBlkBuf_, normMulBuf_;
    AscendC::LocalTensor<float> s_, tmp_, qF_, kF_, kbF_, vF_, uF_, oF_, gRaw_, betaRaw_, gBlk_, betaBlk_, uBlk_, norm_,
        normBlk_, normMul_;
    AscendC::LocalTensor<uint32_t> loadOff_, storeOff_, blkOff_;
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
                if (t_.mode == kModeVerify) len = Token(lo + i + 1) - Token(lo + i);
                counts.SetValue(static_cast<uint32_t>(i * 8), static_cast<int32_t>(Min64(len, t_.maxTokens)));
                if (slot >= 0 && slot < t_.numSlots && t_.mode == kModeVerify && len > 0) {
                    banks.SetValue(static_cast<uint32_t>(i * 8), 1 - bank_.GetValue(slot));
                }
            }
            Sync<AscendC::HardEvent::S_MTE3>();
            for (int64_t i = 0; i < m; ++i) {
                const int64_t slot = idx_.GetValue(lo + i);
                if (slot < 0 || slot >= t_.numSlots) continue;  // padding, or out of range with checks off
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
    // cu_seqlens[i] clamped into [0, T], as the main kernel reads it.
    __aicore__ inline int64_t Token(int64_t i) const { return Max64(0, Min64(cu_.GetValue(i), t_.numTokens)); }

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
