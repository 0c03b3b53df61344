"""Stage (a)'s decoding, beam 4 on the CPU and on the device: the first test sentences' own data-bin, the checkpoint
decoded (the first precision that trained), and the two devices' hypotheses compared by the search's own scores:
identical, near-ties (within twice the devices' drift) or real differences."""

import json
import shutil
from pathlib import Path

from acceptance_logs import differing, parse_generate, trained
from acceptance_plan import ALPHA, NEAR_TIES, PLUGIN_ONLY, TOLERANCE_FLOOR


def write_first_sentences(data, split, count, dest):
    """A data-bin in `dest` with data's dictionaries and the first `count` sentences of its binarised split (both
    languages, fairseq's mmap format), so that fairseq-generate decodes those alone."""
    from fairseq.data.indexed_dataset import MMapIndexedDataset, MMapIndexedDatasetBuilder

    indexes = sorted(Path(data).glob(f"{split}.*.idx"))
    if not indexes:
        raise FileNotFoundError(f"no {split}.*.idx in {data}")
    Path(dest).mkdir()
    for dictionary in Path(data).glob("dict.*.txt"):
        shutil.copyfile(dictionary, Path(dest) / dictionary.name)
    for index in indexes:
        dataset = MMapIndexedDataset(str(index.with_suffix("")))
        out = Path(dest) / index.stem
        builder = MMapIndexedDatasetBuilder(f"{out}.bin", dtype=dataset._index.dtype)
        for i in range(min(int(count), len(dataset))):
            builder.add_item(dataset[i])
        builder.finalize(f"{out}.idx")


def token_log_probs(model, sources, hypotheses, device, dictionary, batch=32):
    """log p of each hypothesis token (</s> last) given the source and the tokens before it, teacher-forced in
    float32 on `device`: one CPU tensor per hypothesis."""
    import torch
    from fairseq.data import data_utils

    pad, eos, scores = dictionary.pad(), dictionary.eos(), []
    with torch.no_grad():
        for start in range(0, len(hypotheses), batch):
            src, hyp = sources[start : start + batch], hypotheses[start : start + batch]
            logits, _ = model(
                data_utils.collate_tokens(src, pad, left_pad=True).to(device),
                torch.tensor([len(tokens) for tokens in src], device=device),
                data_utils.collate_tokens(hyp, pad, eos, move_eos_to_beginning=True).to(device),
            )
            target = data_utils.collate_tokens(hyp, pad).to(device)
            lprobs = torch.log_softmax(logits.float(), dim=-1).gather(-1, target.unsqueeze(-1)).squeeze(-1).cpu()
            scores += [lprobs[row, : len(tokens)] for row, tokens in enumerate(hyp)]
    return scores


def compare_on_both_devices(data, checkpoint, cpu_output, device_output, device):
    """The CPU's and the device's beam-search hypotheses (fairseq-generate's outputs), scored as the search scores
    them (Σ log p / lp(|Y|), §6.1, α = ALPHA) in float32. drift: the largest |device - CPU| of the running sums of
    log p over every CPU hypothesis, teacher-forced on both devices (the same batch); a gap up to 2 × drift between
    two hypotheses can flip their order from one device to the other, so that is the tolerance of a near-tie
    (TOLERANCE_FLOOR at least). rescored: where the device's hypothesis differs, both scored on the CPU."""
    import copy

    from vaswani_plugin.generation.length import gnmt_length_penalty
    from vaswani_plugin.serving.loading import load_model

    task, model = load_model(checkpoint, data)
    model.float()
    task.load_dataset("test")
    sources, dictionary = task.dataset("test").src, task.target_dictionary
    cpu = parse_generate("", Path(cpu_output).read_text())[1]
    ours = parse_generate("", Path(device_output).read_text())[1]

    def tokens(text):
        return dictionary.encode_line(text, add_if_not_exist=False, append_eos=True).long()

    def scores(ids, hypotheses, on, at):
        found = token_log_probs(on, [sources[i] for i in ids], [tokens(hypotheses[i]) for i in ids], at, dictionary)
        return dict(zip(ids, found))

    ids = sorted(cpu)
    on_cpu = scores(ids, cpu, model, "cpu")
    on_device = scores(ids, cpu, copy.deepcopy(model).to(device), device)
    drift = max([float((on_device[i].cumsum(0) - on_cpu[i].cumsum(0)).abs().max()) for i in ids] or [0.0])
    changed = [i for i in ids if i in ours and ours[i] != cpu[i]]
    theirs = scores(changed, ours, model, "cpu")

    def score(lprobs):
        return float(lprobs.sum()) / gnmt_length_penalty(len(lprobs), ALPHA)

    return dict(
        drift=drift,
        tolerance=max(2 * drift, TOLERANCE_FLOOR),
        scores={str(i): score(on_cpu[i]) for i in ids},
        rescored={str(i): [score(on_cpu[i]), score(theirs[i])] for i in changed},
    )


def agreement(cpu, device, comparison, cap=NEAR_TIES):
    """The device's hypotheses against the CPU's (sentence id -> text), three ways: identical; near-ties, which
    both score within comparison's tolerance of each other on the CPU; real differences (farther apart, or a
    hypothesis that one side lacks). Passed: no real difference and at most `cap` near-ties."""
    gaps = {int(i): abs(ours - theirs) for i, (ours, theirs) in comparison["rescored"].items()}
    changed = differing(device, cpu)
    near = [i for i in changed if i in gaps and gaps[i] <= comparison["tolerance"]]
    real = [i for i in changed if i not in near]
    return dict(
        compared=len(set(cpu) | set(device)),
        identical=len(set(cpu) | set(device)) - len(changed),
        near_ties=near,
        real=real,
        gaps=gaps,
        tolerance=comparison["tolerance"],
        drift=comparison["drift"],
        passed=not real and len(near) <= cap,
        cap=cap,
    )


def decoded_checkpoint(work, precisions):
    """Stage (a)'s decoded precision and its checkpoint (decoded_precision), or (None, None), from the training
    runs' results and logs in `work`: the worker decides with it when decoding starts, the report after."""
    training = {}
    for precision in precisions:
        name = f"train-a-{precision}"
        path = work / "results" / f"{name}.json"
        result = json.loads(path.read_text()) if path.exists() else {"error": "no result"}
        training[precision, PLUGIN_ONLY[0]] = trained(work, {name: result}, name)
    chosen = decoded_precision(training, precisions, work / "checkpoints")
    return chosen, chosen and work / "checkpoints" / chosen / "checkpoint_last.pt"


def decoded_precision(training, precisions, checkpoints):
    """The first precision whose run trained (finished, saved its checkpoint, loss finite and falling): stage (a)
    decodes its checkpoint; None if none did."""
    for precision in precisions:
        row = training[precision, PLUGIN_ONLY[0]]
        if (
            "error" not in row
            and row.get("finite")
            and row.get("falling")
            and (checkpoints / precision / "checkpoint_last.pt").is_file()
        ):
            return precision
    return None
