"""`ascend-spec e2e`: plain vs upstream speculative vs plugin speculative decoding in a real vLLM engine."""
