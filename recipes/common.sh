# The recipes' shared shell, sourced by each (quickstart.sh, wmt14.sh, table3.sh, wsj_parsing.sh): what must be shell.
# recipes/stages.py decides, runs and records the stages (docs/recipes.md, "Re-running a recipe"), recipes/training.py
# builds and runs fairseq-train, recipes/launch.py says how the run was started. No function sets a variable another
# reads: the run's facts (its launch, devices, stages, folders) are set once, read-only and exported for the Python
# side; the rest are arguments. Variables a user sets: docs/recipes.md, "Variables".

set -euo pipefail

REPO=$(cd -P "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)  # the recipes folder may be a link to it
PLUGIN="$REPO/vaswani_plugin"
say() { echo "[$RECIPE $(date +%H:%M:%S)] $*" >&2; }
die() { echo "$RECIPE: error: $*" >&2; exit 1; }
RECIPE=${RECIPE:-$(basename "$0" .sh)} DRY_RUN=${DRY_RUN:-0} REPORT=${REPORT:-1} PYTHON=${PYTHON:-python3}
export DRY_RUN REPORT PYTHON  # a stage's plan is what its command prints with DRY_RUN=1 PYTHON=python
declare -rx RECIPE PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
# A stop: SIGTERM, SIGUSR1 or SIGINT to the recipe's shell (a scheduler's, SLURM's --signal=B:USR1@N, kill, Ctrl-C)
# ends the stage that runs (stoppable), then the recipe: status 75 and the stop line (recipes/stops.py); the same
# command again goes on from there (docs/recipes.md, "Stopping a recipe"). Outside a stage, once what runs has ended
# (from here on: before the first command that takes time).
STOPS="TERM USR1 INT"
stopped() { "$PYTHON" -m recipes.stops line "$@" || echo "$RECIPE: stopped by SIG$2" >&2; exit 75; }  # WHAT SIGNAL
# shellcheck disable=SC2064  # each trap names its signal now
stop_anywhere() { local signal; for signal in $STOPS; do trap "stopped 'the recipe' $signal" "$signal"; done; }
stop_anywhere
# The variables' values checked; the paper's settings (§5-§6, Table 3) from their one home: PAPER_BEAM=4 ...
PAPER=$(DEV_SCORE=${DEV_SCORE:-} "$PYTHON" -m recipes.launch paper --shell) || exit 1
eval "$PAPER"
WORK_DIR=${WORK_DIR:-$PWD/work/$RECIPE}
if [ "$DRY_RUN" = 1 ]; then
    WORK_DIR=$(realpath -m "$WORK_DIR")  # read, never created
else
    mkdir -p "$WORK_DIR" && WORK_DIR=$(cd "$WORK_DIR" && pwd)
fi
DATA_DIR=${DATA_DIR:-$WORK_DIR/data}
ASIDE="$WORK_DIR/previous/$(date +%Y%m%d-%H%M%S)"  # where a stage's previous outputs go (recipes/stages.py)
declare -rx WORK_DIR DATA_DIR ASIDE DATA_BIN=$DATA_DIR/data-bin TEXT_DIR=$DATA_DIR/text  # the last two: prepared

# named OPTIONS ARGS...: each `--some-name VALUE` of ARGS into the caller's local variable some_name, one of the
# space-separated OPTIONS; anything else is an error.
named() {
    local allowed=" $1 " variable && shift
    while [ $# -gt 0 ]; do
        variable=${1#--} && variable=${variable//-/_}
        [[ "$1" == --* ]] && [ $# -ge 2 ] && [[ "$allowed" == *" $variable "* ]] ||
            die "internal: ${FUNCNAME[1]} takes$(printf -- ' --%s' $allowed | tr _ -), not $1"
        printf -v "$variable" '%s' "$2"
        shift 2
    done
}

# quoted WORDS...: the words as one command line. run COMMAND...: run it, or with DRY_RUN=1 print it (stdout) as it
# would run; run_to FILE COMMAND...: the same, its output written to FILE.
quoted() { local line; printf -v line '%q ' "$@"; echo "${line% }"; }
run() { if [ "$DRY_RUN" = 1 ]; then quoted "$@"; else "$@"; fi; }
run_to() {
    local file=$1 && shift
    if [ "$DRY_RUN" = 1 ]; then echo "$(quoted "$@") > $(quoted "$file")"; else "$@" > "$file"; fi
}

# stages NAME...: the recipe's stages, in order, which STOP_AFTER and RESTART_FROM may name (a typo is an error
# before anything runs) and whose order says which stage each runs after.
stages() {
    declare -grx STAGES="$*"
    local variable
    for variable in STOP_AFTER RESTART_FROM; do
        [ -z "${!variable:-}" ] || [[ " $STAGES " == *" ${!variable} "* ]] ||
            die "$variable=${!variable} is not a stage of $RECIPE; its stages: $STAGES"
    done
}

# stop_if_asked NAME: end the recipe here when STOP_AFTER names this stage.
stop_if_asked() {
    [[ " $STAGES " == *" $1 "* ]] || die "internal: stage $1 is not among the declared stages ($STAGES)"
    [ "${STOP_AFTER:-}" != "$1" ] ||
        { say "STOP_AFTER=$1: stopping here; run again without it for the later stages"; exit 0; }
}

# stage NAME [--output PATH]... FUNCTION ARGS...: FUNCTION ARGS as the stage NAME, whose outputs are the PATHs; its
# plan, what the engine compares with the stage's record, is what it prints under DRY_RUN=1, naming the interpreter
# `python` (another environment's path is no change of plan: versions are recorded apart).
stage() {
    local name=$1 outputs=() plan decision && shift
    while [ "$1" = --output ]; do outputs+=(--output "$2"); shift 2; done
    plan=$(DRY_RUN=1 PYTHON=python "$@" 2> /dev/null) || die "internal: stage $name cannot say what it runs"
    decision=$("$PYTHON" -m recipes.stages begin "$name" "${outputs[@]}" <<< "$plan") || exit 1
    if [ "${decision%% *}" != skip ]; then
        stoppable "stage $name" "$@"
        [ "$DRY_RUN" = 1 ] || "$PYTHON" -m recipes.stages finish "$name" || die "cannot write the record of $name"
    fi
    stop_if_asked "$name"
}

# stoppable [--passed-on] WHAT COMMAND...: COMMAND (a function too) as a job the shell waits for, which a stop ends
# (every process of it: recipes/stops.py's end) before the stop line naming WHAT; with --passed-on, the signal goes
# to COMMAND, which passes it on and ends in its own line and 75 (recipes/training.py). Else COMMAND's status;
# DRY_RUN=1: COMMAND as it is.
stoppable() {
    local passed_on='' && [ "$1" != --passed-on ] || { passed_on=1 && shift; }
    local what=$1 job received='' passed='' status signal && shift
    [ "$DRY_RUN" = 0 ] || { "$@"; return; }
    # shellcheck disable=SC2064  # each trap names its signal now
    for signal in $STOPS; do trap "received=\${received:-$signal}" "$signal"; done
    "$@" & job=$!
    while
        if [ -n "$received" ] && [ -z "$passed" ] && passed=1; then  # once; then the job's end is waited for
            if [ -n "$passed_on" ]; then kill -s "$received" "$job"; else "$PYTHON" -m recipes.stops end "$job"; fi
        fi
        wait "$job" && status=0 || status=$?  # a trapped signal ends a wait early
        kill -0 "$job" 2> /dev/null
    do :; done
    stop_anywhere
    [ -n "$received" ] || return "$status"
    [ "$status" != 75 ] || exit 75
    stopped "$what" "$received"
}

# detect_devices: how this run was started (SLURM task, torchrun worker, NUM_NODES or alone) and what it trains on
# (recipes/launch.py), read-only: LAUNCH, LAUNCH_ID, RUN_RANK (0 for the run that averages, translates and scores),
# RUN_NAME (node N, task N or rank N), WORKERS, NUM_GPUS, DEVICE_ARGS and EVAL_DEVICE_ARGS (fairseq's words); then
# run 0 holds WORK_DIR/.lock while it runs, and another run that is not of its job stops at once.
detect_devices() {
    local plan
    plan=$(CPU=${CPU:-} PRECISION=${PRECISION:-} FP16=${FP16:-} BF16=${BF16:-} "$PYTHON" -m recipes.launch devices \
        --python "$PYTHON" --shell-pid $$) || exit 1
    eval "$plan"
    [ "$DRY_RUN" = 0 ] && [ "$RUN_RANK" = 0 ] || return 0
    command -v flock > /dev/null || { say "warning: no flock on PATH: WORK_DIR is not locked"; return 0; }
    exec {WORK_LOCK}>> "$WORK_DIR/.lock"
    flock -w "${LOCK_WAIT:-30}" "$WORK_LOCK" ||
        die "$WORK_DIR is in use by another run ($(head -n 1 "$WORK_DIR/.lock")); wait for it to end, or use" \
            "another WORK_DIR"
    echo "$LAUNCH_ID, $(hostname) pid $$, since $(date '+%F %T')" > "$WORK_DIR/.lock"
    mkdir -p "$WORK_DIR/.stages"
    rm -f "$WORK_DIR"/.stages/*.decision  # the last launch's
}

# prepare_data MODULE [--raw PATH]... [NAME=VALUE]... -- ARGS...: the stage prepare, prepare.MODULE ARGS into DATA_DIR
# (download, tokenise, segment, binarise), its settings and raw data against the data's record (recipes/stages.py).
prepare_data() {
    stoppable "stage prepare" "$PYTHON" -m recipes.stages prepare "$@" || exit 1
    stop_if_asked prepare
}

# train [--stage NAME] [--first] [--share all|decoder] SAVE_DIR ARGS...: the stage NAME (default train), fairseq-train
# on DATA_BIN with the paper's set-up and these model ARGS (recipes/training.py), given the recipe's settings.
# A stop is passed on: training stops after its next update, saved, and the recipe exits with 75
# (training/preemption.py; docs/recipes.md, "When training stops early").
train() {
    local name=train
    [ "$1" != --stage ] || name=$2
    PRECISION=${PRECISION:-} FP16=${FP16:-} BF16=${BF16:-} TOKENS_PER_STEP=${TOKENS_PER_STEP:-} \
        MAX_TOKENS_PER_GPU=${MAX_TOKENS_PER_GPU:-} stoppable --passed-on "stage $name" "$PYTHON" -m recipes.training \
        "$@" || exit
    stop_if_asked "$name"
}

# dev_score bleu|f1 REFERENCE ARGS...: fairseq-train's arguments, one a line, for the dev set's score while training
# (the plugin task's --dev-score: tasks/dev_scores.py) with the decoding ARGS, as DEV_SCORE, DEV_SCORE_EVERY and
# DEV_SCORE_SENTENCES ask; none with DEV_SCORE=0. dev_bleu SUBWORDS: newstest2013's BLEU (the valid split: Table 3's
# dev set) with §6.1's decoding, the subwords joined as fairseq-generate's --post-process SUBWORDS.
dev_score() {
    [ "${DEV_SCORE:-1}" = 1 ] || return 0
    printf '%s\n' --dev-score "$1" --dev-score-reference "$2" "${@:3}" \
        --dev-score-interval-updates "${DEV_SCORE_EVERY:-0}" --dev-score-sentences "${DEV_SCORE_SENTENCES:-0}"
}
dev_bleu() {
    dev_score bleu "$TEXT_DIR/valid.$TARGET_LANG" --search "${SEARCH:-paper}" --gnmt-alpha "$PAPER_ALPHA" \
        --dev-score-args "{\"beam\": $PAPER_BEAM, \"max_len_a\": $PAPER_MAX_LEN_A, \"max_len_b\": $PAPER_MAX_LEN_B}" \
        --dev-score-post-process "$1"
}

# leave_the_rest_to_run_zero: every run of the recipe but run 0 stops after training, so that one alone writes the
# averaged checkpoint, the translations and the scores in the shared WORK_DIR.
leave_the_rest_to_run_zero() {
    [ "$RUN_RANK" = 0 ] ||
        { say "$RUN_NAME: training finished; ${RUN_NAME% *} 0 averages, translates and scores"; exit 0; }
}

# average SAVE_DIR N [available]: §6.1, the average of the last N checkpoints; `available`: of the last N interval
# checkpoints or as many as a short wall-clock budget left (checkpoint_last.pt alone when there is none).
average() {
    local count=$2
    if [ "${3:-}" = available ] && [ "$DRY_RUN" = 0 ]; then
        count=$(find "$1" -name 'checkpoint_*_*.pt' | wc -l)
        [ "$count" -gt 0 ] || { say "no interval checkpoint (the budget was too short): using checkpoint_last.pt"
                                cp "$1/checkpoint_last.pt" "$1/checkpoint_average.pt"; return; }
    fi
    run "$PYTHON" -m vaswani_plugin.checkpoints.average --inputs "$1" \
        --num-update-checkpoints $((count < $2 ? count : $2)) --output "$1/checkpoint_average.pt"
}

# budget_hours MINUTES: fairseq's --stop-time-hours for a wall-clock budget given in minutes.
budget_hours() {
    "$PYTHON" -c "import sys; m = float(sys.argv[1]); assert m > 0; print(m / 60)" "$1" 2>/dev/null ||
        die "BUDGET_MINUTES=$1 is not a positive number of minutes"
}

# translate --checkpoint FILE --subset SPLIT --output FILE [--beam B --alpha A --max-len-b N] [--batch-size N]
# [--post-process P]: fairseq-generate on every sentence of SPLIT: beam search of B hypotheses ranked by the GNMT length
# penalty α = A, at most input + N tokens (§6.1, its defaults; SEARCH=fairseq: fairseq's), N sentences a batch (128),
# subwords joined by P (fairseq's --post-process: subword_nmt, sentencepiece; none, the default: left as they are).
translate() {
    local checkpoint= subset= output= beam=$PAPER_BEAM alpha=$PAPER_ALPHA max_len_b=$PAPER_MAX_LEN_B batch_size=128 \
        post_process=none
    named "checkpoint subset output beam alpha max_len_b batch_size post_process" "$@"
    local joined=(--post-process "$post_process")
    [ "$post_process" != none ] || joined=()
    # shellcheck disable=SC2086
    run_to "$output" "$PYTHON" -m fairseq_cli.generate "$DATA_BIN" --user-dir "$PLUGIN" --task vaswani_translation \
        --path "$checkpoint" --gen-subset "$subset" --search "${SEARCH:-paper}" --beam "$beam" \
        --gnmt-alpha "$alpha" --max-len-a "$PAPER_MAX_LEN_A" --max-len-b "$max_len_b" --batch-size "$batch_size" \
        --required-batch-size-multiple 1 "${joined[@]}" $EVAL_DEVICE_ARGS ${EXTRA_GENERATE_ARGS:-}
}

# score --generate-output FILE --subset SPLIT [--examples N --source FILE]: both BLEU lines of §6.1 against the
# plain reference of SPLIT in TARGET_LANG, kept in FILE.bleu.
score() {
    local generate_output= subset= examples= source= more=()
    named "generate_output subset examples source" "$@"
    [ -z "$examples" ] || more=(--examples "$examples" --source "$source")
    local command=("$PYTHON" -m vaswani_plugin.scoring.bleu --generate-output "$generate_output"
                   --reference "$TEXT_DIR/$subset.$TARGET_LANG" --target-lang "$TARGET_LANG" "${more[@]}")
    if [ "$DRY_RUN" = 1 ]; then run "${command[@]}"; return; fi
    stoppable "the scoring" teed "$generate_output.bleu" "${command[@]}"
}
teed() { local file=$1 && shift; "$@" | tee "$file"; }  # teed FILE COMMAND...: its output on stdout and in FILE

# write_report: WORK_DIR/report.md and WORK_DIR/curves/ (vaswani_plugin/tools/run_report.py), at the end.
write_report() {
    [ "$REPORT" = 1 ] || { say "REPORT=0: no curves or report.md (python -m vaswani_plugin.tools.run_report" \
                               "$WORK_DIR draws them)"; return; }
    run "$PYTHON" -m vaswani_plugin.tools.run_report "$WORK_DIR" || die "writing $WORK_DIR/report.md failed"
}
