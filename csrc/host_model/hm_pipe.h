// Host model: TPipe (Unified Buffer allocation), TQue (Alloc/EnQue/DeQue/Free discipline), TBuf, and the
// synchronisation primitives (events, barriers), which are checked for pairing but have no timing.
#pragma once

#include <algorithm>
#include <deque>
#include <map>
#include <memory>

#include "hm_tensor.h"

enum pipe_t { PIPE_S, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL };
using event_t = int32_t;
enum EventID : int32_t { EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };

namespace AscendC {

enum class HardEvent : uint8_t {
    MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V, MTE3_MTE1, MTE1_MTE3,
    MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S,
    MTE2_FIX, FIX_MTE2, FIX_S, M_S, FIX_MTE3, MAX
};

class TPipe;

namespace host_model {
inline TPipe *&CurrentPipe() {
    static TPipe *pipe = nullptr;
    return pipe;
}
inline void Defer(const std::string &msg) {
    State &s = GetState();
    if (s.deferredError.empty()) s.deferredError = msg;
}
}  // namespace host_model

template <TPosition POS, int32_t DEPTH>
class TQue;
template <TPosition POS>
class TBuf;

class TPipe {
public:
    // The arena is the physical UB (larger when a test configures a bigger SoC); carving stops at limit_.
    TPipe()
        : ub_(std::max<uint64_t>(host_model::kPhysicalUbBytes, host_model::GetState().ubBytes), 0xCD),
          limit_(host_model::GetState().ubBytes) {
        host_model::CurrentPipe() = this;
    }
    ~TPipe() {
        CheckBalanced();
        if (host_model::CurrentPipe() == this) host_model::CurrentPipe() = nullptr;
    }
    TPipe(const TPipe &) = delete;
    TPipe &operator=(const TPipe &) = delete;

    template <TPosition POS, int32_t DEPTH>
    bool InitBuffer(TQue<POS, DEPTH> &que, uint8_t num, uint32_t len);
    template <TPosition POS>
    bool InitBuffer(TBuf<POS> &buf, uint32_t len);

    // One pool of kQueMaxEvent ids per HardEvent (asc-devkit kernel_tpipe_impl.h): FetchEventID returns the
    // lowest id AllocEventID has not reserved, without reserving it.
    event_t FetchEventID(HardEvent evt) {
        const uint32_t occupied = pools_[static_cast<int>(evt)];
        for (int32_t id = 0; id < host_model::kQueMaxEvent; ++id) {
            if (!(occupied & (1u << id))) return id;
        }
        host_model::Fail("FetchEventID: all event ids of this HardEvent are allocated (ReleaseEventID missing)");
    }
    template <HardEvent EVT>
    event_t FetchEventID() {
        return FetchEventID(EVT);
    }
    template <HardEvent EVT>
    event_t AllocEventID() {
        event_t id = FetchEventID(EVT);
        pools_[static_cast<int>(EVT)] |= 1u << id;
        return id;
    }
    template <HardEvent EVT>
    void ReleaseEventID(event_t id) {
        host_model::Require(id >= 0 && id < host_model::kQueMaxEvent, "ReleaseEventID: id out of range");
        host_model::Require(pools_[static_cast<int>(EVT)] & (1u << id), "ReleaseEventID of an id not allocated");
        pools_[static_cast<int>(EVT)] &= ~(1u << id);
    }
    void Reset() {
        CheckBalanced();
        buffers_.clear();
        used_ = 0;
    }
    void Destroy() { Reset(); }

