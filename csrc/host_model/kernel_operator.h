// Host model of the AscendC kernel API (the subset ascend-spec's kernels use).
//
// With `-I csrc/host_model -DASCEND_SPEC_HOST_MODEL` this header stands in for CANN's kernel_operator.h, so the
// unchanged kernel sources in csrc/kernels/ compile with g++ and run on the CPU block by block. It refuses what an
// A2/A3 vector core breaks silently (UB as GetCoreMemSize reports it, Select's scratch at 184 KiB, DMA and
// vector-instruction limits, the Cast table, TQue and per-HardEvent event discipline, GM accesses inside the
// kernel's tensors) and models nothing about timing, bank conflicts or pipe concurrency. The exact list:
// docs/host_model.md.
#pragma once

// ASCEND_SPEC_NPU_LAUNCH_CHECK: tests/test_npu_binding.py compiles the NPU launchers (with `<<<>>>` removed)
// against this header to check them against csrc/ops.h; it never runs them.
#if !defined(ASCEND_SPEC_HOST_MODEL) && !defined(ASCEND_SPEC_NPU_LAUNCH_CHECK)
#error "csrc/host_model/kernel_operator.h is the CPU host model; NPU builds must use CANN's kernel_operator.h"
#endif

#include "hm_core.h"
#include "hm_tensor.h"
#include "hm_pipe.h"
#include "hm_datacopy.h"
#include "hm_vector.h"
#include "hm_vector_repeat.h"
#include "hm_launch.h"

#ifdef ASCEND_SPEC_HOST_MODEL
ASCEND_SPEC_HOST_MODEL_RUNTIME
#endif
