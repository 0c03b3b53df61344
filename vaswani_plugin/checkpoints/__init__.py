"""Checkpoint files: safe loading and atomic saving (storage), averaging (§6.1), resuming after a kill, and
converting fairseq's `transformer` checkpoints."""
