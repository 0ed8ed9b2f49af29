// Test kernel for the host model's repeat forms: a [16, 64] fp32 matrix `a` (rows of 64 floats), a 64-float row
// `x`, 16 per-row scalars `s`. op 0: out = a * x (x as a stride-0 repeat operand, mask `mask`); op 1: out = a +
// s_r * x (Brcb of s, then MulAddDst with the broadcast blocks); op 2: out[r] = sum of the first `mask` of row r
// (WholeReduceSum); op 3: as op 0 with `repeats` rows (past the buffer when above 16). Unmasked elements keep a.
#include "kernel_operator.h"

namespace {

constexpr int32_t kRows = 16, kCols = 64;

__aicore__ inline void Probe(GM_ADDR a, GM_ADDR x, GM_ADDR s, GM_ADDR out, int32_t op, int32_t mask, int32_t repeats) {
    AscendC::TPipe pipe;
    AscendC::TBuf<AscendC::TPosition::VECCALC> aBuf, xBuf, sBuf, bBuf;
    pipe.InitBuffer(aBuf, kRows * kCols * 4);
    pipe.InitBuffer(xBuf, kCols * 4);
    pipe.InitBuffer(sBuf, kRows * 4);
    pipe.InitBuffer(bBuf, kRows * 8 * 4);
    AscendC::GlobalTensor<float> aGm, xGm, sGm, outGm;
    aGm.SetGlobalBuffer((__gm__ float *)a, kRows * kCols);
    xGm.SetGlobalBuffer((__gm__ float *)x, kCols);
    sGm.SetGlobalBuffer((__gm__ float *)s, kRows);
    outGm.SetGlobalBuffer((__gm__ float *)out, kRows * kCols);
    AscendC::LocalTensor<float> al = aBuf.Get<float>(), xl = xBuf.Get<float>(), sl = sBuf.Get<float>();
    AscendC::LocalTensor<float> bl = bBuf.Get<float>();
    AscendC::DataCopy(al, aGm, kRows * kCols);
    AscendC::DataCopy(xl, xGm, kCols);
    AscendC::DataCopy(sl, sGm, kRows);
    event_t toV = static_cast<event_t>(pipe.FetchEventID(AscendC::HardEvent::MTE2_V));
    AscendC::SetFlag<AscendC::HardEvent::MTE2_V>(toV);
    AscendC::WaitFlag<AscendC::HardEvent::MTE2_V>(toV);
    const uint64_t m = static_cast<uint64_t>(mask);
    if (op == 0 || op == 3) {
        AscendC::Mul(al, al, xl, m, static_cast<uint8_t>(op == 3 ? repeats : kRows),
                     AscendC::BinaryRepeatParams(1, 1, 1, 8, 8, 0));
    } else if (op == 1) {
        AscendC::Brcb(bl, sl, static_cast<uint8_t>(kRows / 8), AscendC::BrcbRepeatParams(1, 8));
        AscendC::MulAddDst(al, bl, xl, m, static_cast<uint8_t>(kRows), AscendC::BinaryRepeatParams(1, 0, 1, 8, 1, 0));
    } else {
        AscendC::WholeReduceSum(al, al, mask, kRows, 1, 1, 8);
    }
    event_t toMte3 = static_cast<event_t>(pipe.FetchEventID(AscendC::HardEvent::V_MTE3));
    AscendC::SetFlag<AscendC::HardEvent::V_MTE3>(toMte3);
    AscendC::WaitFlag<AscendC::HardEvent::V_MTE3>(toMte3);
    AscendC::DataCopy(outGm, al, kRows * kCols);
}

}  // namespace

extern "C" __global__ __aicore__ void repeat_probe(GM_ADDR a, GM_ADDR x, GM_ADDR s, GM_ADDR out, int32_t op,
                                                   int32_t mask, int32_t repeats) {
    Probe(a, x, s, out, op, mask, repeats);
}

extern "C" int repeat_probe_host(uint32_t vectorCores, void *a, void *x, void *s, void *out, int32_t op,
                                 int32_t mask, int32_t repeats) {
    (void)vectorCores;
    return AscendC::host_model::Launch(1, repeat_probe, (GM_ADDR)a, (GM_ADDR)x, (GM_ADDR)s, (GM_ADDR)out, op, mask,
                                       repeats);
}
