#!/usr/bin/env bash
# Quickstart: the whole pipeline on real data in about half an hour on a laptop, no GPU needed.
# Multi30k task 1 English->German (29,000 image captions), a small Transformer trained for a fixed
# wall-clock budget, the last checkpoints averaged, test2016 (1,000 sentences) translated with beam search,
# BLEU printed, a few translations shown and attention pictures drawn.
#   bash recipes/quickstart.sh
# Variables (all optional):
#   BUDGET_MINUTES   training wall-clock time                           (default 20; none with MAX_UPDATE alone)
#   MAX_UPDATE       train this many updates instead: the same run on any machine (BUDGET_MINUTES then only if set)
#   RAW_DIR          offline: a folder with {train,val,test_2016_flickr}.{en,de}.gz (default: download them)
#   WORK_DIR         where everything goes                               (default ./work/quickstart)
#   ARCH             the model (default vaswani_transformer; benchmarks/ runs fairseq's `transformer` here)
#   MAX_EPOCH        stop earlier than the budget after this many epochs (default 30; a GPU gets there)
#   PRECISION        auto (this recipe's default, on a CPU too): bfloat16 autocast on a CPU with AVX512-BF16 or AMX
#                    (~1.75x the steps), float32 elsewhere, mixed precision on a GPU; fp32: float32 (docs/recipes.md,
#                    "Precision"). The task logs a `precision:` line
#   DEV_SCORE        0 (default): no validation; 1: the dev set's BLEU (val, DEV_SCORE_SENTENCES=400 of its 1,014
#                    sentences) every DEV_SCORE_EVERY=500 updates and its loss at each checkpoint, which cost 7 % of
#                    the budget's updates (docs/results.md, "Dev scores while training")
#   and those of every recipe (DATA_DIR, NUM_GPUS, EXTRA_TRAIN_ARGS, ...): docs/recipes.md, "Variables".
RECIPE=${RECIPE:-quickstart}
source "$(dirname "$0")/common.sh"
stages prepare train average translate  # what STOP_AFTER may name
CPU=${CPU:-1}  # no GPU is this recipe's normal case; one is used when present
detect_devices

# Multi30k task 1: the training, val (valid) and test_2016_flickr (test) splits; Moses tokenisation and a
# joint BPE as for WMT14 En-De (§5.1). 10,000 merges, the usual size for this corpus, give ~9,800 tokens.
TARGET_LANG=de
prepare_data multi30k -- --bpe-merges "${BPE_MERGES:-10000}"

# Chosen for a small corpus and a CPU budget (the paper leaves them open; docs/design.md and docs/results.md say why and
# what was measured): an eighth of the base model's width and half its depth (d_model 128, d_ff 512, h 4,
# so d_k = d_v = 32; N = 3), P_drop = 0.1, batches of 2,048 tokens, warmup 300 steps and eq. 3 scaled by
# 0.7 (peak 3.6e-3), for ~2,400 steps (~10 epochs) in 20 minutes on one core in float32, ~4,100 (~17 epochs)
# under bfloat16 autocast (PRECISION=auto, on a CPU with AVX512-BF16 or AMX).
# Everything else as §5: Adam, eq. 3, label smoothing 0.1.
ARCH=${ARCH:-vaswani_transformer}
MODEL_ARGS=("${PAPER_MODEL_QUICKSTART[@]}")  # vaswani_plugin/paper.py's "quickstart"
TOKENS_PER_STEP=${TOKENS_PER_STEP:-2048} MAX_TOKENS_PER_GPU=${MAX_TOKENS_PER_GPU:-2048}
[ -n "${PRECISION:-}${FP16:-}${BF16:-}" ] || PRECISION=auto  # on a CPU too: bfloat16 where it is native
# The clock by default; MAX_UPDATE: a count of updates, which no machine's speed changes (the clock too if set).
LIMITS=()
if [ -n "${MAX_UPDATE:-}" ]; then
    [[ $MAX_UPDATE =~ ^[1-9][0-9]*$ ]] || die "MAX_UPDATE=$MAX_UPDATE is not a positive number of updates"
    LIMITS=(--max-update "$MAX_UPDATE")
    say "training $ARCH for $MAX_UPDATE updates${BUDGET_MINUTES:+ or $BUDGET_MINUTES minutes} (or ${MAX_EPOCH:-30} epochs)"
