"""Graph buckets, cost profiles, dispatchers and the verify-budget controller."""

from ascend_spec.graph.buckets import GraphBuckets
from ascend_spec.graph.controller import (
    BudgetController,
    BudgetPlan,
    BudgetSplit,
    Explanation,
    ThresholdRow,
    reference_split,
    split_budget,
)
from ascend_spec.graph.cost_profile import CostLookup, CostProfile
from ascend_spec.graph.dispatch import (
    DraftGraphDispatcher,
    GraphDescriptor,
    TargetGraphDispatcher,
    graph_backend,
)

__all__ = [
    "BudgetController",
    "BudgetPlan",
    "BudgetSplit",
    "CostLookup",
    "CostProfile",
    "DraftGraphDispatcher",
    "Explanation",
    "GraphBuckets",
    "GraphDescriptor",
    "TargetGraphDispatcher",
    "ThresholdRow",
    "graph_backend",
    "reference_split",
    "split_budget",
]
