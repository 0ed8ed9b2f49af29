"""Graph buckets, cost profiles, dispatchers and the verify-budget controller."""
