// Host model: the vector instructions the kernels use (level-2, count-based forms). Operands must be UB
// tensors at 32-byte aligned addresses holding `count` elements; element types are those the A2/A3 vector unit
// computes in (half, float, int16_t, int32_t; bfloat16 only through Cast). Add a function here only with the
// exact documented AscendC signature (cannmirror/asc-devkit docs/api/context/<Name>.md).
#pragma once

#include <algorithm>
#include <limits>
#include <type_traits>

#include "hm_pipe.h"
#include "hm_tensor.h"

namespace AscendC {

enum class RoundMode { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };

namespace host_model {

template <typename T>
constexpr bool kVectorType = std::is_same_v<T, half> || std::is_same_v<T, float> ||
                             std::is_same_v<T, int16_t> || std::is_same_v<T, int32_t>;

template <typename T>
void CheckOperand(const LocalTensor<T> &t, int64_t count, const char *what) {
    Require(count >= 0, std::string(what) + ": negative count");
    t.CheckAligned(what);
    t.CheckRange(0, static_cast<uint64_t>(count), what);
}

template <typename T, typename F>
void Unary(const LocalTensor<T> &dst, const LocalTensor<T> &src, int64_t count, const char *what, F fn) {
    static_assert(kVectorType<T>, "vector instructions take half, float, int16_t or int32_t operands");
    CheckOperand(dst, count, what);
    CheckOperand(src, count, what);
    CountVector(uint64_t(count) * sizeof(T));
    T *d = dst.Data();
    const T *s = src.Data();
    for (int64_t i = 0; i < count; ++i) d[i] = fn(s[i]);
}

template <typename T, typename F>
void Binary(const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b, int64_t count,
            const char *what, F fn) {
    static_assert(kVectorType<T>, "vector instructions take half, float, int16_t or int32_t operands");
    CheckOperand(dst, count, what);
    CheckOperand(a, count, what);
    CheckOperand(b, count, what);
    CountVector(uint64_t(count) * sizeof(T));
    T *d = dst.Data();
    const T *x = a.Data();
    const T *y = b.Data();
    for (int64_t i = 0; i < count; ++i) d[i] = fn(x[i], y[i]);
}

template <typename T>
float ToFloat(T v) {
    return static_cast<float>(v);
}

template <typename T>
T RoundTo(double v, RoundMode mode) {
    if constexpr (std::is_integral_v<T>) {
        double r = v;
        switch (mode) {
            case RoundMode::CAST_FLOOR: r = std::floor(v); break;
            case RoundMode::CAST_CEIL: r = std::ceil(v); break;
            case RoundMode::CAST_ROUND: r = std::round(v); break;
            case RoundMode::CAST_TRUNC: r = std::trunc(v); break;
            default: r = std::nearbyint(v); break;
        }
        r = std::clamp(r, double(std::numeric_limits<T>::lowest()), double(std::numeric_limits<T>::max()));
        return static_cast<T>(r);
    } else {
        return static_cast<T>(static_cast<float>(v));
    }
}

}  // namespace host_model

template <typename T>
void Duplicate(const LocalTensor<T> &dst, const T &scalarValue, const int32_t &calCount) {
    static_assert(host_model::kVectorType<T>, "Duplicate takes half, float, int16_t or int32_t");
    host_model::CheckOperand(dst, calCount, "Duplicate");
    host_model::CountVector(uint64_t(calCount) * sizeof(T));
    std::fill(dst.Data(), dst.Data() + calCount, scalarValue);
}

template <typename T>
void CreateVecIndex(LocalTensor<T> dst, const T &firstValue, uint32_t calCount) {
    static_assert(host_model::kVectorType<T>, "CreateVecIndex takes half, float, int16_t or int32_t");
    host_model::CheckOperand(dst, calCount, "CreateVecIndex");
    host_model::CountVector(uint64_t(calCount) * sizeof(T));
    for (uint32_t i = 0; i < calCount; ++i) dst.Data()[i] = static_cast<T>(firstValue + static_cast<T>(i));
}

#define ASCEND_SPEC_HM_SCALAR_OP(NAME, EXPR)                                                                   \
    template <typename T>                                                                                     \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalarValue,                    \
              const int32_t &calCount) {                                                                      \
        host_model::Unary(dst, src, calCount, #NAME, [&](T x) { return static_cast<T>(EXPR); });              \
    }
ASCEND_SPEC_HM_SCALAR_OP(Adds, x + scalarValue)
ASCEND_SPEC_HM_SCALAR_OP(Muls, x * scalarValue)
ASCEND_SPEC_HM_SCALAR_OP(Maxs, x > scalarValue ? x : scalarValue)
ASCEND_SPEC_HM_SCALAR_OP(Mins, x < scalarValue ? x : scalarValue)
#undef ASCEND_SPEC_HM_SCALAR_OP

#define ASCEND_SPEC_HM_BINARY_OP(NAME, EXPR)                                                                   \
    template <typename T>                                                                                     \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1,             \
              const int32_t &calCount) {                                                                      \
        host_model::Binary(dst, src0, src1, calCount, #NAME, [](T x, T y) { return static_cast<T>(EXPR); }); \
    }
ASCEND_SPEC_HM_BINARY_OP(Add, x + y)
ASCEND_SPEC_HM_BINARY_OP(Sub, x - y)
ASCEND_SPEC_HM_BINARY_OP(Mul, x * y)
ASCEND_SPEC_HM_BINARY_OP(Div, x / y)
ASCEND_SPEC_HM_BINARY_OP(Max, x > y ? x : y)
ASCEND_SPEC_HM_BINARY_OP(Min, x < y ? x : y)
#undef ASCEND_SPEC_HM_BINARY_OP

#define ASCEND_SPEC_HM_UNARY_FLOAT_OP(NAME, EXPR)                                                                \
    template <typename T>                                                                                       \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, const int32_t &calCount) {                 \
        static_assert(std::is_same_v<T, half> || std::is_same_v<T, float>, #NAME " takes half or float");      \
        host_model::Unary(dst, src, calCount, #NAME, [](T v) {                                                  \
            float x = static_cast<float>(v);                                                                    \
            return static_cast<T>(EXPR);                                                                        \
        });                                                                                                     \
    }
