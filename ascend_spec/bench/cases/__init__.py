"""Bench cases, one module per op family; each exposes ``run(ctx) -> list[BenchRow]``."""

# Order is the order of the printed table. Add a module name here when its case lands.
CASE_MODULES: tuple[str, ...] = (
    "prepare_block_slots",
    "max_softmax_confidence",
    "allocate_verify_budget",
    "verify_gated_delta_rule",
    "verify_causal_conv1d",
)
