// Test kernel for the host model itself: mode 0 is a correct AscendC kernel (y = exp(x + 1), plus the row max
// and sum); every other mode breaks one rule the chip enforces, and the host model must report it.
#include "kernel_operator.h"

namespace {

constexpr int32_t kTile = 64;  // floats per tile: 256 bytes

class RulesProbe {
public:
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR stats, int32_t n, int32_t mode, uint32_t extraUb,
                                AscendC::TPipe *pipe) {
        n_ = n;
        mode_ = mode;
        xGm_.SetGlobalBuffer((__gm__ float *)x, n);
        yGm_.SetGlobalBuffer((__gm__ float *)y, n);
        statsGm_.SetGlobalBuffer((__gm__ float *)stats, 2 * AscendC::GetBlockNum());
        pipe->InitBuffer(inQue_, 2, kTile * sizeof(float));
        pipe->InitBuffer(outQue_, 1, kTile * sizeof(float));
        pipe->InitBuffer(work_, kTile * sizeof(float));
        pipe->InitBuffer(stat_, 16 * sizeof(float));
        if (extraUb > 0) pipe->InitBuffer(extra_, extraUb);
    }

    __aicore__ inline void Process() {
        const int32_t per = n_ / AscendC::GetBlockNum();
        const int32_t base = AscendC::GetBlockIdx() * per;
        float best = -1e30f, total = 0.0f;
        for (int32_t off = 0; off < per; off += kTile) {
            AscendC::LocalTensor<float> in = inQue_.AllocTensor<float>();
            if (mode_ == 1) {
                AscendC::DataCopy(in, xGm_[base + off], kTile - 1);  // 252 bytes: not a 32-byte multiple
            } else if (mode_ == 2) {
                AscendC::DataCopy(in[1], xGm_[base + off], 8);  // UB operand 4 bytes past a 32-byte boundary
            } else if (mode_ == 5) {
                AscendC::GlobalTensor<float> raw;  // no size: only the GM registry can catch the overrun
                raw.SetGlobalBuffer(xGm_.GetPhyAddr() + n_);
                AscendC::DataCopy(in, raw[base + off], kTile);
            } else if (mode_ == 7) {
                AscendC::DataCopy(in, xGm_[base + off + n_], kTile);  // past the size given to SetGlobalBuffer
            } else {
                AscendC::DataCopy(in, xGm_[base + off], kTile);
            }
            if (mode_ != 3) inQue_.EnQue(in);  // mode 3: DeQue without EnQue
            AscendC::LocalTensor<float> x = inQue_.DeQue<float>();
            AscendC::LocalTensor<float> out = outQue_.AllocTensor<float>();
            AscendC::Adds(out, x, 1.0f, kTile);
            AscendC::Exp(out, out, kTile);
            AscendC::LocalTensor<float> s = stat_.Get<float>();
            AscendC::ReduceMax(s, out, work_.Get<float>(), kTile, false);
            AscendC::ReduceSum(s[8], out, work_.Get<float>(), kTile);
            best = s.GetValue(0) > best ? s.GetValue(0) : best;
            total += s.GetValue(8);
            if (mode_ != 4) inQue_.FreeTensor(x);  // mode 4: leak the input buffer
            outQue_.EnQue(out);
            AscendC::LocalTensor<float> res = outQue_.DeQue<float>();
            AscendC::DataCopy(yGm_[base + off], res, kTile);
            outQue_.FreeTensor(res);
        }
        AscendC::LocalTensor<float> s = stat_.Get<float>();
        s.SetValue(0, best);
        s.SetValue(1, total);
        event_t e = static_cast<event_t>(AscendC::GetTPipePtr()->FetchEventID(AscendC::HardEvent::S_MTE3));
        AscendC::SetFlag<AscendC::HardEvent::S_MTE3>(e);
        if (mode_ != 6) AscendC::WaitFlag<AscendC::HardEvent::S_MTE3>(e);  // mode 6: flag never waited
        AscendC::DataCopyExtParams p{1, 2 * sizeof(float), 0, 0, 0};
        AscendC::DataCopyPad(statsGm_[2 * AscendC::GetBlockIdx()], s, p);
    }

private:
    int32_t n_ = 0, mode_ = 0;
    AscendC::GlobalTensor<float> xGm_, yGm_, statsGm_;
    AscendC::TQue<AscendC::TPosition::VECIN, 2> inQue_;
    AscendC::TQue<AscendC::TPosition::VECOUT, 1> outQue_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> work_, stat_, extra_;
};

}  // namespace

extern "C" __global__ __aicore__ void rules_probe(GM_ADDR x, GM_ADDR y, GM_ADDR stats, int32_t n, int32_t mode,
                                                  uint32_t extraUb) {
    AscendC::TPipe pipe;
    RulesProbe op;
    op.Init(x, y, stats, n, mode, extraUb, &pipe);
    op.Process();
}

extern "C" int rules_probe_host(uint32_t vectorCores, uint32_t blocks, void *x, void *y, void *stats, int32_t n,
                                int32_t mode, uint32_t extraUb) {
    (void)vectorCores;
    return AscendC::host_model::Launch(blocks, rules_probe, (GM_ADDR)x, (GM_ADDR)y, (GM_ADDR)stats, n, mode,
                                       extraUb);
}
