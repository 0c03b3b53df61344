#!/usr/bin/env bash
# WMT 2014 English-French, Transformer (big): Table 2, 41.8 BLEU on newstest2014 (41.0 in the NIPS version).
#   bash recipes/wmt14_en_fr_big.sh
# Variables (WORK_DIR, DATA_DIR, RAW_DIR, NUM_GPUS, MAX_UPDATE, PRECISION, DROPOUT, EXTRA_TRAIN_ARGS, CPU, ...):
# docs/recipes.md, "Variables". Its stages and their commands: recipes/wmt14.sh.
RECIPE=${RECIPE:-wmt14_en_fr_big} exec bash "$(dirname "$0")/wmt14.sh" en-fr vaswani_transformer_big_en_fr big
