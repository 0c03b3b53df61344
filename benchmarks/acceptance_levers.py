"""Stage (b) of the GPU acceptance, the levers: LEVERS, each a host_cost.py run against the default's at the same
size, each started only by its own minute; then, if time allows, both implementations trained by fairseq-train in
stage (a)'s precisions, with nvidia-smi's GPU busy during each run."""

import shutil
import statistics
import subprocess
import time
from datetime import datetime
from pathlib import Path

from acceptance_logs import trained, training_checks
from acceptance_plan import CRITERIA, LEVERS, finished
from acceptance_speed import run_speed, speed_checks
from acceptance_worker import run_jobs, stage_jobs, train_argv


class GpuBusy:
    """nvidia-smi's GPU utilisation, a sample every 250 ms into `path`, while it is entered: how much of each
    training run the GPU was busy. The H100's first runs were host-bound (21-57 % busy, docs/results.md "GPU"). Where
    there is no GPU or no nvidia-smi, nothing is sampled."""

    COMMAND = ["nvidia-smi", "--query-gpu=timestamp,utilization.gpu", "--format=csv,noheader,nounits", "-lms", "250"]

    def __init__(self, path, device):
        self.path, self.device, self.process = Path(path), device, None

    def __enter__(self):
        if self.device == "cuda" and shutil.which(self.COMMAND[0]):
            with open(self.path, "w") as out:
                self.process = subprocess.Popen(self.COMMAND, stdout=out, stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc):
        if self.process is not None:
            self.process.terminate()
            self.process.wait()

    def samples(self):
        """(time.time(), percent) of every sample taken, or None if none was."""
        return parse_gpu_busy(self.path.read_text()) if self.process is not None else None


def parse_gpu_busy(text):
    """nvidia-smi's `timestamp, utilization.gpu` lines (local time, as time.time() counts) as (seconds, percent)."""
    samples = []
    for line in text.splitlines():
        stamp, _, percent = line.partition(",")
        try:
            samples.append((datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp(), float(percent)))
        except ValueError:
            continue  # a line cut short when nvidia-smi was stopped
    return samples


def busy_during(samples, started, ended):
    """The median GPU utilisation (%) of the samples taken between `started` and `ended`, or None."""
    inside = [percent for moment, percent in samples or [] if started is not None and started <= moment <= ended]
    return statistics.median(inside) if inside else None


def stage_b(context):
    """The levers, LEVERS, each against the default's run at the same size (stage s); then, if time allows, both
    implementations trained by fairseq-train in stage (a)'s precisions (a run not started by the stage's end is a
    note, not a failure: the lowest priority)."""
    work, data, mode, device, precisions = (context[k] for k in ("work", "data", "mode", "device", "precisions"))
    deadline, end = context["ends"][2]
    started = time.time()
    levers = run_speed(
        mode, work, LEVERS, deadline, end, context["default"][0], "b", context["minute"], mode.lever_starts
    )
    jobs = stage_jobs(
        work,
        [
            (f"train-b-{p}-{impl}", "train", train_argv(data, mode, mode.speed, p, impl, device))
            for p in precisions
            for impl in CRITERIA
        ],
    )
    with GpuBusy(work / "gpu_busy.csv", device) as busy:
        results = run_jobs(jobs, work, work / "worker-b.log", deadline, end)
    samples = busy.samples()
    training = {(p, i): {"note": context["note"]} for p in context["shown"] for i in CRITERIA}
    ran = []
    for precision in precisions:
        for impl in CRITERIA:
            name = f"train-b-{precision}-{impl}"
            if results[name].get("error", "").startswith("not run: past"):
                training[precision, impl] = {"note": f"{results[name]['error']} (if time allows)"}
                continue
            row = training[precision, impl] = trained(work, results, name)
            row["gpu_busy"] = None if samples is None else busy_during(samples, row.get("started"), row.get("ended"))
            ran.append((precision, impl))
    checks = speed_checks(levers, "lever")
    checks += [check for p, i in ran for check in training_checks(training, [p], [i])]
    return finished(context, started, levers=levers, training=training, checks=checks, jobs=jobs, results=results)
