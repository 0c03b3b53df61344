#!/usr/bin/env bash
# The quickstart against fairseq's own `transformer`: the same Multi30k data, sizes (d_model, layers, heads,
# d_ff), dropout, tokens per batch, Adam and learning-rate schedule, seed, wall-clock budget, averaging and
# beam search. What differs is the implementation: --arch transformer, trained with fairseq's own criterion
# label_smoothed_cross_entropy (ε = 0.1 too) and optimizer adam (§5.3's β and ε too), against this plugin's model,
# criterion and vaswani_adam.
# Prints both test2016 BLEU scores per seed, and the mean and spread of the difference (plugin - fairseq); draws both
# runs' curves of a seed in one picture, WORK_DIR/seedN/curves/{updates,wall_clock}.png. Both score the dev set
# while training, or neither: the quickstart's DEV_SCORE, the same for both.
#   bash benchmarks/quickstart_vs_fairseq.sh
# Variables:
#   BUDGET_MINUTES  training time of each run (default 20; none with MAX_UPDATE alone)
#   MAX_UPDATE      training updates of each run instead: the same pair of runs on any machine
#   SEEDS           one pair of runs per seed (default "1 2 3")
#   PARALLEL        1 (default): the two runs of a seed at the same time, each pinned to its own core with one
#                   thread (taskset), so that both see the same machine; 0: one after the other, all cores each
#   FAIRSEQ_BF16    the precision of fairseq's side (default 0: float32, as fairseq trains on CPU; 1 or auto:
#                   the plugin task's bfloat16 autocast, as the quickstart's PRECISION=auto); the plugin's side
#                   follows PRECISION.
#                   Each run's train.log says what its task chose (its `precision:` line)
#   RAW_DIR, WORK_DIR (default ./work/quickstart_vs_fairseq), and the quickstart's others.
# Progress goes to stderr and to each run's log; stdout is the comparison alone.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK_DIR=${WORK_DIR:-$PWD/work/quickstart_vs_fairseq}
mkdir -p "$WORK_DIR" && WORK_DIR=$(cd "$WORK_DIR" && pwd)
export DATA_DIR=${DATA_DIR:-$WORK_DIR/data}  # prepared once, used by every run
[ -n "${MAX_UPDATE:-}" ] || export BUDGET_MINUTES=${BUDGET_MINUTES:-20}
LIMIT="${BUDGET_MINUTES:+${BUDGET_MINUTES} minutes}${MAX_UPDATE:+${BUDGET_MINUTES:+ or }${MAX_UPDATE} updates}"
PYTHON=${PYTHON:-python3}
SEEDS=${SEEDS:-1 2 3}
PARALLEL=${PARALLEL:-1}
if [ "$PARALLEL" = 1 ]; then
    command -v taskset >/dev/null || { echo "quickstart_vs_fairseq: PARALLEL=1 needs taskset (util-linux); set PARALLEL=0" >&2; exit 1; }
    # nproc alone would count OMP_NUM_THREADS, not the cores this process may run on.
    [ "$(OMP_NUM_THREADS= OMP_THREAD_LIMIT= nproc)" -ge 2 ] || { echo "quickstart_vs_fairseq: PARALLEL=1 needs 2 cores; set PARALLEL=0" >&2; exit 1; }
fi

# run SEED ARCH CORE: one quickstart; CORE empty = unpinned.
run() {
    local seed=$1 arch=$2 core=$3 extra="--seed $1" pin=()
    local precision=()
    if [ "$arch" = transformer ]; then
        extra+=" --criterion label_smoothed_cross_entropy --optimizer adam"  # fairseq's own, as shipped
        precision=(PRECISION= FP16= BF16="${FAIRSEQ_BF16:-0}")  # fairseq has no bfloat16 training on CPU: its --bf16 assumes a TPU
    fi
    [ -n "$core" ] && pin=(env OMP_NUM_THREADS=1 taskset -c "$core")
    echo "[quickstart_vs_fairseq] seed $seed, $arch${core:+ on core $core}: log in $WORK_DIR/seed$seed/$arch.log" >&2
    env "${precision[@]}" ARCH=$arch WORK_DIR="$WORK_DIR/seed$seed/$arch" RECIPE="quickstart-$arch" \
        EXTRA_TRAIN_ARGS="${EXTRA_TRAIN_ARGS:-} $extra" "${pin[@]}" bash "$REPO/recipes/quickstart.sh" \
        > "$WORK_DIR/seed$seed/$arch.log" 2>&1 ||
        { echo "quickstart_vs_fairseq: seed $seed, $arch failed; see $WORK_DIR/seed$seed/$arch.log" >&2; return 1; }
}

