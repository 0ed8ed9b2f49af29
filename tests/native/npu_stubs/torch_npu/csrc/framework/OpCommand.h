// Syntax-check stub of torch_npu's OpCommand.h: only what csrc/torch_binding.cpp uses.
#pragma once
#include <functional>
#include <string>
namespace at_npu::native {
class OpCommand {
public:
    OpCommand &Name(const std::string &name);
    OpCommand &SetCustomHandler(std::function<int()> handler);
    void Run();
};
}  // namespace at_npu::native
