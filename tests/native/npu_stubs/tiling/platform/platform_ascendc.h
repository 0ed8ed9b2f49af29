// Stub of CANN's tiling/platform/platform_ascendc.h (asc-devkit include/utils/tiling/platform/): only what
// csrc/torch_binding.cpp uses, with GetInstance inline over the same private statics as the real header, so the
// binding's object needs exactly the symbols the real one needs (tests/test_npu_build_rules.py lists them).
#pragma once
#include <cstdint>
#include <mutex>
namespace platform_ascendc {
enum class CoreMemType { L0_A = 0, L0_B = 1, L0_C = 2, L1 = 3, L2 = 4, UB = 5, HBM = 6, FB = 7, BT = 8, RESERVED };
class PlatformAscendC {
public:
    void GetCoreMemSize(const CoreMemType &memType, uint64_t &size) const;
};
class PlatformAscendCManager {
public:
    static PlatformAscendC *GetInstance() {
        const std::lock_guard<std::mutex> lock(platformInitMtx);
        if (platformInfo == nullptr) {
            PlatformAscendCManagerInit(nullptr);
            if (platformInfo == nullptr) {
                return nullptr;
            }
        }
        return platformInfo;
    }

private:
    static PlatformAscendC *platformInfo;
    static std::mutex platformInitMtx;
    static PlatformAscendC *PlatformAscendCManagerInit(const char *customSocVersion);
};
}  // namespace platform_ascendc
