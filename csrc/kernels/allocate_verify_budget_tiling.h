// Tiling of allocate_verify_budget (csrc/kernels/allocate_verify_budget.cpp), computed on the host by both the NPU
// launcher and the host-model entry. One vector core does the whole selection: the B*K keys live in its Unified
// Buffer for the 32 bisection steps.
#pragma once

#include <cstdint>

namespace ascend_spec {

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

inline int64_t AllocateAlignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

inline AllocateBudgetTiling ComputeAllocateBudgetTiling(int64_t numReqs, int64_t numPos, int64_t maxBudget,
                                                        int64_t budgetValue, bool budgetInMemory, bool hasCap) {
    AllocateBudgetTiling t{};
    t.numReqs = numReqs;
    t.numPos = numPos;
    t.slots = numReqs * numPos;
    t.slotsPad = AllocateAlignUp(t.slots > 0 ? t.slots : 1, 64);
    t.maxBudget = maxBudget < t.slots ? maxBudget : t.slots;
    t.indexLen = t.maxBudget;
    t.budgetValue = budgetValue;
    t.budgetInMemory = budgetInMemory ? 1 : 0;
    t.hasCap = hasCap ? 1 : 0;
    t.reqPad = AllocateAlignUp(numReqs + 1, 8);
    t.indexPad = AllocateAlignUp(t.indexLen > 0 ? t.indexLen : 1, 8);
    t.tmpLen = AllocateAlignUp(t.slotsPad / 4, 64);
    // keys + 0/1 indicators + workspace (fp32), mask bits, caps/num_drafts/query_lens/query_start_loc, index.
    t.ubBytes = (2 * t.slotsPad + t.tmpLen + 8) * 4 + t.slotsPad / 8 + 4 * t.reqPad * 4 + t.indexPad * 4 + 32 * 8;
    t.blockDim = 1;
    return t;
}

}  // namespace ascend_spec