ASCEND_SPEC_HM_UNARY_FLOAT_OP(Exp, std::exp(x))
ASCEND_SPEC_HM_UNARY_FLOAT_OP(Ln, std::log(x))
ASCEND_SPEC_HM_UNARY_FLOAT_OP(Sqrt, std::sqrt(x))
ASCEND_SPEC_HM_UNARY_FLOAT_OP(Reciprocal, 1.0f / x)
ASCEND_SPEC_HM_UNARY_FLOAT_OP(Relu, x > 0.0f ? x : 0.0f)
#undef ASCEND_SPEC_HM_UNARY_FLOAT_OP

// dst = src * scalarValue + dst (asc-devkit docs/api/context/Axpy.md, "tensor前n个数据计算" form; A2/A3: half/float).
template <typename T, typename U>
void Axpy(const LocalTensor<T> &dst, const LocalTensor<U> &src, const U &scalarValue, const int32_t &count) {
    static_assert((std::is_same_v<T, half> || std::is_same_v<T, float>) &&
                      (std::is_same_v<U, half> || std::is_same_v<U, float>) && sizeof(T) >= sizeof(U),
                  "Axpy takes half or float (float dst with half src allowed)");
    host_model::CheckOperand(dst, count, "Axpy");
    host_model::CheckOperand(src, count, "Axpy");
    host_model::CountVector(uint64_t(count) * sizeof(T));
    T *d = dst.Data();
    const U *s = src.Data();
    const float a = static_cast<float>(scalarValue);
    for (int32_t i = 0; i < count; ++i) d[i] = static_cast<T>(static_cast<float>(s[i]) * a + static_cast<float>(d[i]));
}

