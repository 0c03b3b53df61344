#!/usr/bin/env bash
# WMT 2014 English-German, Transformer (big): Table 2, 28.4 BLEU on newstest2014.
#   bash recipes/wmt14_en_de_big.sh
# Variables (WORK_DIR, RAW_DIR, NUM_GPUS, MAX_UPDATE, FP16, EXTRA_TRAIN_ARGS, CPU, ...): recipes/common.sh.
source "$(dirname "$0")/common.sh"
detect_devices  # before the downloads: no GPU is an error unless CPU=1
TARGET_LANG=de

# §5.1: WMT 2014 English-German, about 4.5 million sentence pairs; byte-pair encoding with a shared
# source-target vocabulary of about 37000 tokens. Dev newstest2013, test newstest2014 (3003 sentences).
prepare_wmt14 en-de --bpe-merges "${BPE_MERGES:-32000}"

# §5.2: 8 GPUs; the big model trains for 300,000 steps (3.5 days) at about 1.0 s per step.
# §5.1: batches of about 25,000 source and 25,000 target tokens, whatever the number of GPUs.
batch_size_for_workers

# Table 3 "big": N = 6, d_model = 1024, d_ff = 4096, h = 16, P_drop = 0.3 (§5.4); ε_ls = 0.1 (§5.4);
# Adam β1 = 0.9, β2 = 0.98, ε = 1e-9 with the learning rate of eq. 3, warmup_steps = 4000 (§5.3).
# §6.1: checkpoints written at 10-minute intervals (600 steps at 1.0 s/step), the last 20 averaged.
SAVE_INTERVAL_UPDATES=${SAVE_INTERVAL_UPDATES:-600}
AVERAGE_LAST=${AVERAGE_LAST:-20}
CHECKPOINTS="$WORK_DIR/checkpoints"
stage train train "$CHECKPOINTS" --arch vaswani_transformer_big --dropout 0.3 \
    --max-update "${MAX_UPDATE:-300000}" \
    --save-interval-updates "$SAVE_INTERVAL_UPDATES" --keep-interval-updates "$AVERAGE_LAST"
stage average average "$CHECKPOINTS" "$AVERAGE_LAST"

# §6.1: beam search with beam 4 and length penalty α = 0.6, maximum output length input + 50.
stage translate translate "$CHECKPOINTS/checkpoint_average.pt" test "$WORK_DIR/newstest2014.generate.txt"
score "$WORK_DIR/newstest2014.generate.txt" test
training_cost "$CHECKPOINTS" big
