"""Commands on trained checkpoints and runs: attention pictures (Figures 3-5), training cost (Table 2's FLOPs), a
run's curves and report, a GPU's largest batch. What runs inside a training is training/'s."""