template <typename T>
void Abs(const LocalTensor<T> &dst, const LocalTensor<T> &src, const int32_t &calCount) {
    host_model::Unary(dst, src, calCount, "Abs", [](T x) { return x < T(0) ? static_cast<T>(-x) : x; });
}

namespace host_model {
// The (src, dst, roundMode) combinations Cast supports on Atlas A2 (asc-devkit Cast.md, the A2 table; A3's is the
// same). Bit i of the mask allows RoundMode i; int32 -> half (SetDeqScale) and the int4/int64 rows are left out
// (no kernel needs them).
template <typename S, typename D>
constexpr uint32_t CastModes() {
    constexpr uint32_t NONE = 1u << 0, RINT = 1u << 1, FLOOR = 1u << 2, CEIL = 1u << 3, ROUND = 1u << 4,
                       TRUNC = 1u << 5, ODD = 1u << 6;
    constexpr uint32_t ROUNDING = RINT | FLOOR | CEIL | ROUND | TRUNC;
    if constexpr (std::is_same_v<S, int8_t> && std::is_same_v<D, half>) return NONE;
    if constexpr (std::is_same_v<S, uint8_t> && std::is_same_v<D, half>) return NONE;
    if constexpr (std::is_same_v<S, int16_t> && std::is_same_v<D, half>) return ROUNDING | NONE;
    if constexpr (std::is_same_v<S, int16_t> && std::is_same_v<D, float>) return NONE;
    if constexpr (std::is_same_v<S, half> && (std::is_same_v<D, int8_t> || std::is_same_v<D, uint8_t>))
        return ROUNDING | NONE;
    if constexpr (std::is_same_v<S, half> && (std::is_same_v<D, int16_t> || std::is_same_v<D, int32_t>))
        return ROUNDING;
    if constexpr (std::is_same_v<S, half> && std::is_same_v<D, float>) return NONE;
    if constexpr (std::is_same_v<S, bfloat16_t> && std::is_same_v<D, int32_t>) return ROUNDING;
    if constexpr (std::is_same_v<S, bfloat16_t> && std::is_same_v<D, float>) return NONE;
    if constexpr (std::is_same_v<S, int32_t> && std::is_same_v<D, int16_t>) return NONE;
    if constexpr (std::is_same_v<S, int32_t> && std::is_same_v<D, float>) return ROUNDING | NONE;
    if constexpr (std::is_same_v<S, float> && std::is_same_v<D, half>) return ROUNDING | ODD | NONE;
    if constexpr (std::is_same_v<S, float> &&
                  (std::is_same_v<D, int16_t> || std::is_same_v<D, bfloat16_t> || std::is_same_v<D, int32_t> ||
                   std::is_same_v<D, float>))
        return ROUNDING;
    return 0;
}
}  // namespace host_model

// Cast between the vector unit's types (bfloat16_t included), only in the combinations A2 supports.
template <typename T1, typename T2>
void Cast(const LocalTensor<T1> &dst, const LocalTensor<T2> &src, const RoundMode &roundMode,
          const uint32_t calCount) {
    constexpr uint32_t modes = host_model::CastModes<T2, T1>();
    static_assert(modes != 0, "Cast: this (src, dst) type pair is not in the A2 Cast table (Cast.md)");
    if (!(modes & (1u << static_cast<uint32_t>(roundMode)))) {
        host_model::Fail("Cast: round mode " + std::to_string(static_cast<int>(roundMode)) +
                         " is not supported for this (src, dst) pair on A2 (Cast.md table; e.g. float -> "
                         "bfloat16_t needs CAST_RINT..CAST_TRUNC, not CAST_NONE)");
    }
    host_model::CheckOperand(dst, calCount, "Cast");
    host_model::CheckOperand(src, calCount, "Cast");
    host_model::CountVector(uint64_t(calCount) * std::max(sizeof(T1), sizeof(T2)));
    for (uint32_t i = 0; i < calCount; ++i) {
        double v = static_cast<double>(static_cast<float>(src.Data()[i]));
        if constexpr (std::is_integral_v<T2>) v = static_cast<double>(src.Data()[i]);
        dst.Data()[i] = host_model::RoundTo<T1>(v, roundMode);
    }
}