    // ---- host-model internals ----
    host_model::UbBuffer *Carve(uint32_t len, TPosition pos, const char *what) {
        host_model::Require(len > 0, std::string(what) + ": buffer length must be > 0");
        uint64_t start = host_model::AlignUp(used_, host_model::kBlockBytes);
        uint64_t end = start + host_model::AlignUp(len, host_model::kBlockBytes);
        if (end > limit_) {
            std::ostringstream os;
            os << what << ": Unified Buffer overflow: needs " << end << " bytes in total but GetCoreMemSize(UB) "
               << "gives " << limit_ << " on this SoC (the tiling must fit it)";
            host_model::Fail(os.str());
        }
        used_ = end;
        auto buf = std::make_unique<host_model::UbBuffer>();
        buf->ubBase = ub_.data();
        buf->offset = static_cast<uint32_t>(start);
        buf->bytes = len;
        buf->pos = pos;
        buffers_.push_back(std::move(buf));
        return buffers_.back().get();
    }
    uint64_t UsedBytes() const { return used_; }
    // The carved buffer overlapping UB bytes [begin, end), or nullptr.
    const host_model::UbBuffer *Overlapping(uint64_t begin, uint64_t end) const {
        for (const auto &buf : buffers_) {
            const uint64_t b0 = buf->offset, b1 = b0 + host_model::AlignUp(buf->bytes, host_model::kBlockBytes);
            if (b0 < end && begin < b1) return buf.get();
        }
        return nullptr;
    }
    uint8_t *UbBase() { return ub_.data(); }
    void SetFlagImpl(HardEvent evt, event_t id) {
        host_model::Require(id >= 0 && id < host_model::kQueMaxEvent,
                            "SetFlag: event id " + std::to_string(id) + " outside the HardEvent's 8 ids");
        int &n = flags_[{static_cast<int>(evt), id}];
        if (n > 0) {
            host_model::Fail("SetFlag twice on one (HardEvent, event id) before its WaitFlag: the second "
                             "signal is lost on the chip (use another id or wait first)");
        }
        n += 1;
    }
    void WaitFlagImpl(HardEvent evt, event_t id) {
        int &n = flags_[{static_cast<int>(evt), id}];
        if (n <= 0) host_model::Fail("WaitFlag on an event that was never SetFlag'ed (the pipe would hang)");
        n -= 1;
    }

private:
    void CheckBalanced() {
        for (const auto &buf : buffers_) {
            if (buf->allocated || buf->queued) {
                host_model::Defer("TQue buffer still allocated or queued when the pipe ended: every AllocTensor "
                                  "needs EnQue/DeQue and a FreeTensor");
            }
        }
        for (const auto &[key, n] : flags_) {
            if (n != 0) host_model::Defer("SetFlag without a matching WaitFlag when the pipe ended");
        }
    }

    std::vector<uint8_t> ub_;  // the physical UB; carving stops at limit_
    uint64_t limit_;
    uint64_t used_ = 0;
    std::vector<std::unique_ptr<host_model::UbBuffer>> buffers_;
    std::map<std::pair<int, event_t>, int> flags_;
    uint32_t pools_[static_cast<int>(HardEvent::MAX)] = {};
};

inline TPipe *GetTPipePtr() { return host_model::CurrentPipe(); }

template <TPosition POS, int32_t DEPTH = 1>
class TQue {
public:
    template <typename T>
    LocalTensor<T> AllocTensor() {
        Require(!buffers_.empty(), "AllocTensor on a TQue that InitBuffer never set up");
        for (host_model::UbBuffer *buf : buffers_) {
            if (!buf->allocated && !buf->queued) {
                buf->allocated = true;
                return Wrap<T>(buf);
            }
        }
        host_model::Fail("AllocTensor: all " + std::to_string(buffers_.size()) +
                         " buffers of this TQue are in use (a FreeTensor is missing)");
    }
    template <typename T>
    bool EnQue(const LocalTensor<T> &tensor) {
        host_model::UbBuffer *buf = Own(tensor, "EnQue");
        Require(buf->allocated && !buf->queued, "EnQue of a tensor that is not freshly allocated from this TQue");
        Require(static_cast<int32_t>(fifo_.size()) < DEPTH, "EnQue past the TQue depth");
        buf->queued = true;
        fifo_.push_back(buf);
        return true;
    }
    template <typename T>
    LocalTensor<T> DeQue() {
        Require(!fifo_.empty(), "DeQue on an empty TQue (no matching EnQue): the pipe would hang");
        host_model::UbBuffer *buf = fifo_.front();
        fifo_.pop_front();
        buf->queued = false;
        return Wrap<T>(buf);
    }
    template <typename T>
    void FreeTensor(LocalTensor<T> &tensor) {
        host_model::UbBuffer *buf = Own(tensor, "FreeTensor");
        Require(buf->allocated, "FreeTensor of a tensor that is not allocated (double free?)");
        Require(!buf->queued, "FreeTensor of a tensor still in the queue (DeQue it first)");
        buf->allocated = false;
    }

