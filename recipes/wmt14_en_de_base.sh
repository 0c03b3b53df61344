#!/usr/bin/env bash
# WMT 2014 English-German, Transformer (base): Table 2, 27.3 BLEU on newstest2014.
#   bash recipes/wmt14_en_de_base.sh
# Variables (WORK_DIR, DATA_DIR, RAW_DIR, NUM_GPUS, MAX_UPDATE, PRECISION, DROPOUT, EXTRA_TRAIN_ARGS, CPU, ...):
# docs/recipes.md, "Variables". Its stages and their commands: recipes/wmt14.sh.
RECIPE=${RECIPE:-wmt14_en_de_base} exec bash "$(dirname "$0")/wmt14.sh" en-de vaswani_transformer base
