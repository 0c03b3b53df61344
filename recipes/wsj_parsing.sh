#!/usr/bin/env bash
# English constituency parsing, §6.3 / Table 4: a 4-layer Transformer with d_model = 1024 trained on the WSJ
# part of the Penn Treebank (40K sentences) reaches 91.3 F1 on section 23 (WSJ only).
#   WSJ_DIR=/path/to/treebank_3/parsed/mrg/wsj bash recipes/wsj_parsing.sh        # the paper's setting (GPUs)
#   SAMPLE_DIR=../shared/data/ptb_sample bash recipes/wsj_parsing.sh              # public sample, CPU-sized
# Variables (all optional but one of WSJ_DIR / SAMPLE_DIR):
#   WSJ_DIR            the LDC treebank's WSJ folder (sections 00..24): 02-21 train, 22 valid, 23 test
#   SAMPLE_DIR         NLTK's public WSJ sample instead: a small model trained on CPU for BUDGET_MINUTES (30)
#                      with GUM's trees, unknown-word signatures and PRECISION=auto by default (below); with
#                      MAX_UPDATE for that many updates instead, the same run on any machine (the clock too if set)
#   EXTRA_TRAIN_TREES  more training tree files or folders of .ptb/.mrg files, space-separated, for training only
#                      (semi-supervised; with SOURCE_VOCABULARY=32000), e.g. ../shared/data/gum_const/const (GUM,
#                      14,597 trees); dev and test stay the treebank's; the log says which trees the model saw.
#                      SAMPLE_DIR's default: $SAMPLE_DIR/../gum_const/const (an error if missing); none: none
#   FINETUNE_EPOCHS    SAMPLE_DIR with extra trees: the budget's end on the sample's own trees alone (stage train),
#                      after the rest on all of them (stage pretrain, WORK_DIR/pretrain), which stops when the time
#                      left is what this many epochs of the sample take at its pace, or with MAX_UPDATE when the
#                      updates left are theirs (default 10; 0: all trees throughout); docs/parsing.md, "Fine-tuning
#                      on the sample's own trees"
#   FINETUNE_MINUTES   instead of FINETUNE_EPOCHS: the budget's last minutes on the sample's own trees
#   SOURCE_VOCABULARY  source words kept (§6.3: 16000; 32000 semi-supervised)
#   UNKNOWN_WORDS      words outside the vocabulary: unk (§6.3, the WSJ_DIR default: one <unk>) or signatures (the
#                      SAMPLE_DIR default: one symbol per word shape, <unk-C-ing>..., prepare.word_signatures; the
#                      vocabulary is then the words seen twice in the treebank's own training trees)
#   TREEBANK_COPIES    the treebank's training trees this many times in the training data, against the extra ones
#                      (default 1; the sample: 2)
#   LEAVES             the tree sequences' leaves: words (default; the decoder sees the word it placed, one
#                      dictionary and embedding for both sides) or XX (Vinyals & Kaiser's placeholders)
#   DROPOUT, ATTENTION_DROPOUT, LR_FACTOR   what §6.3 tuned on section 22 (defaults: the architecture's 0.1 and
#                      0, and eq. 3 unscaled; on the sample 0.35); the recipe scores section 22 (valid) too, for that
#                      tuning
#   UNCONSTRAINED      1: also decode without the tree constraint (outputs repaired into trees afterwards) and
#                      print both F1s; by default only the constrained decoding (--parse-constrained)
#   DEV_SCORE          WSJ_DIR: 1 (default), section 22's F1 at every checkpoint, §6.3's constrained decoding; 0: off.
#                      The sample: 0 (default), no validation; 1: 100 of its sentences every 1,000 updates and the
#                      loss at each checkpoint, which cost 11 % of the budget's updates (docs/results.md)
#   BEAM (21), ALPHA (0.3), MAX_UPDATE, and those of every recipe: docs/recipes.md, "Variables".
source "$(dirname "$0")/common.sh"
if [ -n "${WSJ_DIR:-}" ]; then
    TREEBANK=(--wsj-dir "$WSJ_DIR")
    UNKNOWN_WORDS=${UNKNOWN_WORDS:-unk}
elif [ -n "${SAMPLE_DIR:-}" ]; then
    TREEBANK=(--sample-dir "$SAMPLE_DIR")
    CPU=${CPU:-1}  # the sample is sized for a CPU
    # What lifts the sample from 67 to 80 F1 in 30 minutes (docs/parsing.md, "The public sample"): GUM's trees
    # (CC-BY) beside it as ../shared/data lays them out, the sample's trees twice against them, unknown words as
    # signatures, bfloat16 where the CPU multiplies it natively (PRECISION=auto, as the quickstart).
    EXTRA_TRAIN_TREES=${EXTRA_TRAIN_TREES-$(dirname "$SAMPLE_DIR")/gum_const/const}
    TREEBANK_COPIES=${TREEBANK_COPIES:-2} UNKNOWN_WORDS=${UNKNOWN_WORDS:-signatures}
    [ -n "${PRECISION:-}${FP16:-}${BF16:-}" ] || PRECISION=auto  # on a CPU too: bfloat16 where it is native
