"""Task `vaswani_translation`: beam search ranked by the GNMT length penalty of §6.1 (Wu et al., 2016)."""

import math
import re

import pytest
import torch
from cli_helpers import TEST_SENTENCES, plugin_dir, run
from conftest import build_model, make_dictionary, random_tokens
from fairseq.dataclass.configs import GenerationConfig
from fairseq.sequence_generator import SequenceGenerator
from torch import nn

from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.generation.generators import (
    GnmtSequenceGenerator,
    GnmtSequenceGeneratorWithAlignment,
    PlainSequenceGenerator,
)
from vaswani_plugin.generation.length import gnmt_length_penalty
from vaswani_plugin.scoring.bleu import read_hypotheses, score_files
from vaswani_plugin.tasks.vaswani_translation import VaswaniTranslationConfig, VaswaniTranslationTask


def test_penalty_formula():
    assert gnmt_length_penalty(1, 0.6) == 1.0
    assert gnmt_length_penalty(7, 0.6) == pytest.approx(2**0.6)
    assert gnmt_length_penalty(10, 0.0) == 1.0


class TableDecoder(nn.Module):
    """Next-token probabilities looked up by prefix; unlisted tokens share what is left, </s> gets 1e-6."""

    def __init__(self, dictionary, table):
        super().__init__()
        self.dictionary, self.table = dictionary, table

    def forward(self, prev_output_tokens, encoder_out=None):
        rows = []
        for prefix in prev_output_tokens[:, 1:].tolist():
            listed = self.table.get(tuple(self.dictionary[i] for i in prefix), {})
            listed = {"</s>": 1e-6, **listed}
            others = [s for s in self.dictionary.symbols if s not in listed and s != "<pad>"]
            rest = (1 - sum(listed.values())) / len(others)
            rows.append([math.log(listed.get(s, rest)) if s != "<pad>" else -math.inf for s in self.dictionary.symbols])
        return (torch.tensor(rows).unsqueeze(1).expand(-1, prev_output_tokens.size(1), -1),)


class TableModel(nn.Module):
    """A decoder-only stand-in for a model, so that beam search finishes exactly the hypotheses chosen."""

    def __init__(self, dictionary, table):
        super().__init__()
        self.decoder = TableDecoder(dictionary, table)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return net_output[0].float()


# Beam 2 finishes "a </s>" (p = 0.4 · 0.9) at step 1 and "b b b </s>" (p = 0.55 · 0.9 · 0.9 · 0.5) at step 3.
TABLE = {
    (): {"a": 0.4, "b": 0.55},
    ("a",): {"</s>": 0.9},
    ("b",): {"b": 0.9},
    ("b", "b"): {"b": 0.9},
    ("b", "b", "b"): {"</s>": 0.5},
}
SHORT = math.log(0.4 * 0.9)  # -1.0217, |Y| = 2
LONG = math.log(0.55 * 0.9 * 0.9 * 0.5)  # -1.5017, |Y| = 4


def generate(generator_class, **options):
    dictionary = make_dictionary(0)
    dictionary.add_symbol("a")
    dictionary.add_symbol("b")
    generator = generator_class([TableModel(dictionary, TABLE)], dictionary, beam_size=2, max_len_b=10, **options)
    sample = {"net_input": {"src_tokens": torch.tensor([[4, 2]]), "src_lengths": torch.tensor([2])}}
    return [
        (dictionary.string(h["tokens"]), h["score"].item(), h["positional_scores"].sum().item())
        for h in generator.generate(None, sample)[0]
    ]


