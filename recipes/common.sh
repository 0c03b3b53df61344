# Shared stages of the WMT14 recipes: sourced by wmt14_*.sh and table3.sh, not run on its own.
#
# A re-run skips a finished stage, resumes training, runs again what changed or refuses (stage, below; the table:
# docs/recipes.md, "Re-running a recipe").
#
# Variables every recipe reads (all optional):
#   WORK_DIR             where data, checkpoints and translations go   (default: ./work/<recipe>)
#   RAW_DIR              offline: a folder holding the upstream archives (default: download them)
#   DATA_DIR             prepared data; recipes of one language pair can share it (default: $WORK_DIR/data)
#   NUM_GPUS             GPUs per node to train on                      (default: all visible)
#   NUM_NODES            nodes; with MASTER_ADDR, MASTER_PORT, NODE_RANK (see docs/recipes.md)  (default: 1)
#   MAX_UPDATE           training steps                                 (default: the paper's)
#   FP16=1               mixed-precision training (--fp16)
#   BF16                 the plugin task's --bf16-autocast, passed as it is: 1 (or on), 0 (or off) or auto, which
#                        the task turns on only on a CPU that multiplies bfloat16 natively (AVX512-BF16, AMX) and
#                        logs as train.log's `precision:` line  (default 0; quickstart auto)
#   DROPOUT              P_drop, for the WMT14 recipes and the parsing one (default: the architecture's)
#   TOKENS_PER_STEP      source (and target) tokens per step            (default: 25000, §5.1)
#   MAX_TOKENS_PER_GPU   most tokens one GPU holds in a batch           (default: 4096)
#   SAVE_INTERVAL_UPDATES, AVERAGE_LAST   checkpoint cadence and how many to average (default: the paper's)
#   EXTRA_TRAIN_ARGS     more fairseq-train arguments, appended last (so they override)
#   EXTRA_PREPARE_ARGS   more `python -m prepare.wmt14` (or prepare.multi30k) arguments (e.g. --train-lines 100000)
#   EXTRA_GENERATE_ARGS  more fairseq-generate arguments, appended last (e.g. --batch-size 32)
#   SEARCH               the task's --search: paper (§6.1's search) or fairseq (fairseq's rule)  (default: paper)
#   STOP_AFTER           a stage (prepare, train, ...: the recipe's `stages` line) after which the recipe stops; a
#                        re-run without it goes on from there
#   RESTART_FROM         a stage whose outputs, and every later stage's, move to $WORK_DIR/previous/TIME and run again
#   CPU=1                allow running without a GPU (slow: for trying the pipeline out)
#   DRY_RUN=1            print the launch plan, what each stage would do and every command as it would run it
#                        (stdout); download, prepare, train and write nothing. Give NUM_GPUS on a machine without
#                        the GPUs
#   PEAK_TFLOPS          per-GPU peak for the training-cost line (default: looked up by GPU name)
#
# SLURM: run the recipe as the tasks of an srun step, one task per GPU or one per node; each finds its rank, the
# world size, its GPU and the master (scontrol) from SLURM's variables (docs/recipes.md, "SLURM"). torchrun:
# `torchrun --nproc_per_node 8 --no-python bash RECIPE`, one process per GPU.
# Several nodes by hand (NUM_NODES > 1): start the recipe once on every node, all with the same WORK_DIR and DATA_DIR on a
# shared file system (fairseq's rank 0 writes the checkpoints, every rank reads checkpoint_last.pt to resume).
# The first node to reach the data preparation prepares; the others wait for its lock (DATA_DIR/.lock, taken by
# prepare.wmt14 and prepare.multi30k) and then find every step done. Node 0 logs training to
# checkpoints/train.log, node N to checkpoints/train.nodeN.log (SLURM's task N: train.taskN.log; torchrun's rank N:
# train.rankN.log), and writes the stage records. After training only node 0 (task 0, rank 0) averages, translates
# and scores; the others say so and exit 0.
# On CPU (CPU=1) a node is one training process (torch already spreads it over every core), so NUM_GPUS is 1
# there and NUM_NODES counts processes; two on one machine, in two shells:
#   CPU=1 NUM_NODES=2 NODE_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 bash recipes/wmt14_en_de_base.sh
#   CPU=1 NUM_NODES=2 NODE_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 bash recipes/wmt14_en_de_base.sh
# fairseq's own start of CPU processes fails (its inference from torchrun's variables: rank %
# torch.cuda.device_count(); pytorch_ddp asks for device_ids), so each process gets its rank and the master's
# address outright and joins over gloo with legacy_ddp (detect_devices); fairseq is not changed.

set -euo pipefail

