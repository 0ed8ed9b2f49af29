// Syntax-check stub of torch_npu's NPUStream.h: only what csrc/torch_binding.cpp uses.
#pragma once
#include "acl/acl.h"
namespace c10_npu {
struct NPUStream {
    aclrtStream stream() const { return nullptr; }
};
NPUStream getCurrentNPUStream();
}  // namespace c10_npu
