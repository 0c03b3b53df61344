"""The quickstart end to end on the real Multi30k (../shared/data/multi30k as RAW_DIR), with a tiny model and a
budget of seconds, and the benchmark that runs it against fairseq's `transformer` on the same prepared data.

Outputs are cut at 3 tokens (EXTRA_GENERATE_ARGS), as in tests/test_recipes.py: an untrained model would
otherwise run to input + 50 tokens on every one of the 1,000 test sentences.
"""

import os
import re
import subprocess
import sys

import numpy
import pytest
import torch
from matplotlib.image import imread

from cli_helpers import NATIVE_BF16, SHARED_DATA
from conftest import lane_job
from doc_blocks import block, run_shell
from test_recipes import NEEDS_CPU_PATH, REPO, TINY, hypotheses, ran_the_documented_preparation, run_recipe

pytestmark = pytest.mark.e2e  # the whole quickstart on the real Multi30k

TINY_QUICKSTART = dict(RAW_DIR=str(SHARED_DATA / "multi30k"), BUDGET_MINUTES="0.15", BPE_MERGES="500",
                       SAVE_INTERVAL_UPDATES="4", AVERAGE_LAST="2", EXTRA_TRAIN_ARGS=TINY,
                       EXTRA_GENERATE_ARGS="--max-len-a 0 --max-len-b 3")


@lane_job
def quickstart_run(tmp_path_factory, lane):
    """bash recipes/quickstart.sh in the layout benchmarks/quickstart_vs_fairseq.sh uses, so that the
    benchmark finds the plugin's half done."""
    root = tmp_path_factory.mktemp("quickstart")
    env = dict(TINY_QUICKSTART, WORK_DIR=str(root / "seed1" / "vaswani_transformer"), DATA_DIR=str(root / "data"))
    # First a dry run (the commands it prints, in root/dry_run.txt), then the run.
    dry = run_recipe("quickstart.sh", dict(env, DRY_RUN="1"), command=block("README.md", "test:quickstart"))
    (root / "dry_run.txt").write_text(dry.stdout)
    return root, run_recipe("quickstart.sh", env, command=block("README.md", "test:quickstart"))


@lane_job
def quickstart_benchmark_run(tmp_path_factory, lane):
    """benchmarks/quickstart_vs_fairseq.sh for seed 1 where quickstart_run left its runs."""
    root, _ = lane["quickstart_run"].result()
    env = dict(TINY_QUICKSTART, WORK_DIR=str(root), SEEDS="1")
    return subprocess.run(["bash", str(REPO / "benchmarks" / "quickstart_vs_fairseq.sh")], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, **env, PYTHON=sys.executable))


@NEEDS_CPU_PATH
@pytest.mark.lane("quickstart_run")
def test_quickstart_from_raw_files_to_bleu_translations_and_pictures(lane):
    root, result = lane["quickstart_run"].result()
    work, data = root / "seed1" / "vaswani_transformer", root / "data"

    # Data: the three real splits in full, joint BPE.
    sizes = {split: len((data / "text" / f"{split}.de").read_text(encoding="utf-8").splitlines())
             for split in ("train", "valid", "test")}
    assert sizes == {"train": 29000, "valid": 1014, "test": 1000}
    ran_the_documented_preparation(result.stderr, 2)
    # The dry run before it printed the very fairseq-train command the run then ran (its logged command line).
    (planned,) = [line for line in (root / "dry_run.txt").read_text().splitlines() if " -m fairseq_cli.train " in line]
    assert re.search(r"\] stage train: (\S+ -m fairseq_cli\.train .*)$", result.stderr, re.M)[1] == planned
    assert (data / "data-bin" / "dict.en.txt").read_text() == (data / "data-bin" / "dict.de.txt").read_text()

    # Training stopped by the wall-clock budget; the average is that of the last 2 interval checkpoints.
    log = (work / "checkpoints" / "train.log").read_text()
    assert "Stopping training due to cumulative_training_time" in log and "'stop_time_hours': 0.0025" in log
    # BF16=auto: bfloat16 autocast where this CPU multiplies bfloat16 natively, float32 elsewhere; the task
    # decides and says so.
    assert "'task': {'_name': 'vaswani_translation'" in log and "'bf16_autocast': 'auto'" in log
    assert ("| precision: bfloat16 autocast (--bf16-autocast auto: this CPU has " in log) == NATIVE_BF16
    assert ("| precision: float32 (--bf16-autocast auto: no native bfloat16 on this CPU)" in log) != NATIVE_BF16
    assert log.count("| precision: ") == 1
    interval = sorted((work / "checkpoints").glob("checkpoint_*_*.pt"),
                      key=lambda path: int(path.stem.split("_")[-1]))
    assert len(interval) == 2
    states = [torch.load(path, weights_only=True)["model"] for path in interval]
    average = torch.load(work / "checkpoints" / "checkpoint_average.pt", weights_only=True)["model"]
    for name, value in average.items():
        torch.testing.assert_close(value, (states[0][name] + states[1][name]) / 2)

    # Every test sentence translated and scored; examples shown next to source and reference.
    assert len(hypotheses(work / "test2016.generate.txt")) == 1000
    assert re.search(r"^sacreBLEU = \d+\.\d+ .*nrefs:1", result.stdout, re.M)
    assert re.search(r"^sentences = 1000$", result.stdout, re.M)
    first_source = (data / "text" / "test.en").read_text(encoding="utf-8").splitlines()[0]
    assert f"example 1\n  source:      {first_source}\n" in result.stdout

    # Attention pictures of the first test sentence, and the summary that says where everything is.
    pictures = work / "attention"
    for kind in ("encoder_self", "decoder_self", "encoder_decoder"):
        (grid,) = pictures.glob(f"{kind}_layer*_all_heads.png")  # each stack's last layer
        assert imread(grid).ndim == 3
    arrays = numpy.load(pictures / "attention.npz")
    assert arrays["encoder_decoder"].shape[-1] == len(arrays["source_tokens"])
    assert f"attention pictures:                      {pictures}" in result.stderr
    assert f"model (average of the last checkpoints): {work / 'checkpoints' / 'checkpoint_average.pt'}" \
        in result.stderr


