// Syntax-check stub of torch_npu's NPUGuard.h: only what csrc/torch_binding.cpp uses (the device guard
// vllm-ascend's ops construct from their tensors' device).
#pragma once
#include <c10/core/Device.h>
#include <c10/util/Optional.h>
namespace c10_npu {
struct OptionalNPUGuard {
    explicit OptionalNPUGuard(c10::optional<c10::Device> device_opt);
    explicit OptionalNPUGuard(c10::Device device);
    OptionalNPUGuard(const OptionalNPUGuard &) = delete;
    OptionalNPUGuard &operator=(const OptionalNPUGuard &) = delete;
    ~OptionalNPUGuard();
};
}  // namespace c10_npu
