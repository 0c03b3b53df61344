#!/usr/bin/env bash
# GPU acceptance in one command, on one GPU, in two stages (their reports written by minutes 4 and 9 of the command
# on an H100; it took 2.3 and 8.7 there): (a) the plugin's base model trained on Multi30k in fp16, amp and
# bf16 autocast, its beam search on the GPU against the CPU's; (b) its speed, memory and MFU (base and big) against
# fairseq's own `transformer`. Writes a markdown report as each stage ends and prints where; without a GPU, writes a
# report of what the machine showed of CUDA and exits 1.
# On a GPU machine without a package index: benchmarks/gpu_kit.sh builds the wheels and prints the command.
#   bash benchmarks/gpu_acceptance.sh [--report-dir D]
# Variables (all optional):
#   WORK_DIR   data, logs, checkpoints and the report  (default ./work/gpu_acceptance, the report then in
#              benchmarks/gpu_acceptance_report.md)
#   RAW_DIR    Multi30k's {train,val,test_2016_flickr}.{en,de}.gz, offline  (default ../shared/data/multi30k
#              if there, else downloaded)
#   PYTHON     the Python with the plugin installed  (default python3)
# What it runs and measures: benchmarks/gpu_acceptance.py.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec "${PYTHON:-python3}" "$REPO/benchmarks/gpu_acceptance.py" "$@"
