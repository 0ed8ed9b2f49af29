// Host model: DataCopy (32-byte granular) and DataCopyPad (byte granular) between GM and the Unified Buffer.
#pragma once

#include "hm_tensor.h"

namespace AscendC {

struct DataCopyParams {
    uint16_t blockCount = 1;
    uint16_t blockLen = 0;   // in 32-byte blocks for DataCopy; in bytes for DataCopyPad
    uint16_t srcStride = 0;
    uint16_t dstStride = 0;
    DataCopyParams() = default;
    DataCopyParams(uint16_t count, uint16_t len, uint16_t srcStrideIn, uint16_t dstStrideIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn) {}
};

struct DataCopyExtParams {
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;  // bytes
    uint32_t srcStride = 0;
    uint32_t dstStride = 0;
    uint32_t rsv = 0;
    DataCopyExtParams() = default;
    DataCopyExtParams(uint16_t count, uint32_t len, uint32_t srcStrideIn, uint32_t dstStrideIn, uint32_t rsvIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn) {}
};

struct DataCopyPadParams {
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    uint64_t paddingValue = 0;
    DataCopyPadParams() = default;
    DataCopyPadParams(bool pad, uint8_t left, uint8_t right, uint64_t value)
        : isPad(pad), leftPadding(left), rightPadding(right), paddingValue(value) {}
};

template <typename T>
struct DataCopyPadExtParams {
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    T paddingValue = 0;
    DataCopyPadExtParams() = default;
    DataCopyPadExtParams(bool pad, uint8_t left, uint8_t right, T value)
        : isPad(pad), leftPadding(left), rightPadding(right), paddingValue(value) {}
};

namespace host_model {

inline void CheckCopyLength(uint64_t bytes, const char *what) {
    if (bytes % kBlockBytes != 0) {
        std::ostringstream os;
        os << what << ": " << bytes << " bytes is not a multiple of 32 (use DataCopyPad for unaligned lengths)";
        Fail(os.str());
    }
}

// DataCopyPad's encodable ranges (asc-devkit DataCopyPad docs): blockCount 1..4095, blockLen 1..2097151 bytes,
// left/right padding at most 32 bytes each. Out of range, the chip's fields wrap or truncate silently.
inline void CheckPadParams(uint32_t count, uint32_t blockLen, uint64_t leftBytes, uint64_t rightBytes) {
    std::ostringstream os;
    if (count < 1 || count > 4095) os << "DataCopyPad: blockCount " << count << " outside 1..4095";
    else if (blockLen < 1 || blockLen > 2097151) os << "DataCopyPad: blockLen " << blockLen << " bytes outside 1..2097151";
    else if (leftBytes > 32 || rightBytes > 32)
        os << "DataCopyPad: padding of " << leftBytes << " + " << rightBytes << " bytes; each side is at most 32";
    if (!os.str().empty()) Fail(os.str());
}

// GM -> UB, `blockCount` blocks of `blockLen` bytes; UB blocks start on 32-byte boundaries. The bytes between a
// block's end (after any right padding) and its 32-byte boundary get the block's first element, as the chip
// fills them.
template <typename T>
void PadCopyIn(const LocalTensor<T> &dst, const GlobalTensor<T> &src, uint32_t count, uint32_t blockLen,
               uint64_t srcGapBytes, uint64_t dstGapBlocks, bool isPad, uint32_t left, uint32_t right, T padValue) {
    dst.CheckAligned("DataCopyPad(GM->UB)");
    CheckPadParams(count, blockLen, uint64_t(left) * sizeof(T), uint64_t(right) * sizeof(T));
    Require(blockLen % sizeof(T) == 0, "DataCopyPad: blockLen must be a whole number of elements");
    CountDma(Dma::GmToUb, count, uint64_t(count) * blockLen);
    uint32_t elems = blockLen / sizeof(T);
    uint64_t ubBlock = AlignUp((left + elems + right) * sizeof(T), kBlockBytes) + dstGapBlocks * kBlockBytes;
    for (uint32_t b = 0; b < count; ++b) {
        uint64_t gmOff = b * (blockLen + srcGapBytes) / sizeof(T);
        Require((b * (blockLen + srcGapBytes)) % sizeof(T) == 0, "DataCopyPad: srcStride not element aligned");
        src.Check(gmOff, elems, "DataCopyPad(GM->UB) source");
        uint64_t ubOff = b * ubBlock / sizeof(T);
        dst.CheckRange(ubOff, AlignUp((left + elems + right) * sizeof(T), kBlockBytes) / sizeof(T),
                       "DataCopyPad(GM->UB) destination");
        T *out = dst.Data() + ubOff;
        if (isPad) {
            for (uint32_t i = 0; i < left; ++i) out[i] = padValue;
            for (uint32_t i = 0; i < right; ++i) out[left + elems + i] = padValue;
        }
        std::memcpy(out + left, src.GetPhyAddr() + gmOff, blockLen);
        const uint32_t filled = left + elems + right;
        const uint64_t aligned = AlignUp(filled * sizeof(T), kBlockBytes) / sizeof(T);
        for (uint64_t i = filled; i < aligned; ++i) out[i] = out[0];
    }
}

template <typename T>
void PadCopyOut(const GlobalTensor<T> &dst, const LocalTensor<T> &src, uint32_t count, uint32_t blockLen,
                uint64_t srcGapBlocks, uint64_t dstGapBytes) {
    src.CheckAligned("DataCopyPad(UB->GM)");
    CheckPadParams(count, blockLen, 0, 0);
    CountDma(Dma::UbToGm, count, uint64_t(count) * blockLen);
    Require(blockLen % sizeof(T) == 0, "DataCopyPad: blockLen must be a whole number of elements");
    uint32_t elems = blockLen / sizeof(T);
    uint64_t ubBlock = AlignUp(blockLen, kBlockBytes) + srcGapBlocks * kBlockBytes;
    for (uint32_t b = 0; b < count; ++b) {
        uint64_t ubOff = b * ubBlock / sizeof(T);
        src.CheckRange(ubOff, elems, "DataCopyPad(UB->GM) source");
        Require((b * (blockLen + dstGapBytes)) % sizeof(T) == 0, "DataCopyPad: dstStride not element aligned");
        uint64_t gmOff = b * (blockLen + dstGapBytes) / sizeof(T);
        dst.Check(gmOff, elems, "DataCopyPad(UB->GM) destination");
        std::memcpy(dst.GetPhyAddr() + gmOff, src.Data() + ubOff, blockLen);
    }
}

}  // namespace host_model

// ---- DataCopy: lengths and UB addresses in whole 32-byte blocks ----
template <typename T>
void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const uint32_t calCount) {
    host_model::CheckCopyLength(uint64_t(calCount) * sizeof(T), "DataCopy(GM->UB)");
    host_model::CountDma(host_model::Dma::GmToUb, 1, uint64_t(calCount) * sizeof(T));
    dst.CheckAligned("DataCopy(GM->UB)");
    dst.CheckRange(0, calCount, "DataCopy(GM->UB) destination");
    src.Check(0, calCount, "DataCopy(GM->UB) source");
    std::memcpy(dst.Data(), src.GetPhyAddr(), uint64_t(calCount) * sizeof(T));
}

