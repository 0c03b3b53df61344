#!/usr/bin/env bash
# WMT 2014 English-German, Transformer (base): Table 2, 27.3 BLEU on newstest2014.
#   bash recipes/wmt14_en_de_base.sh
# Variables (WORK_DIR, RAW_DIR, NUM_GPUS, MAX_UPDATE, FP16, EXTRA_TRAIN_ARGS, CPU, ...): recipes/common.sh.
source "$(dirname "$0")/common.sh"
detect_devices  # before the downloads: no GPU is an error unless CPU=1
TARGET_LANG=de

# §5.1: WMT 2014 English-German, about 4.5 million sentence pairs; byte-pair encoding with a shared
# source-target vocabulary of about 37000 tokens. Dev newstest2013, test newstest2014 (3003 sentences).
prepare_wmt14 en-de --bpe-merges "${BPE_MERGES:-32000}"

# §5.2: 8 GPUs; the base model trains for 100,000 steps (12 hours) at about 0.4 s per step.
# §5.1: batches of about 25,000 source and 25,000 target tokens, whatever the number of GPUs.
batch_size_for_workers

# Table 3 "base": N = 6, d_model = 512, d_ff = 2048, h = 8, P_drop = 0.1 (§5.4); ε_ls = 0.1 (§5.4);
# Adam β1 = 0.9, β2 = 0.98, ε = 1e-9 with the learning rate of eq. 3, warmup_steps = 4000 (§5.3).
# §6.1: checkpoints written at 10-minute intervals (1500 steps at 0.4 s/step), the last 5 averaged.
SAVE_INTERVAL_UPDATES=${SAVE_INTERVAL_UPDATES:-1500}
AVERAGE_LAST=${AVERAGE_LAST:-5}
CHECKPOINTS="$WORK_DIR/checkpoints"
stage train train "$CHECKPOINTS" --arch vaswani_transformer --dropout 0.1 \
    --max-update "${MAX_UPDATE:-100000}" \
    --save-interval-updates "$SAVE_INTERVAL_UPDATES" --keep-interval-updates "$AVERAGE_LAST"
stage average average "$CHECKPOINTS" "$AVERAGE_LAST"

# §6.1: beam search with beam 4 and length penalty α = 0.6, maximum output length input + 50.
stage translate translate "$CHECKPOINTS/checkpoint_average.pt" test "$WORK_DIR/newstest2014.generate.txt"
score "$WORK_DIR/newstest2014.generate.txt" test
training_cost "$CHECKPOINTS" base
