#!/usr/bin/env bash
# GPU acceptance in one command, on one GPU, in three stages in priority order, each writing its part of a markdown
# report as it ends (by minutes 4.5, 7 and 9.5 of the command): (s) the speed of the recipes' default precision at
# the sizes users train against fairseq's own `transformer`; (a) correctness: the plugin's base model trained on
# Multi30k in the card's mixed precisions, its beam search on the GPU against the CPU's; (b) levers (one thread per
# process, torch.compile, CUDA graphs) against the default. Prints where the report is; without a GPU, writes a
# report of what the machine showed of CUDA and exits 1. Its runs on GPUs so far: docs/results.md, "GPU".
# On a GPU machine without a package index: benchmarks/gpu_kit.sh builds the wheels and prints the command.
#   bash benchmarks/gpu_acceptance.sh [--report-dir D]
# Variables (all optional):
#   WORK_DIR   data, logs, checkpoints and the report  (default ./work/gpu_acceptance, the report then in
#              benchmarks/gpu_acceptance_report.md)
#   RAW_DIR    Multi30k's {train,val,test_2016_flickr}.{en,de}.gz, offline  (default ../shared/data/multi30k
#              if there, else downloaded)
#   PYTHON     the Python with the plugin installed  (default python3)
# What it runs and measures: benchmarks/gpu_acceptance.py and its modules, benchmarks/acceptance_*.py.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec "${PYTHON:-python3}" "$REPO/benchmarks/gpu_acceptance.py" "$@"
