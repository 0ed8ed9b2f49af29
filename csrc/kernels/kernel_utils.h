// Small helpers every AscendC kernel in csrc/kernels/ uses: one definition instead of a copy per kernel.
// Only documented AscendC API (GetTPipePtr()->FetchEventID, SetFlag/WaitFlag, DataCopyPad with
// DataCopyExtParams), so the header builds unchanged for the NPU and under the host model (csrc/host_model/).
#pragma once

#include "dtype_codes.h"
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

// `rows` GM rows of `cols` elements, `gmPitch` elements apart -> UB rows `ubPitch` elements apart.
template <typename T>
__aicore__ inline void LoadRows(const AscendC::LocalTensor<T> &dst, const AscendC::GlobalTensor<T> &src, int64_t rows,
                                int64_t cols, int64_t gmPitch, int64_t ubPitch) {
    const int64_t bytes = cols * static_cast<int64_t>(sizeof(T));
    AscendC::DataCopyExtParams params{static_cast<uint16_t>(rows), static_cast<uint32_t>(bytes),
                                      static_cast<uint32_t>((gmPitch - cols) * static_cast<int64_t>(sizeof(T))),
                                      static_cast<uint32_t>((ubPitch * static_cast<int64_t>(sizeof(T)) - Align32(bytes)) / 32),
                                      0};
    AscendC::DataCopyPadExtParams<T> pad{false, 0, 0, static_cast<T>(0)};
    AscendC::DataCopyPad(dst, src, params, pad);
}

// UB rows `ubPitch` elements apart -> `rows` GM rows of `cols` elements, `gmPitch` elements apart.
template <typename T>
__aicore__ inline void StoreRows(const AscendC::GlobalTensor<T> &dst, const AscendC::LocalTensor<T> &src,
                                 int64_t rows, int64_t cols, int64_t gmPitch, int64_t ubPitch) {
    const int64_t bytes = cols * static_cast<int64_t>(sizeof(T));
    AscendC::DataCopyExtParams params{static_cast<uint16_t>(rows), static_cast<uint32_t>(bytes),
                                      static_cast<uint32_t>((ubPitch * static_cast<int64_t>(sizeof(T)) - Align32(bytes)) / 32),
                                      static_cast<uint32_t>((gmPitch - cols) * static_cast<int64_t>(sizeof(T))), 0};
    AscendC::DataCopyPad(dst, src, params);
}

}  // namespace kernel
}  // namespace ascend_spec
