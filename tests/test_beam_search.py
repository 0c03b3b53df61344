"""The plugin's beam search (vaswani_plugin.generation.beam_search, --search paper): §6.1's rule finds what an
exhaustive search finds where fairseq's early stop does not and limits each sentence by its own length;
--search fairseq is fairseq's own generator."""

import itertools
import math
import re

import pytest
import torch
from cli_helpers import plugin_dir, run
from conftest import build_model, make_dictionary, random_tokens
from fairseq.dataclass.configs import GenerationConfig
from fairseq.sequence_generator import SequenceGenerator
from torch import nn

from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.generation.beam_search import BeamSearchGenerator
from vaswani_plugin.generation.generators import GnmtSequenceGenerator
from vaswani_plugin.generation.length import gnmt_length_penalty
from vaswani_plugin.tasks.vaswani_translation import VaswaniTranslationConfig, VaswaniTranslationTask

# A model of next-token probabilities by prefix. Beam 2 at step 1 sees "a </s>" (0.51 · 0.54) and "b </s>"
# (0.49 · 0.56) above "a a" (0.51 · 0.46): fairseq finishes both and stops, its best "a </s>" scoring
# log(0.2754) / lp(2) = -1.1756. "a a a a </s>" (0.51 · 0.46 · 1 · 1 · 1) scores log(0.2346) / lp(5) = -1.0671:
# better. At step 1 "a a"'s log P over lp at its next length, lp(3), is -1.2204, below the worst finished score
# (-1.1790): only the bound at the longest length allowed, lp(L + 1), keeps the search going. (The symbols a
# prefix does not list share 1e-9.)
TABLE = {
    (): {"a": 0.51, "b": 0.49},
    ("a",): {"</s>": 0.54, "a": 0.46},
    ("b",): {"</s>": 0.56, "b": 0.44},
    ("a", "a"): {"a": 1.0},
    ("a", "a", "a"): {"a": 1.0},
}
ENDING = {"</s>": 1.0}  # any other prefix
LEFT_OVER = 1e-9  # what the symbols a prefix does not list share


def next_token_log_probs(dictionary, prefix):
    """log P(token | prefix) for every symbol; <pad> never."""
    listed = TABLE.get(tuple(prefix), ENDING)
    others = [s for s in dictionary.symbols if s not in listed and s != "<pad>"]
    probabilities = {**{s: LEFT_OVER / len(others) for s in others}, **listed}
    total = sum(probabilities.values())
    return [math.log(probabilities[s] / total) if s in probabilities else -math.inf for s in dictionary.symbols]


class TableModel(nn.Module):
    """An encoder-decoder both generators drive: the source is ignored, the decoder looks its prefix up."""

    def __init__(self, dictionary):
        super().__init__()
        self.dictionary = dictionary
        self.encoder = TableEncoder()
        self.decoder = TableDecoder(dictionary)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return net_output[0].float()

    def max_decoder_positions(self):
        return 1024


class TableEncoder(nn.Module):
    def forward_torchscript(self, net_input):
        return {"src_tokens": [net_input["src_tokens"]]}

    def reorder_encoder_out(self, encoder_out, new_order):
        return {key: [t.index_select(0, new_order) for t in value] for key, value in encoder_out.items()}


class TableDecoder(nn.Module):
    def __init__(self, dictionary):
        super().__init__()
        self.dictionary = dictionary

    def forward(self, prev_output_tokens, encoder_out=None):
        rows = [
            next_token_log_probs(self.dictionary, [self.dictionary[i] for i in prefix])
            for prefix in prev_output_tokens[:, 1:].tolist()
        ]
        return (torch.tensor(rows).unsqueeze(1),)


def table_dictionary():
    dictionary = make_dictionary(0)
    for symbol in ("a", "b"):
        dictionary.add_symbol(symbol)
    return dictionary


def exhaustive_best(dictionary, max_len, alpha):
    """The best log P / lp over every output of at most max_len tokens then </s> (fairseq's and the paper's
    limit), tokens anything but <pad> and </s>."""
    words = [s for s in dictionary.symbols if s not in ("<pad>", "</s>")]
    best = (-math.inf, None)
    for length in range(1, max_len + 1):  # --min-len 1: at least one token before </s>
        for output in itertools.product(words, repeat=length):
            log_p = sum(
                next_token_log_probs(dictionary, output[:i])[dictionary.index(output[i])] for i in range(length)
            )
            log_p += next_token_log_probs(dictionary, output)[dictionary.eos()]
            best = max(best, (log_p / gnmt_length_penalty(length + 1, alpha), " ".join(output)))
    return best