else
    die "set WSJ_DIR (the LDC Penn Treebank's parsed/mrg/wsj) or SAMPLE_DIR (e.g. ../shared/data/ptb_sample)"
fi
# The decoding stages, DECODING_SPLIT: section 22 (valid) for tuning, section 23 (test); with UNCONSTRAINED=1 each
# also without the tree constraint.
DECODE_STAGES=(constrained_valid constrained_test)
[ "${UNCONSTRAINED:-0}" != 1 ] ||
    DECODE_STAGES=(constrained_valid unconstrained_valid constrained_test unconstrained_test)
[ "${EXTRA_TRAIN_TREES:-}" != none ] || EXTRA_TRAIN_TREES=
# The sample's limits: the clock (CLOCK minutes) by default; MAX_UPDATE: a count, the clock only if set too.
CLOCK=${BUDGET_MINUTES:-30} COUNT=()
if [ -n "${MAX_UPDATE:-}" ]; then
    [[ $MAX_UPDATE =~ ^[1-9][0-9]*$ ]] || die "MAX_UPDATE=$MAX_UPDATE is not a positive number of updates"
    CLOCK=${BUDGET_MINUTES:-} COUNT=(--max-update "$MAX_UPDATE")
fi
# The sample with extra trees: pre-trained on all of them, then fine-tuned on its own for about FINETUNE_EPOCHS
# epochs (the pre-training leaves their time, or their updates: the plugin task's --leave-epochs) or for
# FINETUNE_MINUTES.
PRETRAIN=()  # the pre-training's stage: "on", then its minutes (none: no clock) and the epochs it leaves (none)
if [ -n "${SAMPLE_DIR:-}" ] && [ -n "${EXTRA_TRAIN_TREES:-}" ]; then
    [ -z "$CLOCK" ] || budget_hours "$CLOCK" > /dev/null
    [ -z "${FINETUNE_MINUTES:-}" ] || [ -z "${FINETUNE_EPOCHS:-}" ] || die "set FINETUNE_EPOCHS or FINETUNE_MINUTES, \
not both"
    [ -z "${FINETUNE_MINUTES:-}" ] || [ -n "$CLOCK" ] || die "FINETUNE_MINUTES is a share of BUDGET_MINUTES: set \
it too, or FINETUNE_EPOCHS with MAX_UPDATE alone"
    read -r -a PRETRAIN < <("$PYTHON" -c 'import sys; b, m, e = float(sys.argv[1] or 0), sys.argv[2], float(sys.argv[3])
f = float(m or 0); assert e >= 0 and 0 <= f and (f < b or not m); clock = lambda t: f"{t:g}" if t else "-"
print(f"on {clock(b - f)} -" if f else f"on {clock(b)} {e:g}" if e and not m else "")' \
        "$CLOCK" "${FINETUNE_MINUTES:-}" "${FINETUNE_EPOCHS:-10}" 2> /dev/null ||
        echo error) || true
    [ "${PRETRAIN[0]:-}" != error ] || [ -z "${FINETUNE_MINUTES:-}" ] || die "FINETUNE_MINUTES=$FINETUNE_MINUTES \
must be 0 or more and less than BUDGET_MINUTES=$CLOCK"
    [ "${PRETRAIN[0]:-}" != error ] || die "FINETUNE_EPOCHS=$FINETUNE_EPOCHS must be 0 or more"
fi
stages prepare ${PRETRAIN[0]:+pretrain} train average "${DECODE_STAGES[@]}"  # what STOP_AFTER may name
for path in ${EXTRA_TRAIN_TREES:-}; do
    [ -e "$path" ] || die "EXTRA_TRAIN_TREES: $path does not exist (the sample's default: GUM's trees beside it, \
../shared/data/gum_const/const); set EXTRA_TRAIN_TREES to GUM's const folder, or to none for the WSJ sample alone"
done
detect_devices

