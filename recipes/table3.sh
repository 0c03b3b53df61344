#!/usr/bin/env bash
# Table 3: variations on the base model, English-German, measured on newstest2013 (the dev set) without
# checkpoint averaging, with the beam search of §6.1. One row per run:
#   bash recipes/table3.sh A|B|C|D|E|big
# Each variant of the row trains its own model (100,000 steps; big 300,000) and prints its dev perplexity
# (per word-piece) and BLEU next to the paper's. Variables as every recipe (docs/recipes.md, "Variables"); the data
# preparation is shared with the other En-De recipes when they use the same DATA_DIR.
ROW=${1:-}
RECIPE=table3
source "$(dirname "$0")/common.sh"
TARGET_LANG=de

# name | fairseq-train arguments over the base model | paper dev PPL | paper dev BLEU | paper params (M)
case "$ROW" in
A) VARIANTS=(
    "h=1 dk=dv=512|--encoder-attention-heads 1 --decoder-attention-heads 1 --attention-key-dim 512 --attention-value-dim 512|5.29|24.9|"
    "h=4 dk=dv=128|--encoder-attention-heads 4 --decoder-attention-heads 4 --attention-key-dim 128 --attention-value-dim 128|5.00|25.5|"
    "h=16 dk=dv=32|--encoder-attention-heads 16 --decoder-attention-heads 16 --attention-key-dim 32 --attention-value-dim 32|4.91|25.8|"
    "h=32 dk=dv=16|--encoder-attention-heads 32 --decoder-attention-heads 32 --attention-key-dim 16 --attention-value-dim 16|5.01|25.4|") ;;
B) VARIANTS=(
    "dk=16|--attention-key-dim 16|5.16|25.1|58"
    "dk=32|--attention-key-dim 32|5.01|25.4|60") ;;
C) VARIANTS=(
    "N=2|--encoder-layers 2 --decoder-layers 2|6.11|23.7|36"
    "N=4|--encoder-layers 4 --decoder-layers 4|5.19|25.3|50"
    "N=8|--encoder-layers 8 --decoder-layers 8|4.88|25.5|80"
    "dmodel=256 dk=dv=32|--encoder-embed-dim 256 --decoder-embed-dim 256|5.75|24.5|28"
    "dmodel=1024 dk=dv=128|--encoder-embed-dim 1024 --decoder-embed-dim 1024|4.66|26.0|168"
    "dff=1024|--encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024|5.12|25.4|53"
    "dff=4096|--encoder-ffn-embed-dim 4096 --decoder-ffn-embed-dim 4096|4.75|26.2|90") ;;
D) VARIANTS=(
    "Pdrop=0.0|--dropout 0.0|5.77|24.6|"
    "Pdrop=0.2|--dropout 0.2|4.95|25.5|"
    "els=0.0|--label-smoothing 0.0|4.67|25.3|"
    "els=0.2|--label-smoothing 0.2|5.47|25.7|") ;;
E) VARIANTS=(
    "learned positions|--encoder-learned-pos --decoder-learned-pos|4.92|25.7|") ;;
big) VARIANTS=(
    "big|--arch vaswani_transformer_big|4.33|26.4|213") ;;  # P_drop = 0.3: the architecture's
*) die "usage: bash recipes/table3.sh A|B|C|D|E|big (a row of Table 3)" ;;
esac

STAGE_NAMES=(prepare)
for index in "${!VARIANTS[@]}"; do STAGE_NAMES+=("train-$ROW-$((index + 1))" "translate-$ROW-$((index + 1))"); done
stages "${STAGE_NAMES[@]}"  # what STOP_AFTER may name

# §5.1 data as the base recipe: WMT 2014 English-German, shared BPE vocabulary of about 37000 tokens.
detect_devices
prepare_data wmt14 -- --pair en-de --bpe-merges "${BPE_MERGES:-32000}"

results=()
for index in "${!VARIANTS[@]}"; do
    IFS='|' read -r name variant_args paper_ppl paper_bleu paper_params <<< "${VARIANTS[$index]}"
    run="$ROW-$((index + 1))"
    steps=$PAPER_BASE_STEPS
    [ "$ROW" = big ] && steps=$PAPER_BIG_STEPS
    say "Table 3 ($ROW) $name"
    # The base model of §5 (P_drop = 0.1: the architecture's) with this variant's changes; the last --option
    # wins, so variants override. Each variant is independent of the others (--first).
    # shellcheck disable=SC2086
    train --stage "train-$run" --first "$WORK_DIR/$run" --arch vaswani_transformer \
        --max-update "${MAX_UPDATE:-$steps}" --save-interval-updates 0 $variant_args
    [ "$RUN_RANK" = 0 ] || continue  # run 0 alone validates, translates and scores
    # Dev perplexity per word-piece on all of newstest2013, and BLEU with beam 4, α = 0.6, no averaging.
    # shellcheck disable=SC2086
    validate=("$PYTHON" -m fairseq_cli.validate "$DATA_BIN" --user-dir "$PLUGIN" --task translation
              --path "$WORK_DIR/$run/checkpoint_last.pt" --valid-subset valid --batch-size 128
              --required-batch-size-multiple 1 $EVAL_DEVICE_ARGS)
    if [ "$DRY_RUN" = 1 ]; then
        run "${validate[@]}"
    else
        ppl=$("${validate[@]}" 2>&1 | sed -n "s/.*| ppl \([0-9.]*\) |.*/\1/p" | tail -n 1)
        [ -n "$ppl" ] || die "fairseq-validate printed no perplexity for $run"
    fi
    output="$WORK_DIR/$run/newstest2013.generate.txt"
    stage "translate-$run" --output "$output" translate --checkpoint "$WORK_DIR/$run/checkpoint_last.pt" \
        --subset valid --output "$output" --post-process subword_nmt
    if [ "$DRY_RUN" = 1 ]; then
        score --generate-output "$output" --subset valid
        continue
    fi
    bleu=$(score --generate-output "$output" --subset valid | sed -n 's/^BLEU (tokenised, compound-split) = \([0-9.]*\).*/\1/p')
    params=$(sed -n 's/.*num. shared model params: \([0-9,]*\).*/\1/p' "$WORK_DIR/$run/train.log" | tail -n 1 | tr -d ,)
    results+=("$(printf '%-22s %8s (%5s) %9s (%4s) %9.1fM (%sM)' "$name" "$ppl" "$paper_ppl" "$bleu" "$paper_bleu" \
        "$(awk "BEGIN { print $params / 1e6 }")" "${paper_params:--}")")
done

leave_the_rest_to_run_zero
[ "$DRY_RUN" = 0 ] || exit 0
echo "Table 3 row ($ROW), dev = newstest2013, no checkpoint averaging; ours (paper's)"
printf '%-22s %16s %16s %15s\n' variant "PPL (dev)" "BLEU (dev)" "params"
printf '%s\n' "${results[@]}"
