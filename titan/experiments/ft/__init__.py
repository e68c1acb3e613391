"""Fault-tolerant training with TorchFT replica groups (legacy ``[fault_tolerance]``)."""