# Words in, linearised trees out (Vinyals & Kaiser 2015): "(S (NP The cat )NP (VP sat )VP . )S", or with XX
# leaves "(S (NP XX XX )NP (VP XX )VP XX )S"; a vocabulary of the 16K most frequent words (§6.3; the sample's:
# the words it has twice, every other word as a signature of its shape).
LEAVES=${LEAVES:-words}
# The data's record (recipes/stages.py): its raw folders and these settings, compared before and written after.
RAW=(--raw "${WSJ_DIR:-$SAMPLE_DIR}")
for EXTRA in ${EXTRA_TRAIN_TREES:-}; do RAW+=(--raw "$EXTRA"); done
# shellcheck disable=SC2086
prepare_data wsj_parsing "${RAW[@]}" "LEAVES=$LEAVES" "UNKNOWN_WORDS=$UNKNOWN_WORDS" \
    "TREEBANK_COPIES=${TREEBANK_COPIES:-1}" "SOURCE_VOCABULARY=${SOURCE_VOCABULARY:-16000}" -- "${TREEBANK[@]}" \
    --leaves "$LEAVES" --unknown-words "$UNKNOWN_WORDS" --treebank-copies "${TREEBANK_COPIES:-1}" \
    --source-vocabulary "${SOURCE_VOCABULARY:-16000}" ${EXTRA_TRAIN_TREES:+--extra-train $EXTRA_TRAIN_TREES}
# Word leaves: one dictionary, so one embedding for the input, the decoder's input and its output (§3.4).
SHARE=all
[ "$LEAVES" = words ] || SHARE=decoder

# §6.3: 4 layers, d_model = 1024, all else as the base model (d_ff 2048, h 8, P_drop 0.1): the architecture
# vaswani_transformer_parsing; batches of ~25,000 tokens, Adam and eq. 3 with 4,000 warmup steps, label
# smoothing 0.1 (§5). What §6.3 tuned goes to fairseq only when set: the architecture's and eq. 3's otherwise.
TUNED=(${DROPOUT:+--dropout "$DROPOUT"} ${ATTENTION_DROPOUT:+--attention-dropout "$ATTENTION_DROPOUT"})
CHECKPOINTS="$WORK_DIR/checkpoints" BUDGET=()
if [ -n "${WSJ_DIR:-}" ]; then
    MODEL_ARGS=(--arch vaswani_transformer_parsing "${TUNED[@]}" ${LR_FACTOR:+--factor "$LR_FACTOR"}
                --max-update "${MAX_UPDATE:-$PAPER_BASE_STEPS}"
                --save-interval-updates "${SAVE_INTERVAL_UPDATES:-$PAPER_BASE_CHECKPOINT_EVERY}"
                --keep-interval-updates "${AVERAGE_LAST:-$PAPER_BASE_AVERAGE}")
else
    # The sample (3,253 training trees) on 2 CPU cores: the quickstart's small model with the parsing depth
    # (4 layers) and a fixed wall-clock budget, at half the quickstart's peak rate (eq. 3 factor 0.35, peak
    # 1.8e-3): at 3.6e-3 with dropout 0.2 the model ignored its input and became a tree-sequence language
    # model (F1 2.6). With the defaults (GUM, signatures, bfloat16): test F1 80.06, dev 80.50 in 30 minutes (2
    # cores, 2026-11-26; the sample alone: 68.17, 66.97); see docs/parsing.md, "The public sample".
    MODEL_ARGS=(--arch vaswani_transformer_parsing "${PAPER_MODEL_PARSING_SAMPLE[@]}" "${TUNED[@]}"
                --warmup-updates 300 --factor "${LR_FACTOR:-0.35}"
                --max-epoch "${MAX_EPOCH:-200}" --save-interval-updates "${SAVE_INTERVAL_UPDATES:-50}" "${COUNT[@]}")
    BUDGET=(--keep-interval-updates "${AVERAGE_LAST:-5}")
    [ -z "$CLOCK" ] || BUDGET=(--stop-time-hours "$(budget_hours "$CLOCK")" "${BUDGET[@]}")
    TOKENS_PER_STEP=${TOKENS_PER_STEP:-2048} MAX_TOKENS_PER_GPU=${MAX_TOKENS_PER_GPU:-2048}
    DEV_SCORE=${DEV_SCORE:-0} DEV_SCORE_EVERY=${DEV_SCORE_EVERY:-1000} DEV_SCORE_SENTENCES=${DEV_SCORE_SENTENCES:-100}
fi
# Section 22's F1 while training (DEV_SCORE), decoded as the decoding stages below decode it.
mapfile -t DEV_ARGS < <(dev_score f1 "$DATA_DIR" --parse-constrained --search "${SEARCH:-paper}" \
    --gnmt-alpha "${ALPHA:-$PAPER_PARSING_ALPHA}" --dev-score-args "{\"beam\": ${BEAM:-$PAPER_PARSING_BEAM}, \"max_len_a\": $PAPER_MAX_LEN_A, \"max_len_b\": $PAPER_PARSING_MAX_LEN_B}")
