// The modes of the kernel pairs that serve both a verify call and the flushes of its records (GDN recurrence and
// causal conv1d). ascend_spec.gdn.protocol.KernelMode mirrors the values; tests/test_kernel_abi.py pins the two.
#pragma once

#include <cstdint>

enum KernelMode : int64_t {
    kModeVerify = 0,         // commit pending records, run this call's tokens, record them
    kModeFlush = 1,          // commit pending records only; num_recorded = 0
    kModeFlushAndReset = 2,  // kModeFlush, then zero pending (conv kernel only; the GDN op zeroes it in Python)
};
