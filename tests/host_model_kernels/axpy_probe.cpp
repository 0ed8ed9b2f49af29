// Test kernel for the host model's Axpy (count form): y = x * a + y over the first `count` of 64 floats.
// mode 0: as given; mode 1: an unaligned UB operand (one float past the buffer start).
#include "kernel_operator.h"

namespace {

constexpr int32_t kN = 64;

__aicore__ inline void Probe(GM_ADDR x, GM_ADDR y, float a, int32_t count, int32_t mode) {
    AscendC::TPipe pipe;
    AscendC::TBuf<AscendC::TPosition::VECCALC> xBuf, yBuf;
    pipe.InitBuffer(xBuf, kN * sizeof(float));
    pipe.InitBuffer(yBuf, kN * sizeof(float));
    AscendC::GlobalTensor<float> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ float *)x, kN);
    yGm.SetGlobalBuffer((__gm__ float *)y, kN);
    AscendC::LocalTensor<float> xl = xBuf.Get<float>(), yl = yBuf.Get<float>();
    AscendC::DataCopy(xl, xGm, kN);
    AscendC::DataCopy(yl, yGm, kN);
    event_t toV = static_cast<event_t>(pipe.FetchEventID(AscendC::HardEvent::MTE2_V));
    AscendC::SetFlag<AscendC::HardEvent::MTE2_V>(toV);
    AscendC::WaitFlag<AscendC::HardEvent::MTE2_V>(toV);
    AscendC::Axpy(mode == 1 ? yl[1] : yl, xl, a, count);
    event_t toMte3 = static_cast<event_t>(pipe.FetchEventID(AscendC::HardEvent::V_MTE3));
    AscendC::SetFlag<AscendC::HardEvent::V_MTE3>(toMte3);
    AscendC::WaitFlag<AscendC::HardEvent::V_MTE3>(toMte3);
    AscendC::DataCopy(yGm, yl, kN);
}

}  // namespace

extern "C" __global__ __aicore__ void axpy_probe(GM_ADDR x, GM_ADDR y, float a, int32_t count, int32_t mode) {
    Probe(x, y, a, count, mode);
}

extern "C" int axpy_probe_host(uint32_t vectorCores, void *x, void *y, float a, int32_t count, int32_t mode) {
    (void)vectorCores;
    return AscendC::host_model::Launch(1, axpy_probe, (GM_ADDR)x, (GM_ADDR)y, a, count, mode);
}
