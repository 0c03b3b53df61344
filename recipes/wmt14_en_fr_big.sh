#!/usr/bin/env bash
# WMT 2014 English-French, Transformer (big): Table 2, 41.8 BLEU on newstest2014 (41.0 in the NIPS version).
#   bash recipes/wmt14_en_fr_big.sh
# Variables (WORK_DIR, DATA_DIR, RAW_DIR, NUM_GPUS, MAX_UPDATE, FP16, BF16, DROPOUT, EXTRA_TRAIN_ARGS, CPU, ...):
# docs/recipes.md, "Variables".
source "$(dirname "$0")/common.sh"
stages prepare train average translate  # what STOP_AFTER may name
detect_devices  # before the downloads: no GPU is an error unless CPU=1

# §5.1: the significantly larger WMT 2014 English-French dataset, 36M sentences, split into a 32000
# word-piece vocabulary (sentencepiece). Dev newstest2013, test newstest2014 (3003 sentences).
TARGET_LANG=fr
prepare_wmt14 en-fr --spm-vocab "${SPM_VOCAB:-32000}"

# Table 3 "big" with, for English-French, P_drop = 0.1 instead of 0.3 (§6.1; the architecture's).
# --paper big (vaswani_plugin/paper.py): §5.2's 300,000 steps (3.5 days on 8 P100 GPUs at about 1.0 s per step);
# §6.1's checkpoints at 10-minute intervals (600 steps), the last 20 averaged; Table 2's big row of the cost.
train_average_translate --arch vaswani_transformer_big_en_fr --paper big
