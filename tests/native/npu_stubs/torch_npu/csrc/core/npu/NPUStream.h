// Syntax-check stub of torch_npu's NPUStream.h: only what csrc/torch_binding.cpp uses.
#pragma once
#include <c10/core/Device.h>
#include "acl/acl.h"
namespace c10_npu {
struct NPUStream {
    aclrtStream stream() const { return nullptr; }
};
NPUStream getCurrentNPUStream(c10::DeviceIndex device_index = -1);
}  // namespace c10_npu
