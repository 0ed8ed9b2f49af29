// Test kernel for the host model's Gather (count form): y[i] = x[offsets[i] / 4 + base / 4] for float x.
// mode 0: the offsets as given; mode 1: one offset not a multiple of 4 bytes; mode 2: one offset past src.
#include "kernel_operator.h"

namespace {

constexpr int32_t kN = 64;

__aicore__ inline void Probe(GM_ADDR x, GM_ADDR offsets, GM_ADDR y, int32_t mode, uint32_t base) {
    AscendC::TPipe pipe;
    AscendC::TBuf<AscendC::TPosition::VECCALC> xBuf, offBuf, yBuf;
    pipe.InitBuffer(xBuf, kN * sizeof(float));
    pipe.InitBuffer(offBuf, kN * sizeof(uint32_t));
    pipe.InitBuffer(yBuf, kN * sizeof(float));
    AscendC::GlobalTensor<float> xGm, yGm;
    AscendC::GlobalTensor<uint32_t> offGm;
    xGm.SetGlobalBuffer((__gm__ float *)x, kN);
    offGm.SetGlobalBuffer((__gm__ uint32_t *)offsets, kN);
    yGm.SetGlobalBuffer((__gm__ float *)y, kN);
    AscendC::LocalTensor<float> xl = xBuf.Get<float>(), yl = yBuf.Get<float>();
    AscendC::LocalTensor<uint32_t> off = offBuf.Get<uint32_t>();
    AscendC::DataCopy(xl, xGm, kN);
    AscendC::DataCopy(off, offGm, kN);
    event_t toS = static_cast<event_t>(pipe.FetchEventID(AscendC::HardEvent::MTE2_S));
    AscendC::SetFlag<AscendC::HardEvent::MTE2_S>(toS);
    AscendC::WaitFlag<AscendC::HardEvent::MTE2_S>(toS);
    if (mode == 1) off.SetValue(3, 6);
    if (mode == 2) off.SetValue(5, kN * 4);
    event_t toV = static_cast<event_t>(pipe.FetchEventID(AscendC::HardEvent::S_V));
    AscendC::SetFlag<AscendC::HardEvent::S_V>(toV);
    AscendC::WaitFlag<AscendC::HardEvent::S_V>(toV);
    AscendC::Gather(yl, xl, off, base, static_cast<uint32_t>(kN));
    event_t toMte3 = static_cast<event_t>(pipe.FetchEventID(AscendC::HardEvent::V_MTE3));
    AscendC::SetFlag<AscendC::HardEvent::V_MTE3>(toMte3);
    AscendC::WaitFlag<AscendC::HardEvent::V_MTE3>(toMte3);
    AscendC::DataCopy(yGm, yl, kN);
}

}  // namespace

extern "C" __global__ __aicore__ void gather_probe(GM_ADDR x, GM_ADDR offsets, GM_ADDR y, int32_t mode,
                                                   uint32_t base) {
    Probe(x, offsets, y, mode, base);
}

extern "C" int gather_probe_host(uint32_t vectorCores, void *x, void *offsets, void *y, int32_t mode, uint32_t base) {
    (void)vectorCores;
    return AscendC::host_model::Launch(1, gather_probe, (GM_ADDR)x, (GM_ADDR)offsets, (GM_ADDR)y, mode, base);
}
