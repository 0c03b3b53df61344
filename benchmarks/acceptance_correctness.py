"""Stage (a) of the GPU acceptance, correctness: the plugin's base model trained by fairseq-train in each precision
the card's recipes may choose (the stand-in: fp32 and bfloat16 autocast), then beam-4 decoding of the first test
sentences on the CPU and on the device in float32 and fp16, from the first precision that trained."""

import time

from acceptance_decoding import agreement, decoded_checkpoint
from acceptance_logs import differing, parse_generate, trained, training_checks
from acceptance_plan import CHOSEN, CRITERIA, DECODES, PLUGIN_ONLY, finished
from acceptance_worker import generate_argv, run_jobs, stage_jobs, train_argv


def stage_a(context):
    """Correctness: the plugin trained in each precision; the first that trained decoded on the CPU and on the
    device, and their hypotheses compared."""
    work, data, mode, device, precisions = (context[k] for k in ("work", "data", "mode", "device", "precisions"))
    deadline, end = context["ends"][1]
    started, first, checkpoints = time.time(), work / "first-sentences", work / "checkpoints"
    specs = [("first-sentences", "subset", [str(data), "test", str(mode.sentences), str(first)])]
    specs += [
        (f"train-a-{p}", "train", train_argv(data, mode, mode.check, p, PLUGIN_ONLY[0], device, checkpoints / p))
        for p in precisions
    ]
    # The decoding jobs run in the same worker (CUDA starts once), on the checkpoint it chooses after training.
    # Each run on the device follows an untimed one of the same decoding: CUDA loads a kernel at its first use,
    # which took 5 of the H100's 5.4 s for its first fp16 decoding of 100 sentences.
    outputs = {name: work / f"generate-{name}" for name in DECODES}
    decodes = [
        (
            f"{run}-{name}",
            "generate",
            generate_argv(first, "test", CHOSEN, fp16, "cpu" if cpu else device, work / f"{run}-{name}"),
        )
        for name, (cpu, fp16) in DECODES.items()
        for run in ["warm-up"] * (not cpu) + ["generate"]
    ]
    decodes.append(
        (
            "compare",
            "compare",
            [
                str(first),
                CHOSEN,
                str(outputs["cpu"] / "generate-test.txt"),
                str(outputs["fp32"] / "generate-test.txt"),
                device,
            ],
        )
    )
    jobs = stage_jobs(work, specs) + [
        dict(job, decodes=dict(work=str(work), precisions=precisions)) for job in stage_jobs(work, decodes)
    ]
    results = run_jobs(jobs, work, work / "worker-a.log", deadline, end)
    training = {(p, i): {"note": context["note"]} for p in context["shown"] for i in CRITERIA}
    for precision in precisions:
        training[precision, PLUGIN_ONLY[0]] = trained(work, results, f"train-a-{precision}")
    chosen, checkpoint = decoded_checkpoint(work, precisions)
    for job in jobs:  # the report's list of runs: as they ran
        job["argv"] = [str(checkpoint) if x == CHOSEN and checkpoint else x for x in job["argv"]]

    decoding = {
        "checkpoint": f"the {chosen} run's" if chosen else "none (no precision trained)",
        "sentences": mode.sentences,
        "hypotheses": {},
    }
    for name in DECODES:
        output = outputs[name] / "generate-test.txt"
        log = work / "logs" / f"generate-{name}.log"
        timing, decoding["hypotheses"][name], _ = parse_generate(
            log.read_text() if log.exists() else "", output.read_text() if output.exists() else ""
        )
        decoding[name] = timing or {"error": results[f"generate-{name}"].get("error", "no timing line in its log")}
    hypotheses = decoding["hypotheses"]
    decoding["fp16_differing"] = differing(hypotheses["fp16"], hypotheses["fp32"])
    checks = training_checks(training, precisions, PLUGIN_ONLY)
    if "error" in results["first-sentences"]:
        checks.append(
            (f"the first {mode.sentences} test sentences written ({results['first-sentences']['error']})", False)
        )
    checks += [(f"beam-4 decoding ran: {name}", "sentences" in decoding[name]) for name in DECODES]
    on = "GPU" if device == "cuda" else "stand-in device"
    if "error" in results["compare"]:
        checks.append(
            (f"beam 4 in float32: the {on}'s hypotheses compared with the CPU's ({results['compare']['error']})", False)
        )
    else:
        found = decoding["agreement"] = agreement(hypotheses["cpu"], hypotheses["fp32"], results["compare"])
        checks += [
            (
                f"beam 4 in float32: no real difference between the {on}'s hypotheses and the CPU's "
                f"({found['identical']} identical, {len(found['near_ties'])} near-ties, {len(found['real'])} "
                f"real differences of {found['compared']})",
                found["compared"] > 0 and not found["real"],
            ),
            (
                f"beam 4 in float32: at most {found['cap']} near-ties ({len(found['near_ties'])})",
                len(found["near_ties"]) <= found["cap"],
            ),
        ]
    return finished(context, started, training=training, decoding=decoding, checks=checks, jobs=jobs, results=results)