REPO=$(cd -P "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)  # the recipes folder may be a link to it
PLUGIN="$REPO/vaswani_plugin"
RECIPE=${RECIPE:-$(basename "$0" .sh)}
WORK_DIR=${WORK_DIR:-$PWD/work/$RECIPE}
DRY_RUN=${DRY_RUN:-0}
if [ "$DRY_RUN" = 1 ]; then
    WORK_DIR=$(realpath -m "$WORK_DIR")  # read, never created
else
    mkdir -p "$WORK_DIR" && WORK_DIR=$(cd "$WORK_DIR" && pwd)
fi
PYTHON=${PYTHON:-python3}
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"

say() { echo "[$RECIPE $(date +%H:%M:%S)] $*" >&2; }
die() { echo "$RECIPE: error: $*" >&2; exit 1; }
[[ "$DRY_RUN" =~ ^[01]$ ]] || die "DRY_RUN=$DRY_RUN: use 1 (print what would run, run nothing) or 0"

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
STAGES=()
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

# Stage records (prepare/records.py, docs/recipes.md "Re-running a recipe"): a stage's record,
# $WORK_DIR/.stages/NAME.json, holds its plan (the commands it runs, as DRY_RUN=1 prints them) and the record of
# the stage before it. On a re-run a stage is skipped when both are as they were; otherwise it runs again, its
# previous outputs moved to $ASIDE first (nothing is deleted), which makes every later stage run again too.
# Training goes on from its checkpoints, or refuses (vaswani_plugin/checkpoints/resume.py --plan).
ASIDE="$WORK_DIR/previous/$(date +%Y%m%d-%H%M%S)"
PREVIOUS_STAGE=
RESTARTING=0

# set_aside PATH...: move each PATH that exists to $ASIDE, at its place under WORK_DIR.
set_aside() {
    local path relative
    for path in "$@"; do
        [ -e "$path" ] || continue
        relative=${path#"$WORK_DIR"/}
        [ "$relative" != "$path" ] || die "internal: $path is not in WORK_DIR"
        mkdir -p "$(dirname "$ASIDE/$relative")"
        mv "$path" "$ASIDE/$relative"
    done
}

# agreed NAME COMMAND...: DECISION, the first line COMMAND prints, taken by run 0 and published in
# $WORK_DIR/.stages/NAME.decision for this launch; every other run of the job (node, task, rank) waits for it, so
# that all of them skip, run, resume or refuse alike.
agreed() {
    local name=$1 file="$WORK_DIR/.stages/$1.decision" waited=0
    shift
    if [ "${RUN_RANK:-0}" = 0 ] || [ "$DRY_RUN" = 1 ]; then
        DECISION=$("$@" | head -n 1) || die "deciding stage $name failed"
        [ "$DRY_RUN" = 1 ] || [ "${WORKERS:-1}" = 1 ] || printf '%s\t%s\n' "$LAUNCH_ID" "$DECISION" > "$file"
        return
    fi
    until [ -f "$file" ] && [ "$(cut -f 1 "$file")" = "$LAUNCH_ID" ]; do
        [ $((waited % 60)) != 0 ] || say "$RUN_NAME: waiting for ${RUN_NAME% *} 0's decision on stage $name"
        [ "$waited" -lt "${DECISION_WAIT:-1800}" ] ||
            die "${RUN_NAME% *} 0 of this job ($LAUNCH_ID) decided nothing on stage $name in ${DECISION_WAIT:-1800} s"
        sleep 1
        waited=$((waited + 1))
    done
    DECISION=$(cut -f 2- "$file")
}

# train_decision PLAN STATE SAVE_DIR: skip, run, resume or refuse for a training stage whose record is in STATE.
train_decision() {
    if [ "$2" = same ]; then echo skip; return; fi
    compgen -G "$3/checkpoint*.pt" > /dev/null || { echo run; return; }  # nothing to compare with
    if [[ "$2" == inputs-changed* ]]; then echo "refuse ${2#inputs-changed }, but $3 holds its checkpoints"; return; fi
    # Killed while training with this very command: it goes on (its checkpoint_last.pt repaired first if cut off).
    if [ "$2" = interrupted ]; then echo "resume (interrupted before)"; return; fi
    local errors decision repair=()
    # Run 0 also makes a cut-off checkpoint_last.pt resumable here (resume_checkpoint), saving a fairseq import.
    [ "${RUN_RANK:-0}" != 0 ] || [ "$DRY_RUN" = 1 ] || repair=(--repair)
    errors=$(mktemp)
    decision=$("$PYTHON" -m vaswani_plugin.checkpoints.resume --plan "${repair[@]}" <<< "$1" 2> "$errors") ||
        { cat "$errors" >&2; die "cannot compare the training command with its checkpoints"; }
    grep "^vaswani_plugin.checkpoints.resume: " "$errors" | tee -a "$3/train.log" >&2 || true
    rm -f "$errors"
    [ "$decision" != finished ] || decision="skip (its checkpoints reached the target)"
    echo "$decision"
}

# stage NAME [--output PATH]... COMMAND...: run COMMAND as the stage NAME, whose outputs are the PATHs, as its
# record says (above).
stage() {
    local name=$1 outputs=() plan state
    shift
    while [ "$1" = --output ]; do outputs+=("$2"); shift 2; done
    # The plan names the interpreter `python`: another environment's path is no change of plan (versions are
    # recorded apart).
    plan=$(STAGE_PLAN=1 DRY_RUN=1 PYTHON=python "$@" 2> /dev/null) || die "internal: stage $name cannot say what it runs"
    [ "${RESTART_FROM:-}" != "$name" ] || RESTARTING=1
    local records=(${PREVIOUS_STAGE:+--after "$PREVIOUS_STAGE"}) dictionary
    if [ "$1" = train ]; then  # what training reads: the data's dictionaries
        for dictionary in "$DATA_BIN"/dict.*.txt; do records+=(--input "$dictionary"); done
    fi
    state=new
    if [ "$RESTARTING" = 0 ]; then
        state=$("$PYTHON" -m prepare.records check "$WORK_DIR" "$name" "${records[@]}" <<< "$plan") ||
            die "cannot read the record of stage $name"
    fi
    if [ "$1" = train ]; then
        agreed "$name" train_decision "$plan" "$state" "${outputs[0]}"
    else
        case $state in same) DECISION=skip ;; changed) DECISION=rerun ;; *) DECISION=run ;; esac
    fi
    local record="$WORK_DIR/.stages/$name.json"
    case $DECISION in
    skip*)
        say "stage $name: done before, skipped${DECISION#skip}"
        # Finished, but not recorded (killed in between, or trained before records): recorded now.
        if [[ "$state" =~ ^(new|interrupted)$ ]] && [ "${RUN_RANK:-0}" = 0 ] && [ "$DRY_RUN" = 0 ]; then
            "$PYTHON" -m prepare.records start "$WORK_DIR" "$name" "${records[@]}" <<< "$plan" &&
                "$PYTHON" -m prepare.records finish "$WORK_DIR" "$name"
        fi ;;
    refuse*)
        die "stage $name: ${DECISION#refuse }. Nothing was changed; to go on, use a new WORK_DIR, or set" \
            "RESTART_FROM=$name to move its outputs and every later stage's aside (to WORK_DIR/previous/) and run" \
            "them again" ;;
    *)
        local would=run doing=starting why=  # what the stage does, as a dry run and a run say it
        [ "$RESTARTING" = 0 ] || why=" (RESTART_FROM=$RESTART_FROM: its outputs moved to $ASIDE)"
        if [ "$DECISION" = rerun ]; then
            would="run again" doing="running again"
            why=" (its plan or the stage before it changed; its outputs moved to $ASIDE)"
        elif [ "$DECISION" = "resume (interrupted before)" ]; then
            would=resume doing=resuming why=" from its checkpoints (interrupted before)"
        elif [ "${DECISION%% *}" = resume ]; then
            would=resume doing=resuming why=" from update ${DECISION#resume }"
        fi
        if [ "$DRY_RUN" = 1 ]; then
            say "stage $name: would $would$why"
            "$@"
        else
            say "stage $name: $doing$why"
            if [ "${RUN_RANK:-0}" = 0 ]; then
                [ "$RESTARTING" = 0 ] && [ "$DECISION" != rerun ] || set_aside "${outputs[@]}" "$record"
                [[ ! "$DECISION" =~ ^resume\ [0-9]+$ ]] || records+=(--started-from "${DECISION#resume }")
                "$PYTHON" -m prepare.records start "$WORK_DIR" "$name" "${records[@]}" <<< "$plan" ||
                    die "cannot write the record of stage $name"
            fi
            "$@"
            [ "${RUN_RANK:-0}" != 0 ] || "$PYTHON" -m prepare.records finish "$WORK_DIR" "$name"
            say "stage $name: finished"
        fi ;;
    esac
    PREVIOUS_STAGE=$name
    stop_if_asked "$name"
}

