#!/usr/bin/env bash
# The GPU kit, built on a CPU machine with a package index: the wheels (fairseq, its missing dependencies, the
# plugin) and Multi30k that a GPU machine without a package index needs for benchmarks/gpu_acceptance.py, at most
# 50 MiB, in DIR (default .gpu_kit/ at the repo root, git-ignored). The last line printed is the command to run
# there, from the repository root (the device tool: carry [".gpu_kit"]).
#   bash benchmarks/gpu_kit.sh [DIR] [--python-version 3.12] [--raw-dir R]
# Variables: PYTHON  the Python of the README's set-up, whose package versions the kit takes (default python3)
# What it does: benchmarks/gpu_kit.py.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec "${PYTHON:-python3}" "$REPO/benchmarks/gpu_kit.py" "$@"
