"""Offline tools on trained checkpoints: attention pictures (Figures 3-5) and training cost (Table 2's FLOPs)."""
