// allocate_verify_budget: admit the T best (request, position) draft slots of survival [B, K] and emit per-request
// counts, query lengths, offsets and the flat gather index, without any host read. Semantics (order, ties,
// out-of-contract clamps): ascend_spec/ops/allocate_verify_budget/; the reference there is the oracle.
//
// One vector core (the selection is global; B*K is a few thousand slots):
// 1. survival and capacities -> UB; the scalar unit turns each row into keys: NaN -> 0, clamp to [0, 1], running
//    minimum along K, -1 for positions >= capacity (below every real key), and counts the E eligible slots.
//    T = min(clamp(budget, 0, max_budget), E); the budget is a GM scalar when it is a device tensor.
//    A key is stored as the float whose bits are bits(v) + bits(FLT_MIN): non-negative floats order like their
//    bits, so the map keeps the order of [0, 1] and lands in the normal floats [FLT_MIN, 2], and no vector
//    compare ever sees a subnormal (the vector unit's denormal handling is undocumented).
// 2. 32 bisection steps over the key bit patterns [bits(FLT_MIN), bits(2.0f)] find the T-th best key t: each
//    step is CompareScalar(GE) -> Select(1, 0) -> ReduceSum on the vector unit.
// 3. the scalar unit admits key > t, and key == t while fewer than T - #{key > t} equal keys were seen in flat
//    (request, position) order, writing counts, offsets and indices into UB tiles that leave by DataCopyPad.
#include "allocate_verify_budget_tiling.h"
#include "kernel_operator.h"
#include "kernel_utils.h"

namespace {

using namespace ascend_spec::kernel;  // kernel_utils.h

__aicore__ inline float BitsToFloat(uint32_t bits) {
    union {
        uint32_t u;
        float f;
    } v;
    v.u = bits;
    return v.f;
}

__aicore__ inline uint32_t FloatToBits(float f) {
    union {
        float f;
        uint32_t u;
    } v;
    v.f = f;
    return v.u;
}

constexpr uint32_t kKeyShift = 0x00800000u;               // bits(FLT_MIN): survival 0 -> the smallest normal
constexpr uint32_t kOneBits = 0x3F800000u + kKeyShift;    // survival 1.0f -> 2.0f, the largest key

class AllocateVerifyBudget {
public:
    __aicore__ inline AllocateVerifyBudget() {}

    __aicore__ inline void Init(GM_ADDR survival, GM_ADDR capacities, GM_ADDR budget, GM_ADDR numDrafts,
                                GM_ADDR queryLens, GM_ADDR queryStartLoc, GM_ADDR draftIndex,
                                const AllocateBudgetTiling &tiling, AscendC::TPipe *pipe) {
        t_ = tiling;
        surv_.SetGlobalBuffer((__gm__ float *)survival, t_.slots);
        if (t_.hasCap) caps_.SetGlobalBuffer((__gm__ int32_t *)capacities, t_.numReqs);
        if (t_.budgetInMemory) budget_.SetGlobalBuffer((__gm__ int64_t *)budget, 1);
        numDrafts_.SetGlobalBuffer((__gm__ int32_t *)numDrafts, t_.numReqs);
        queryLens_.SetGlobalBuffer((__gm__ int32_t *)queryLens, t_.numReqs);
        qsl_.SetGlobalBuffer((__gm__ int32_t *)queryStartLoc, t_.numReqs + 1);
        if (t_.indexLen > 0) index_.SetGlobalBuffer((__gm__ int32_t *)draftIndex, t_.indexLen);
        const uint32_t slotBytes = static_cast<uint32_t>(t_.slotsPad * 4);
        pipe->InitBuffer(keysBuf_, slotBytes);
        pipe->InitBuffer(indBuf_, slotBytes);
        pipe->InitBuffer(tmpBuf_, static_cast<uint32_t>(t_.tmpLen * 4));
        pipe->InitBuffer(redBuf_, 32);
        pipe->InitBuffer(maskBuf_, static_cast<uint32_t>(t_.slotsPad / 8));
        const uint32_t reqBytes = static_cast<uint32_t>(t_.reqPad * 4);
        pipe->InitBuffer(capBuf_, reqBytes);
        pipe->InitBuffer(nBuf_, reqBytes);
        pipe->InitBuffer(qlBuf_, reqBytes);
        pipe->InitBuffer(qslBuf_, reqBytes);
        pipe->InitBuffer(idxBuf_, static_cast<uint32_t>(t_.indexPad * 4));
        keys_ = keysBuf_.Get<float>();
        ind_ = indBuf_.Get<float>();
        tmp_ = tmpBuf_.Get<float>();
        red_ = redBuf_.Get<float>();
        mask_ = maskBuf_.Get<uint8_t>();
    }