# hold_work_dir: run 0 holds WORK_DIR/.lock while it runs; another run that is not of its job stops at once.
hold_work_dir() {
    [ "$DRY_RUN" = 0 ] && [ "${RUN_RANK:-0}" = 0 ] || return 0
    command -v flock > /dev/null || { say "warning: no flock on PATH: WORK_DIR is not locked"; return 0; }
    exec {WORK_LOCK}>> "$WORK_DIR/.lock"
    flock -w "${LOCK_WAIT:-30}" "$WORK_LOCK" ||
        die "$WORK_DIR is in use by another run ($(head -n 1 "$WORK_DIR/.lock")); wait for it to end, or use" \
            "another WORK_DIR"
    echo "$LAUNCH_ID, $(hostname) pid $$, since $(date '+%F %T')" > "$WORK_DIR/.lock"
    mkdir -p "$WORK_DIR/.stages"
    rm -f "$WORK_DIR"/.stages/*.decision  # the last launch's
}

# How this run of the recipe was started, and so which runs train together. Sets LAUNCH and RUN_NAME; where the
# launcher starts one run per worker (several SLURM tasks a node, torchrun), also TASK_WORKERS, TASK_RANK,
# TASK_LOCAL (its place on the node), TASKS_PER_NODE and INIT_METHOD. An srun step of one task a node is the
# NUM_NODES way with NUM_NODES, NODE_RANK and MASTER_ADDR read from SLURM.
#   nodes:    one run, or one per node by hand (NUM_NODES, NODE_RANK, MASTER_ADDR, MASTER_PORT);
#   slurm:    a task of an srun step (SLURM_STEP_NUM_TASKS is set) — fairseq's own SLURM inference is bypassed, as
#             it runs one process per task silently when scontrol is missing;
#   torchrun: a process of `torchrun --no-python bash RECIPE` (RANK, WORLD_SIZE and LOCAL_RANK are set).
launcher() {
    LAUNCH=nodes
    if [ -n "${SLURM_STEP_NUM_TASKS:-}" ]; then
        slurm_task
    elif [ -n "${RANK:-}" ] && [ -n "${WORLD_SIZE:-}" ] && [ -n "${LOCAL_RANK:-}" ]; then
        torchrun_process
    elif [ "${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}" != 1 ]; then
        die "this SLURM job has ${SLURM_JOB_NUM_NODES:-$SLURM_NNODES} nodes but the recipe is not a task of an srun" \
            "step: start it with srun (docs/recipes.md, \"SLURM\")"
    fi
    if [ "$LAUNCH" = nodes ]; then
        NUM_NODES=${NUM_NODES:-1}
        [[ "$NUM_NODES" =~ ^[1-9][0-9]*$ ]] || die "NUM_NODES=$NUM_NODES: use a number of nodes, 1 or more"
        if [ "$NUM_NODES" -gt 1 ]; then
            # fairseq's multi-node start: one run of the recipe per node, all reaching node 0 over TCP.
            [ -n "${MASTER_ADDR:-}" ] && [ -n "${MASTER_PORT:-}" ] && [ -n "${NODE_RANK:-}" ] ||
                die "NUM_NODES=$NUM_NODES needs MASTER_ADDR, MASTER_PORT (node 0's address and a free port) and" \
                    "NODE_RANK (0 .. NUM_NODES-1) on every node"
            [[ "$NODE_RANK" =~ ^[0-9]+$ ]] && [ "$NODE_RANK" -lt "$NUM_NODES" ] ||
                die "NODE_RANK=$NODE_RANK: use 0 .. $((NUM_NODES - 1)) (NUM_NODES=$NUM_NODES)"
        else
            NODE_RANK=0
        fi
        RUN_RANK=$NODE_RANK RUN_NAME="node $NODE_RANK"
        LAUNCH_ID="nodes $NUM_NODES via ${MASTER_ADDR:-$(hostname)}:${MASTER_PORT:-$$}"
    fi
}

# slurm_task: this run is task SLURM_PROCID of an srun step; the tasks agree on the master through scontrol.
slurm_task() {
    local tasks=$SLURM_STEP_NUM_TASKS nodes=${SLURM_STEP_NUM_NODES:-${SLURM_NNODES:-}} procid=${SLURM_PROCID:-}
    local job="SLURM step of $tasks task(s) on ${nodes:-?} node(s)"
    [[ "$tasks${nodes:-x}${procid:-x}${SLURM_LOCALID:-x}${SLURM_NODEID:-x}" =~ ^[0-9]+$ ]] ||
        die "$job: SLURM_STEP_NUM_TASKS, SLURM_STEP_NUM_NODES, SLURM_PROCID, SLURM_LOCALID and SLURM_NODEID must" \
            "all be set, as srun sets them"
    [ -z "${NUM_NODES:-}${NODE_RANK:-}" ] ||
        die "$job: SLURM gives the tasks their ranks; unset NUM_NODES and NODE_RANK"
    [ "$nodes" -gt 0 ] && [ $((tasks % nodes)) = 0 ] ||
        die "$job: the nodes hold different numbers of tasks; give each the same (--ntasks-per-node)"
    [ "$procid" -lt "$tasks" ] || die "$job: SLURM_PROCID=$procid is not one of its tasks"
    [ "$tasks" -gt 1 ] || return 0  # a step of one task (srun --pty bash, say) is a single node: nothing to agree on
    if [ -z "${MASTER_ADDR:-}" ]; then
        command -v scontrol > /dev/null ||
            die "$job: scontrol is not on PATH, so the tasks cannot agree on a master; put SLURM's scontrol on" \
                "PATH or set MASTER_ADDR to the first node's address"
        local nodelist=${SLURM_STEP_NODELIST:-${SLURM_JOB_NODELIST:-}}
        MASTER_ADDR=$(scontrol show hostnames "$nodelist" | head -n 1)
        [ -n "$MASTER_ADDR" ] || die "$job: 'scontrol show hostnames $nodelist' named no node"
    fi
    # One port for every task of the step, from the job's numbers unless MASTER_PORT is given.
    MASTER_PORT=${MASTER_PORT:-$((20000 + (${SLURM_JOB_ID:-0} * 16 + ${SLURM_STEP_ID:-0}) % 40000))}
    LAUNCH=slurm TASKS_PER_NODE=$((tasks / nodes))
    if [ "$TASKS_PER_NODE" = 1 ]; then  # one task a node: it starts the node's workers, as NUM_NODES does
        LAUNCH=nodes NUM_NODES=$nodes NODE_RANK=$SLURM_NODEID
    else
        TASK_WORKERS=$tasks TASK_RANK=$procid TASK_LOCAL=$SLURM_LOCALID RUN_RANK=$procid RUN_NAME="task $procid"
        INIT_METHOD="tcp://$MASTER_ADDR:$MASTER_PORT" LAUNCH_ID="SLURM step ${SLURM_JOB_ID:-}.${SLURM_STEP_ID:-}"
    fi
    say "$job: this is task $procid; master $MASTER_ADDR:$MASTER_PORT"
}

# torchrun_process: this run is one of torchrun's workers; they meet through torchrun's own store (env://).
torchrun_process() {
    [[ "$RANK$WORLD_SIZE$LOCAL_RANK${LOCAL_WORLD_SIZE:-x}" =~ ^[0-9]+$ ]] && [ "$RANK" -lt "$WORLD_SIZE" ] ||
        die "torchrun: RANK=$RANK, WORLD_SIZE=$WORLD_SIZE, LOCAL_RANK=$LOCAL_RANK, LOCAL_WORLD_SIZE=${LOCAL_WORLD_SIZE:-}" \
            "do not describe a worker; start the recipe as 'torchrun --nproc_per_node N --no-python bash RECIPE'"
    [ -z "${NUM_NODES:-}${NODE_RANK:-}" ] || die "torchrun gives the workers their ranks; unset NUM_NODES and NODE_RANK"
    LAUNCH=torchrun TASK_WORKERS=$WORLD_SIZE TASK_RANK=$RANK TASK_LOCAL=$LOCAL_RANK TASKS_PER_NODE=$LOCAL_WORLD_SIZE
    RUN_RANK=$RANK RUN_NAME="rank $RANK" INIT_METHOD=env://
    LAUNCH_ID="torchrun ${TORCHELASTIC_RUN_ID:-} via ${MASTER_ADDR:-}:${MASTER_PORT:-}"
}

# worker_args WORLD_SIZE RANK INIT_METHOD DEVICE: fairseq-train's arguments for one worker process whose rank is
# given outright (no spawning, no inference from the environment).
worker_args() {
    DEVICE_ARGS+=(--distributed-world-size "$1" --distributed-rank "$2" --distributed-init-method "$3"
                  --distributed-no-spawn --device-id "$4")
}

# Sets WORKERS (processes that train in parallel), DEVICE_ARGS (training), EVAL_DEVICE_ARGS, RUN_RANK (0 for the
# run that averages, translates and scores after training; the others stop) and RUN_NAME (node N, task N or rank
# N, in messages and log names).
detect_devices() {
    local visible=0
    # CUDA_VISIBLE_DEVICES set and empty hides every GPU: no need to import torch (1.5 s) to count none.
    if [ "$DRY_RUN" = 1 ] && [ -n "${NUM_GPUS:-}" ] && [ "${CPU:-0}" != 1 ]; then
        visible=$NUM_GPUS  # the GPUs the run will have, not this machine's
    elif [ "${CUDA_VISIBLE_DEVICES-unset}" != "" ]; then
        visible=$("$PYTHON" -c "import torch; print(torch.cuda.device_count())") || die "python with torch not found"
    fi
    launcher
    DEVICE_ARGS=()
    if [ "$visible" -eq 0 ]; then
        [ "${CPU:-0}" = 1 ] || die "no GPU visible. The paper trains on 8 GPUs; to try the pipeline on CPU" \
            "(very slow, for testing only) set CPU=1"
        # One process per node or task: torch already spreads its products over every core, and fairseq cannot
        # start several CPU processes itself (its spawn counts GPUs).
        [ "${NUM_GPUS:-1}" = 1 ] || die "NUM_GPUS=$NUM_GPUS: on CPU a node trains in one process, which uses" \
            "every core; for more processes start more nodes (NUM_NODES, NODE_RANK)"
        NUM_GPUS=1
        say "no GPU: training on CPU because CPU=1"
        # glibc hands every allocation over 32 MB straight back to the kernel, so each training step's
        # (tokens x vocabulary) tensors are page-faulted in afresh: keeping them in the heap measured 1.25x the
        # tokens/s of the quickstart (docs/results.md, "CPU memory allocator"). Other C libraries ignore these
        # variables.
        export MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_:-4294967296}
        export MALLOC_TRIM_THRESHOLD_=${MALLOC_TRIM_THRESHOLD_:-4294967296}
        EVAL_DEVICE_ARGS=(--cpu)
        if [ -n "${TASK_RANK:-}" ]; then
            WORKERS=$TASK_WORKERS
            worker_args "$WORKERS" "$TASK_RANK" "$INIT_METHOD" 0
        else
            WORKERS=$NUM_NODES
            [ "$NUM_NODES" = 1 ] || worker_args "$WORKERS" "$NODE_RANK" "tcp://$MASTER_ADDR:$MASTER_PORT" 0
        fi
        # Each process gets its rank and node 0's address outright (fairseq's start of CPU processes fails at
        # rank % torch.cuda.device_count()); gloo, as NCCL is GPU-only, and legacy_ddp's all-reduce of the
        # gradients, as pytorch_ddp on CPU fails on device_ids=[0].
        [ "$WORKERS" = 1 ] || DEVICE_ARGS+=(--distributed-backend gloo --ddp-backend legacy_ddp)
        DEVICE_ARGS+=(--cpu)
    elif [ -n "${TASK_RANK:-}" ]; then
        # One process a GPU: it sees all of the node's GPUs (and takes the one of its place) or one alone.
        [ -z "${NUM_GPUS:-}" ] || [ "$NUM_GPUS" = "$TASKS_PER_NODE" ] ||
            die "NUM_GPUS=$NUM_GPUS but $LAUNCH starts $TASKS_PER_NODE processes a node, one per GPU: unset NUM_GPUS"
        local device=0
        if [ "$visible" = "$TASKS_PER_NODE" ]; then
            device=$TASK_LOCAL
        elif [ "$visible" != 1 ]; then
            die "$RUN_NAME sees $visible GPUs, but $LAUNCH starts $TASKS_PER_NODE processes a node: give each" \
                "process one GPU (srun --gpus-per-task 1) or each all $TASKS_PER_NODE"
        fi
        NUM_GPUS=$TASKS_PER_NODE WORKERS=$TASK_WORKERS
        worker_args "$WORKERS" "$TASK_RANK" "$INIT_METHOD" "$device"
    else
        NUM_GPUS=${NUM_GPUS:-$visible}
        [ "$NUM_GPUS" -le "$visible" ] || die "NUM_GPUS=$NUM_GPUS but only $visible GPUs are visible"
        WORKERS=$((NUM_GPUS * NUM_NODES))
        DEVICE_ARGS=(--distributed-world-size "$WORKERS")
        if [ "$NUM_NODES" -gt 1 ]; then
            DEVICE_ARGS+=(--distributed-init-method "tcp://$MASTER_ADDR:$MASTER_PORT"
                          --distributed-rank $((NODE_RANK * NUM_GPUS)))
        fi
    fi
    if [ "$visible" -gt 0 ]; then
        EVAL_DEVICE_ARGS=()  # translation and validation run on one GPU (their default world size is 1)
        local precision=fp32
        if [ "${FP16:-0}" = 1 ]; then
            DEVICE_ARGS+=(--fp16)
            precision=fp16
        fi
        say "training on $NUM_GPUS GPU(s) x $((WORKERS / NUM_GPUS)) node(s), $precision"
    fi
    [ "$WORKERS" = 1 ] || say "$RUN_NAME: world size $WORKERS (started as $LAUNCH)"
    hold_work_dir
}

# Sets UPDATE_FREQ and MAX_TOKENS so that one step holds TOKENS_PER_STEP tokens (§5.1: about 25,000 source
# and 25,000 target tokens), however many workers there are.
batch_size_for_workers() {
    local tokens=${TOKENS_PER_STEP:-25000} per_gpu=${MAX_TOKENS_PER_GPU:-4096}
    [[ "$tokens$per_gpu" =~ ^[0-9]+$ ]] && [ "$tokens" -gt 0 ] && [ "$per_gpu" -gt 0 ] ||
        die "TOKENS_PER_STEP=$tokens, MAX_TOKENS_PER_GPU=$per_gpu: use positive numbers of tokens"
    UPDATE_FREQ=$(( (tokens + WORKERS * per_gpu - 1) / (WORKERS * per_gpu) ))
    MAX_TOKENS=$(( (tokens + WORKERS * UPDATE_FREQ - 1) / (WORKERS * UPDATE_FREQ) ))
    say "batch: $WORKERS worker(s) x $MAX_TOKENS tokens x update-freq $UPDATE_FREQ ~ $tokens tokens per step"
    if [ "$DRY_RUN" = 1 ]; then
        say "batch: whether a batch holds the longest sentence is known once the data is prepared (at run time)"
        return
    fi
    # fairseq asserts that a batch holds its longest example (train, and valid at the same --max-tokens).
    local longest split
    read -r longest split < <("$PYTHON" -m prepare.longest "$DATA_BIN") && [[ "$longest" =~ ^[0-9]+$ ]] ||
        die "cannot read the longest sentence of $DATA_BIN"
    if [ "$per_gpu" -lt "$longest" ]; then
        die "MAX_TOKENS_PER_GPU=$per_gpu is below the longest $split sentence ($longest tokens): set" \
            "MAX_TOKENS_PER_GPU to at least $longest"
    elif [ "$MAX_TOKENS" -lt "$longest" ] && [ "$UPDATE_FREQ" = 1 ]; then
        die "TOKENS_PER_STEP=$tokens over $WORKERS worker(s) gives each a batch of $MAX_TOKENS tokens, below the" \
            "longest $split sentence ($longest tokens): set TOKENS_PER_STEP to at least $((longest * WORKERS))"
    elif [ "$MAX_TOKENS" -lt "$longest" ]; then  # the step's even split rounded below it: the GPU holds it
        say "batch: $longest tokens a worker instead, to hold the longest $split sentence"
        MAX_TOKENS=$longest
    fi
}

# prepare_data MODULE ARGS...: download, tokenise, segment and binarise with prepare.MODULE; sets PREPARED_DIR
# (its work dir), DATA_BIN and TEXT_DIR. The preparation skips the steps it finished before, so recipes sharing DATA_DIR prepare once.
prepare_data() {
    local module=$1
    shift
    local data_dir=${DATA_DIR:-$WORK_DIR/data}
    local args=(--work-dir "$data_dir" "$@")
    [ -n "${RAW_DIR:-}" ] && args+=(--raw-dir "$RAW_DIR")
    local settings=() word
    # Its settings by the recipe's names (--bpe-merges: BPE_MERGES), for the data's record.
    for word in "$@"; do
        if [[ "$word" == --* ]]; then settings+=("$(echo "${word#--}" | tr a-z- A-Z_)=");
        else settings[-1]+=$word; fi
    done
    data_gate "$data_dir" "${RAW_DIR:-$data_dir/raw}" -- "${settings[@]}"
    say "stage prepare: python -m prepare.$module ${args[*]} ${EXTRA_PREPARE_ARGS:-}"
    [ "$DRY_RUN" = 0 ] || say "stage prepare: would run (it skips the steps it finished before, each by its settings)"
    # shellcheck disable=SC2086
    run "$PYTHON" -m "prepare.$module" "${args[@]}" ${EXTRA_PREPARE_ARGS:-}
    data_recorded
    PREPARED_DIR=$data_dir
    DATA_BIN="$data_dir/data-bin"
    TEXT_DIR="$data_dir/text"
    stop_if_asked prepare
}

# data_gate DATA_DIR RAW... -- NAME=VALUE...: before the preparation, compare its settings (and EXTRA_PREPARE_ARGS)
# and the raw files with those the data was prepared with (prepare/records.py): changed while checkpoints trained on
# it exist, refused; with RESTART_FROM=prepare, the data (under WORK_DIR) set aside first. data_recorded, after it:
# records them.
DATA_RECORD=()
data_gate() {
    local data_dir=$1 raw=() restarting=()
    shift
    while [ "$1" != -- ]; do raw+=(--raw "$1"); shift; done
    shift
    [ "${RESTART_FROM:-}" != prepare ] || restarting=(--restarting)
    DATA_RECORD=("$PYTHON" -m prepare.records data "$data_dir" --recipe-dir "$WORK_DIR" "${raw[@]}" "$@"
                 "EXTRA_PREPARE_ARGS=${EXTRA_PREPARE_ARGS:-}")
    local dry=()
    [ "$DRY_RUN" = 0 ] || dry=(--dry-run)
    agreed prepare "${DATA_RECORD[@]}" "${restarting[@]}" "${dry[@]}"
    case $DECISION in
    refuse*)
        die "stage prepare: ${DECISION#refuse }. Nothing was changed; to go on, use a new WORK_DIR and DATA_DIR, or" \
            "set RESTART_FROM=prepare (with DATA_DIR in WORK_DIR) to move the data, the checkpoints and every later" \
            "output aside (to WORK_DIR/previous/) and run them again" ;;
    changed*) say "stage prepare: ${DECISION#changed }; no checkpoint was trained on the data: preparing it again" ;;
    esac
    [ "${RESTART_FROM:-}" = prepare ] || return 0
    RESTARTING=1
    [ "${data_dir#"$WORK_DIR"/}" != "$data_dir" ] ||
        die "RESTART_FROM=prepare: DATA_DIR $data_dir is outside WORK_DIR (other recipes may share it); give a new" \
            "DATA_DIR instead"
    say "stage prepare: RESTART_FROM=prepare: the data moved to $ASIDE"
    [ "$DRY_RUN" = 1 ] || [ "${RUN_RANK:-0}" != 0 ] || set_aside "$data_dir"
}
data_recorded() {
    [ "$DRY_RUN" = 1 ] || [ "${RUN_RANK:-0}" != 0 ] || "${DATA_RECORD[@]}" --write > /dev/null ||
        die "cannot write the data's record"
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

# §3.4: one matrix for source and target embeddings and the pre-softmax projection (a joined dictionary);
# the parsing recipe, whose source words and target tree tokens have dictionaries of their own, shares only
# the target embedding with the pre-softmax projection.
EMBEDDING_SHARING=(--share-all-embeddings)

# resume_checkpoint SAVE_DIR: a job killed while fairseq copied its newest checkpoint to checkpoint_last.pt leaves
# that file cut off; make the newest intact checkpoint checkpoint_last.pt (vaswani_plugin/checkpoints/resume.py).
# Run 0 only: fairseq's rank 0 reads checkpoint_last.pt and sends it to the other ranks, which start training only
# once run 0's fairseq-train, run after this, has joined them.
resume_checkpoint() {
    # A first run has nothing to check, and saves the command's start-up (importing fairseq, 3.5 s); a stage's plan
    # (its record) is the training command alone.
    [ "${RUN_RANK:-0}" = 0 ] && [ -e "$1/checkpoint_last.pt" ] && [ -z "${STAGE_PLAN:-}" ] || return 0
    [[ ! "${DECISION:-}" =~ ^resume\ [0-9]+$ ]] || [ "$DRY_RUN" = 1 ] || return 0  # done deciding (train_decision)
    if [ "$DRY_RUN" = 1 ]; then
        say "stage train: would resume from $1/checkpoint_last.pt"
        run "$PYTHON" -m vaswani_plugin.checkpoints.resume "$1"
        return
    fi
    "$PYTHON" -m vaswani_plugin.checkpoints.resume "$1" 2>&1 | tee -a "$1/train.log" >&2
}

# train SAVE_DIR ARGS...: the paper's training set-up (§5) plus the recipe's model arguments, in the precision BF16
# asks of the plugin task (bfloat16 autocast runs the matrix products in bfloat16 and keeps weights, loss and
# Adam in float32: 3x faster products on a CPU with AVX512-BF16 or AMX, slower on one without;
# docs/results.md, "bfloat16 against float32"). The task decides and says what it chose; fairseq's own --bf16
# assumes a TPU.
train() {
    local save_dir=$1
    shift
    [ "$DRY_RUN" = 1 ] || mkdir -p "$save_dir"
    resume_checkpoint "$save_dir"
    # One log per run of the recipe (train.node1.log, train.task1.log, ...), so that theirs never interleave;
    # fairseq's other ranks log warnings only.
    local log=train.log
    [ "$RUN_RANK" = 0 ] || log="train.${RUN_NAME// /}.log"
    # Adam's β and ε (§5.3) differ from fairseq's defaults; noam's warmup_steps = 4000 (eq. 3) and the plugin
    # criterion's ε_ls = 0.1 (§5.4) are their defaults, but fairseq's own label_smoothed_cross_entropy, which
    # benchmarks/quickstart_vs_fairseq.sh trains with, has 0.
    # shellcheck disable=SC2086
    local command=("$PYTHON" -m fairseq_cli.train "$DATA_BIN" --user-dir "$PLUGIN"
        --task vaswani_translation --bf16-autocast "${BF16:-0}"
        "${EMBEDDING_SHARING[@]}"
        --optimizer adam --adam-betas '(0.9,0.98)' --adam-eps 1e-9
        --lr-scheduler noam
        --criterion vaswani_label_smoothed_cross_entropy --label-smoothing 0.1
        --max-tokens "$MAX_TOKENS" --update-freq "$UPDATE_FREQ" --required-batch-size-multiple 1
        --save-dir "$save_dir" --no-epoch-checkpoints
        --log-format simple --log-interval 100
        "${DEVICE_ARGS[@]}" "$@" ${EXTRA_TRAIN_ARGS:-})
    say "stage train: $(quoted "${command[@]}")"
    if [ "$DRY_RUN" = 1 ]; then
        run "${command[@]}"
        return
    fi
    { [ "$WORKERS" = 1 ] || echo "[$RECIPE] $RUN_NAME: world size $WORKERS (started as $LAUNCH)"
      "${command[@]}"; } 2>&1 | tee -a "$save_dir/$log"
}

# leave_the_rest_to_run_zero: every run of the recipe but run 0 (node 0, task 0, rank 0) stops after training, so
# that one alone writes the averaged checkpoint, the translations and the scores in the shared WORK_DIR.
leave_the_rest_to_run_zero() {
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

# translate CHECKPOINT SUBSET OUTPUT BEAM ALPHA MAX_LEN_B BATCH_SIZE POST_PROCESS: fairseq-generate's output for
# every sentence of SUBSET of DATA_BIN: beam search of BEAM hypotheses ranked by the GNMT length penalty α = ALPHA,
# at most input + MAX_LEN_B tokens (§6.1's early stop; SEARCH=fairseq: fairseq's), BATCH_SIZE sentences at a
# time, subwords joined by POST_PROCESS (fairseq's --post-process: subword_nmt, sentencepiece; none: left as
# they are). §6.1: 4 0.6 50 (batches of 128, the subwords of the data); §6.3: 21 0.3 300 (batches of 32, none).
translate() {
    local checkpoint=$1 subset=$2 output=$3 beam=$4 alpha=$5 max_len_b=$6 batch_size=$7 post_process=$8
    local joined=(--post-process "$post_process")
    [ "$post_process" != none ] || joined=()
    # shellcheck disable=SC2086
    run_to "$output" "$PYTHON" -m fairseq_cli.generate "$DATA_BIN" --user-dir "$PLUGIN" --task vaswani_translation \
        --path "$checkpoint" --gen-subset "$subset" --search "${SEARCH:-paper}" --beam "$beam" \
        --gnmt-alpha "$alpha" --max-len-a 1 --max-len-b "$max_len_b" --batch-size "$batch_size" \
        --required-batch-size-multiple 1 "${joined[@]}" \
        "${EVAL_DEVICE_ARGS[@]}" ${EXTRA_GENERATE_ARGS:-}
}

# training_cost SAVE_DIR PAPER_MODEL: the Table 2 line.
training_cost() {
    local peak=()
    [ -n "${PEAK_TFLOPS:-}" ] && peak=(--peak-tflops "$PEAK_TFLOPS")
    local fp16=()
    [ "${FP16:-0}" = 1 ] && fp16=(--fp16)
    run "$PYTHON" -m vaswani_plugin.tools.training_cost --checkpoint "$1/checkpoint_last.pt" --gpus "$WORKERS" \
        --paper "$2" "${peak[@]}" "${fp16[@]}"
}

# score GENERATE_OUTPUT SUBSET [ARGS...]: both BLEU lines of §6.1 against the plain reference of SUBSET.
score() {
    local output=$1 subset=$2
    shift 2
    local command=("$PYTHON" -m vaswani_plugin.scoring.bleu --generate-output "$output"
                   --reference "$TEXT_DIR/$subset.$TARGET_LANG" --target-lang "$TARGET_LANG" "$@")
    if [ "$DRY_RUN" = 1 ]; then run "${command[@]}"; else "${command[@]}" | tee "$output.bleu"; fi
}

# model_parameters SAVE_DIR: the parameter count fairseq-train logged.
model_parameters() {
    sed -n 's/.*num. shared model params: \([0-9,]*\).*/\1/p' "$1/train.log" | tail -n 1 | tr -d ,
}

