// Test kernel for the host model's A2/A3 rules (tests/test_host_model_npu_rules.py): each mode either obeys one
// rule (even modes: writes what it observed to `out`) or breaks it (odd modes: the host model must refuse).
#include "kernel_operator.h"

namespace {

using AscendC::HardEvent;
using AscendC::LocalTensor;
using AscendC::TPosition;

constexpr uint32_t kKiB = 1024;

class NpuRulesProbe {
public:
    __aicore__ inline void Run(GM_ADDR outAddr, int32_t mode, AscendC::TPipe *pipe) {
        out_.SetGlobalBuffer((__gm__ float *)outAddr, 64);
        switch (mode) {
            case 0: return SelectBelowScratch(pipe);
            case 1: return SelectOverScratch(pipe);
            case 2: return CompareWholeRepeats(pipe, 64, 0.5f);
            case 3: return CompareWholeRepeats(pipe, 63, 0.5f);  // 252 bytes: a partial repeat
            case 5: return CompareWholeRepeats(pipe, 64, 1e-40f);  // a subnormal threshold
            case 7: return CompareSubnormalElement(pipe);
            case 8: return GatherCount(pipe, 16383);
            case 9: return GatherCount(pipe, 16384);  // 256 full repeats of 64 floats
            case 10: return PadTail(pipe);
            case 11: return PadParams(pipe, 4096, 32, 0);  // blockCount past 4095
            case 13: return PadParams(pipe, 1, 2097152, 0);  // blockLen past 2097151 bytes
            case 15: return PadParams(pipe, 1, 32, 9);  // 36 bytes of left padding
            case 16: return Reduce(pipe, 32, 16);
            case 17: return Reduce(pipe, 24, 16);  // ReduceMax of 1024 floats needs 32 workspace elements
            case 19: return Reduce(pipe, 32, 8);  // ReduceSum of 1024 floats needs 16
            case 20: return CastBf16(pipe, AscendC::RoundMode::CAST_RINT);
            case 21: return CastBf16(pipe, AscendC::RoundMode::CAST_NONE);  // not in A2's float -> bf16 row
            case 22: return EventPools();
            case 23: return DoubleSetFlag();
            default: AscendC::host_model::Fail("npu_rules_probe: unknown mode");
        }
    }

private:
    // Select in tensor-scalar mode with every buffer below 184 KiB (mode 0) or one across it (mode 1).
    __aicore__ inline void SelectWith(AscendC::TPipe *pipe, uint32_t fillerBytes) {
        AscendC::TBuf<TPosition::VECCALC> filler, data, mask;
        pipe->InitBuffer(filler, fillerBytes);
        pipe->InitBuffer(data, 64 * sizeof(float));
        pipe->InitBuffer(mask, 32);
        LocalTensor<float> x = data.Get<float>();
        LocalTensor<uint8_t> m = mask.Get<uint8_t>();
        AscendC::CreateVecIndex(x, 0.0f, 64);
        AscendC::CompareScalar(m, x, 31.5f, AscendC::CMPMODE::GT, 64);
        AscendC::Select(x, m, x, -1.0f, AscendC::SELMODE::VSEL_TENSOR_SCALAR_MODE, 64);
        for (int32_t i = 0; i < 64; ++i) out_.SetValue(i, x.GetValue(i));
    }
    __aicore__ inline void SelectBelowScratch(AscendC::TPipe *pipe) { SelectWith(pipe, 180 * kKiB); }
    __aicore__ inline void SelectOverScratch(AscendC::TPipe *pipe) { SelectWith(pipe, 184 * kKiB); }

    __aicore__ inline void CompareWholeRepeats(AscendC::TPipe *pipe, uint32_t count, float threshold) {
        AscendC::TBuf<TPosition::VECCALC> data, mask;
        pipe->InitBuffer(data, 64 * sizeof(float));
        pipe->InitBuffer(mask, 32);
        LocalTensor<float> x = data.Get<float>();
        LocalTensor<uint8_t> m = mask.Get<uint8_t>();
        AscendC::Duplicate(x, 1.0f, 64);
        AscendC::CompareScalar(m, x, threshold, AscendC::CMPMODE::GT, count);
        out_.SetValue(0, static_cast<float>(m.GetValue(0)));
    }

    __aicore__ inline void CompareSubnormalElement(AscendC::TPipe *pipe) {
        AscendC::TBuf<TPosition::VECCALC> data, mask;
        pipe->InitBuffer(data, 64 * sizeof(float));
        pipe->InitBuffer(mask, 32);
        LocalTensor<float> x = data.Get<float>();
        AscendC::Duplicate(x, 1.0f, 64);
        x.SetValue(5, 1e-40f);
        LocalTensor<uint8_t> m = mask.Get<uint8_t>();
        AscendC::CompareScalar(m, x, 0.5f, AscendC::CMPMODE::GT, 64);
    }

