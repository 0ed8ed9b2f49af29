// Test-only build: the real schemas (csrc/ops_schema.h) plus the Meta implementations
// (csrc/torch_binding_meta.cpp, compiled alongside), without torch_npu or CANN.
#include "ops_schema.h"

TORCH_LIBRARY(_C_ascend_spec, ops) { ascend_spec::DefineSchemas(ops); }
