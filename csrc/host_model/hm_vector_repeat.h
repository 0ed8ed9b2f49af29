// Host model: the repeat forms ("tensor高维切分计算", level 0) of the vector instructions the kernels use, with
// their documented signatures (asc-devkit docs: MulAddDst.md, Mul.md / Add.md / Sub.md, Brcb.md,
// WholeReduceSum.md; structs from include/basic_api/kernel_struct_binary.h and kernel_struct_brcb.h). One call is
// one instruction of `repeatTime` repeats: repeat r, block b (0..7), element e of an operand lie at element
// r * repStride * (32 / sizeof(T)) + b * blkStride * (32 / sizeof(T)) + e; the continuous mask takes the first
// `mask` elements of each repeat (1..256 / sizeof(T)). A stride of 0 re-reads one block or repeat (broadcast).
#pragma once

#include <vector>

#include "hm_vector.h"

namespace AscendC {

struct BinaryRepeatParams {
    BinaryRepeatParams() {}
    BinaryRepeatParams(const uint8_t dstBlkStrideIn, const uint8_t src0BlkStrideIn, const uint8_t src1BlkStrideIn,
                       const uint8_t dstRepStrideIn, const uint8_t src0RepStrideIn, const uint8_t src1RepStrideIn)
        : dstBlkStride(dstBlkStrideIn),
          src0BlkStride(src0BlkStrideIn),
          src1BlkStride(src1BlkStrideIn),
          dstRepStride(dstRepStrideIn),
          src0RepStride(src0RepStrideIn),
          src1RepStride(src1RepStrideIn) {}

    uint32_t blockNumber = 8;
    uint8_t dstBlkStride = 1;
    uint8_t src0BlkStride = 1;
    uint8_t src1BlkStride = 1;
    uint8_t dstRepStride = 8;
    uint8_t src0RepStride = 8;
    uint8_t src1RepStride = 8;
    bool repeatStrideMode = false;
    bool strideSizeMode = false;
};

struct BrcbRepeatParams {
    BrcbRepeatParams() {}
    BrcbRepeatParams(const uint16_t dstBlkStrideIn, const uint16_t dstRepStrideIn)
        : dstRepStride(dstRepStrideIn), dstBlkStride(dstBlkStrideIn) {}

    uint32_t blockNumber = 8;
    uint16_t dstRepStride = 8;
    uint16_t dstBlkStride = 1;
    uint8_t src0BlkStride = 1;
    uint8_t src1BlkStride = 1;
    uint8_t src0RepStride = 8;
    uint8_t src1RepStride = 8;
    bool repeatStrideMode = false;
    bool strideSizeMode = false;
};

namespace host_model {

template <typename T>
constexpr uint64_t kBlockElems = kBlockBytes / sizeof(T);

// Element index of (repeat, element-in-repeat) of an operand with these strides.
template <typename T>
uint64_t RepeatIndex(uint64_t r, uint64_t i, uint64_t repStride, uint64_t blkStride) {
    return r * repStride * kBlockElems<T> + (i / kBlockElems<T>) * blkStride * kBlockElems<T> + i % kBlockElems<T>;
}

template <typename T>
void CheckRepeatForm(const char *what, uint64_t mask, uint64_t repeatTime) {
    static_assert(kVectorType<T>, "vector instructions take half, float, int16_t or int32_t operands");
    const uint64_t perRepeat = kRepeatBytes / sizeof(T);
    if (mask < 1 || mask > perRepeat) {
        Fail(std::string(what) + ": continuous mask " + std::to_string(mask) + " outside 1.." +
             std::to_string(perRepeat));
    }
    Require(repeatTime <= 255, std::string(what) + ": repeatTime above 255");
}

// Every element an operand's repeats touch must lie inside it.
template <typename T>
void CheckRepeatOperand(const LocalTensor<T> &t, uint64_t mask, uint64_t repeatTime, uint64_t repStride,
                        uint64_t blkStride, const char *what) {
    t.CheckAligned(what);
    if (repeatTime == 0) return;
    uint64_t last = 0;
    for (uint64_t i = 0; i < mask; ++i) last = std::max(last, RepeatIndex<T>(repeatTime - 1, i, repStride, blkStride));
    for (uint64_t i = 0; i < mask; ++i) last = std::max(last, RepeatIndex<T>(0, i, repStride, blkStride));
    t.CheckRange(0, last + 1, what);
}

// dst(r, i) = fn(src0(r, i), src1(r, i), dst(r, i)) for the first `mask` elements of each repeat, repeat by repeat.
template <typename T, typename F>
void BinaryRepeat(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, uint64_t mask,
                  uint8_t repeatTime, const BinaryRepeatParams &p, const char *what, F fn) {
    CheckRepeatForm<T>(what, mask, repeatTime);
    CheckRepeatOperand(dst, mask, repeatTime, p.dstRepStride, p.dstBlkStride, what);
    CheckRepeatOperand(src0, mask, repeatTime, p.src0RepStride, p.src0BlkStride, what);
    CheckRepeatOperand(src1, mask, repeatTime, p.src1RepStride, p.src1BlkStride, what);
    CountVectorRepeats(repeatTime);
    std::vector<T> out(mask);
    for (uint64_t r = 0; r < repeatTime; ++r) {
        for (uint64_t i = 0; i < mask; ++i) {
            const T a = src0.Data()[RepeatIndex<T>(r, i, p.src0RepStride, p.src0BlkStride)];
            const T b = src1.Data()[RepeatIndex<T>(r, i, p.src1RepStride, p.src1BlkStride)];
            out[i] = fn(a, b, dst.Data()[RepeatIndex<T>(r, i, p.dstRepStride, p.dstBlkStride)]);
        }
        for (uint64_t i = 0; i < mask; ++i) dst.Data()[RepeatIndex<T>(r, i, p.dstRepStride, p.dstBlkStride)] = out[i];
    }
}

}  // namespace host_model

#define ASCEND_SPEC_HM_BINARY_REPEAT_OP(NAME, EXPR)                                                              \
    template <typename T, bool isSetMask = true>                                                                \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, uint64_t mask, \
              const uint8_t repeatTime, const BinaryRepeatParams &repeatParams) {                               \
        host_model::BinaryRepeat(dst, src0, src1, mask, repeatTime, repeatParams, #NAME,                        \
                                 [](T x, T y, T d) { (void)d; return static_cast<T>(EXPR); });                  \
    }
