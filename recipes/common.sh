# The recipes' shared shell, sourced by every recipe (quickstart.sh, wmt14_*.sh, table3.sh, wsj_parsing.sh), not run on
# its own: how a run was started (recipes/launch.py), the WORK_DIR lock, stages through the one engine
# (recipes/stages.py: skip, run, resume or refuse) and the commands of the paper's pipeline. The variables every
# recipe reads (WORK_DIR, NUM_GPUS, MAX_UPDATE, DRY_RUN, ...): docs/recipes.md, "Variables"; SLURM, torchrun and
# several nodes: docs/recipes.md, "Several GPUs, processes or nodes"; re-runs: "Re-running a recipe".

set -euo pipefail

REPO=$(cd -P "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)  # the recipes folder may be a link to it
PLUGIN="$REPO/vaswani_plugin"
RECIPE=${RECIPE:-$(basename "$0" .sh)}
WORK_DIR=${WORK_DIR:-$PWD/work/$RECIPE}
DRY_RUN=${DRY_RUN:-0}
PYTHON=${PYTHON:-python3}
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"

# The recipe's state: each function below says which of these it sets, and stops with one line if one it reads is
# unset (needs), so that a recipe calling them out of order says so.
STAGES=()                       # stages: the recipe's stages, in order
LAUNCH= LAUNCH_ID= RUN_NAME= WORKERS= MASTER_ADDR=${MASTER_ADDR:-} MASTER_PORT=${MASTER_PORT:-}  # detect_devices
RUN_RANK=0 DEVICE_ARGS=() EVAL_DEVICE_ARGS=()       # detect_devices (RUN_RANK 0: the run that writes the records)
MAX_TOKENS= UPDATE_FREQ=        # batch_size_for_workers
PREPARED_DIR= DATA_BIN=${DATA_BIN:-} TEXT_DIR= SUBWORDS=   # prepare_data, prepare_wmt14
PREVIOUS_STAGE=                 # begun: the stage before the next one
ASIDE="$WORK_DIR/previous/$(date +%Y%m%d-%H%M%S)"  # where a stage's previous outputs go (recipes/stages.py)
# §3.4: one matrix for source and target embeddings and the pre-softmax projection (a joined dictionary);
# the parsing recipe, whose source words and target tree tokens have dictionaries of their own, shares only
# the target embedding with the pre-softmax projection.
EMBEDDING_SHARING=(--share-all-embeddings)

say() { echo "[$RECIPE $(date +%H:%M:%S)] $*" >&2; }
die() { echo "$RECIPE: error: $*" >&2; exit 1; }
[[ "$DRY_RUN" =~ ^[01]$ ]] || die "DRY_RUN=$DRY_RUN: use 1 (print what would run, run nothing) or 0"
REPORT=${REPORT:-1}
[[ "$REPORT" =~ ^[01]$ ]] || die "REPORT=$REPORT: use 1 (draw the curves and write report.md) or 0"
[[ "${STALL_MINUTES:-10}" =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
    die "STALL_MINUTES=$STALL_MINUTES: use the minutes a rank may wait for the others (default 10; 0: no watchdog)"
if [ "$DRY_RUN" = 1 ]; then
    WORK_DIR=$(realpath -m "$WORK_DIR")  # read, never created
else
    mkdir -p "$WORK_DIR" && WORK_DIR=$(cd "$WORK_DIR" && pwd)
fi
# The paper's settings (§5-§6, Table 3), from their one home: PAPER_BEAM=4 ..., PAPER_TRAINING_ARGS=(...), ...
eval "$("$PYTHON" -m recipes.launch paper --shell)" || die "cannot read the paper's settings (vaswani_plugin/paper.py)"

# needs VARIABLE FUNCTION: stop in one line unless VARIABLE, which FUNCTION sets, is set (the order of calls).
needs() {
    [ -n "${!1:-}" ] || die "internal: ${FUNCNAME[1]} needs $1, which $2 sets: call $2 before it"
}

# named OPTIONS ARGS...: each `--some-name VALUE` of ARGS into the caller's local variable some_name, one of the
# space-separated OPTIONS; anything else is an error.
named() {
    local allowed=" $1 " variable
    shift
    while [ $# -gt 0 ]; do
        variable=${1#--}
        variable=${variable//-/_}
        [[ "$1" == --* ]] && [ $# -ge 2 ] && [[ "$allowed" == *" $variable "* ]] ||
            die "internal: ${FUNCNAME[1]} takes$(printf -- ' --%s' $allowed | tr _ -), not $1"
        printf -v "$variable" '%s' "$2"
        shift 2
    done
}

# quoted WORDS...: the words as one shell command line, each quoted where it needs to be.
quoted() {
    local line
    printf -v line '%q ' "$@"
    echo "${line% }"
}

# run COMMAND...: run it; with DRY_RUN=1 print it instead (stdout), as it would run. run_to FILE COMMAND...: the
# same, its output written to FILE.
run() {
    if [ "$DRY_RUN" = 1 ]; then quoted "$@"; else "$@"; fi
}
run_to() {
    local file=$1
    shift
    if [ "$DRY_RUN" = 1 ]; then echo "$(quoted "$@") > $(quoted "$file")"; else "$@" > "$file"; fi
}

# stages NAME...: the stages this recipe runs, in order, which STOP_AFTER and RESTART_FROM may name; naming none of
# them is an error before anything runs (a typo would otherwise go on to a full training run).
stages() {
    STAGES=("$@")
    local variable
    for variable in STOP_AFTER RESTART_FROM; do
        [ -z "${!variable:-}" ] || [[ " ${STAGES[*]} " == *" ${!variable} "* ]] ||
            die "$variable=${!variable} is not a stage of $RECIPE; its stages: ${STAGES[*]}"
    done
}

# stop_if_asked NAME: end the recipe here when STOP_AFTER names this stage.
stop_if_asked() {
    [[ " ${STAGES[*]} " == *" $1 "* ]] || die "internal: stage $1 is not among the declared stages (${STAGES[*]})"
    if [ "${STOP_AFTER:-}" = "$1" ]; then
        say "STOP_AFTER=$1: stopping here; run again without it for the later stages"
        exit 0
    fi
}

# Stage records and decisions: recipes/stages.py, the one engine (docs/recipes.md "Re-running a recipe"). A stage
# is skipped when its plan (the commands it runs, as DRY_RUN=1 prints them) and the stage before it are as
# recorded; otherwise it runs again, its previous outputs moved to $ASIDE first (nothing is deleted). Training goes
# on from its checkpoints, or refuses.

# engine ACTION ARGS...: recipes/stages.py, told this run's place in its job.
engine() {
    RECIPE=$RECIPE WORK_DIR=$WORK_DIR STAGES="${STAGES[*]}" RESTART_FROM=${RESTART_FROM:-} DRY_RUN=$DRY_RUN \
        ASIDE=$ASIDE RUN_RANK=$RUN_RANK RUN_NAME=$RUN_NAME LAUNCH_ID=$LAUNCH_ID WORKERS=${WORKERS:-1} \
        "$PYTHON" -m recipes.stages "$@"
}

# agreed NAME COMMAND...: the first line COMMAND prints, taken by run 0 and published for this launch; every other
# run of the job (node, task, rank) waits for it and prints the same.
agreed() {
    local name=$1
    shift
    if [ "$RUN_RANK" = 0 ] || [ "$DRY_RUN" = 1 ]; then "$@" | head -n 1 | engine publish "$name"
    else engine follow "$name"; fi
}

# begun NAME PLAN [--output PATH]... [--input FILE]... [--save-dir DIR]: whether the stage NAME, which runs PLAN, runs
# (the engine's decision: skip ..., run, rerun, resume ...; a refusal stops the recipe in its one line). ended NAME:
# its command ended well.
begun() {
    local name=$1 plan=$2 decision
    shift 2
    decision=$(engine begin "$name" ${PREVIOUS_STAGE:+--after "$PREVIOUS_STAGE"} "$@" <<< "$plan") || exit 1
    PREVIOUS_STAGE=$name
    [ "${decision%% *}" != skip ]
}
ended() {
    [ "$DRY_RUN" = 1 ] || engine finish "$1" || die "cannot write the record of stage $1"
    stop_if_asked "$1"
}

# stage NAME [--output PATH]... FUNCTION ARGS...: FUNCTION ARGS as the stage NAME, whose outputs are the PATHs; its
# plan is what it prints under DRY_RUN=1, naming the interpreter `python` (another environment's path is no change
# of plan: versions are recorded apart).
stage() {
    local name=$1 outputs=() plan
    shift
    while [ "$1" = --output ]; do outputs+=(--output "$2"); shift 2; done
    plan=$(DRY_RUN=1 PYTHON=python "$@" 2> /dev/null) || die "internal: stage $name cannot say what it runs"
    if begun "$name" "$plan" "${outputs[@]}"; then "$@"; ended "$name"; else stop_if_asked "$name"; fi
}

# hold_work_dir: run 0 holds WORK_DIR/.lock while it runs; another run that is not of its job stops at once.
hold_work_dir() {
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

# launch_plan PLAN ARGS...: recipes/launch.py's PLAN (devices, batch) as shell assignments, printed, the recipe's
# variables given to it whether they are exported or not; launch PLAN ARGS... evaluates them.
launch_plan() {
    local plan=$1
    shift
    RECIPE=$RECIPE DRY_RUN=$DRY_RUN CPU=${CPU:-} FP16=${FP16:-} NUM_GPUS=${NUM_GPUS:-} \
        NUM_NODES=${NUM_NODES:-} NODE_RANK=${NODE_RANK:-} MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT \
        TOKENS_PER_STEP=${TOKENS_PER_STEP:-} MAX_TOKENS_PER_GPU=${MAX_TOKENS_PER_GPU:-} \
        "$PYTHON" -m recipes.launch "$plan" --python "$PYTHON" "$@"
}
launch() {
    local assignments
    assignments=$(launch_plan "$@") || exit 1  # its one line is said
    eval "$assignments"
}

# detect_devices: how this run was started (SLURM task, torchrun worker, NUM_NODES or alone) and what it trains on
# (recipes/launch.py): sets LAUNCH, LAUNCH_ID, RUN_RANK (0 for the run that averages, translates and scores after
# training; the others stop), RUN_NAME (node N, task N or rank N, in messages and log names), WORKERS (processes
# that train in parallel), NUM_GPUS, DEVICE_ARGS (training) and EVAL_DEVICE_ARGS; then holds WORK_DIR.
detect_devices() {
    launch devices --shell-pid $$
    hold_work_dir
}

# batch_size_for_workers [MODEL ARGS...]: UPDATE_FREQ and MAX_TOKENS such that one step holds TOKENS_PER_STEP
# tokens (§5.1: about 25,000 source and 25,000 target tokens) however many workers there are, each batch the
# longest sentence at least and at most MAX_TOKENS_PER_GPU; unset, on GPUs, as many as the GPU's memory holds for
# the model that the MODEL ARGS (fairseq's, as train gets them) describe: then run 0 decides and the others take
# its batch, as their cards may differ.
batch_size_for_workers() {
    needs WORKERS detect_devices
    needs DATA_BIN prepare_data
    if [ $# = 0 ] || [ -n "${MAX_TOKENS_PER_GPU:-}" ] || [[ " ${DEVICE_ARGS[*]} " == *" --cpu "* ]]; then
        launch batch --workers "$WORKERS" --data-bin "$DATA_BIN"
        return
    fi
    local assignments
    # shellcheck disable=SC2086
    assignments=$(agreed batch launch_plan batch --workers "$WORKERS" --data-bin "$DATA_BIN" -- --user-dir "$PLUGIN" \
        --task vaswani_translation --bf16-autocast "${BF16:-0}" "${EMBEDDING_SHARING[@]}" "$@" "${DEVICE_ARGS[@]}" \
        ${EXTRA_TRAIN_ARGS:-}) || exit 1  # the command said why
    eval "$assignments"
}

# prepare_data MODULE ARGS...: download, tokenise, segment and binarise with prepare.MODULE; sets PREPARED_DIR
# (its work dir), DATA_BIN and TEXT_DIR. The preparation skips the steps it finished before, so recipes sharing
# DATA_DIR prepare once.
prepare_data() {
    local module=$1
    shift
    local data_dir=${DATA_DIR:-$WORK_DIR/data} settings=() word
    local args=(--work-dir "$data_dir" "$@")
    [ -n "${RAW_DIR:-}" ] && args+=(--raw-dir "$RAW_DIR")
    # Its settings by the recipe's names (--bpe-merges: BPE_MERGES), for the data's record.
    for word in "$@"; do
        if [[ "$word" == --* ]]; then settings+=("$(echo "${word#--}" | tr a-z- A-Z_)=");
        else settings[-1]+=$word; fi
    done
    # Before the preparation, its settings and raw files against the data's record; after it, recorded.
    local record=("$data_dir" --raw "${RAW_DIR:-$data_dir/raw}" "${settings[@]}"
                  "EXTRA_PREPARE_ARGS=${EXTRA_PREPARE_ARGS:-}")
    engine data "${record[@]}" || exit 1
    say "stage prepare: python -m prepare.$module ${args[*]} ${EXTRA_PREPARE_ARGS:-}"
    [ "$DRY_RUN" = 0 ] || say "stage prepare: would run (it skips the steps it finished before, each by its settings)"
    # shellcheck disable=SC2086
    run "$PYTHON" -m "prepare.$module" "${args[@]}" ${EXTRA_PREPARE_ARGS:-}
    [ "$DRY_RUN" = 1 ] || engine data "${record[@]}" --write || die "cannot write the data's record"
    PREPARED_DIR=$data_dir
    DATA_BIN="$data_dir/data-bin"
    TEXT_DIR="$data_dir/text"
    stop_if_asked prepare
}

# prepare_wmt14 PAIR ARGS...: prepare_data for WMT14; also sets SUBWORDS (how fairseq-generate joins subwords
# back: BPE for en-de, sentencepiece for en-fr).
prepare_wmt14() {
    local pair=$1
    shift
    prepare_data wmt14 --pair "$pair" "$@"
    case "$pair" in
    en-fr) SUBWORDS=sentencepiece ;;
    *) SUBWORDS=subword_nmt ;;
    esac
}

# train [--stage NAME] SAVE_DIR ARGS...: the stage NAME (default train). The paper's training set-up (§5:
# PAPER_TRAINING_ARGS, Adam's β and ε differing from fairseq's defaults) plus the recipe's model arguments, in the
# precision BF16 asks of the plugin task (bfloat16 autocast runs the matrix products in bfloat16 and keeps weights,
# loss and Adam in float32: 3x faster products on a CPU with AVX512-BF16 or AMX, slower on one without;
# docs/results.md, "bfloat16 against float32"). The task decides and says what it chose; fairseq's own --bf16
# assumes a TPU. The command is built once: the stage's plan, and what the engine compares with the checkpoints.
train() {
    needs MAX_TOKENS batch_size_for_workers
    local name=train
    [ "$1" != --stage ] || { name=$2; shift 2; }
    local save_dir=$1 dictionary inputs=()
    shift
    # A run whose checkpoints trained under fairseq's adam (the recipes' optimizer before vaswani_adam) goes on with
    # it: fairseq resumes no checkpoint under another optimizer.
    local training=("${PAPER_TRAINING_ARGS[@]}")
    if compgen -G "$save_dir/checkpoint*.pt" > /dev/null &&
        [ "$("$PYTHON" -m vaswani_plugin.checkpoints.resume --optimizer "$save_dir")" = adam ]; then
        training=("${training[@]/#vaswani_adam/adam}")
    fi
    # shellcheck disable=SC2086
    local command=(-m fairseq_cli.train "$DATA_BIN" --user-dir "$PLUGIN"
        --task vaswani_translation --bf16-autocast "${BF16:-0}" "${EMBEDDING_SHARING[@]}" "${training[@]}"
        --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --required-batch-size-multiple 1
        --save-dir "$save_dir" --no-epoch-checkpoints --log-format simple --log-interval 100
        "${DEVICE_ARGS[@]}" "$@" ${EXTRA_TRAIN_ARGS:-})
    [ "${TENSORBOARD:-auto}" = 0 ] || ! "$PYTHON" -c "import importlib.util as u, sys
sys.exit(not (u.find_spec('tensorboard') or u.find_spec('tensorboardX')))" 2> /dev/null ||
        command+=(--tensorboard-logdir "$save_dir/tensorboard")
    for dictionary in "$DATA_BIN"/dict.*.txt; do inputs+=(--input "$dictionary"); done  # what training reads
    begun "$name" "$(quoted python "${command[@]}")" --output "$save_dir" --save-dir "$save_dir" "${inputs[@]}" ||
        { stop_if_asked "$name"; return; }
    command=("$PYTHON" "${command[@]}")
    # The engine, on run 0, first makes a cut-off checkpoint_last.pt resumable (the newest intact checkpoint).
    if [ "$DRY_RUN" = 1 ] && [ "$RUN_RANK" = 0 ] && [ -e "$save_dir/checkpoint_last.pt" ]; then
        say "stage $name: would resume from $save_dir/checkpoint_last.pt"
        run "$PYTHON" -m vaswani_plugin.checkpoints.resume "$save_dir"
    fi
    say "stage $name: $(quoted "${command[@]}")"
    if [ "$DRY_RUN" = 1 ]; then
        run "${command[@]}"
        return
    fi
    mkdir -p "$save_dir"
    # One log per run of the recipe (train.node1.log, train.task1.log, ...), so that theirs never interleave;
    # fairseq's other ranks log warnings only.
    local log=train.log
    [ "$RUN_RANK" = 0 ] || log="train.${RUN_NAME// /}.log"
    # The training writes its own ETA lines and records (rank 0, vaswani_plugin/tools/progress_meter.py); after a
    # validation it redraws the curves and report (at most every REPORT_EVERY seconds, in the background).
    # A rank that makes no step for STALL_MINUTES ends its process in one line (vaswani_plugin/tools/watchdog.py).
    local watch=(VASWANI_STALL_MINUTES="${STALL_MINUTES:-10}")
    [ "$REPORT" = 0 ] || watch+=(VASWANI_PROGRESS_REFRESH_SECONDS="${REPORT_EVERY:-300}"
        VASWANI_PROGRESS_REFRESH="$(quoted "$PYTHON" -m vaswani_plugin.tools.run_report "$WORK_DIR") > /dev/null")
    { [ "$WORKERS" = 1 ] || echo "[$RECIPE] $RUN_NAME: world size $WORKERS (started as $LAUNCH)"
      env "${watch[@]}" "${command[@]}"; } 2>&1 | tee -a "$save_dir/$log" ||
        { engine stopped "$name" --save-dir "$save_dir"; exit 1; }  # a divergence: its record says so, in one line
    ended "$name"
}

# dev_score bleu|f1 REFERENCE ARGS...: DEV_ARGS, fairseq-train's arguments for the dev set's score while training
# (the plugin task's --dev-score: vaswani_plugin/tasks/dev_scores.py) with the decoding ARGS (--search, --gnmt-alpha,
# --dev-score-args ...), as DEV_SCORE, DEV_SCORE_EVERY and DEV_SCORE_SENTENCES ask; none with DEV_SCORE=0.
DEV_ARGS=()
dev_score() {
    local kind=$1 reference=$2
    shift 2
    [[ "${DEV_SCORE:-1}" =~ ^[01]$ ]] || die "DEV_SCORE=$DEV_SCORE: use 1 (score the dev set while training) or 0"
    DEV_ARGS=()
    [ "${DEV_SCORE:-1}" = 1 ] || return 0
    DEV_ARGS=(--dev-score "$kind" --dev-score-reference "$reference" "$@"
              --dev-score-interval-updates "${DEV_SCORE_EVERY:-0}" --dev-score-sentences "${DEV_SCORE_SENTENCES:-0}")
}

# dev_bleu: dev_score's BLEU of newstest2013 (the valid split: Table 3's dev set) with §6.1's decoding.
dev_bleu() {
    needs TEXT_DIR prepare_data
    dev_score bleu "$TEXT_DIR/valid.$TARGET_LANG" --search "${SEARCH:-paper}" --gnmt-alpha "$PAPER_ALPHA" \
        --dev-score-args "{\"beam\": $PAPER_BEAM, \"max_len_a\": $PAPER_MAX_LEN_A, \"max_len_b\": $PAPER_MAX_LEN_B}" \
        --dev-score-post-process "$SUBWORDS"
}

# write_report: WORK_DIR/report.md and WORK_DIR/curves/ (vaswani_plugin/tools/run_report.py), at the end.
write_report() {
    if [ "$REPORT" = 0 ]; then
        say "REPORT=0: no curves or report.md (python -m vaswani_plugin.tools.run_report $WORK_DIR draws them)"
        return
    fi
    run "$PYTHON" -m vaswani_plugin.tools.run_report "$WORK_DIR" || die "writing $WORK_DIR/report.md failed"
}

# leave_the_rest_to_run_zero: every run of the recipe but run 0 (node 0, task 0, rank 0) stops after training, so
# that one alone writes the averaged checkpoint, the translations and the scores in the shared WORK_DIR.
leave_the_rest_to_run_zero() {
    needs WORKERS detect_devices
    if [ "$RUN_RANK" != 0 ]; then
        say "$RUN_NAME: training finished; ${RUN_NAME% *} 0 averages, translates and scores"
        exit 0
    fi
}

# average SAVE_DIR N: §6.1, the average of the last N checkpoints.
average() {
    run "$PYTHON" -m vaswani_plugin.checkpoints.average --inputs "$1" --num-update-checkpoints "$2" \
        --output "$1/checkpoint_average.pt"
}

# average_available SAVE_DIR N: the average of the last N interval checkpoints, or of as many as a short
# wall-clock budget left (checkpoint_last.pt alone when there is none).
average_available() {
    local found
    if [ "$DRY_RUN" = 1 ]; then
        say "stage average: the last $2 interval checkpoints, or as many as training writes (checkpoint_last.pt if none)"
        average "$1" "$2"
        return
    fi
    found=$(find "$1" -name 'checkpoint_*_*.pt' | wc -l)
    if [ "$found" -eq 0 ]; then
        say "no interval checkpoint (the budget was too short): using checkpoint_last.pt"
        cp "$1/checkpoint_last.pt" "$1/checkpoint_average.pt"
    else
        average "$1" $((found < $2 ? found : $2))
    fi
}

# budget_hours MINUTES: fairseq's --stop-time-hours for a wall-clock budget given in minutes.
budget_hours() {
    "$PYTHON" -c "import sys; m = float(sys.argv[1]); assert m > 0; print(m / 60)" "$1" 2>/dev/null ||
        die "BUDGET_MINUTES=$1 is not a positive number of minutes"
}

# translate --checkpoint FILE --subset SPLIT --output FILE [--beam B --alpha A --max-len-b N] [--batch-size N]
#           [--post-process P]: fairseq-generate's output for every sentence of SPLIT of DATA_BIN: beam search of B
# hypotheses ranked by the GNMT length penalty α = A, at most input + N tokens (§6.1's early stop; SEARCH=fairseq:
# fairseq's), N sentences a batch (128), subwords joined by P (fairseq's --post-process: subword_nmt, sentencepiece;
# none, the default: left as they are). The decoding defaults to §6.1's (PAPER_BEAM ...); §6.3's is the parsing
# recipe's.
translate() {
    needs DATA_BIN prepare_data
    needs WORKERS detect_devices
    local checkpoint= subset= output= beam=$PAPER_BEAM alpha=$PAPER_ALPHA max_len_b=$PAPER_MAX_LEN_B batch_size=128 \
        post_process=none
    named "checkpoint subset output beam alpha max_len_b batch_size post_process" "$@"
    local joined=(--post-process "$post_process")
    [ "$post_process" != none ] || joined=()
    # shellcheck disable=SC2086
    run_to "$output" "$PYTHON" -m fairseq_cli.generate "$DATA_BIN" --user-dir "$PLUGIN" --task vaswani_translation \
        --path "$checkpoint" --gen-subset "$subset" --search "${SEARCH:-paper}" --beam "$beam" \
        --gnmt-alpha "$alpha" --max-len-a "$PAPER_MAX_LEN_A" --max-len-b "$max_len_b" --batch-size "$batch_size" \
        --required-batch-size-multiple 1 "${joined[@]}" \
        "${EVAL_DEVICE_ARGS[@]}" ${EXTRA_GENERATE_ARGS:-}
}

# training_cost --checkpoints SAVE_DIR --table2-row base|big: the Table 2 line.
training_cost() {
    needs WORKERS detect_devices
    local checkpoints= table2_row= peak=() fp16=()
    named "checkpoints table2_row" "$@"
    [ -n "${PEAK_TFLOPS:-}" ] && peak=(--peak-tflops "$PEAK_TFLOPS")
    [ "${FP16:-0}" = 1 ] && fp16=(--fp16)
    run_to "$WORK_DIR/training_cost.txt" "$PYTHON" -m vaswani_plugin.tools.training_cost --checkpoint \
        "$checkpoints/checkpoint_last.pt" --gpus "$WORKERS" --paper "$table2_row" "${peak[@]}" "${fp16[@]}"
    [ "$DRY_RUN" = 1 ] || cat "$WORK_DIR/training_cost.txt"
}

# score --generate-output FILE --subset SPLIT [--examples N --source FILE]: both BLEU lines of §6.1 against the
# plain reference of SPLIT, kept in FILE.bleu.
score() {
    needs TEXT_DIR prepare_data
    local generate_output= subset= examples= source= more=()
    named "generate_output subset examples source" "$@"
    [ -z "$examples" ] || more=(--examples "$examples" --source "$source")
    local command=("$PYTHON" -m vaswani_plugin.scoring.bleu --generate-output "$generate_output"
                   --reference "$TEXT_DIR/$subset.$TARGET_LANG" --target-lang "$TARGET_LANG" "${more[@]}")
    if [ "$DRY_RUN" = 1 ]; then run "${command[@]}"; else "${command[@]}" | tee "$generate_output.bleu"; fi
}

# model_parameters SAVE_DIR: the parameter count fairseq-train logged.
model_parameters() {
    sed -n 's/.*num. shared model params: \([0-9,]*\).*/\1/p' "$1/train.log" | tail -n 1 | tr -d ,
}

# train_average_translate --arch ARCH --paper base|big: the rest of a Table 2 recipe. ARCH (Table 3; its P_drop
# unless DROPOUT is set) trained for the paper's steps of that model (§5.2; MAX_UPDATE overrides) with a checkpoint
# at its 10-minute interval, the last of them averaged (§6.1; SAVE_INTERVAL_UPDATES and AVERAGE_LAST override);
# batches of about 25,000 source and 25,000 target tokens on any number of GPUs (§5.1); §5.3's Adam and eq. 3,
# §5.4's label smoothing (train); newstest2013's BLEU at each checkpoint (dev_bleu); newstest2014 translated with
# §6.1's beam search; both BLEU scores and the training cost of that Table 2 row printed; the run's report written.
train_average_translate() {
    local arch= paper=
    named "arch paper" "$@"
    local size=${paper^^}
    local steps_var="PAPER_${size}_STEPS" every_var="PAPER_${size}_CHECKPOINT_EVERY" average_var="PAPER_${size}_AVERAGE"
    [ -n "${!steps_var:-}" ] || die "internal: train_average_translate --paper $paper: use base or big"
    batch_size_for_workers --arch "$arch" ${DROPOUT:+--dropout "$DROPOUT"}
    local checkpoints="$WORK_DIR/checkpoints" every=${SAVE_INTERVAL_UPDATES:-${!every_var}}
    local average_last=${AVERAGE_LAST:-${!average_var}} output="$WORK_DIR/newstest2014.generate.txt"
    dev_bleu
    train "$checkpoints" --arch "$arch" ${DROPOUT:+--dropout "$DROPOUT"} \
        --max-update "${MAX_UPDATE:-${!steps_var}}" --save-interval-updates "$every" --keep-interval-updates "$average_last" \
        "${DEV_ARGS[@]}"
    leave_the_rest_to_run_zero
    stage average --output "$checkpoints/checkpoint_average.pt" average "$checkpoints" "$average_last"
    stage translate --output "$output" --output "$output.bleu" translate --checkpoint "$checkpoints/checkpoint_average.pt" \
        --subset test --output "$output" --post-process "$SUBWORDS"
    score --generate-output "$output" --subset test
    training_cost --checkpoints "$checkpoints" --table2-row "$paper"
    write_report
}