namespace host_model {
// Minimum sharedTmpBuffer elements of the count forms (asc-devkit ReduceMax.md / ReduceSum.md "sharedTmpBuffer
// 所需空间设置"; firstMaxRepeat = count / elementsPerRepeat, at least 1, rounded up here).
inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
template <typename T>
int64_t ReduceMaxTmpElements(int64_t count, bool calIndex) {
    const int64_t perBlock = kBlockBytes / sizeof(T), perRepeat = kRepeatBytes / sizeof(T);
    const int64_t repeats = CeilDiv(count, perRepeat);
    const int64_t out1 = repeats * 2;  // the instruction writes (value, index) pairs either way
    const int64_t end1 = CeilDiv(out1, perBlock) * perBlock;
    if (!calIndex) return end1;
    const int64_t out2 = CeilDiv(out1, perRepeat) * 2;
    const int64_t end2 = CeilDiv(out2, perBlock) * perBlock;
    if (out2 <= 2) return end1 + end2;
    const int64_t out3 = CeilDiv(out2, perRepeat) * 2;
    return end1 + end2 + CeilDiv(out3, perBlock) * perBlock;
}
template <typename T>
int64_t ReduceSumTmpElements(int64_t count) {
    const int64_t perBlock = kBlockBytes / sizeof(T), perRepeat = kRepeatBytes / sizeof(T);
    return CeilDiv(CeilDiv(count, perRepeat), perBlock) * perBlock;
}
}  // namespace host_model

// dst[0] = max(src[0:count]); with calIndex, dst[1] holds the index of the first maximum (bit pattern of an
// integer stored in T, as on the chip).
template <typename T>
void ReduceMax(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &sharedTmpBuffer,
               const int32_t count, bool calIndex = 0) {
    static_assert(std::is_same_v<T, half> || std::is_same_v<T, float>, "ReduceMax takes half or float");
    host_model::Require(count >= 1, "ReduceMax: count must be >= 1");
    host_model::CheckOperand(src, count, "ReduceMax");
    host_model::CheckOperand(dst, calIndex ? 2 : 1, "ReduceMax");
    host_model::CheckOperand(sharedTmpBuffer, host_model::ReduceMaxTmpElements<T>(count, calIndex),
                             "ReduceMax sharedTmpBuffer (its documented minimum size)");
    host_model::CountVector(uint64_t(count) * sizeof(T));
    const T *s = src.Data();
    int32_t best = 0;
    for (int32_t i = 1; i < count; ++i) {
        if (static_cast<float>(s[i]) > static_cast<float>(s[best])) best = i;
    }
    dst.Data()[0] = s[best];
    if (calIndex) {
        if constexpr (sizeof(T) == 4) {
            uint32_t idx = static_cast<uint32_t>(best);
            std::memcpy(&dst.Data()[1], &idx, sizeof(idx));
        } else {
            uint16_t idx = static_cast<uint16_t>(best);
            std::memcpy(&dst.Data()[1], &idx, sizeof(idx));
        }
    }
}

template <typename T>
void ReduceSum(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &sharedTmpBuffer,
               const int32_t count) {
    static_assert(std::is_same_v<T, half> || std::is_same_v<T, float>, "ReduceSum takes half or float");
    host_model::Require(count >= 1, "ReduceSum: count must be >= 1");
    host_model::CheckOperand(src, count, "ReduceSum");
    host_model::CheckOperand(dst, 1, "ReduceSum");
    host_model::CheckOperand(sharedTmpBuffer, host_model::ReduceSumTmpElements<T>(count),
                             "ReduceSum sharedTmpBuffer (its documented minimum size)");
    host_model::CountVector(uint64_t(count) * sizeof(T));
    float acc = 0.0f;
    for (int32_t i = 0; i < count; ++i) acc += static_cast<float>(src.Data()[i]);
    dst.Data()[0] = static_cast<T>(acc);
}

