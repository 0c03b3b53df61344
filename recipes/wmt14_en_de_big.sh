#!/usr/bin/env bash
# WMT 2014 English-German, Transformer (big): Table 2, 28.4 BLEU on newstest2014.
#   bash recipes/wmt14_en_de_big.sh
# Variables (WORK_DIR, DATA_DIR, RAW_DIR, NUM_GPUS, MAX_UPDATE, PRECISION, DROPOUT, EXTRA_TRAIN_ARGS, CPU, ...):
# docs/recipes.md, "Variables". Its stages and their commands: recipes/wmt14.sh.
RECIPE=${RECIPE:-wmt14_en_de_big} exec bash "$(dirname "$0")/wmt14.sh" en-de vaswani_transformer_big big
