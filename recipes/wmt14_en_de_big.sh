#!/usr/bin/env bash
# WMT 2014 English-German, Transformer (big): Table 2, 28.4 BLEU on newstest2014.
#   bash recipes/wmt14_en_de_big.sh
# Variables (WORK_DIR, DATA_DIR, RAW_DIR, NUM_GPUS, MAX_UPDATE, FP16, BF16, DROPOUT, EXTRA_TRAIN_ARGS, CPU, ...):
# docs/recipes.md, "Variables".
source "$(dirname "$0")/common.sh"
stages prepare train average translate  # what STOP_AFTER may name
detect_devices  # before the downloads: no GPU is an error unless CPU=1

# §5.1: WMT 2014 English-German, about 4.5 million sentence pairs; byte-pair encoding with a shared
# source-target vocabulary of about 37000 tokens. Dev newstest2013, test newstest2014 (3003 sentences).
TARGET_LANG=de
prepare_wmt14 en-de --bpe-merges "${BPE_MERGES:-32000}"

# Table 3 "big": N = 6, d_model = 1024, d_ff = 4096, h = 16, P_drop = 0.3 (the architecture's).
# --paper big (vaswani_plugin/paper.py): §5.2's 300,000 steps (3.5 days on 8 P100 GPUs at about 1.0 s per step);
# §6.1's checkpoints at 10-minute intervals (600 steps), the last 20 averaged; Table 2's big row of the cost.
train_average_translate --arch vaswani_transformer_big --paper big
