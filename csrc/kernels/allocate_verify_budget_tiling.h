// Arguments and tiling of allocate_verify_budget (csrc/kernels/allocate_verify_budget.cpp). The arguments are
// filled by the NPU binding and, field for field, by the host-model runner (ascend_spec/ops/allocate_verify_budget/
// ascendc.py, a ctypes mirror checked against sizeof at every launch); both derive the tiling from them. One vector
// core does the whole selection: the B*K keys live in its Unified Buffer for the 32 bisection steps. Global
// scope: CANN's launch-stub generator declares the kernels' structs there.
#pragma once

#include <cstdint>

struct AllocateVerifyBudgetArgs {
    void *survival;         // [B, K] fp32, contiguous
    void *capacities;       // [B] int32 or nullptr
    void *budget;           // 0-dim int64 or nullptr (budgetInMemory)
    void *numDrafts;        // outputs: see VerifyAllocation (ascend_spec/ops/allocate_verify_budget/__init__.py)
    void *queryLens;
    void *queryStartLoc;
    void *draftIndex;
    int64_t numReqs;        // B
    int64_t numPos;         // K
    int64_t maxBudget;      // static bound of the budget
    int64_t budgetValue;    // the budget when it is a host int
    int64_t budgetInMemory; // 1: read the budget from `budget`
    int64_t hasCap;         // 1: capacities given
};

struct AllocateBudgetTiling {
    int64_t numReqs;        // B
    int64_t numPos;         // K
    int64_t slots;          // B*K
    int64_t slotsPad;       // B*K rounded up to 64 (whole 256-byte vector repeats of fp32)
    int64_t indexLen;       // L = min(max_budget, B*K)
    int64_t maxBudget;      // clamp of the budget: min(max_budget, B*K)
    int64_t budgetValue;    // the budget when it is a host int
    int64_t budgetInMemory; // 1: read the budget from a 0-dim int64 device tensor
    int64_t hasCap;         // 1: capacities [B] int32 given
    int64_t reqPad;         // B + 1 rounded up to 8 int32
    int64_t indexPad;       // L rounded up to 8 int32 (at least 8)
    int64_t tmpLen;         // ReduceSum workspace elements
    int64_t ubBytes;        // Unified Buffer this tiling needs
    uint32_t blockDim;
};

namespace ascend_spec {

inline int64_t AllocateAlignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

inline AllocateBudgetTiling ComputeAllocateBudgetTiling(const AllocateVerifyBudgetArgs &a) {
    AllocateBudgetTiling t{};
    const int64_t numReqs = a.numReqs, numPos = a.numPos, maxBudget = a.maxBudget;
    t.numReqs = numReqs;
    t.numPos = numPos;
    t.slots = numReqs * numPos;
    t.slotsPad = AllocateAlignUp(t.slots > 0 ? t.slots : 1, 64);
    t.maxBudget = maxBudget < t.slots ? maxBudget : t.slots;
    t.indexLen = t.maxBudget;
    t.budgetValue = a.budgetValue;
    t.budgetInMemory = a.budgetInMemory ? 1 : 0;
    t.hasCap = a.hasCap ? 1 : 0;
    t.reqPad = AllocateAlignUp(numReqs + 1, 8);
    t.indexPad = AllocateAlignUp(t.indexLen > 0 ? t.indexLen : 1, 8);
    t.tmpLen = AllocateAlignUp(t.slotsPad / 4, 64);
    // keys + 0/1 indicators + workspace (fp32), mask bits, caps/num_drafts/query_lens/query_start_loc, index.
    t.ubBytes = (2 * t.slotsPad + t.tmpLen + 8) * 4 + t.slotsPad / 8 + 4 * t.reqPad * 4 + t.indexPad * 4 + 32 * 8;
    t.blockDim = 1;
    return t;
}

}  // namespace ascend_spec
