// Host model: GlobalTensor (GM views) and LocalTensor (views into one Unified Buffer allocation).
#pragma once

#include "hm_core.h"

namespace AscendC {

enum class TPosition : uint8_t { GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM = VECCALC, MAX };
using QuePosition = TPosition;

template <typename T>
class GlobalTensor {
public:
    GlobalTensor() = default;

    void SetGlobalBuffer(__gm__ T *buffer, uint64_t bufferSize) {
        data_ = buffer;
        size_ = bufferSize;
        sized_ = true;
    }
    void SetGlobalBuffer(__gm__ T *buffer) {
        data_ = buffer;
        size_ = 0;
        sized_ = false;
    }

    T GetValue(uint64_t offset) const {
        Check(offset, 1, "GlobalTensor::GetValue");
        host_model::GetState().counters.scalarGmReads += 1;
        return data_[offset];
    }
    void SetValue(uint64_t offset, T value) {
        Check(offset, 1, "GlobalTensor::SetValue");
        host_model::GetState().counters.scalarGmWrites += 1;
        data_[offset] = value;
    }
    GlobalTensor operator[](uint64_t offset) const {
        GlobalTensor view;
        view.data_ = data_ + offset;
        view.sized_ = sized_;
        view.size_ = sized_ ? (offset <= size_ ? size_ - offset : 0) : 0;
        return view;
    }
    __gm__ T *GetPhyAddr() const { return data_; }
    __gm__ T *GetPhyAddr(uint64_t offset) const { return data_ + offset; }
    uint64_t GetSize() const { return size_; }

    // Host-model internal: validate an access of `count` elements at `offset`.
    void Check(uint64_t offset, uint64_t count, const char *what) const {
        host_model::Require(data_ != nullptr, std::string(what) + ": GlobalTensor has no buffer (SetGlobalBuffer)");
        if (sized_ && offset + count > size_) {
            std::ostringstream os;
            os << what << ": elements [" << offset << ", " << offset + count << ") past the buffer size " << size_
               << " given to SetGlobalBuffer";
            host_model::Fail(os.str());
        }
        host_model::CheckGm(data_ + offset, count * sizeof(T), what);
    }

private:
    __gm__ T *data_ = nullptr;
    uint64_t size_ = 0;
    bool sized_ = false;
};

namespace host_model {
// One buffer of a TQue/TBuf inside the Unified Buffer arena of a TPipe.
struct UbBuffer {
    uint8_t *ubBase = nullptr;  // start of the UB arena
    uint32_t offset = 0;        // byte offset of this buffer from the UB start (32-byte aligned)
    uint32_t bytes = 0;         // capacity in bytes
    TPosition pos = TPosition::VECCALC;
    bool allocated = false;
    bool queued = false;
};
}  // namespace host_model

template <typename T>
class LocalTensor {
public:
    LocalTensor() = default;

    T GetValue(uint32_t index) const {
        CheckRange(index, 1, "LocalTensor::GetValue");
        host_model::GetState().counters.scalarUbReads += 1;
        return Data()[index];
    }
    void SetValue(uint32_t index, T value) const {
        CheckRange(index, 1, "LocalTensor::SetValue");
        host_model::GetState().counters.scalarUbWrites += 1;
        Data()[index] = value;
    }
    LocalTensor operator[](uint32_t offset) const {
        CheckRange(offset, 0, "LocalTensor::operator[]");
        LocalTensor view = *this;
        view.byteOffset_ += offset * sizeof(T);
        view.size_ = size_ - offset;
        return view;
    }
    uint32_t GetSize() const { return size_; }
    uint64_t GetPhyAddr() const { return byteOffset_; }
    TPosition GetPosition() const { return buffer_ ? buffer_->pos : TPosition::MAX; }

    template <typename U>
    LocalTensor<U> ReinterpretCast() const {
        LocalTensor<U> out;
        out.buffer_ = buffer_;
        out.byteOffset_ = byteOffset_;
        out.size_ = static_cast<uint32_t>(static_cast<uint64_t>(size_) * sizeof(T) / sizeof(U));
        return out;
    }

    // ---- host-model internals (not AscendC API) ----
    T *Data() const {
        host_model::Require(buffer_ != nullptr, "LocalTensor used before it was allocated from a TQue/TBuf");
        return reinterpret_cast<T *>(buffer_->ubBase + byteOffset_);
    }
    void CheckRange(uint64_t index, uint64_t count, const char *what) const {
        host_model::Require(buffer_ != nullptr, std::string(what) + ": LocalTensor was never allocated");
        if (index + count > size_) {
            std::ostringstream os;
            os << what << ": elements [" << index << ", " << index + count << ") past the tensor's " << size_
               << " elements (its UB buffer holds " << buffer_->bytes << " bytes)";
            host_model::Fail(os.str());
        }
    }
    // Vector instructions and DataCopy need 32-byte aligned UB operands.
    void CheckAligned(const char *what) const {
        if (byteOffset_ % host_model::kBlockBytes != 0) {
            std::ostringstream os;
            os << what << ": UB operand at byte offset " << byteOffset_ << " is not 32-byte aligned";
            host_model::Fail(os.str());
        }
    }
    host_model::UbBuffer *Buffer() const { return buffer_; }

    host_model::UbBuffer *buffer_ = nullptr;
    uint32_t byteOffset_ = 0;  // from the UB start
    uint32_t size_ = 0;        // elements
};

}  // namespace AscendC
