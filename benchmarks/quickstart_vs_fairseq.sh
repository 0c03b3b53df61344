#!/usr/bin/env bash
# The quickstart against fairseq's own `transformer` architecture: the same Multi30k data, sizes (d_model,
# layers, heads, d_ff), dropout, tokens per batch, schedule, wall-clock budget, averaging and beam search;
# only --arch differs. Prints both test2016 BLEU scores and the difference (plugin - fairseq).
#   bash benchmarks/quickstart_vs_fairseq.sh
# Variables: BUDGET_MINUTES (default 20, each), RAW_DIR, WORK_DIR (default ./work/quickstart_vs_fairseq),
# and the quickstart's others. The two trainings run one after the other, so that each has the machine.
# Their progress goes to stderr; stdout is the comparison alone.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK_DIR=${WORK_DIR:-$PWD/work/quickstart_vs_fairseq}
mkdir -p "$WORK_DIR" && WORK_DIR=$(cd "$WORK_DIR" && pwd)
export DATA_DIR=${DATA_DIR:-$WORK_DIR/data}  # prepared once, used by both
PYTHON=${PYTHON:-python3}

for arch in vaswani_transformer transformer; do
    echo "[quickstart_vs_fairseq] $arch: bash recipes/quickstart.sh with ARCH=$arch" >&2
    ARCH=$arch WORK_DIR="$WORK_DIR/$arch" RECIPE="quickstart-$arch" bash "$REPO/recipes/quickstart.sh" >&2
done

"$PYTHON" - "$WORK_DIR" "${BUDGET_MINUTES:-20}" <<'PY'
import re, sys
from pathlib import Path

work, budget = Path(sys.argv[1]), sys.argv[2]
rows = {}
for arch in ("vaswani_transformer", "transformer"):
    bleu = (work / arch / "test2016.generate.txt.bleu").read_text()
    log = (work / arch / "checkpoints" / "train.log").read_text()
    updates = re.findall(r"num_updates[ =](\d+)", log)
    rows[arch] = {"sacrebleu": float(re.search(r"^sacreBLEU = ([\d.]+)", bleu, re.M)[1]),
                  "tokenised": float(re.search(r"^BLEU \(tokenised, compound-split\) = ([\d.]+)", bleu, re.M)[1]),
                  "sentences": int(re.search(r"^sentences = (\d+)", bleu, re.M)[1]),
                  "updates": int(updates[-1]) if updates else 0}
print(f"test2016 ({rows['transformer']['sentences']} sentences), {budget} minutes of training each")
print(f"{'arch':22} {'updates':>8} {'sacreBLEU':>10} {'tok. BLEU':>10}")
for arch, row in rows.items():
    print(f"{arch:22} {row['updates']:>8} {row['sacrebleu']:>10.2f} {row['tokenised']:>10.2f}")
ours, theirs = rows["vaswani_transformer"], rows["transformer"]
print(f"difference (vaswani_transformer - transformer): sacreBLEU {ours['sacrebleu'] - theirs['sacrebleu']:+.2f}, "
      f"tokenised BLEU {ours['tokenised'] - theirs['tokenised']:+.2f}, updates {ours['updates'] - theirs['updates']:+d}")
PY