def test_paper_search_finds_the_exhaustive_best_where_fairseqs_early_stop_does_not():
    dictionary = table_dictionary()
    model = TableModel(dictionary)
    sample = {"net_input": {"src_tokens": torch.tensor([[4, 2]]), "src_lengths": torch.tensor([2])}}
    options = dict(beam_size=2, max_len_a=1, max_len_b=2)  # at most 1 · 2 + 2 = 4 tokens, then </s>
    score, text = exhaustive_best(dictionary, 4, 0.6)
    assert text == "a a a a" and score == pytest.approx(math.log(0.51 * 0.46) / (10 / 6) ** 0.6, abs=1e-3)
    paper = BeamSearchGenerator([model], dictionary, gnmt_alpha=0.6, **options).generate(None, sample)
    assert dictionary.string(paper[0][0]["tokens"]) == text
    assert paper[0][0]["score"].item() == pytest.approx(score, abs=1e-6)
    # fairseq's generator (ranked by the same penalty: --search fairseq) stops at step 1.
    for generator in (GnmtSequenceGenerator([model], dictionary, gnmt_alpha=0.6, **options),):
        best = generator.generate(None, sample)[0][0]
        assert dictionary.string(best["tokens"]) == "a"
        assert best["score"].item() == pytest.approx(math.log(0.51 * 0.54) / (7 / 6) ** 0.6, abs=1e-3)
        assert best["score"].item() < score - 0.02


def never_ending(model, eos):
    """The model with </s> forbidden: every hypothesis runs to its length limit."""
    model.decoder.output_projection.register_forward_hook(
        lambda module, inputs, output: output.index_fill(-1, torch.tensor([eos]), -1e9)
    )
    return model


def test_each_sentence_stops_at_its_own_limit_under_the_paper_search():
    torch.manual_seed(0)
    dictionary = make_dictionary(20)
    model = never_ending(build_model(dictionary).eval(), dictionary.eos())
    lengths = [12, 3, 7, 2]  # source tokens with </s>
    src_tokens = random_tokens(
        dictionary, 4, 12, lengths=lengths, generator=torch.Generator().manual_seed(0), left_pad=True
    )
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": torch.tensor(lengths)}}
    options = dict(beam_size=4, max_len_a=1.5, max_len_b=3)
    paper = BeamSearchGenerator([model], dictionary, **options).generate([model], sample)
    fairseq = SequenceGenerator([model], dictionary, **options).generate([model], sample)
    for length, ours, theirs in zip(lengths, paper, fairseq):
        own_limit = math.floor(1.5 * length + 3)  # tokens before </s>
        assert len(ours) == 4 and all(len(h["tokens"]) == own_limit + 1 for h in ours)
        assert all(len(h["tokens"]) == math.floor(1.5 * 12 + 3) + 1 for h in theirs)  # the batch's longest
        assert len(theirs[0]["tokens"]) > own_limit + 1 or length == 12


def translation_task(**options):
    dictionary = make_dictionary(20)
    return VaswaniTranslationTask(VaswaniTranslationConfig(**options), dictionary, dictionary), dictionary


def test_search_fairseq_is_fairseqs_generator_and_paper_refuses_what_it_does_not_do():
    task, dictionary = translation_task(gnmt_alpha=0.6)
    model = build_model(dictionary).eval()
    generator = task.build_generator([model], GenerationConfig(beam=2, sampling=True, sampling_topk=3))
    assert type(generator) is GnmtSequenceGenerator and type(generator.search).__name__ == "Sampling"
    src_tokens = random_tokens(dictionary, 2, 5, generator=torch.Generator().manual_seed(0))
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": torch.tensor([5, 5])}}
    assert all(len(hypotheses) == 2 for hypotheses in generator.generate([model], sample))
    # The paper's rule is not fairseq's: refused rather than silently changed.
    paper, _ = translation_task(search="paper")
    with pytest.raises(VaswaniConfigError, match="--search paper does not combine with --sampling"):
        paper.build_generator([model], GenerationConfig(sampling=True))
    with pytest.raises(VaswaniConfigError, match="--search paper replaces fairseq's length normalisation"):
        paper.build_generator([model], GenerationConfig(lenpen=0.6))
    assert paper.build_generator([model], GenerationConfig()).gnmt_alpha == 0.6  # the paper's α by default
    with pytest.raises(VaswaniConfigError, match="^--search gnmt: choose one of fairseq, paper$"):
        translation_task(search="gnmt")


