"""vaswani_plugin/paper.py: each setting pinned once to the paper; run by its path, it prints fairseq's arguments
and imports nothing (the recipes run it so, without the package's fairseq import)."""

import subprocess
import sys

from cli_helpers import REPO

from vaswani_plugin import paper


def test_each_setting_is_the_papers():
    assert paper.TOKENS_PER_STEP == 25000  # §5.1: about 25,000 source and 25,000 target tokens a batch
    assert paper.ADAM_BETAS == (0.9, 0.98)  # §5.3: β1 = 0.9, β2 = 0.98
    assert paper.ADAM_EPS == 1e-9  # §5.3: ε = 10^-9
    assert paper.WARMUP_STEPS == 4000  # §5.3: warmup_steps = 4000
    assert paper.LABEL_SMOOTHING == 0.1  # §5.4: ε_ls = 0.1
    assert paper.BASE_STEPS == 100_000  # §5.2: the base models, 100,000 steps (12 hours)
    assert paper.BIG_STEPS == 300_000  # §5.2: the big models, 300,000 steps (3.5 days)
    assert paper.BASE_CHECKPOINT_EVERY == 1500  # §6.1: 10-minute intervals, at §5.2's 0.4 s a base step
    assert paper.BIG_CHECKPOINT_EVERY == 600  # §6.1: 10-minute intervals, at §5.2's 1.0 s a big step
    assert paper.BASE_AVERAGE == 5  # §6.1: the base models, the last 5 checkpoints averaged
    assert paper.BIG_AVERAGE == 20  # §6.1: the big models, the last 20
    assert paper.BEAM == 4  # §6.1: beam size 4
    assert paper.ALPHA == 0.6  # §6.1: length penalty α = 0.6
    assert (paper.MAX_LEN_A, paper.MAX_LEN_B) == (1, 50)  # §6.1: maximum output length input length + 50
    assert paper.PARSING_BEAM == 21  # §6.3: beam size 21
    assert paper.PARSING_ALPHA == 0.3  # §6.3: α = 0.3
    assert (paper.PARSING_MAX_LEN_A, paper.PARSING_MAX_LEN_B) == (1, 300)  # §6.3: input length + 300
    assert paper.MODELS == {
        "base": dict(layers=6, d_model=512, d_ff=2048, heads=8, dropout=0.1),  # Table 3: base
        "big": dict(layers=6, d_model=1024, d_ff=4096, heads=16, dropout=0.3),  # Table 3: big
        "big_en_fr": dict(layers=6, d_model=1024, d_ff=4096, heads=16, dropout=0.1),  # §6.1: En-Fr big, P_drop 0.1
        # §6.3: 4 layers, d_model 1024; the rest is not stated there: the base model's
        "parsing": dict(layers=4, d_model=1024, d_ff=2048, heads=8, dropout=0.1),
        # not the paper's: ours (docs/design.md), the quickstart's, and the same at §6.3's depth
        "quickstart": dict(layers=3, d_model=128, d_ff=512, heads=4, dropout=0.1),
        "parsing_sample": dict(layers=4, d_model=128, d_ff=512, heads=4, dropout=0.1),
    }


# The recipes' reading of paper.py (recipes/launch.py, which loads it by its path); then which of the heavy packages
# the run imported.
READ_BY_THE_RECIPES = """
import runpy, sys
sys.argv = ["recipes.launch", "paper", "training", "decoding"]
runpy.run_module("recipes.launch", run_name="__main__")
print(sorted(name for name in ("fairseq", "torch", "numpy", "vaswani_plugin") if name in sys.modules))
"""


def test_the_recipes_read_the_arguments_without_importing_fairseq():
    done = subprocess.run(
        [sys.executable, "-c", READ_BY_THE_RECIPES], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n") == [
        "--optimizer",
        "vaswani_adam",
        "--adam-betas",
        "(0.9,0.98)",
        "--adam-eps",
        "1e-9",
        "--lr-scheduler",
        "noam",
        "--criterion",
        "vaswani_label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
        "--beam",
        "4",
        "--gnmt-alpha",
        "0.6",
        "--max-len-a",
        "1",
        "--max-len-b",
        "50",
        "['vaswani_plugin']",  # the package, whose import has no fairseq, and its leaf paper.py
        "",
    ]