else
    BUDGET_MINUTES=${BUDGET_MINUTES:-20}
    say "training $ARCH for $BUDGET_MINUTES minutes of wall-clock time (or ${MAX_EPOCH:-30} epochs)"
fi
[ -z "${BUDGET_MINUTES:-}" ] || LIMITS=(--stop-time-hours "$(budget_hours "$BUDGET_MINUTES")" "${LIMITS[@]}")

# §6.1 averages the last 5 checkpoints written at 10-minute intervals of a 12-hour run; here a checkpoint
# every 50 steps (~25 s on 2 cores) and the last 5 of them. No validation by default: fairseq validates at every
# checkpoint, and the dev set's loss there and its BLEU every 500 updates (DEV_SCORE=1) cost 7 % of the updates
# of the budget (docs/results.md, "Dev scores while training"); the test set is scored at the end.
DEV_SCORE=${DEV_SCORE:-0} DEV_SCORE_EVERY=${DEV_SCORE_EVERY:-500} DEV_SCORE_SENTENCES=${DEV_SCORE_SENTENCES:-400}
mapfile -t DEV_ARGS < <(dev_bleu subword_nmt)
[ "$DEV_SCORE" = 1 ] || DEV_ARGS=(--disable-validation)
CHECKPOINTS="$WORK_DIR/checkpoints"
train "$CHECKPOINTS" --arch "$ARCH" "${MODEL_ARGS[@]}" --warmup-updates 300 --factor 0.7 \
    "${LIMITS[@]}" --max-epoch "${MAX_EPOCH:-30}" \
    --save-interval-updates "${SAVE_INTERVAL_UPDATES:-50}" --keep-interval-updates "${AVERAGE_LAST:-5}" \
    "${DEV_ARGS[@]}" --log-interval 10

leave_the_rest_to_run_zero
stage average --output "$CHECKPOINTS/checkpoint_average.pt" average "$CHECKPOINTS" "${AVERAGE_LAST:-5}" available

# §6.1 decoding (translate's default): beam 4, length penalty α = 0.6, at most input + 50 tokens; every one of the
# 1,000 sentences, 128 a batch, the BPE subwords joined back.
TRANSLATIONS="$WORK_DIR/test2016.generate.txt"
stage translate --output "$TRANSLATIONS" --output "$TRANSLATIONS.bleu" translate \
    --checkpoint "$CHECKPOINTS/checkpoint_average.pt" --subset test --output "$TRANSLATIONS" --post-process subword_nmt
score --generate-output "$TRANSLATIONS" --subset test --examples 3 --source "$TEXT_DIR/test.en"

# Attention of the first test sentence: every head of the last layer (Figures 3-5 of the paper).
PICTURES="$WORK_DIR/attention"
if [ "$ARCH" = vaswani_transformer ]; then
    FIRST="{the first test sentence}"
    [ "$DRY_RUN" = 1 ] || FIRST=$(head -n 1 "$TEXT_DIR/test.en")
    run "$PYTHON" -m vaswani_plugin.tools.attention_pictures --path "$CHECKPOINTS/checkpoint_average.pt" \
        --data "$DATA_BIN" --bpe-codes "$DATA_DIR/bpe/codes" --source "$FIRST" \
        --output-dir "$PICTURES" || die "attention pictures failed"
else
    PICTURES="(none: attention pictures are drawn for vaswani_transformer models)"
fi

write_report
[ "$DRY_RUN" = 0 ] || exit 0
cat >&2 <<EOF
[$RECIPE] done. Where things are:
  model (average of the last checkpoints): $CHECKPOINTS/checkpoint_average.pt
  training log:                            $CHECKPOINTS/train.log
  report, with the training curves:        $WORK_DIR/report.md (curves: $WORK_DIR/curves/)
  translations (fairseq-generate output):  $TRANSLATIONS
  BLEU:                                    $TRANSLATIONS.bleu
  attention pictures:                      $PICTURES
  translate your own sentences:            see README.md, "Quickstart"
  serve it with CTranslate2:               see README.md, "Serve with CTranslate2" (export, translate)
EOF
