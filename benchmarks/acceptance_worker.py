"""The GPU acceptance's runs: fairseq-train's and fairseq-generate's command lines, run as jobs in one worker process
a stage (a run that kills it fails alone, and the rest go on in a new one), each stopped at its stage's deadline.

    python benchmarks/acceptance_worker.py JOBS.json     # the worker itself, as run_jobs starts it
"""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from acceptance_decoding import compare_on_both_devices, decoded_checkpoint, write_first_sentences
from acceptance_plan import CHOSEN, CRITERIA, PLUGIN_ONLY, PRECISIONS, say
from common import DROPOUT, PAPER, PLUGIN, REPO, SIZES, paper_training, size_arguments
from host_cost_memory import PeakMemory

# Batches are collated in the run's own process: a DataLoader worker process takes 5 s to shut down after each
# run in the shared worker, and a Multi30k batch collates in about a millisecond.
DATA_LOADING = ["--num-workers", "0"]


def plugin_argv(data, *words):
    """A fairseq command line's arguments with the plugin's --user-dir, as strings."""
    return [str(word) for word in (data, "--user-dir", PLUGIN, *words)]


def train_argv(data, mode, runs, precision, impl, device, save_dir=None):
    """fairseq-train's arguments: §5's training (Adam, eq. 3, label smoothing 0.1) of one size, json logs."""
    # fairseq's transformer with fairseq's own adam (what a user gets by doing nothing), each its own criterion
    paper = paper_training(None if impl in PLUGIN_ONLY else "adam", CRITERIA[impl])
    save = (
        ["--save-dir", save_dir, "--no-epoch-checkpoints", "--save-interval", "1000000", "--no-save-optimizer-state"]
        if save_dir
        else ["--no-save"]
    )
    return plugin_argv(
        data,
        *PRECISIONS[precision],
        "--arch",
        impl,
        "--share-all-embeddings",
        *size_arguments(*SIZES[mode.size]),
        "--dropout",
        DROPOUT,
        *paper,
        "--warmup-updates",
        runs.warmup,
        "--max-tokens",
        mode.max_tokens,
        "--required-batch-size-multiple",
        "1",
        "--seed",
        "1",
        "--distributed-world-size",
        "1",  # one GPU, however many the machine has
        "--max-update",
        runs.steps,
        "--stop-time-hours",
        runs.seconds / 3600,
        "--disable-validation",
        "--log-format",
        "json",
        "--log-interval",
        runs.log_interval,
        *save,
        *DATA_LOADING,
        *(["--cpu"] if device == "cpu" else []),
    )


def generate_argv(data, subset, checkpoint, fp16, device, results):
    """fairseq-generate's arguments: §6.1's beam search over a split."""
    return plugin_argv(
        data,
        "--task",
        "vaswani_translation",
        "--path",
        checkpoint,
        "--gen-subset",
        subset,
        *PAPER.arguments("decoding"),
        "--batch-size",
        "128",
        "--required-batch-size-multiple",
        "1",
        "--results-path",
        results,
        *DATA_LOADING,
        *(["--fp16"] if fp16 else []),
        *(["--cpu"] if device == "cpu" else []),
    )


def run_job(job):
    """One fairseq command-line run in this process, its log in job["log"]; returns its result."""
    import gc
    import logging

    handler = logging.FileHandler(job["log"], mode="w")  # fairseq's log format, as its command-line tools set it
    handler.setFormatter(
        logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    )
    root, level = logging.getLogger(), logging.getLogger().level
    root.addHandler(handler)
    root.setLevel(logging.INFO)

    import fairseq_cli.generate
    import fairseq_cli.train
    import torch
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.distributed import utils as distributed_utils

    import vaswani_plugin

    vaswani_plugin.register()  # as --user-dir would: this process imported the package before fairseq read that
    gc.collect()  # the runs before this one: their models and optimisers are garbage in reference cycles
    cuda = torch.cuda.is_available() and "--cpu" not in job["argv"]
    if cuda:
        torch.cuda.empty_cache()
    else:
        _reset_peak_rss()
    start = time.perf_counter()
    result = {"started": time.time()}
    try:
        with PeakMemory(torch.cuda if cuda else None) as peak:
            if job["tool"] == "train":  # fairseq-train's cli_main
                args = options.parse_args_and_arch(options.get_training_parser(), job["argv"])
                distributed_utils.call_main(convert_namespace_to_omegaconf(args), fairseq_cli.train.main)
            elif job["tool"] == "generate":  # fairseq-generate's cli_main
                fairseq_cli.generate.main(options.parse_args_and_arch(options.get_generation_parser(), job["argv"]))
            elif job["tool"] == "compare":
                result.update(compare_on_both_devices(*job["argv"]))
            else:
                write_first_sentences(*job["argv"])
    except (Exception, SystemExit) as error:  # fairseq's argument errors exit; the next job still runs
        logging.getLogger("gpu_acceptance").exception("the run failed")
        result["error"] = f"{type(error).__name__}: {error}"
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()
    result["seconds"] = time.perf_counter() - start
    result["ended"] = time.time()
    result["peak_memory_mb"] = peak.megabytes if cuda else _peak_rss_mb()
    return result