    // Count-form Gather of `count` floats, all from offset 4 of an 8-float source.
    __aicore__ inline void GatherCount(AscendC::TPipe *pipe, uint32_t count) {
        AscendC::TBuf<TPosition::VECCALC> src, dst, off;
        pipe->InitBuffer(src, 32);
        pipe->InitBuffer(dst, 16384 * sizeof(float));
        pipe->InitBuffer(off, 16384 * sizeof(uint32_t));
        LocalTensor<float> s = src.Get<float>();
        AscendC::CreateVecIndex(s, 0.0f, 8);
        LocalTensor<uint32_t> o = off.Get<uint32_t>();
        for (uint32_t i = 0; i < count; ++i) o.SetValue(i, 4);
        LocalTensor<float> d = dst.Get<float>();
        AscendC::Gather(d, s, o, 0, count);
        out_.SetValue(0, d.GetValue(count - 1));
    }

    // 3 floats GM -> UB without padding: the chip fills the rest of the 32-byte block with the first element.
    __aicore__ inline void PadTail(AscendC::TPipe *pipe) {
        AscendC::TBuf<TPosition::VECCALC> buf;
        pipe->InitBuffer(buf, 32);
        LocalTensor<float> t = buf.Get<float>();
        AscendC::Duplicate(t, -7.0f, 8);
        out_.SetValue(0, 2.0f);
        out_.SetValue(1, 3.0f);
        out_.SetValue(2, 4.0f);
        AscendC::DataCopyExtParams p{1, 3 * sizeof(float), 0, 0, 0};
        AscendC::DataCopyPad(t, out_, p, AscendC::DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
        for (int32_t i = 0; i < 8; ++i) out_.SetValue(8 + i, t.GetValue(i));
    }

    __aicore__ inline void PadParams(AscendC::TPipe *pipe, uint16_t count, uint32_t len, uint8_t left) {
        AscendC::TBuf<TPosition::VECCALC> buf;
        pipe->InitBuffer(buf, 256);
        LocalTensor<float> t = buf.Get<float>();
        AscendC::DataCopyExtParams p{count, len, 0, 0, 0};
        AscendC::DataCopyPad(t, out_, p, AscendC::DataCopyPadExtParams<float>{left > 0, left, 0, 0.0f});
    }

    // ReduceMax and ReduceSum of 1024 floats with the given workspace sizes (elements).
    __aicore__ inline void Reduce(AscendC::TPipe *pipe, uint32_t maxWork, uint32_t sumWork) {
        AscendC::TBuf<TPosition::VECCALC> data, workMax, workSum, res;
        pipe->InitBuffer(data, 1024 * sizeof(float));
        pipe->InitBuffer(workMax, maxWork * sizeof(float));
        pipe->InitBuffer(workSum, sumWork * sizeof(float));
        pipe->InitBuffer(res, 32);
        LocalTensor<float> x = data.Get<float>();
        AscendC::CreateVecIndex(x, 0.0f, 1024);
        LocalTensor<float> r = res.Get<float>();
        AscendC::ReduceMax(r, x, workMax.Get<float>(), 1024, false);
        out_.SetValue(0, r.GetValue(0));
        AscendC::ReduceSum(r, x, workSum.Get<float>(), 1024);
        out_.SetValue(1, r.GetValue(0));
    }

    __aicore__ inline void CastBf16(AscendC::TPipe *pipe, AscendC::RoundMode mode) {
        AscendC::TBuf<TPosition::VECCALC> f, b;
        pipe->InitBuffer(f, 64 * sizeof(float));
        pipe->InitBuffer(b, 64 * sizeof(bfloat16_t));
        LocalTensor<float> x = f.Get<float>();
        AscendC::Duplicate(x, 1.5f, 64);
        LocalTensor<bfloat16_t> y = b.Get<bfloat16_t>();
        AscendC::Cast(y, x, mode, 64);
        out_.SetValue(0, static_cast<float>(y.GetValue(0)));
    }

    // One id pool per HardEvent: fetching V_S does not see S_V's allocation; an allocated id is skipped.
    __aicore__ inline void EventPools() {
        AscendC::TPipe *p = AscendC::GetTPipePtr();
        const event_t a = p->AllocEventID<HardEvent::S_V>();
        out_.SetValue(0, static_cast<float>(a));
        out_.SetValue(1, static_cast<float>(p->FetchEventID(HardEvent::S_V)));
        out_.SetValue(2, static_cast<float>(p->FetchEventID(HardEvent::V_S)));
        p->ReleaseEventID<HardEvent::S_V>(a);
        out_.SetValue(3, static_cast<float>(p->FetchEventID(HardEvent::S_V)));
    }

    __aicore__ inline void DoubleSetFlag() {
        const event_t id = static_cast<event_t>(AscendC::GetTPipePtr()->FetchEventID(HardEvent::V_S));
        AscendC::SetFlag<HardEvent::V_S>(id);
        AscendC::SetFlag<HardEvent::V_S>(id);  // the first signal is still pending
        AscendC::WaitFlag<HardEvent::V_S>(id);
        AscendC::WaitFlag<HardEvent::V_S>(id);
    }

    AscendC::GlobalTensor<float> out_;
};

}  // namespace

extern "C" __global__ __aicore__ void npu_rules_probe(GM_ADDR out, int32_t mode) {
    AscendC::TPipe pipe;
    NpuRulesProbe op;
    op.Run(out, mode, &pipe);
}

extern "C" int npu_rules_probe_host(uint32_t vectorCores, void *out, int32_t mode) {
    (void)vectorCores;
    return AscendC::host_model::Launch(1, npu_rules_probe, (GM_ADDR)out, mode);
}
