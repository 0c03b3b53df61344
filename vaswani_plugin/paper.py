"""The paper's settings (§5.1-§6.3, Table 3), written once; the quickstart's small model beside them.

A leaf that imports nothing: the plugin, prepare/, recipes/, benchmarks and tests import it (the package's import
has no fairseq), and the recipes read it as bash variables (recipes/launch.py: `python -m recipes.launch paper
--shell`). tests/test_paper.py pins each value to the paper.
"""

TOKENS_PER_STEP = 25000  # §5.1: about 25,000 source and 25,000 target tokens a batch

ADAM_BETAS = (0.9, 0.98)  # §5.3: β1, β2
ADAM_EPS = 1e-9  # §5.3: ε
WARMUP_STEPS = 4000  # §5.3, eq. 3

LABEL_SMOOTHING = 0.1  # §5.4: ε_ls

BASE_STEPS = 100_000  # §5.2: the base models
BIG_STEPS = 300_000  # §5.2: the big models
# §6.1: checkpoints written at 10-minute intervals (steps at §5.2's 0.4 s and 1.0 s a step), the last 5 (base)
# or 20 (big) averaged.
BASE_CHECKPOINT_EVERY, BASE_AVERAGE = 1500, 5
BIG_CHECKPOINT_EVERY, BIG_AVERAGE = 600, 20

BEAM = 4  # §6.1: beam size
ALPHA = 0.6  # §6.1: length penalty α
MAX_LEN_A, MAX_LEN_B = 1, 50  # §6.1: maximum output length, input length + 50

PARSING_BEAM = 21  # §6.3
PARSING_ALPHA = 0.3  # §6.3
PARSING_MAX_LEN_A, PARSING_MAX_LEN_B = 1, 300  # §6.3: input length + 300

# Table 3's base and big, §6.1's big for English-French, §6.3's parser; the quickstart's is ours (an eighth of
# the base model's width, half its depth: docs/design.md). d_k = d_v = d_model / h throughout.
MODELS = {
    "base": dict(layers=6, d_model=512, d_ff=2048, heads=8, dropout=0.1),
    "big": dict(layers=6, d_model=1024, d_ff=4096, heads=16, dropout=0.3),
    "big_en_fr": dict(layers=6, d_model=1024, d_ff=4096, heads=16, dropout=0.1),
    "parsing": dict(layers=4, d_model=1024, d_ff=2048, heads=8, dropout=0.1),
    "quickstart": dict(layers=3, d_model=128, d_ff=512, heads=4, dropout=0.1),
    "parsing_sample": dict(layers=4, d_model=128, d_ff=512, heads=4, dropout=0.1),  # the quickstart's at §6.3's depth
}


def model_options(name: str) -> dict:
    """MODELS[name] as fairseq's model options (encoder and decoder alike)."""
    size = MODELS[name]
    options = {}
    for side in ("encoder", "decoder"):
        options.update(
            {
                f"{side}_layers": size["layers"],
                f"{side}_embed_dim": size["d_model"],
                f"{side}_ffn_embed_dim": size["d_ff"],
                f"{side}_attention_heads": size["heads"],
            }
        )
    return dict(options, dropout=size["dropout"])


def number(value) -> str:
    """A value as a command line writes it: 1e-9, 0.1, 512."""
    return f"{value:g}".replace("e-0", "e-")


def arguments(section: str) -> list:
    """A section of the settings as fairseq command-line arguments."""
    if section == "training":  # §5.3's Adam and eq. 3, §5.4's label smoothing, with the plugin's components
        return [
            "--optimizer",
            "vaswani_adam",
            "--adam-betas",
            f"({ADAM_BETAS[0]},{ADAM_BETAS[1]})",
            "--adam-eps",
            number(ADAM_EPS),
            "--lr-scheduler",
            "noam",
            "--criterion",
            "vaswani_label_smoothed_cross_entropy",
            "--label-smoothing",
            number(LABEL_SMOOTHING),
        ]
    if section in ("decoding", "parsing-decoding"):  # §6.1 / §6.3, with the task's --search paper
        beam, alpha, a, b = (
            (BEAM, ALPHA, MAX_LEN_A, MAX_LEN_B)
            if section == "decoding"
            else (PARSING_BEAM, PARSING_ALPHA, PARSING_MAX_LEN_A, PARSING_MAX_LEN_B)
        )
        return ["--beam", str(beam), "--gnmt-alpha", number(alpha), "--max-len-a", str(a), "--max-len-b", str(b)]
    if section.startswith("model:"):
        return [
            word
            for name, value in model_options(section[len("model:") :]).items()
            for word in (f"--{name.replace('_', '-')}", number(value))
        ]
    raise KeyError(section)