# The data first, as the quickstart prepares it (its runs then find it done): parallel runs must not race.
export BPE_MERGES=${BPE_MERGES:-10000}
PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m prepare.multi30k --work-dir "$DATA_DIR" \
    --bpe-merges "$BPE_MERGES" ${RAW_DIR:+--raw-dir "$RAW_DIR"} >&2

for seed in $SEEDS; do
    mkdir -p "$WORK_DIR/seed$seed"
    if [ "$PARALLEL" = 1 ]; then
        run "$seed" vaswani_transformer 0 & ours=$!
        run "$seed" transformer 1 & theirs=$!
        wait "$ours" && wait "$theirs"
    else
        run "$seed" vaswani_transformer ""
        run "$seed" transformer ""
    fi
done

# Both runs of a seed in one picture: loss and dev score against updates and against wall-clock time.
for seed in $SEEDS; do
    PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m vaswani_plugin.tools.training_curves \
        "$WORK_DIR/seed$seed/vaswani_transformer" "$WORK_DIR/seed$seed/transformer" \
        --output-dir "$WORK_DIR/seed$seed/curves" >&2 || { echo "quickstart_vs_fairseq: drawing seed $seed's curves failed" >&2; exit 1; }
done

"$PYTHON" - "$WORK_DIR" "$LIMIT" "$PARALLEL" $SEEDS <<'PY'
import re, statistics, sys
from pathlib import Path

work, budget, parallel, seeds = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1", sys.argv[4:]
archs = ("vaswani_transformer", "transformer")


def result(run):
    bleu = (run / "test2016.generate.txt.bleu").read_text()
    log = (run / "checkpoints" / "train.log").read_text()
    updates = re.findall(r"num_updates[ =](\d+)", log)
    return {"sacrebleu": float(re.search(r"^sacreBLEU = ([\d.]+)", bleu, re.M)[1]),
            "tokenised": float(re.search(r"^BLEU \(tokenised, compound-split\) = ([\d.]+)", bleu, re.M)[1]),
            "sentences": int(re.search(r"^sentences = (\d+)", bleu, re.M)[1]),
            "updates": int(updates[-1]) if updates else 0,
            "precision": "bf16 autocast" if "precision: bfloat16 autocast (" in log else "float32"}


rows = {(seed, arch): result(work / f"seed{seed}" / arch) for seed in seeds for arch in archs}
sentences = rows[seeds[0], "transformer"]["sentences"]
how = "the two runs of a seed side by side, one core each" if parallel else "one run at a time"
print(f"test2016 ({sentences} sentences), {budget} of training per run, {how}")
print(f"{'seed':>4} {'arch':22} {'precision':14} {'updates':>8} {'sacreBLEU':>10} {'tok. BLEU':>10}")
for (seed, arch), row in rows.items():
    print(f"{seed:>4} {arch:22} {row['precision']:14} {row['updates']:>8} {row['sacrebleu']:>10.2f} "
          f"{row['tokenised']:>10.2f}")
for key in ("sacrebleu", "tokenised", "updates"):
    differences = [rows[seed, archs[0]][key] - rows[seed, archs[1]][key] for seed in seeds]
    spread = f" ± {statistics.stdev(differences):.2f} (sd)" if len(differences) > 1 else ""
    print(f"difference vaswani_transformer - transformer, {key}: mean {statistics.mean(differences):+.2f}{spread} "
          f"over {len(seeds)} seed(s): {' '.join(f'{d:+.2f}' for d in differences)}")
PY