template <typename T>
void DataCopy(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const uint32_t calCount) {
    host_model::CheckCopyLength(uint64_t(calCount) * sizeof(T), "DataCopy(UB->GM)");
    host_model::CountDma(host_model::Dma::UbToGm, 1, uint64_t(calCount) * sizeof(T));
    src.CheckAligned("DataCopy(UB->GM)");
    src.CheckRange(0, calCount, "DataCopy(UB->GM) source");
    dst.Check(0, calCount, "DataCopy(UB->GM) destination");
    std::memcpy(dst.GetPhyAddr(), src.Data(), uint64_t(calCount) * sizeof(T));
}

template <typename T>
void DataCopy(const LocalTensor<T> &dst, const LocalTensor<T> &src, const uint32_t calCount) {
    host_model::CheckCopyLength(uint64_t(calCount) * sizeof(T), "DataCopy(UB->UB)");
    host_model::CountDma(host_model::Dma::UbToUb, 1, uint64_t(calCount) * sizeof(T));
    dst.CheckAligned("DataCopy(UB->UB)");
    src.CheckAligned("DataCopy(UB->UB)");
    dst.CheckRange(0, calCount, "DataCopy(UB->UB) destination");
    src.CheckRange(0, calCount, "DataCopy(UB->UB) source");
    std::memmove(dst.Data(), src.Data(), uint64_t(calCount) * sizeof(T));
}

// Strided form: blockLen, srcStride and dstStride in 32-byte blocks on both sides.
template <typename T>
void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const DataCopyParams &p) {
    dst.CheckAligned("DataCopy(GM->UB, params)");
    host_model::CountDma(host_model::Dma::GmToUb, p.blockCount, uint64_t(p.blockCount) * p.blockLen * host_model::kBlockBytes);
    const uint64_t blk = host_model::kBlockBytes / sizeof(T);
    for (uint32_t b = 0; b < p.blockCount; ++b) {
        uint64_t s = b * (p.blockLen + p.srcStride) * blk, d = b * (p.blockLen + p.dstStride) * blk;
        src.Check(s, p.blockLen * blk, "DataCopy(GM->UB, params) source");
        dst.CheckRange(d, p.blockLen * blk, "DataCopy(GM->UB, params) destination");
        std::memcpy(dst.Data() + d, src.GetPhyAddr() + s, p.blockLen * host_model::kBlockBytes);
    }
}

template <typename T>
void DataCopy(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyParams &p) {
    src.CheckAligned("DataCopy(UB->GM, params)");
    host_model::CountDma(host_model::Dma::UbToGm, p.blockCount, uint64_t(p.blockCount) * p.blockLen * host_model::kBlockBytes);
    const uint64_t blk = host_model::kBlockBytes / sizeof(T);
    for (uint32_t b = 0; b < p.blockCount; ++b) {
        uint64_t s = b * (p.blockLen + p.srcStride) * blk, d = b * (p.blockLen + p.dstStride) * blk;
        src.CheckRange(s, p.blockLen * blk, "DataCopy(UB->GM, params) source");
        dst.Check(d, p.blockLen * blk, "DataCopy(UB->GM, params) destination");
        std::memcpy(dst.GetPhyAddr() + d, src.Data() + s, p.blockLen * host_model::kBlockBytes);
    }
}

// ---- DataCopyPad: byte-granular lengths; GM strides in bytes, UB strides in 32-byte blocks ----
template <typename T>
void DataCopyPad(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const DataCopyExtParams &p,
                 const DataCopyPadExtParams<T> &pad) {
    host_model::PadCopyIn(dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride, pad.isPad, pad.leftPadding,
                          pad.rightPadding, pad.paddingValue);
}

template <typename T>
void DataCopyPad(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const DataCopyParams &p,
                 const DataCopyPadParams &pad) {
    T value;
    uint64_t raw = pad.paddingValue;
    std::memcpy(&value, &raw, sizeof(T));
    host_model::PadCopyIn(dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride, pad.isPad, pad.leftPadding,
                          pad.rightPadding, value);
}

template <typename T>
void DataCopyPad(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyExtParams &p) {
    host_model::PadCopyOut(dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride);
}

template <typename T>
void DataCopyPad(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyParams &p) {
    host_model::PadCopyOut(dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride);
}

}  // namespace AscendC
