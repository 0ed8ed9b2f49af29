// Syntax-check stub of CANN's acl.h: only what csrc/torch_binding.cpp uses.
#pragma once
#include <cstdint>
typedef void *aclrtStream;
typedef int aclError;
constexpr aclError ACL_SUCCESS = 0;
typedef enum { ACL_DEVICE_INFO_AI_CORE_NUM = 0, ACL_DEVICE_INFO_VECTOR_CORE_NUM = 1 } aclDeviceInfo;
aclError aclrtGetDevice(int32_t *deviceId);
aclError aclGetDeviceCapability(uint32_t deviceId, aclDeviceInfo deviceInfo, int64_t *value);