def test_gnmt_and_fairseq_normalisation_pick_different_winners():
    gnmt = generate(GnmtSequenceGenerator, gnmt_alpha=0.6)
    # lp(2) = (7/6)^0.6 = 1.09690, lp(4) = (9/6)^0.6 = 1.27542: -1.02165/1.09690 = -0.93140 > -1.17742
    assert [text for text, _, _ in gnmt] == ["a", "b b b"]
    assert gnmt[0][1] == pytest.approx(-0.931396, abs=1e-6)
    assert gnmt[0][1] == pytest.approx(SHORT / (7 / 6) ** 0.6, rel=1e-6)
    assert gnmt[1][1] == pytest.approx(-1.177416, abs=1e-6)
    assert gnmt[1][1] == pytest.approx(LONG / (9 / 6) ** 0.6, rel=1e-6)
    # Positional scores stay the raw log-probabilities.
    assert [total for _, _, total in gnmt] == pytest.approx([SHORT, LONG], rel=1e-6)
    # fairseq's --lenpen 0.6 divides by |Y|^0.6 and prefers the long one: -1.50171/2.29740 = -0.65366 > -0.67404.
    fairseq = generate(SequenceGenerator, len_penalty=0.6)
    assert [text for text, _, _ in fairseq] == ["b b b", "a"]
    assert [score for _, score, _ in fairseq] == pytest.approx([LONG / 4**0.6, SHORT / 2**0.6], rel=1e-6)


def translation_task(**options):
    dictionary = make_dictionary(20)
    return VaswaniTranslationTask(VaswaniTranslationConfig(**options), dictionary, dictionary), dictionary


@pytest.mark.parametrize("alignment", [False, True])
def test_tiny_model_scores_are_summed_log_probs_over_lp(alignment):
    torch.manual_seed(0)
    task, dictionary = translation_task(gnmt_alpha=0.6)
    model = build_model(dictionary).eval()
    generation = GenerationConfig(beam=4, max_len_b=12, print_alignment="hard" if alignment else None)
    generator = task.build_generator([model], generation)
    # fairseq's generator ranked by the penalty (the default --search fairseq), alignments included.
    assert type(generator) is (GnmtSequenceGeneratorWithAlignment if alignment else GnmtSequenceGenerator)
    raw = SequenceGenerator([model], dictionary, beam_size=4, max_len_b=12, normalize_scores=False)
    src_tokens = random_tokens(dictionary, 5, 7, lengths=[7, 6, 5, 4, 3], generator=torch.Generator().manual_seed(1))
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_tokens.ne(dictionary.pad()).sum(1)}}
    for hypotheses, unnormalised in zip(generator.generate([model], sample), raw.generate([model], sample)):
        assert len(hypotheses) == 4
        scores = [h["score"].item() for h in hypotheses]
        assert scores == sorted(scores, reverse=True)
        raw_scores = {tuple(h["tokens"].tolist()): h["score"].item() for h in unnormalised}
        for h in hypotheses:
            lp = ((5 + len(h["tokens"])) / 6) ** 0.6
            assert h["tokens"][-1] == dictionary.eos()
            assert h["score"].item() == pytest.approx(h["positional_scores"].sum().item() / lp, rel=1e-5)
            # The same beam search as fairseq's: only the ranking score differs.
            assert h["score"].item() == pytest.approx(raw_scores[tuple(h["tokens"].tolist())] / lp, rel=1e-5)


def test_alignments_from_one_full_pass_equal_those_of_the_decoding_steps():
    """--print-alignment: with full_context_alignment fairseq re-reads the attention from a full pass over the
    finished hypotheses; the step-by-step attention (asked for explicitly) gives the same alignments."""
    torch.manual_seed(0)
    task, dictionary = translation_task(gnmt_alpha=0.6)
    model = build_model(dictionary).eval()
    src_tokens = random_tokens(
        dictionary, 4, 7, lengths=[7, 6, 4, 3], generator=torch.Generator().manual_seed(2), left_pad=True
    )
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_tokens.ne(dictionary.pad()).sum(1)}}
    generation = GenerationConfig(beam=4, max_len_b=12, print_alignment="soft")
    full_pass = task.build_generator([model], generation).generate([model], sample)

    stepwise_model = build_model(dictionary).eval()
    stepwise_model.load_state_dict(model.state_dict())
    stepwise_model.full_context_alignment = False
    decoder_forward = stepwise_model.decoder.forward
    stepwise_model.decoder.forward = lambda *args, **kwargs: decoder_forward(*args, **kwargs, return_attention=True)
    stepwise = task.build_generator([stepwise_model], generation).generate([stepwise_model], sample)
    for ours, reference in zip(full_pass, stepwise):
        for a, b in zip(ours, reference):
            assert a["tokens"].tolist() == b["tokens"].tolist()
            # Soft alignments: per target token, the probabilities of the source tokens, as strings.
            probabilities = [[[float(p) for p in row] for row in h["alignment"]] for h in (a, b)]
            assert len(probabilities[0]) == len(a["tokens"]) and len(probabilities[0][0]) >= 3
            torch.testing.assert_close(
                torch.tensor(probabilities[0]), torch.tensor(probabilities[1]), rtol=0, atol=1e-5
            )


