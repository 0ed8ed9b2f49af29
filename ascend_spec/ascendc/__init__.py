"""AscendC kernels: the compiled extension on NPU, the host model of the AscendC API on CPU."""
