#!/usr/bin/env bash
# WMT 2014 English-French, Transformer (big): Table 2, 41.8 BLEU on newstest2014 (41.0 in the NIPS version).
#   bash recipes/wmt14_en_fr_big.sh
# Variables (WORK_DIR, DATA_DIR, RAW_DIR, NUM_GPUS, MAX_UPDATE, FP16, BF16, DROPOUT, EXTRA_TRAIN_ARGS, CPU, ...):
# recipes/common.sh.
source "$(dirname "$0")/common.sh"
stages prepare train average translate  # what STOP_AFTER may name
detect_devices  # before the downloads: no GPU is an error unless CPU=1

# §5.1: the significantly larger WMT 2014 English-French dataset, 36M sentences, split into a 32000
# word-piece vocabulary (sentencepiece). Dev newstest2013, test newstest2014 (3003 sentences).
TARGET_LANG=fr
prepare_wmt14 en-fr --spm-vocab "${SPM_VOCAB:-32000}"

# Table 3 "big" with, for English-French, P_drop = 0.1 instead of 0.3 (§6.1; the architecture's).
# §5.2: the big models train for 300,000 steps (3.5 days) at about 1.0 s per step.
# §6.1: checkpoints written at 10-minute intervals (600 steps at 1.0 s/step), the last 20 averaged.
# Table 2: the training cost of the big model.
#                       architecture                  steps  checkpoint every  average last  Table 2 row
train_average_translate vaswani_transformer_big_en_fr 300000 600               20            big
