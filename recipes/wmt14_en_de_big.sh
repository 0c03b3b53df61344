#!/usr/bin/env bash
# WMT 2014 English-German, Transformer (big): Table 2, 28.4 BLEU on newstest2014.
#   bash recipes/wmt14_en_de_big.sh
# Variables (WORK_DIR, DATA_DIR, RAW_DIR, NUM_GPUS, MAX_UPDATE, FP16, BF16, DROPOUT, EXTRA_TRAIN_ARGS, CPU, ...):
# recipes/common.sh.
source "$(dirname "$0")/common.sh"
stages prepare train average translate  # what STOP_AFTER may name
detect_devices  # before the downloads: no GPU is an error unless CPU=1

# §5.1: WMT 2014 English-German, about 4.5 million sentence pairs; byte-pair encoding with a shared
# source-target vocabulary of about 37000 tokens. Dev newstest2013, test newstest2014 (3003 sentences).
TARGET_LANG=de
prepare_wmt14 en-de --bpe-merges "${BPE_MERGES:-32000}"

# Table 3 "big": N = 6, d_model = 1024, d_ff = 4096, h = 16, P_drop = 0.3 (the architecture's).
# §5.2: 8 P100 GPUs, 300,000 steps (3.5 days) at about 1.0 s per step.
# §6.1: checkpoints written at 10-minute intervals (600 steps at 1.0 s/step), the last 20 averaged.
# Table 2: the training cost of the big model.
#                       architecture            steps  checkpoint every  average last  Table 2 row
train_average_translate vaswani_transformer_big 300000 600               20            big