    // ---- host-model internals ----
    void Attach(host_model::UbBuffer *buf) { buffers_.push_back(buf); }

private:
    static void Require(bool ok, const std::string &msg) { host_model::Require(ok, "TQue: " + msg); }
    template <typename T>
    static LocalTensor<T> Wrap(host_model::UbBuffer *buf) {
        LocalTensor<T> t;
        t.buffer_ = buf;
        t.byteOffset_ = buf->offset;
        t.size_ = buf->bytes / sizeof(T);
        return t;
    }
    template <typename T>
    host_model::UbBuffer *Own(const LocalTensor<T> &tensor, const char *what) {
        for (host_model::UbBuffer *buf : buffers_) {
            if (buf == tensor.Buffer() && tensor.byteOffset_ == buf->offset) return buf;
        }
        host_model::Fail(std::string("TQue: ") + what + " of a tensor that this TQue did not allocate");
    }
    std::vector<host_model::UbBuffer *> buffers_;
    std::deque<host_model::UbBuffer *> fifo_;
};

template <TPosition POS = TPosition::VECCALC>
class TBuf {
public:
    // Non-const as in CANN (kernel_tpipe.h): a kernel calling Get on a const TBuf does not compile there.
    template <typename T>
    LocalTensor<T> Get() {
        host_model::Require(buf_ != nullptr, "TBuf::Get before InitBuffer");
        return Get<T>(buf_->bytes / sizeof(T));
    }
    template <typename T>
    LocalTensor<T> Get(uint32_t len) {
        host_model::Require(buf_ != nullptr, "TBuf::Get before InitBuffer");
        host_model::Require(len * sizeof(T) <= buf_->bytes, "TBuf::Get(len) larger than the buffer");
        LocalTensor<T> t;
        t.buffer_ = buf_;
        t.byteOffset_ = buf_->offset;
        t.size_ = len;
        return t;
    }
    void Attach(host_model::UbBuffer *buf) { buf_ = buf; }

private:
    host_model::UbBuffer *buf_ = nullptr;
};

template <TPosition POS, int32_t DEPTH>
bool TPipe::InitBuffer(TQue<POS, DEPTH> &que, uint8_t num, uint32_t len) {
    host_model::Require(num >= 1, "TPipe::InitBuffer(TQue): num must be >= 1");
    for (uint8_t i = 0; i < num; ++i) que.Attach(Carve(len, POS, "TPipe::InitBuffer(TQue)"));
    return true;
}

template <TPosition POS>
bool TPipe::InitBuffer(TBuf<POS> &buf, uint32_t len) {
    buf.Attach(Carve(len, POS, "TPipe::InitBuffer(TBuf)"));
    return true;
}

template <HardEvent EVT>
inline void SetFlag(event_t id) {
    host_model::Require(GetTPipePtr() != nullptr, "SetFlag outside a TPipe's lifetime");
    GetTPipePtr()->SetFlagImpl(EVT, id);
}

template <HardEvent EVT>
inline void WaitFlag(event_t id) {
    host_model::Require(GetTPipePtr() != nullptr, "WaitFlag outside a TPipe's lifetime");
    GetTPipePtr()->WaitFlagImpl(EVT, id);
}

template <pipe_t PIPE>
inline void PipeBarrier() {}

}  // namespace AscendC