ASCEND_SPEC_HM_BINARY_REPEAT_OP(Add, x + y)
ASCEND_SPEC_HM_BINARY_REPEAT_OP(Sub, x - y)
ASCEND_SPEC_HM_BINARY_REPEAT_OP(Mul, x * y)
#undef ASCEND_SPEC_HM_BINARY_REPEAT_OP

// dst = src0 * src1 + dst (MulAddDst.md, mask continuous form; A2/A3: half or float with one type here).
template <typename T, typename U, bool isSetMask = true>
void MulAddDst(const LocalTensor<T> &dst, const LocalTensor<U> &src0, const LocalTensor<U> &src1, uint64_t mask,
               const uint8_t repeatTime, const BinaryRepeatParams &repeatParams) {
    static_assert(std::is_same_v<T, U> && (std::is_same_v<T, half> || std::is_same_v<T, float>),
                  "MulAddDst here takes half or float operands of one type");
    host_model::BinaryRepeat(dst, src0, src1, mask, repeatTime, repeatParams, "MulAddDst",
                             [](T x, T y, T d) { return static_cast<T>(x * y + d); });
}

// Brcb.md: repeat i reads src[8 i .. 8 i + 7] and fills destination block i * dstRepStride + j * dstBlkStride
// (a dstBlkStride of 0 counts as 1) with src[8 i + j].
template <typename T>
void Brcb(const LocalTensor<T> &dst, const LocalTensor<T> &src, const uint8_t repeatTime,
          const BrcbRepeatParams &repeatParams) {
    static_assert(sizeof(T) == 2 || sizeof(T) == 4, "Brcb takes 16- or 32-bit elements");
    dst.CheckAligned("Brcb");
    src.CheckAligned("Brcb");
    const uint64_t blk = repeatParams.dstBlkStride == 0 ? 1 : repeatParams.dstBlkStride;
    const uint64_t per = host_model::kBlockElems<T>;
    src.CheckRange(0, uint64_t(repeatTime) * 8, "Brcb source");
    if (repeatTime > 0) {
        dst.CheckRange(0, ((repeatTime - 1) * uint64_t(repeatParams.dstRepStride) + 7 * blk + 1) * per,
                       "Brcb destination");
    }
    host_model::CountVectorRepeats(repeatTime);
    for (uint64_t i = 0; i < repeatTime; ++i) {
        for (uint64_t j = 0; j < 8; ++j) {
            T *block = dst.Data() + (i * repeatParams.dstRepStride + j * blk) * per;
            std::fill(block, block + per, src.Data()[i * 8 + j]);
        }
    }
}

// WholeReduceSum.md, mask continuous form: dst[r * dstRepStride] = the sum of the first `mask` elements of repeat
// r (dstRepStride in dst elements; srcBlkStride / srcRepStride in blocks); dst needs only element alignment.
template <typename T, bool isSetMask = true>
void WholeReduceSum(const LocalTensor<T> &dst, const LocalTensor<T> &src, const int32_t mask,
                    const int32_t repeatTime, const int32_t dstRepStride, const int32_t srcBlkStride,
                    const int32_t srcRepStride) {
    static_assert(std::is_same_v<T, half> || std::is_same_v<T, float>, "WholeReduceSum takes half or float");
    host_model::CheckRepeatForm<T>("WholeReduceSum", static_cast<uint64_t>(mask), static_cast<uint64_t>(repeatTime));
    host_model::Require(repeatTime >= 0 && dstRepStride >= 0 && srcBlkStride >= 0 && srcRepStride >= 0,
                        "WholeReduceSum: negative repeat or stride");
    host_model::CheckRepeatOperand(src, mask, repeatTime, srcRepStride, srcBlkStride, "WholeReduceSum source");
    if (repeatTime > 0) dst.CheckRange(0, uint64_t(repeatTime - 1) * dstRepStride + 1, "WholeReduceSum destination");
    host_model::CountVectorRepeats(static_cast<uint64_t>(repeatTime));
    std::vector<T> out(repeatTime);
    for (int64_t r = 0; r < repeatTime; ++r) {
        float sum = 0.0f;
        for (int64_t i = 0; i < mask; ++i) {
            sum += static_cast<float>(src.Data()[host_model::RepeatIndex<T>(r, i, srcRepStride, srcBlkStride)]);
        }
        out[r] = static_cast<T>(sum);
    }
    for (int64_t r = 0; r < repeatTime; ++r) dst.Data()[r * dstRepStride] = out[r];
}

}  // namespace AscendC
