"""Bench cases, one module per op family; each exposes ``run(ctx) -> list[BenchRow]``."""

# Order is the order of the printed table. Add a module name here when its case lands.
CASE_MODULES: tuple[str, ...] = ("block_slots", "confidence", "verify_budget", "gdn", "gdn_conv1d")
