"""What the GPU acceptance reads of fairseq's output: fairseq-train's json log windows (loss, tokens/s, loss
scales, overflows) summarized and checked, fairseq-generate's timing line and hypotheses."""

import json
import math
import re
import statistics

TRAIN_INNER = re.compile(r"\| train_inner \| (\{.*\})\s*$", re.M)
TRAIN_SUMMARY = re.compile(r"\| train \| (\{.*\})\s*$", re.M)  # fairseq's end-of-epoch record, keys "train_..."
OVERFLOW = re.compile(r"gradient overflow detected|AMP: overflow detected")
TRANSLATED = re.compile(
    r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s "
    r"\(([\d.]+) sentences/s, ([\d.]+) tokens/s\)"
)
HYPOTHESIS = re.compile(r"^H-(\d+)\t([^\t]*)\t(.*)$", re.M)
PRODUCTS = re.compile(r"\| (float16 products on \S+: .*)$", re.M)  # models/output_layer_loss.py's one line


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def parse_train_log(text):
    """The log windows of a fairseq-train json log (its train_inner records, numbers as floats) and how many
    gradient overflows fp16/amp reported (each one lowers the loss scale and skips or repeats the step). A run
    stopped before its first window (fairseq's transformer on the H200, 9 updates in 10 s) has its end-of-epoch
    record as its one window, marked "whole_run": its tokens/s include the start-up."""
    windows = [
        {key: _number(value) for key, value in json.loads(record).items()} for record in TRAIN_INNER.findall(text)
    ]
    if not windows and TRAIN_SUMMARY.search(text):
        record = json.loads(TRAIN_SUMMARY.findall(text)[-1])
        windows = [dict({key.removeprefix("train_"): _number(value) for key, value in record.items()}, whole_run=True)]
    return windows, len(OVERFLOW.findall(text))


def summarize_training(windows, overflows):
    """Steps, loss of the first and last window, whether it is finite and falling, tokens/s, loss scales."""
    if not windows:
        return {"error": "no train_inner line in the log"}
    losses = [window["loss"] for window in windows]
    timed = windows[1:] or windows  # the first window holds the start-up (CUDA, data loading)
    return {
        "steps": int(windows[-1]["num_updates"]),
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "finite": all(isinstance(x, float) and math.isfinite(x) for x in losses),
        "windows": len(windows),
        "falling": len(losses) > 1 and losses[-1] < losses[0],
        "tokens_per_s": statistics.median(window["wps"] for window in timed),
        "loss_scales": [(int(w["num_updates"]), w["loss_scale"]) for w in windows if "loss_scale" in w],
        "overflows": overflows,
        "whole_run": windows[0].get("whole_run", False),
    }


def parse_generate(log_text, output_text):
    """fairseq-generate's timing line ({sentences, tokens, seconds, sentences_per_s, tokens_per_s}), its
    hypotheses (sentence id -> H- line's tokens) and their scores (id -> the H- line's score)."""
    found = TRANSLATED.search(log_text)
    lines = HYPOTHESIS.findall(output_text)
    hypotheses, scores = {int(i): tokens for i, _, tokens in lines}, {int(i): float(score) for i, score, _ in lines}
    if not found:
        return None, hypotheses, scores
    sentences, tokens, seconds, per_s, tokens_per_s = (float(x.replace(",", "")) for x in found.groups())
    timing = dict(
        sentences=int(sentences), tokens=int(tokens), seconds=seconds, sentences_per_s=per_s, tokens_per_s=tokens_per_s
    )
    return timing, hypotheses, scores


def differing(hypotheses, reference):
    """The sentence ids (of either set) with a different hypothesis, or none, in `hypotheses`, in order."""
    return sorted(i for i in set(hypotheses) | set(reference) if hypotheses.get(i) != reference.get(i))


def trained(work, results, name):
    """A training run's summary from its log, with the worker's result (seconds, peak memory, error) and the
    output layer's float16 product line, if it logged one."""
    log = work / "logs" / f"{name}.log"
    text = log.read_text() if log.exists() else ""
    summary = summarize_training(*parse_train_log(text))
    return {**summary, **results[name], "products": PRODUCTS.findall(text)[:1]}


def one_window(row):
    """Why a run's loss cannot be seen to fall: it logged one window (the H100's first fp16 run in stage (b)), or
    none, and its end-of-epoch record stands in (fairseq's transformer on the H200)."""
    if row.get("whole_run"):
        return " (no log window: the run's end-of-epoch record)"
    return " (one log window: no later loss to compare)" if row.get("windows", 2) < 2 else ""


def training_checks(training, precisions, impls):
    """(what, passed) of each training run: it ran, and its loss is finite and falls. fairseq's transformer is the
    comparison's baseline, not under test: it passes with a finite loss (on the H200 it trained 7-9 updates in its
    10 s, cuDNN's attention building a graph for each new shape: too few to see a loss fall)."""
    checks = []
    for precision in precisions:
        for impl in impls:
            row = training[precision, impl]
            if "error" in row:
                checks.append((f"{precision} {impl} trained ({row['error']})", False))
            elif impl == "transformer":
                checks.append(
                    (
                        f"{precision} {impl} (the baseline): trained {row['steps']} steps, loss finite"
                        + one_window(row),
                        row["finite"],
                    )
                )
            else:
                checks.append(
                    (
                        f"{precision} {impl}: trained {row['steps']} steps, loss finite and falling" + one_window(row),
                        row["finite"] and row["falling"],
                    )
                )
    return checks