[ "${DEV_SCORE:-1}" = 1 ] || [ -n "${WSJ_DIR:-}" ] || DEV_ARGS=(--disable-validation)
# Fine-tuning (FINETUNE_EPOCHS, FINETUNE_MINUTES): the pre-training's model, Adam's moments and step go on (eq. 3
# continued) on the sample's own trees (prepare.wsj_parsing's train_treebank split) until the whole budget's
# training time (fairseq's, counted on from the pre-training's); a fine-tuning resumed after a stop starts its epochs
# over (--reset-dataloader: the mixed corpus's place means nothing here).
FINETUNE=() PRETRAINED="$WORK_DIR/pretrain"
if [ -n "${PRETRAIN[0]:-}" ]; then
    LIMIT=() LEAVE=()
    [ "${PRETRAIN[1]}" = - ] || LIMIT=(--stop-time-hours "$(budget_hours "${PRETRAIN[1]}")")
    [ "${PRETRAIN[2]}" = - ] || LEAVE=(--leave-epochs "${PRETRAIN[2]}" --leave-epochs-of train_treebank)
    train --stage pretrain --share "$SHARE" "$PRETRAINED" "${MODEL_ARGS[@]}" "${LIMIT[@]}" "${LEAVE[@]}" \
        --keep-interval-updates 1 "${DEV_ARGS[@]}" --log-interval 10
    FINETUNE=(--train-subset train_treebank --continue-once "$PRETRAINED/checkpoint_last.pt" --reset-dataloader)
fi
train --share "$SHARE" "$CHECKPOINTS" "${MODEL_ARGS[@]}" "${BUDGET[@]}" "${FINETUNE[@]}" "${DEV_ARGS[@]}" \
    --log-interval 10
leave_the_rest_to_run_zero
stage average --output "$CHECKPOINTS/checkpoint_average.pt" average "$CHECKPOINTS" "${AVERAGE_LAST:-5}" available

# §6.3 decoding (vaswani_plugin/paper.py's PARSING_*): beam 21, length penalty α = 0.3, at most input + 300
# tokens (32 sentences a batch; the tree tokens are whole words, none joined), constrained to well-formed trees
# over the sentence's words (--parse-constrained); with UNCONSTRAINED=1 also without the constraint, the outputs
# repaired into trees. Every output becomes a tree over its words and is scored with EVALB's COLLINS.prm.
SCORES=()
for split in valid test; do
    for name in "${DECODE_STAGES[@]}"; do
        [ "${name#*_}" = "$split" ] || continue
        if [ "${name%_*}" = constrained ]; then
            out=$WORK_DIR/$split constraint=--parse-constrained title=constrained
        else
            out=$WORK_DIR/$split.unconstrained constraint= title="unconstrained, repaired"
        fi
        EXTRA_GENERATE_ARGS="$constraint ${EXTRA_GENERATE_ARGS:-}" stage "$name" --output "$out.generate.txt" \
            --output "$out.parsed.trees" --output "$out.f1" --output "$out.f1.number" translate \
            --checkpoint "$CHECKPOINTS/checkpoint_average.pt" --subset "$split" --output "$out.generate.txt" \
            --beam "${BEAM:-$PAPER_PARSING_BEAM}" --alpha "${ALPHA:-$PAPER_PARSING_ALPHA}" \
            --max-len-b "$PAPER_PARSING_MAX_LEN_B" --batch-size 32
        say "$split, $title: labelled bracketing F1 (EVALB, COLLINS.prm)"
        parses=("$PYTHON" -m vaswani_plugin.scoring.parses --generate-output "$out.generate.txt"
                --words "$DATA_DIR/text/$split.words" --tags "$DATA_DIR/gold/$split.tags"
                --gold "$DATA_DIR/gold/$split.trees" --output "$out.parsed.trees" --f1-file "$out.f1.number")
        if [ "$DRY_RUN" = 1 ]; then run "${parses[@]}"; continue; fi
        "${parses[@]}" | tee "$out.f1"
        SCORES+=("$split, $title: F1 $(cat "$out.f1.number")")
    done
    # The floor: every sentence's right-branching tree, (S w1 (S w2 ... (S w(n-1) wn))).
    floor=$WORK_DIR/$split.right_branching.f1
    run_to "$floor" "$PYTHON" -m vaswani_plugin.scoring.parses --right-branching --words "$DATA_DIR/text/$split.words" \
        --tags "$DATA_DIR/gold/$split.tags" --gold "$DATA_DIR/gold/$split.trees" --f1-file "$floor.number"
    [ "$DRY_RUN" = 1 ] || SCORES+=("$split, right-branching baseline: F1 $(cat "$floor.number")")
done
write_report
[ "$DRY_RUN" = 0 ] || exit 0
for line in "${SCORES[@]}"; do say "$line"; done
also=
[ "${UNCONSTRAINED:-0}" != 1 ] || also=" (without the constraint: {valid,test}.unconstrained.*)"
say "done: parsed trees in $WORK_DIR/{valid,test}.parsed.trees, scores in $WORK_DIR/{valid,test}.f1$also"