    __aicore__ inline void Process() {
        if (AscendC::GetBlockIdx() != 0) return;
        const int64_t eligible = LoadKeys();
        int64_t budget = t_.budgetInMemory ? budget_.GetValue(0) : t_.budgetValue;
        if (budget < 0) budget = 0;
        if (budget > t_.maxBudget) budget = t_.maxBudget;
        if (budget > eligible) budget = eligible;
        Sync<AscendC::HardEvent::S_V>();  // keys written by the scalar unit feed the vector unit
        // invariant: #{key >= lo} >= budget (lo = the key of survival 0 counts every eligible slot)
        int64_t lo = kKeyShift, hi = kOneBits;
        for (int32_t step = 0; step < 32; ++step) {
            const int64_t mid = lo + (hi - lo + 1) / 2;
            if (Count(AscendC::CMPMODE::GE, BitsToFloat(static_cast<uint32_t>(mid))) >= budget) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        const float thr = BitsToFloat(static_cast<uint32_t>(lo));
        const int64_t needEq = budget - Count(AscendC::CMPMODE::GT, thr);
        Admit(thr, needEq);
    }

private:
    __aicore__ inline int64_t LoadKeys() {
        AscendC::DataCopyExtParams params{1, static_cast<uint32_t>(t_.slots * 4), 0, 0, 0};
        AscendC::DataCopyPad(keys_, surv_, params, AscendC::DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
        AscendC::LocalTensor<int32_t> cap = capBuf_.Get<int32_t>();
        if (t_.hasCap) {
            AscendC::DataCopyExtParams cp{1, static_cast<uint32_t>(t_.numReqs * 4), 0, 0, 0};
            AscendC::DataCopyPad(cap, caps_, cp, AscendC::DataCopyPadExtParams<int32_t>{false, 0, 0, 0});
        }
        Sync<AscendC::HardEvent::MTE2_S>();
        const int64_t k = t_.numPos;
        int64_t eligible = 0;
        for (int64_t b = 0; b < t_.numReqs; ++b) {
            int64_t c = t_.hasCap ? cap.GetValue(static_cast<uint32_t>(b)) : k;
            c = c < 0 ? 0 : (c > k ? k : c);
            eligible += c;
            float run = 1.0f;
            for (int64_t j = 0; j < k; ++j) {
                const uint32_t i = static_cast<uint32_t>(b * k + j);
                float v = keys_.GetValue(i);
                if (!(v > 0.0f)) v = 0.0f;  // NaN, negatives and -0.0 -> +0.0
                if (v > 1.0f) v = 1.0f;
                if (v < run) run = v;
                keys_.SetValue(i, j < c ? BitsToFloat(FloatToBits(run) + kKeyShift) : -1.0f);
            }
        }
        for (int64_t i = t_.slots; i < t_.slotsPad; ++i) keys_.SetValue(static_cast<uint32_t>(i), -1.0f);
        return eligible;
    }

    // #{slots whose key compares `mode` against x}, on the vector unit.
    __aicore__ inline int64_t Count(AscendC::CMPMODE mode, float x) {
        const uint32_t n = static_cast<uint32_t>(t_.slotsPad);
        AscendC::CompareScalar(mask_, keys_, x, mode, n);
        AscendC::Duplicate(ind_, 1.0f, static_cast<int32_t>(n));
        AscendC::Select(ind_, mask_, ind_, 0.0f, AscendC::SELMODE::VSEL_TENSOR_SCALAR_MODE, n);
        AscendC::ReduceSum(red_, ind_, tmp_, static_cast<int32_t>(n));  // exact: integers < 2^24
        Sync<AscendC::HardEvent::V_S>();
        return static_cast<int64_t>(red_.GetValue(0));
    }

    __aicore__ inline void Admit(float thr, int64_t needEq) {
        AscendC::LocalTensor<int32_t> nUb = nBuf_.Get<int32_t>();
        AscendC::LocalTensor<int32_t> qlUb = qlBuf_.Get<int32_t>();
        AscendC::LocalTensor<int32_t> qslUb = qslBuf_.Get<int32_t>();
        AscendC::LocalTensor<int32_t> idxUb = idxBuf_.Get<int32_t>();
        AscendC::Duplicate(idxUb, static_cast<int32_t>(-1), static_cast<int32_t>(t_.indexPad));
        Sync<AscendC::HardEvent::V_S>();
        const int64_t k = t_.numPos;
        int64_t eqSeen = 0, before = 0;
        qslUb.SetValue(0, 0);
        for (int64_t b = 0; b < t_.numReqs; ++b) {
            int64_t n = 0;
            for (int64_t j = 0; j < k; ++j) {
                const float v = keys_.GetValue(static_cast<uint32_t>(b * k + j));
                bool admit = v > thr;
                if (v == thr) {
                    admit = eqSeen < needEq;
                    ++eqSeen;
                }
                if (admit) {  // admitted slots of a row are a prefix, so position j lands at before + j
                    idxUb.SetValue(static_cast<uint32_t>(before + n), static_cast<int32_t>(b * k + j));
                    ++n;
                }
            }
            nUb.SetValue(static_cast<uint32_t>(b), static_cast<int32_t>(n));
            qlUb.SetValue(static_cast<uint32_t>(b), static_cast<int32_t>(n + 1));
            before += n;
            qslUb.SetValue(static_cast<uint32_t>(b + 1), static_cast<int32_t>(before + b + 1));
        }
        Sync<AscendC::HardEvent::S_MTE3>();
        const uint32_t reqBytes = static_cast<uint32_t>(t_.numReqs * 4);
        AscendC::DataCopyPad(numDrafts_, nUb, AscendC::DataCopyExtParams{1, reqBytes, 0, 0, 0});
        AscendC::DataCopyPad(queryLens_, qlUb, AscendC::DataCopyExtParams{1, reqBytes, 0, 0, 0});
        AscendC::DataCopyPad(qsl_, qslUb, AscendC::DataCopyExtParams{1, reqBytes + 4, 0, 0, 0});
        if (t_.indexLen > 0) {
            const uint32_t idxBytes = static_cast<uint32_t>(t_.indexLen * 4);
            AscendC::DataCopyPad(index_, idxUb, AscendC::DataCopyExtParams{1, idxBytes, 0, 0, 0});
        }
        Sync<AscendC::HardEvent::MTE3_S>();
    }

    AllocateBudgetTiling t_;
    AscendC::GlobalTensor<float> surv_;
    AscendC::GlobalTensor<int32_t> caps_, numDrafts_, queryLens_, qsl_, index_;
    AscendC::GlobalTensor<int64_t> budget_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> keysBuf_, indBuf_, tmpBuf_, redBuf_, maskBuf_, capBuf_, nBuf_,
        qlBuf_, qslBuf_, idxBuf_;
    AscendC::LocalTensor<float> keys_, ind_, tmp_, red_;
    AscendC::LocalTensor<uint8_t> mask_;
};

}  // namespace

extern "C" __global__ __aicore__ void allocate_verify_budget(GM_ADDR survival, GM_ADDR capacities, GM_ADDR budget,
                                                             GM_ADDR numDrafts, GM_ADDR queryLens,
                                                             GM_ADDR queryStartLoc, GM_ADDR draftIndex,
                                                             AllocateBudgetTiling tiling) {
    AscendC::TPipe pipe;
    AllocateVerifyBudget op;
    op.Init(survival, capacities, budget, numDrafts, queryLens, queryStartLoc, draftIndex, tiling, &pipe);
    op.Process();
}

// Host-side launch: `<<<>>>` on the NPU; the host model's launcher on the CPU. Both take the same
// AllocateVerifyBudgetArgs and compute the same tiling from it.
#define ALLOCATE_BUDGET_GM(a)                                                                                    \
    (GM_ADDR)(a).survival, (GM_ADDR)(a).capacities, (GM_ADDR)(a).budget, (GM_ADDR)(a).numDrafts,               \
        (GM_ADDR)(a).queryLens, (GM_ADDR)(a).queryStartLoc, (GM_ADDR)(a).draftIndex

#ifdef ASCEND_SPEC_HOST_MODEL
extern "C" uint64_t allocate_verify_budget_args_bytes() { return sizeof(AllocateVerifyBudgetArgs); }

extern "C" int allocate_verify_budget_host(uint32_t vectorCores, const AllocateVerifyBudgetArgs *args) {
    (void)vectorCores;
    AllocateBudgetTiling tiling = ascend_spec::ComputeAllocateBudgetTiling(*args);
    return AscendC::host_model::Launch(tiling.blockDim, allocate_verify_budget, ALLOCATE_BUDGET_GM(*args), tiling);
}

// UB bytes the tiling needs, so the Python side can refuse a batch too large for one core with a clear message.
extern "C" int64_t allocate_verify_budget_ub_bytes(int64_t numReqs, int64_t numPos, int64_t maxBudget) {
    AllocateVerifyBudgetArgs a{};
    a.numReqs = numReqs;
    a.numPos = numPos;
    a.maxBudget = maxBudget;
    a.hasCap = 1;
    return ascend_spec::ComputeAllocateBudgetTiling(a).ubBytes;
}
#else
namespace ascend_spec {
void allocate_verify_budget_impl(void *stream, uint32_t vectorCores, const AllocateVerifyBudgetArgs &a) {
    (void)vectorCores;
    AllocateBudgetTiling tiling = ComputeAllocateBudgetTiling(a);
    allocate_verify_budget<<<tiling.blockDim, nullptr, stream>>>(ALLOCATE_BUDGET_GM(a), tiling);
}
}  // namespace ascend_spec
#endif