def _reset_peak_rss():
    """Linux: restart the process's peak RSS (VmHWM) from its current RSS, so that each run has its own."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _peak_rss_mb():
    try:
        kilobytes = re.search(r"^VmHWM:\s*(\d+) kB", Path("/proc/self/status").read_text(), re.M)[1]
    except (OSError, TypeError):
        return None
    return int(kilobytes) / 1024


def worker(jobs_file):
    """Run the jobs one after another; each one's result goes to its own file as soon as it is known. A job whose
    deadline (time.time()) has passed is not run: its result says so. A decoding job of stage (a) ("decodes": the
    work folder and the precisions) runs on the checkpoint chosen when it starts: CHOSEN in its argv."""
    for job in json.loads(Path(jobs_file).read_text()):
        if job.get("deadline") is not None and time.time() > job["deadline"]:
            result = {"error": job["late"]}
        elif "decodes" in job:
            _, checkpoint = decoded_checkpoint(Path(job["decodes"]["work"]), job["decodes"]["precisions"])
            result = (
                {"error": "not run: no precision trained"}
                if checkpoint is None
                else run_job(dict(job, argv=[str(checkpoint) if x == CHOSEN else x for x in job["argv"]]))
            )
        else:
            result = run_job(job)
        Path(job["result"]).write_text(json.dumps(result))


def run_jobs(jobs, work, log, deadline=None, end="the deadline"):
    """Run all jobs in worker processes: one, unless a run kills it (then that run failed, the rest go on). At
    `deadline` (time.time()) the worker is stopped: the run in progress then failed ("stopped at END"), and the runs
    not started are not run ("not run: past END")."""
    late = f"not run: past {end}"
    pending = [dict(job, deadline=deadline, late=late) for job in jobs]
    with open(log, "w") as out:
        while pending:
            if deadline is not None and time.time() > deadline:
                for job in pending:
                    Path(job["result"]).write_text(json.dumps({"error": late}))
                break
            (work / "jobs.json").write_text(json.dumps(pending))
            say(f"worker: {', '.join(job['name'] for job in pending)} (log {log})")
            status = run_until(
                [sys.executable, __file__, str(work / "jobs.json")],
                None if deadline is None else deadline - time.time(),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, PYTHONPATH=pythonpath()),
            )
            error = (
                f"stopped at {end}"
                if status is None
                else f"the worker died (exit status {status}) in this run; see {log}"
            )
            unfinished = [job for job in pending if not Path(job["result"]).exists()]
            if unfinished:
                Path(unfinished[0]["result"]).write_text(json.dumps({"error": error}))
            pending = unfinished[1:]
    return {job["name"]: json.loads(Path(job["result"]).read_text()) for job in jobs}


def run_until(command, seconds, **popen):
    """Run a command, its whole process group (it and what it started) killed after `seconds` (None: no limit):
    its exit status, or None if it was stopped."""
    process = subprocess.Popen(command, start_new_session=True, **popen)
    try:
        return process.wait(timeout=None if seconds is None else max(0.0, seconds))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return None


def pythonpath():
    """PYTHONPATH of the acceptance's processes: the repository first, so that they run its working tree."""
    return os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))


def stage_jobs(work, specs):
    """Jobs from (name, tool, argv): their logs and results under work."""
    return [
        dict(
            name=name,
            tool=tool,
            argv=argv,
            log=str(work / "logs" / f"{name}.log"),
            result=str(work / "results" / f"{name}.json"),
        )
        for name, tool, argv in specs
    ]


def described(job):
    """A job as the report's list of runs shows it: the fairseq command line."""
    if job["tool"] == "subset":
        data, split, count, dest = job["argv"]
        return f"the first {count} sentences of {split} in {data}, written to {dest}"
    if job["tool"] == "compare":
        data, checkpoint, cpu, device_output, device = job["argv"]
        return (
            f"{cpu} and {device_output} scored by {checkpoint}, teacher-forced on the CPU and on {device} "
            "(compare_on_both_devices)"
        )
    return f"fairseq-{job['tool']} {shlex.join(job['argv'])}"


if __name__ == "__main__":
    worker(sys.argv[1])