// Compare / Select (CANN docs: CompareScalar, Select). The mask holds one bit per element, element i at bit i % 8
// of byte i / 8. ascend-spec kernels pass counts that are whole 256-byte repeats.
enum class CMPMODE : uint8_t { LT = 0, GT, EQ, LE, GE, NE };
enum class SELMODE : uint8_t { VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE };

template <typename T, typename U>
void CompareScalar(const LocalTensor<U> &dst, const LocalTensor<T> &src0, const T src1Scalar, CMPMODE cmpMode,
                   uint32_t count) {
    static_assert(std::is_same_v<T, half> || std::is_same_v<T, float>, "CompareScalar takes half or float");
    static_assert(std::is_same_v<U, uint8_t>, "CompareScalar writes a uint8_t bit mask");
    // Compare.md: count elements must fill whole 256-byte repeats; the chip silently skips a partial one.
    if (uint64_t(count) * sizeof(T) % host_model::kRepeatBytes != 0) {
        host_model::Fail("CompareScalar: " + std::to_string(count) + " elements are not whole 256-byte repeats "
                         "(the chip drops the last " + std::to_string(uint64_t(count) * sizeof(T) % 256) + " bytes)");
    }
    host_model::CheckOperand(src0, count, "CompareScalar");
    host_model::CheckOperand(dst, (count + 7) / 8, "CompareScalar mask");
    host_model::CountVector(uint64_t(count) * sizeof(T));
    const T *x = src0.Data();
    uint8_t *m = dst.Data();
    std::fill(m, m + (count + 7) / 8, uint8_t(0));
    const float y = static_cast<float>(src1Scalar);
    // How the vector unit treats subnormal operands is not documented (flush to zero is common): a compare whose
    // result would depend on it is refused.
    auto subnormal = [](float v) { return std::fpclassify(v) == FP_SUBNORMAL; };
    host_model::Require(!subnormal(y), "CompareScalar: the scalar is subnormal (" + std::to_string(y) +
                                           "); the vector unit's denormal handling is undocumented");
    for (uint32_t i = 0; i < count; ++i) {
        host_model::Require(!subnormal(static_cast<float>(x[i])),
                            "CompareScalar: element " + std::to_string(i) + " is subnormal; the vector unit's "
                            "denormal handling is undocumented");
    }
    for (uint32_t i = 0; i < count; ++i) {
        const float v = static_cast<float>(x[i]);
        bool r = false;
        switch (cmpMode) {
            case CMPMODE::LT: r = v < y; break;
            case CMPMODE::GT: r = v > y; break;
            case CMPMODE::EQ: r = v == y; break;
            case CMPMODE::LE: r = v <= y; break;
            case CMPMODE::GE: r = v >= y; break;
            case CMPMODE::NE: r = v != y; break;
        }
        if (r) m[i / 8] = static_cast<uint8_t>(m[i / 8] | (1u << (i % 8)));
    }
}

namespace host_model {
// What the chip's Select does before selecting (dav_c220 VselImpl): Duplicate `src1` into the 32-byte block at
// TMP_UB_OFFSET (184 KiB) and load the compare mask from there. A buffer of the kernel in that block would be
// overwritten: it fails here, and the block is written as on the chip.
template <typename T>
void ScribbleTmpUb(T value, const char *what) {
    TPipe *pipe = GetTPipePtr();
    Require(pipe != nullptr, std::string(what) + " outside a TPipe's lifetime");
    if (const UbBuffer *buf = pipe->Overlapping(kTmpUbOffset, kTmpUbOffset + kBlockBytes)) {
        std::ostringstream os;
        os << what << " writes its scratch at UB offset " << kTmpUbOffset << " (TMP_UB_OFFSET, 184 KiB), inside "
           << "the kernel's buffer at [" << buf->offset << ", " << buf->offset + buf->bytes
           << "): keep buffers below 184 KiB in kernels that call it";
        Fail(os.str());
    }
    T *scratch = reinterpret_cast<T *>(pipe->UbBase() + kTmpUbOffset);
    for (uint32_t i = 0; i < kBlockBytes / sizeof(T); ++i) scratch[i] = value;
}
}  // namespace host_model