@NEEDS_CPU_PATH
@pytest.mark.lane("quickstart_run", "quickstart_benchmark_run")
def test_benchmark_against_fairseq_transformer(lane):
    root, _ = lane["quickstart_run"].result()
    result = lane["quickstart_benchmark_run"].result()
    assert result.returncode == 0, result.stderr[-4000:]
    runs = root / "seed1"
    assert "stage train: done before, skipped" in (runs / "vaswani_transformer.log").read_text()
    log = (runs / "transformer" / "checkpoints" / "train.log").read_text()
    assert "arch='transformer'" in log and "encoder_embed_dim=32" in log  # fairseq's model config: a Namespace
    # fairseq's side is trained with fairseq's own criterion and the pair's seed.
    assert "'_name': 'label_smoothed_cross_entropy'" in log and "'seed': 1," in log
    # float32, as fairseq trains on CPU (FAIRSEQ_BF16=0)
    assert "'bf16_autocast': '0'" in log and "| precision: float32 (--bf16-autocast off)" in log
    assert "on core 1" in result.stderr  # the two runs of a seed side by side, pinned

    scores = {}
    for arch in ("vaswani_transformer", "transformer"):
        bleu = (runs / arch / "test2016.generate.txt.bleu").read_text()
        scores[arch] = float(re.search(r"^sacreBLEU = ([\d.]+)", bleu, re.M)[1])
        precision = "bf16 autocast" if arch == "vaswani_transformer" and NATIVE_BF16 else "float32"
        assert re.search(rf"^ +1 {arch} +{precision} +\d+ +{scores[arch]:.2f} ", result.stdout, re.M), result.stdout
    difference = scores["vaswani_transformer"] - scores["transformer"]
    assert f"sacrebleu: mean {difference:+.2f} over 1 seed(s)" in result.stdout, result.stdout


@NEEDS_CPU_PATH
@pytest.mark.lane("quickstart_run")
def test_translating_your_own_sentence_as_the_readme_says(lane):
    root, _ = lane["quickstart_run"].result()
    command = block("README.md", "test:interactive").replace("work/quickstart/data", str(root / "data")) \
        .replace("work/quickstart", str(root / "seed1" / "vaswani_transformer"))
    result = run_shell(command, REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    # fairseq-interactive Moses-tokenised and BPE-segmented the sentence itself, then translated it.
    (source,) = re.findall(r"^S-0\t(.*)$", result.stdout, re.M)
    assert source.replace("@@ ", "") == "A little girl climbs into a wooden playhouse ."
    assert re.search(r"^H-0\t-?\d+\.\d+\t", result.stdout, re.M) and re.search(r"^D-0\t", result.stdout, re.M)
