"""Variable-length Gated DeltaNet verification with deferred commit."""

from ascend_spec.gdn.records import GDNRecords, allocate_records, record_bytes_per_slot
from ascend_spec.gdn.verify_causal_conv1d import (
    ConvRecords,
    allocate_conv_records,
    conv_record_bytes_per_slot,
    flush_conv_pending,
    verify_causal_conv1d,
)
from ascend_spec.gdn.verify_gated_delta_rule import flush_pending, verify_gated_delta_rule
from ascend_spec.gdn.verify_gated_delta_rule.reference import replay_states

__all__ = [
    "ConvRecords",
    "allocate_conv_records",
    "conv_record_bytes_per_slot",
    "flush_conv_pending",
    "verify_causal_conv1d",
    "GDNRecords",
    "allocate_records",
    "flush_pending",
    "record_bytes_per_slot",
    "replay_states",
    "verify_gated_delta_rule",
]
