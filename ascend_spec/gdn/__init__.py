"""Variable-length Gated DeltaNet verification with deferred commit."""