def test_empty_source_gets_the_empty_output_undecoded():
    torch.manual_seed(0)
    task, dictionary = translation_task()
    model = build_model(dictionary).eval()
    src_tokens = random_tokens(
        dictionary, 3, 5, lengths=[5, 1, 3], left_pad=True, generator=torch.Generator().manual_seed(0)
    )
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": torch.tensor([5, 1, 3])}}
    for search in ("fairseq", "paper"):
        task.cfg.search = search
        hypotheses = task.build_generator([model], GenerationConfig(beam=4)).generate([model], sample)
        assert [h["tokens"].tolist() for h in hypotheses[1]] == [[dictionary.eos()]]
        assert hypotheses[1][0]["score"].item() == 0.0
        assert len(hypotheses[0]) == len(hypotheses[2]) == 4


# Through fairseq's command-line tools, on the tiny checkpoint tests/conftest.py trains.


@pytest.fixture(scope="module")
def checkpoint(reversal_data, reversal_training):
    save_dir, _ = reversal_training
    return reversal_data / "joined", save_dir / "checkpoint_last.pt"


def hypotheses_of(output):
    """{sentence id: (score, hypothesis, positional scores)} of fairseq-generate's or -interactive's output."""
    lines = output.splitlines()
    scores = {m[1]: (float(m[2]), m[3]) for m in (re.match(r"H-(\d+)\t(\S+)\t(.*)$", line) for line in lines) if m}
    positional = {m[1]: m[2] for m in (re.match(r"P-(\d+)\t(.*)$", line) for line in lines) if m}
    return {sid: (score, text, positional[sid]) for sid, (score, text) in scores.items()}


def test_fairseq_generate_gives_fairseqs_output_by_default(checkpoint, tmp_path):
    data, path = checkpoint
    common = [
        data,
        "--path",
        path,
        "--user-dir",
        plugin_dir(),
        "--beam",
        "4",
        "--cpu",
        "--batch-size",
        "32",
        "--required-batch-size-multiple",
        "1",
        "--max-len-a",
        "1",
        "--max-len-b",
        "3",
    ]
    fairseq = hypotheses_of(run("generate", *common, "--task", "translation", cwd=tmp_path).stdout)
    result = run("generate", *common, "--task", "vaswani_translation", cwd=tmp_path)
    assert hypotheses_of(result.stdout) == fairseq and len(fairseq) > 100


def test_interactive_paper_search_translates_an_empty_line_to_an_empty_line(checkpoint, tmp_path):
    data, path = checkpoint
    result = run(
        "interactive",
        data,
        "--path",
        path,
        "--user-dir",
        plugin_dir(),
        "--task",
        "vaswani_translation",
        "--search",
        "paper",
        "--beam",
        "4",
        "--cpu",
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        "--max-len-a",
        "1",
        "--max-len-b",
        "3",
        cwd=tmp_path,
        stdin="w1 w2 w3\n\nw4 w5\n",
    )
    hypotheses = hypotheses_of(result.stdout)
    assert sorted(hypotheses) == ["0", "1", "2"]
    assert hypotheses["1"][:2] == (0.0, "") and hypotheses["0"][1] and hypotheses["2"][1]
    for sid, words in (("0", 3), ("2", 2)):
        score, _, positional = hypotheses[sid]
        tokens = [float(x) for x in positional.split()]
        assert len(tokens) <= (words + 1) + 3 + 1  # a · its own length (with </s>) + b, then </s>
        assert score == pytest.approx(sum(tokens) / gnmt_length_penalty(len(tokens), 0.6), abs=1e-4 * len(tokens))


def test_an_input_line_longer_than_the_model_takes_is_a_one_line_error_naming_it():
    """fairseq-interactive builds one dataset per chunk of input lines; the error names the line, counted over
    all chunks."""
    task, dictionary = translation_task()
    lines = [torch.tensor([4, 5, 2]), torch.tensor([6, 2]), torch.tensor([4] * 9 + [2])]
    first = task.build_dataset_for_inference(lines[:2], [3, 2])
    assert list(task.filter_indices_by_size(first.ordered_indices(), first, (5, 5))) == [1, 0]
    second = task.build_dataset_for_inference(lines[2:], [10])
    with pytest.raises(VaswaniConfigError, match=r"^input line 3 is longer than the model takes: \[10, 0\] tokens"):
        task.filter_indices_by_size(second.ordered_indices(), second, (5, 5))
