// dtype codes of the kernels' entry points (the same codes as torch_binding.cpp's DtypeCode and the Python
// runners' host_model.DTYPE_CODES). Plain C++: the tiling headers and the NPU binding use them too.
#pragma once

#include <cstdint>

namespace ascend_spec {
namespace kernel {

constexpr int64_t kDtypeF32 = 0;
constexpr int64_t kDtypeBf16 = 1;
constexpr int64_t kDtypeF16 = 2;

// Bytes per element of a dtype code (host side: the tilings size Unified Buffer rows with it).
inline int64_t DtypeBytes(int64_t code) { return code == kDtypeF32 ? 4 : 2; }

}  // namespace kernel
}  // namespace ascend_spec