# train_average_translate ARCH STEPS SAVE_EVERY AVERAGE PAPER_MODEL: the rest of a Table 2 recipe. ARCH
# (Table 3; its P_drop unless DROPOUT is set) trained for STEPS steps (§5.2; MAX_UPDATE overrides) with a
# checkpoint every SAVE_EVERY steps, the last AVERAGE of them averaged (§6.1; SAVE_INTERVAL_UPDATES and
# AVERAGE_LAST override), and PAPER_MODEL (base or big) the Table 2 row of the training cost.
# Batches of about 25,000 source and 25,000 target tokens on any number of GPUs (§5.1); Adam with
# β1 = 0.9, β2 = 0.98, ε = 1e-9 and the learning rate of eq. 3 with warmup_steps = 4000 (§5.3); ε_ls = 0.1
# (§5.4); newstest2014 translated with beam 4, length penalty α = 0.6 and at most input + 50 tokens (§6.1);
# both BLEU scores and the training cost printed.
train_average_translate() {
    local arch=$1 steps=$2 save_every=$3 average=$4 paper_model=$5
    batch_size_for_workers
    local checkpoints="$WORK_DIR/checkpoints" every=${SAVE_INTERVAL_UPDATES:-$save_every}
    local average_last=${AVERAGE_LAST:-$average}
    stage train --output "$checkpoints" train "$checkpoints" --arch "$arch" ${DROPOUT:+--dropout "$DROPOUT"} \
        --max-update "${MAX_UPDATE:-$steps}" --save-interval-updates "$every" --keep-interval-updates "$average_last"
    leave_the_rest_to_run_zero
    stage average --output "$checkpoints/checkpoint_average.pt" average "$checkpoints" "$average_last"
    # §6.1: beam 4, α = 0.6, at most input + 50 tokens; 128 sentences a batch; the subwords joined back.
    local output="$WORK_DIR/newstest2014.generate.txt"
    stage translate --output "$output" --output "$output.bleu" translate "$checkpoints/checkpoint_average.pt" test \
        "$output" 4 0.6 50 128 "$SUBWORDS"
    score "$WORK_DIR/newstest2014.generate.txt" test
    training_cost "$checkpoints" "$paper_model"
}
