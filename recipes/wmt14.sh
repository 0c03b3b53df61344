#!/usr/bin/env bash
# WMT 2014 translation, Table 2's rows, as the three recipes run it (their names are the WORK_DIR's):
#   bash recipes/wmt14_en_de_base.sh    wmt14.sh en-de vaswani_transformer base            27.3 BLEU
#   bash recipes/wmt14_en_de_big.sh     wmt14.sh en-de vaswani_transformer_big big         28.4 BLEU
#   bash recipes/wmt14_en_fr_big.sh     wmt14.sh en-fr vaswani_transformer_big_en_fr big   41.8 (41.0 in NIPS)
# Variables (WORK_DIR, DATA_DIR, RAW_DIR, NUM_GPUS, MAX_UPDATE, PRECISION, DROPOUT, EXTRA_TRAIN_ARGS, CPU, ...):
# docs/recipes.md, "Variables".
PAIR=${1:-} ARCH=${2:-} SIZE=${3:-}
RECIPE=${RECIPE:-wmt14_${PAIR/-/_}_$SIZE}
source "$(dirname "$0")/common.sh"
[[ "$PAIR" =~ ^en-(de|fr)$ && -n "$ARCH" && "$SIZE" =~ ^(base|big)$ ]] ||
    die "usage: bash recipes/wmt14.sh en-de|en-fr ARCH base|big (or a recipe that runs it: wmt14_en_de_base.sh ...)"
stages prepare train average translate  # what STOP_AFTER may name
detect_devices  # before the downloads: no GPU is an error unless CPU=1

# §5.1: WMT 2014, newstest2013 the dev set, newstest2014 the test set (3003 sentences). English-German: about 4.5
# million sentence pairs, byte-pair encoding with a shared source-target vocabulary of about 37000 tokens;
# English-French: 36M sentences split into a 32000 word-piece vocabulary (sentencepiece).
TARGET_LANG=${PAIR#en-}
if [ "$PAIR" = en-de ]; then
    prepare_data wmt14 -- --pair en-de --bpe-merges "${BPE_MERGES:-32000}"
    SUBWORDS=subword_nmt  # how fairseq-generate joins the subwords back
else
    prepare_data wmt14 -- --pair en-fr --spm-vocab "${SPM_VOCAB:-32000}"
    SUBWORDS=sentencepiece
fi

# Table 3's model (base: N = 6, d_model = 512, d_ff = 2048, h = 8, P_drop = 0.1; big: d_model = 1024, d_ff = 4096,
# h = 16, P_drop = 0.3, 0.1 for English-French: the architecture's unless DROPOUT is set) for §5.2's steps (base
# 100,000, 12 hours on 8 P100 GPUs; big 300,000, 3.5 days), a checkpoint every 10 minutes (§6.1: 1,500 or 600 steps)
# and the last of them averaged (5 or 20): vaswani_plugin/paper.py's; batches of about 25,000 source and 25,000
# target tokens (§5.1), Adam and eq. 3 (§5.3), label smoothing (§5.4); newstest2013's BLEU at each checkpoint.
STEPS=PAPER_${SIZE^^}_STEPS EVERY=PAPER_${SIZE^^}_CHECKPOINT_EVERY LAST=PAPER_${SIZE^^}_AVERAGE
AVERAGE_LAST=${AVERAGE_LAST:-${!LAST}}
CHECKPOINTS="$WORK_DIR/checkpoints"
mapfile -t DEV_ARGS < <(dev_bleu "$SUBWORDS")
train "$CHECKPOINTS" --arch "$ARCH" ${DROPOUT:+--dropout "$DROPOUT"} --max-update "${MAX_UPDATE:-${!STEPS}}" \
    --save-interval-updates "${SAVE_INTERVAL_UPDATES:-${!EVERY}}" --keep-interval-updates "$AVERAGE_LAST" \
    "${DEV_ARGS[@]}"
leave_the_rest_to_run_zero
stage average --output "$CHECKPOINTS/checkpoint_average.pt" average "$CHECKPOINTS" "$AVERAGE_LAST"

# newstest2014 translated with §6.1's beam search; both BLEU scores; the training cost of that Table 2 row.
OUTPUT="$WORK_DIR/newstest2014.generate.txt"
stage translate --output "$OUTPUT" --output "$OUTPUT.bleu" translate --checkpoint "$CHECKPOINTS/checkpoint_average.pt" \
    --subset test --output "$OUTPUT" --post-process "$SUBWORDS"
score --generate-output "$OUTPUT" --subset test
run_to "$WORK_DIR/training_cost.txt" "$PYTHON" -m vaswani_plugin.tools.training_cost --checkpoint \
    "$CHECKPOINTS/checkpoint_last.pt" --gpus "$WORKERS" --paper "$SIZE" ${PEAK_TFLOPS:+--peak-tflops "$PEAK_TFLOPS"}
[ "$DRY_RUN" = 1 ] || cat "$WORK_DIR/training_cost.txt"
write_report
