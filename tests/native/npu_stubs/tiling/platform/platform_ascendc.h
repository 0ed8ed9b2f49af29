// Syntax-check stub of CANN's platform_ascendc.h: only what csrc/torch_binding.cpp uses.
#pragma once
#include <cstdint>
namespace platform_ascendc {
enum class CoreMemType { L0_A, L0_B, L0_C, L1, L2, UB, HBM };
class PlatformAscendC {
public:
    void GetCoreMemSize(const CoreMemType &memType, uint64_t &size) const;
};
class PlatformAscendCManager {
public:
    static PlatformAscendC *GetInstance();
};
}  // namespace platform_ascendc
