"""Native CPU kernels (``csrc/cpu/``): the ``cpu`` backend of the ops on the CPU engine's per-layer hot path."""
