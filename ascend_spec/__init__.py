"""ascend-spec: block-drafter speculative decoding ops for vllm-ascend (Atlas A2/A3) and GPU CI."""

__version__ = "0.1.0"
