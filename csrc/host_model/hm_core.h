// Host model of the AscendC kernel API: core definitions (qualifiers, scalar types, errors, GM registry, the
// per-launch configuration). See docs/host_model.md for what is modelled and what is not.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// Kernel-side qualifiers of the AscendC dialect become plain C++ on the host.
#define __aicore__
#define __global__
#define __gm__
#define __ubuf__
#ifndef GM_ADDR
#define GM_ADDR uint8_t *
#endif

// The host model compiles the AI Core vector path of an A2/A3-class chip (dav-c220).
#ifndef __CCE_AICORE__
#define __CCE_AICORE__ 220
#endif

using half = _Float16;

// bfloat16 as the chip stores it: the top 16 bits of an fp32, rounded to nearest even on conversion.
struct bfloat16_t {
    uint16_t bits = 0;
    bfloat16_t() = default;
    bfloat16_t(float value) { bits = FromFloat(value); }  // NOLINT: implicit like the device type
    operator float() const {
        uint32_t u = static_cast<uint32_t>(bits) << 16;
        float f;
        std::memcpy(&f, &u, sizeof(f));
        return f;
    }
    static uint16_t FromFloat(float value) {
        uint32_t u;
        std::memcpy(&u, &value, sizeof(u));
        if (std::isnan(value)) return static_cast<uint16_t>((u >> 16) | 0x40);
        uint32_t rounding = 0x7FFF + ((u >> 16) & 1);
        return static_cast<uint16_t>((u + rounding) >> 16);
    }
};

namespace AscendC {

// A kernel broke a rule the chip enforces (or would corrupt memory on it). Raised inside a block, reported by
// the launcher with the block index; the Python side turns it into a RuntimeError.
class HostModelError : public std::runtime_error {
public:
    explicit HostModelError(const std::string &what) : std::runtime_error(what) {}
};

namespace host_model {

constexpr uint32_t kBlockBytes = 32;     // DataCopy / UB operand granularity ("dataBlock")
constexpr uint32_t kRepeatBytes = 256;   // one vector repeat
// dav-c220 (A2/A3), asc-devkit impl/basic_api/utils/kernel_utils_constants.h: TOTAL_UB_SIZE = 192 KiB of
// physical UB; TMP_UB_OFFSET = 184 KiB, where API calls that need a scratch (Select in tensor-scalar and
// tensor-tensor mode: one 32-byte block) write it. TOTAL_VEC_LOCAL_SIZE = 184 KiB is what a kernel calling them
// may use.
constexpr uint64_t kPhysicalUbBytes = 192 * 1024;
constexpr uint64_t kTmpUbOffset = 184 * 1024;
constexpr int32_t kQueMaxEvent = 8;  // event ids per HardEvent (kernel_macros.h QUE_MAX_EVENT)

struct GmRegion {
    uintptr_t begin;
    uintptr_t end;
};

// What the kernels of one host entry call issued (ascend_spec_hm_configure resets it), summed over their blocks
// (instruction accounting; no timing). The order is the
// order ascend_spec_hm_counters() writes and ascend_spec/ascendc/host_model.py's COUNTERS names.
struct Counters {
    int64_t vectorInstructions = 0;  // one per vector API call (count forms: one instruction)
    int64_t vectorRepeats = 0;       // 256-byte repeats those instructions cover
    int64_t scalarUbReads = 0;       // LocalTensor::GetValue
    int64_t scalarUbWrites = 0;      // LocalTensor::SetValue
    int64_t scalarGmReads = 0;       // GlobalTensor::GetValue
    int64_t scalarGmWrites = 0;      // GlobalTensor::SetValue
    int64_t mte2Bursts = 0;          // GM -> UB DMA blocks (DataCopy / DataCopyPad blockCount)
    int64_t mte2Bytes = 0;
    int64_t mte3Bursts = 0;          // UB -> GM
    int64_t mte3Bytes = 0;
    int64_t ubCopyBursts = 0;        // UB -> UB DataCopy
    int64_t ubCopyBytes = 0;
    int64_t blocks = 0;
};
constexpr int kCounterFields = 13;

// Per-library state; the launcher is single-threaded (blocks run one after another).
struct State {
    // UB a tiling may carve: what GetCoreMemSize(UB) reports on the SoC (196352 on 910B and 910_93: the
    // physical 192 KiB less the 256-byte kfc reserve, asc-devkit platform_ascendc.cpp LOCAL_RESERV_SIZE).
    uint64_t ubBytes = kPhysicalUbBytes - 256;
    bool reverseBlocks = false;     // run blocks last-to-first to expose order dependence
    std::vector<GmRegion> gm;       // every GM buffer the launch may touch
    int64_t blockIdx = 0;
    int64_t blockNum = 1;
    Counters counters;              // since the last ascend_spec_hm_configure
    std::string deferredError;      // errors found in destructors (cannot throw there)
    std::string lastError;
};

inline State &GetState() {
    static State state;
    return state;
}

[[noreturn]] inline void Fail(const std::string &msg) { throw HostModelError(msg); }

inline void Require(bool ok, const std::string &msg) {
    if (!ok) Fail(msg);
}

// Every GM access must lie inside a registered tensor: a kernel that would write (or read) a slot it does not
// own fails here instead of corrupting a neighbour's memory on the chip.
inline void CheckGm(const void *ptr, uint64_t bytes, const char *what) {
    const State &s = GetState();
    if (s.gm.empty() || bytes == 0) return;
    auto begin = reinterpret_cast<uintptr_t>(ptr);
    for (const GmRegion &r : s.gm) {
        if (begin >= r.begin && begin + bytes <= r.end) return;
    }
    std::ostringstream os;
    os << what << ": " << bytes << " bytes at GM address 0x" << std::hex << begin
       << " fall outside every tensor passed to the kernel";
    Fail(os.str());
}

inline uint64_t AlignUp(uint64_t value, uint64_t align) { return (value + align - 1) / align * align; }

// A count-form vector call over `bytes` of its widest operand: the API issues it as instructions of at most 255
// repeats (the 8-bit repeat field), so one call over more than 255 x 256 bytes counts as several.
inline void CountVector(uint64_t bytes) {
    Counters &c = GetState().counters;
    const int64_t repeats = static_cast<int64_t>((bytes + kRepeatBytes - 1) / kRepeatBytes);
    c.vectorInstructions += repeats > 255 ? (repeats + 254) / 255 : 1;
    c.vectorRepeats += repeats;
}

// One repeat-form (level-0) vector instruction of `repeats` repeats.
inline void CountVectorRepeats(uint64_t repeats) {
    Counters &c = GetState().counters;
    c.vectorInstructions += 1;
    c.vectorRepeats += static_cast<int64_t>(repeats);
}
enum class Dma { GmToUb, UbToGm, UbToUb };
inline void CountDma(Dma dir, uint64_t bursts, uint64_t bytes) {
    Counters &c = GetState().counters;
    int64_t &n = dir == Dma::GmToUb ? c.mte2Bursts : dir == Dma::UbToGm ? c.mte3Bursts : c.ubCopyBursts;
    int64_t &b = dir == Dma::GmToUb ? c.mte2Bytes : dir == Dma::UbToGm ? c.mte3Bytes : c.ubCopyBytes;
    n += static_cast<int64_t>(bursts);
    b += static_cast<int64_t>(bytes);
}

}  // namespace host_model

inline int64_t GetBlockIdx() { return host_model::GetState().blockIdx; }
inline int64_t GetBlockNum() { return host_model::GetState().blockNum; }

}  // namespace AscendC
