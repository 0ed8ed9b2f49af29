// Small helpers every AscendC kernel in csrc/kernels/ uses: one definition instead of a copy per kernel.
// Only documented AscendC API (GetTPipePtr()->FetchEventID, SetFlag/WaitFlag), so the header builds unchanged for the NPU and under the host model (csrc/host_model/).
#pragma once

#include "kernel_operator.h"

namespace ascend_spec {
namespace kernel {

// Make pipe B wait for everything pipe A issued so far (EVT = A_B, e.g. MTE2_V, V_MTE3, S_MTE3, MTE3_S).
template <AscendC::HardEvent EVT>
__aicore__ inline void Sync() {
    event_t id = static_cast<event_t>(AscendC::GetTPipePtr()->FetchEventID(EVT));
    AscendC::SetFlag<EVT>(id);
    AscendC::WaitFlag<EVT>(id);
}

// std::is_same without the standard library in kernel code.
template <typename A, typename B>
struct SameType {
    static constexpr bool value = false;
};
template <typename A>
struct SameType<A, A> {
    static constexpr bool value = true;
};

__aicore__ inline int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }
__aicore__ inline int64_t Max64(int64_t a, int64_t b) { return a > b ? a : b; }
// Bytes rounded up to the 32-byte block the Unified Buffer addresses.
__aicore__ inline int64_t Align32(int64_t bytes) { return (bytes + 31) / 32 * 32; }

}  // namespace kernel
}  // namespace ascend_spec