// Select mode 1 (VSEL_TENSOR_SCALAR_MODE): dst[i] = mask bit i ? src0[i] : src1.
template <typename T, typename U>
void Select(const LocalTensor<T> &dst, const LocalTensor<U> &selMask, const LocalTensor<T> &src0, T src1,
            SELMODE selMode, uint32_t count) {
    static_assert(std::is_same_v<T, half> || std::is_same_v<T, float>, "Select takes half or float");
    host_model::Require(selMode == SELMODE::VSEL_TENSOR_SCALAR_MODE,
                        "Select(tensor, scalar) needs SELMODE::VSEL_TENSOR_SCALAR_MODE");
    host_model::CheckOperand(dst, count, "Select");
    host_model::CheckOperand(src0, count, "Select");
    host_model::CheckOperand(selMask, ((count + 7) / 8 + sizeof(U) - 1) / sizeof(U), "Select mask");
    host_model::ScribbleTmpUb<T>(src1, "Select(VSEL_TENSOR_SCALAR_MODE)");
    host_model::CountVector(host_model::kBlockBytes);  // the Duplicate into the scratch block
    host_model::CountVector(uint64_t(count) * sizeof(T));
    const uint8_t *m = reinterpret_cast<const uint8_t *>(selMask.Data());
    for (uint32_t i = 0; i < count; ++i) {
        dst.Data()[i] = ((m[i / 8] >> (i % 8)) & 1u) ? src0.Data()[i] : src1;
    }
}

// Gather, count form (docs/api/context/Gather.md, Atlas A2/A3): dst[i] = the element at byte offset
// srcBaseAddr + srcOffset[i] from the start of src. Offsets are bytes, element aligned, inside src.
template <typename T>
void Gather(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<uint32_t> &srcOffset,
            const uint32_t srcBaseAddr, const uint32_t count) {
    static_assert(std::is_same_v<T, int16_t> || std::is_same_v<T, uint16_t> || std::is_same_v<T, int32_t> ||
                      std::is_same_v<T, uint32_t> || std::is_same_v<T, float> || std::is_same_v<T, half> ||
                      std::is_same_v<T, bfloat16_t>,
                  "Gather takes int16_t, uint16_t, int32_t, uint32_t, float, half or bfloat16_t");
    // The count form runs count / (256 / sizeof(T)) full repeats through an 8-bit repeat field plus a tail:
    // beyond 255 full repeats (16383 32-bit elements) the counter wraps on the chip.
    const uint32_t perRepeat = host_model::kRepeatBytes / sizeof(T);
    if (count / perRepeat > 255) {
        host_model::Fail("Gather: count " + std::to_string(count) + " needs " + std::to_string(count / perRepeat) +
                         " repeats of " + std::to_string(perRepeat) + " elements; the 8-bit repeat counter holds 255");
    }
    host_model::CheckOperand(dst, count, "Gather");
    host_model::CheckOperand(srcOffset, count, "Gather offsets");
    host_model::CountVector(uint64_t(count) * sizeof(uint32_t));
    src.CheckAligned("Gather");
    std::vector<T> out(count);
    for (uint32_t i = 0; i < count; ++i) {
        const uint64_t byte = uint64_t(srcBaseAddr) + srcOffset.Data()[i];
        host_model::Require(byte % sizeof(T) == 0, "Gather: offset is not aligned to the element size");
        src.CheckRange(byte / sizeof(T), 1, "Gather source");
        out[i] = src.Data()[byte / sizeof(T)];
    }
    std::copy(out.begin(), out.end(), dst.Data());
}

}  // namespace AscendC