def test_without_gnmt_alpha_the_task_is_fairseqs_translation():
    task, dictionary = translation_task()
    generator = task.build_generator([build_model(dictionary)], GenerationConfig(beam=4, lenpen=0.6))
    assert type(generator) is PlainSequenceGenerator and generator.len_penalty == 0.6


@pytest.mark.parametrize("option", [dict(lenpen=0.6), dict(unnormalized=True)])
def test_gnmt_alpha_with_fairseqs_normalisation_is_an_error(option):
    task, dictionary = translation_task(gnmt_alpha=0.6)
    with pytest.raises(VaswaniConfigError, match="--gnmt-alpha 0.6 replaces fairseq's length normalisation"):
        task.build_generator([build_model(dictionary)], GenerationConfig(beam=4, **option))


# Through fairseq's command-line tools, on a checkpoint trained with fairseq's own --task translation.


@pytest.fixture(scope="module")
def checkpoint(reversal_data, reversal_training):
    """The tiny model tests/conftest.py trains with fairseq's --task translation."""
    save_dir, _ = reversal_training
    return reversal_data / "joined", save_dir / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def gnmt():
    return ["--user-dir", plugin_dir(), "--task", "vaswani_translation", "--gnmt-alpha", "0.6", "--beam", "4", "--cpu"]


def test_generate_with_gnmt_alpha(checkpoint, gnmt, tmp_path):
    data, path = checkpoint
    result = run(
        "generate",
        data,
        "--path",
        path,
        *gnmt,
        "--required-batch-size-multiple",
        "1",
        "--batch-size",
        "16",
        "--print-alignment",
        cwd=tmp_path,
    )
    lines = result.stdout.splitlines()
    scores = {m[1]: float(m[2]) for m in (re.match(r"H-(\d+)\t(\S+)\t", line) for line in lines) if m}
    positional = {
        line.split("\t")[0][2:]: [float(x) for x in line.split("\t")[1].split()]
        for line in lines
        if line.startswith("P-")
    }
    assert sorted(int(i) for i in scores) == list(range(TEST_SENTENCES))
    for sid, score in scores.items():  # both in base 2; P- is rounded to 4 decimals
        tokens = positional[sid]
        assert score == pytest.approx(sum(tokens) / gnmt_length_penalty(len(tokens), 0.6), abs=1e-4 * len(tokens))
    # vaswani_plugin.scoring.bleu reads this output: every sentence, in id order.
    (tmp_path / "generate.out").write_text(result.stdout)
    hypotheses, ids = read_hypotheses(tmp_path / "generate.out")
    assert ids == list(range(TEST_SENTENCES))
    assert hypotheses[0] == next(line.split("\t")[2] for line in lines if line.startswith("H-0\t"))
    assert score_files(tmp_path / "generate.out", data.parent / "test.tgt", "en").sentences == TEST_SENTENCES


def test_interactive_with_gnmt_alpha(checkpoint, gnmt, tmp_path):
    data, path = checkpoint
    result = run(
        "interactive",
        data,
        "--path",
        path,
        *gnmt,
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        cwd=tmp_path,
        stdin="w1 w2 w3\nw4 w5\nw6 w7 w8 w9\n",
    )
    assert sum(line.startswith("H-") for line in result.stdout.splitlines()) == 3


def test_gnmt_alpha_with_lenpen_is_a_one_line_error(checkpoint, gnmt, tmp_path):
    data, path = checkpoint
    result = run("generate", data, "--path", path, *gnmt, "--lenpen", "0.6", cwd=tmp_path, check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "vaswani_plugin: error: --gnmt-alpha 0.6 replaces fairseq's length normalisation; drop --lenpen 0.6"
    )
