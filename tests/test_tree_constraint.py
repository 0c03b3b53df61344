"""§6.3 parsing: the task's --parse-constrained beam search emits only trees over exactly the input's words, never
removes the gold tree, and refuses what it cannot decode, in one line."""

import copy
import zlib

import numpy as np
import pytest
import torch
from cli_helpers import SHARED_DATA
from conftest import build_model, random_tokens
from fairseq.data import Dictionary, LanguagePairDataset
from fairseq.dataclass.configs import GenerationConfig

from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.generation.beam_search import BeamSearchGenerator
from vaswani_plugin.generation.generators import GnmtSequenceGenerator
from vaswani_plugin.generation.tree_constraint import TreeConstrainedBeamSearch, TreeConstraint
from vaswani_plugin.scoring.trees import Tree, clean, delinearise, is_one_tree, linearise, read_trees, repair
from vaswani_plugin.tasks.vaswani_translation import VaswaniTranslationConfig, VaswaniTranslationTask

# Tree symbols, and some that must never come out: an opening without its closing symbol, a closing without its
# opening, a symbol that is neither, and fairseq's padding of a dictionary to a multiple of 8.
TREE_SYMBOLS = ["XX", "(S", ")S", "(NP", ")NP", "(VP", ")VP", "(PP", ")PP"]
NEVER = ["(X", ")Y", "junk", "XX)"]


def dictionaries():
    source = Dictionary()
    for index in range(30):
        source.add_symbol(f"w{index}")
    target = Dictionary()
    for symbol in TREE_SYMBOLS + NEVER:
        target.add_symbol(symbol)
    target.finalize(padding_factor=8)  # adds madeupword0000...
    assert any(s.startswith("madeupword") for s in target.symbols)
    return source, target


def joined_dictionary():
    """Word leaves: one dictionary for both sides, the words first (so random_sample's words are words here)."""
    source, _ = dictionaries()
    joined = Dictionary()
    for symbol in source.symbols[source.nspecial :] + TREE_SYMBOLS[1:] + ["XX"]:  # XX: a word of the input here
        joined.add_symbol(symbol)
    joined.pad_to_multiple_(8)  # not finalize, which would sort the symbols
    assert joined.symbols[: len(source)] == source.symbols
    return source, joined


def parsing_task(source, target, **options):
    return VaswaniTranslationTask(VaswaniTranslationConfig(**options), source, target)


def random_sample(source, lengths, seed):
    """Sentences of `lengths` random words (+ </s>), left-padded as fairseq's translation task batches them."""
    tokens = random_tokens(
        source,
        len(lengths),
        max(lengths) + 1,
        lengths=[n + 1 for n in lengths],
        generator=torch.Generator().manual_seed(seed),
        left_pad=True,
    )
    return {
        "id": torch.arange(len(lengths)) + 100,
        "net_input": {"src_tokens": tokens, "src_lengths": torch.tensor([n + 1 for n in lengths])},
    }


def decode(task, model, sample, **generation):
    generator = task.build_generator([model], GenerationConfig(**{"beam": 21, "max_len_a": 1, **generation}))
    return generator, task.inference_step(generator, [model], sample)


LENGTHS = [1, 2, 3, 4, 5, 6, 8, 10, 12, 1, 7, 9]


@pytest.mark.parametrize("search", ["fairseq", "paper"])
def test_every_hypothesis_is_a_tree_over_exactly_its_words_and_unconstrained_ones_are_not(search):
    """An untrained model, the §6.3 search (beam 21, GNMT alpha 0.3, at most input + B tokens): every finished
    hypothesis (not only the best) is well-formed; the same model and search without the constraint is not.
    Under --search paper, each sentence within its own limit."""
    torch.manual_seed(0)
    source, target = dictionaries()
    model = build_model(source, target).eval()
    sample = random_sample(source, LENGTHS, seed=1)
    never = {target.index(s) for s in NEVER} | {i for i, s in enumerate(target.symbols) if s.startswith("madeup")}
    never |= {target.pad(), target.unk(), target.bos()}
    generator, constrained = decode(
        parsing_task(source, target, gnmt_alpha=0.3, parse_constrained=True, search=search), model, sample, max_len_b=6
    )
    assert type(generator) is (BeamSearchGenerator if search == "paper" else GnmtSequenceGenerator)
    assert isinstance(generator.search, TreeConstrainedBeamSearch)
    assert generator.search.per_sentence_limits == (search == "paper")
    for count, hypotheses in zip(LENGTHS, constrained):
        assert len(hypotheses) == 21
        if search == "paper":  # </s> at step a x its own length (with </s>) + b at the latest
            assert all(len(h["tokens"]) <= (count + 1) + 6 + 1 for h in hypotheses)
        for hypothesis in hypotheses:
            ids = hypothesis["tokens"].tolist()
            assert ids[-1] == target.eos() and target.eos() not in ids[:-1] and not never & set(ids)
            tokens = target.string(hypothesis["tokens"]).split()
            assert repair(tokens, count) == tokens and is_one_tree(tokens)  # nothing to repair, one root
            words = [f"w{i}" for i in range(count)]
            tree = delinearise(tokens, words)
            assert tree.words() == words and linearise(tree, keep_words=False) == tokens  # each ) its own label
            assert len(ids) <= 1 * (max(LENGTHS) + 1) + 6 + 1  # </s> at step max_len = a x src_len + b at the latest
            # GNMT's ranking score: the summed log-probabilities over lp(Y).
            assert hypothesis["score"].item() == pytest.approx(
                hypothesis["positional_scores"].sum().item() / ((5 + len(ids)) / 6) ** 0.3, rel=1e-5
            )
    _, unconstrained = decode(parsing_task(source, target, gnmt_alpha=0.3), model, sample, max_len_b=6)
    malformed = 0
    for count, hypotheses in zip(LENGTHS, unconstrained):
        tokens = target.string(hypotheses[0]["tokens"]).split()
        malformed += repair(tokens, count) != tokens
    assert malformed >= len(LENGTHS) // 2


def test_with_word_leaves_every_hypothesis_places_exactly_the_input_words_in_order():
    """Word leaves (one joined dictionary): every finished hypothesis is a well-formed tree whose leaves are the
    input's words in order, <unk> included; a leaf scores the log-probability of all leaves together; the same
    search without the constraint does not place the words."""
    torch.manual_seed(0)
    source, joined = joined_dictionary()
    model = build_model(joined, joined).eval()
    sample = random_sample(source, LENGTHS, seed=1)
    sample["net_input"]["src_tokens"][0, -2] = joined.unk()  # an unknown word is placed as <unk>
    sample["net_input"]["src_tokens"][3, -2] = joined.index("XX")  # a word XX is a word
    sample["net_input"]["src_tokens"][4, -2] = joined.index("(S")  # a bracket as a word: placed as <unk>
    inputs = [
        [t if joined[t][0] != "(" else joined.unk() for t in row.tolist() if t not in (joined.pad(), joined.eos())]
        for row in sample["net_input"]["src_tokens"]
    ]
    task = parsing_task(joined, joined, gnmt_alpha=0.3, parse_constrained=True)
    generator, constrained = decode(task, model, sample, max_len_b=6)
    assert generator.search.constraint.leaves_are_words
    is_leaf = generator.search.constraint.is_leaf
    for count, words, hypotheses in zip(LENGTHS, inputs, constrained):
        assert len(hypotheses) == 21
        for hypothesis in hypotheses:
            ids = hypothesis["tokens"].tolist()
            assert ids[-1] == joined.eos() and joined.eos() not in ids[:-1]
            assert [t for t in ids[:-1] if is_leaf[t]] == words
            tokens = joined.string(hypothesis["tokens"]).split()
            assert repair(tokens, count) == tokens and is_one_tree(tokens)
            assert hypothesis["score"].item() == pytest.approx(
                hypothesis["positional_scores"].sum().item() / ((5 + len(ids)) / 6) ** 0.3, rel=1e-5
            )
    # A leaf's score: the log of the probability of every leaf, for the best hypothesis of the first sentence.
    best = constrained[0][0]
    prefix = torch.cat([torch.tensor([joined.eos()]), best["tokens"][:-1]])[None]
    with torch.no_grad():
        encoder_out = model.encoder(
            sample["net_input"]["src_tokens"][:1], src_lengths=sample["net_input"]["src_lengths"][:1]
        )
        lprobs = model.get_normalized_probs(model.decoder(prefix, encoder_out=encoder_out), log_probs=True)[0]
    expected = torch.where(
        is_leaf[best["tokens"]], lprobs[:, is_leaf].logsumexp(-1), lprobs.gather(1, best["tokens"][:, None]).squeeze(1)
    )
    assert best["positional_scores"].tolist() == pytest.approx(expected.tolist(), abs=1e-4)
    _, unconstrained = decode(parsing_task(joined, joined, gnmt_alpha=0.3), model, sample, max_len_b=6)
    wrong = sum(
        [t for t in h[0]["tokens"].tolist()[:-1] if is_leaf[t]] != words for words, h in zip(inputs, unconstrained)
    )
    assert wrong >= len(LENGTHS) // 2


def test_an_empty_sentence_gets_the_empty_tree_and_too_long_ones_are_refused():
    torch.manual_seed(0)
    source, target = dictionaries()
    model = build_model(source, target).eval()
    task = parsing_task(source, target, gnmt_alpha=0.3, parse_constrained=True)
    sample = random_sample(source, [3, 1, 3], seed=2)
    tokens = sample["net_input"]["src_tokens"]
    tokens[1, :-1] = source.pad()  # the second sentence: no words, only </s>
    sample["net_input"]["src_lengths"] = torch.tensor([4, 1, 4])
    _, hypotheses = decode(task, model, sample, max_len_b=3)
    assert [h["tokens"].tolist() for h in hypotheses[1]] == [[target.eos()]]
    assert all(target.string(h[0]["tokens"]).count("XX") == 3 for h in (hypotheses[0], hypotheses[2]))
    # 4 words and the root's two brackets cannot fit in 0 x 5 + 5 tokens: refused in one line, naming the
    # sentence by its id (3 words fit).
    with pytest.raises(
        VaswaniConfigError,
        match=r"sentence 101 of the input has 4 words, but decoding ends after 5 "
        r"tokens .*raise --max-len-b",
    ):
        decode(task, model, random_sample(source, [2, 4], seed=3), max_len_a=0, max_len_b=5)
    decode(task, model, random_sample(source, [2, 3], seed=3), max_len_a=0, max_len_b=5)


def test_the_task_refuses_what_it_cannot_constrain():
    source, target = dictionaries()
    model = build_model(source, target)
    with pytest.raises(VaswaniConfigError, match="does not combine with Sampling"):
        parsing_task(source, target, parse_constrained=True).build_generator([model], GenerationConfig(sampling=True))
    words = Dictionary()
    words.add_symbol("cat")
    with pytest.raises(VaswaniConfigError, match=r"has no pair of \(LABEL and \)LABEL"):
        parsing_task(source, words, parse_constrained=True).build_generator(
            [build_model(source, words)], GenerationConfig()
        )
    # Sentences of a loaded test set that no tree within the length limit fits: refused before decoding.
    task = parsing_task(source, target, parse_constrained=True)
    task.datasets["test"] = LanguagePairDataset(
        [torch.tensor([4, 5, 2]), torch.tensor([4] * 20 + [2])], np.array([3, 21]), source
    )
    with pytest.raises(VaswaniConfigError, match="sentence 1 of test has 20 words, but decoding ends after 12"):
        task.build_generator([model], GenerationConfig(max_len_a=0, max_len_b=12))


def test_longer_than_the_model_is_a_one_line_error_naming_the_sentence():
    source, target = dictionaries()
    task = parsing_task(source, target)
    dataset = LanguagePairDataset(
        [torch.tensor([4, 2]), torch.tensor([4] * 9 + [2])],
        np.array([2, 10]),
        source,
        [torch.tensor([5, 2])] * 2,
        np.array([2, 2]),
        target,
    )
    with pytest.raises(
        VaswaniConfigError,
        match=r"sentence 1 is longer than the model takes: \[10, 2\] tokens "
        r"\(source, target: </s> included\), positions \(8, 8\)",
    ):
        task.filter_indices_by_size(np.arange(2), dataset, (8, 8))
    assert task.filter_indices_by_size(np.arange(2), dataset, (8, 8), ignore_invalid_inputs=True).tolist() == [0]


def allowed_symbols(constraint, dictionary, prefix, words, max_len=100):
    ids = torch.tensor([[dictionary.eos()] + [dictionary.index(s) for s in prefix.split()]])
    allowed = constraint.allowed(ids, torch.tensor([words]), max_len)[0]
    return {dictionary[i] for i in allowed.nonzero().squeeze(1).tolist()}


OPENINGS = {"(S", "(NP", "(VP", "(PP"}


@pytest.mark.parametrize(
    "prefix, words, max_len, expected",
    [
        ("", 2, 100, OPENINGS),  # the root first: no word outside it
        ("(S", 2, 100, {"XX"} | OPENINGS),  # no )S before S holds a child
        ("(S (NP XX", 2, 100, {"XX", ")NP"} | OPENINGS),  # only the innermost closes
        ("(S (NP XX )NP", 2, 100, {"XX"} | OPENINGS),  # the root stays open while a word is left
        ("(S (NP XX )NP XX", 2, 100, {")S"}),  # no words left: nothing opens, no XX
        ("(S (NP XX )NP XX )S", 2, 100, {"</s>"}),
        ("(S XX )S", 2, 100, set()),  # a root closed early: a forest would follow
        ("(S XX )S (S", 2, 100, set()),
        ("XX XX", 2, 100, set()),  # words outside any root
        ("(S XX", 2, 5, {"XX"}),  # an opening would need 1 word + 2 closes + </s>: 4 tokens after step 2 of 5
        ("(S XX", 2, 6, {"XX"} | OPENINGS),
        ("", 0, 100, {"</s>"}),
        ("XX </s>", 1, 100, set()),  # finished, or dead: nothing
        ("XX junk", 2, 100, set()),
        (")S", 1, 100, set()),
    ],
)
def test_allowed_tokens(prefix, words, max_len, expected):
    _, target = dictionaries()
    assert allowed_symbols(TreeConstraint(target), target, prefix, words, max_len) == expected


@pytest.mark.shared_data
def test_the_constraint_never_removes_the_gold_tree_of_the_wsj_sample():
    """Every tree of the sample, forced token by token: each gold token is allowed at its step, with the recipe's
    limit (input + 300; one tree of the sample is longer, wsj_0096's 249 words in 573 tokens: there its own length)
    and with the tightest one (the gold sequence's own length); with word leaves too (the tightest limit)."""
    files = sorted((SHARED_DATA / "ptb_sample").glob("wsj_*.mrg"))
    trees = [clean(t) for path in files for t in read_trees(path.read_text())]
    for keep_words in (False, True):
        force_gold_sequences(trees, keep_words)


def force_gold_sequences(trees, keep_words):
    if keep_words:  # 64 stand-ins for the ~12,000 words: the same sequences, a mask of 116 symbols, not 12,000
        trees = [Tree(t.label, t.children) for t in map(copy.deepcopy, trees)]
        for tree in trees:
            for preterminal in tree.preterminals():
                preterminal.children = [f"w{zlib.crc32(preterminal.children[0].encode()) % 64}"]
    sequences = [linearise(t, keep_words) for t in trees]
    dictionary = Dictionary()  # with word leaves, joined: the words are symbols of both sides
    for sequence in sequences:
        for token in sequence:
            dictionary.add_symbol(token)
    constraint = TreeConstraint(dictionary, dictionary if keep_words else None)
    assert constraint.leaves_are_words == keep_words
    input_words = None
    if keep_words:
        sources = [torch.tensor([dictionary.index(w) for w in t.words()] + [dictionary.eos()]) for t in trees]
        src_tokens = torch.nn.utils.rnn.pad_sequence(sources, batch_first=True, padding_value=dictionary.pad())
        input_words = constraint.input_words(src_tokens, dictionary.pad(), dictionary.eos())
    lengths = torch.tensor([len(s) for s in sequences])  # without </s>
    words = torch.tensor([len(t.words()) for t in trees])
    gold = torch.full((len(trees), int(lengths.max()) + 2), dictionary.pad())
    gold[:, 0] = dictionary.eos()
    for row, sequence in enumerate(sequences):
        gold[row, 1 : len(sequence) + 1] = torch.tensor([dictionary.index(s) for s in sequence])
        gold[row, len(sequence) + 1] = dictionary.eos()
    assert len(trees) > 3500
    recipe = torch.clamp(words + 1 + 300, max=1023)
    assert (lengths > recipe).sum() == 1
    limits = [lengths] if keep_words else [torch.maximum(recipe, lengths), lengths]  # the limits' rule is shared
    for max_len in limits:  # </s> at step max_len at the latest
        for step in range(int(lengths.max()) + 1):
            rows = (lengths >= step).nonzero().squeeze(1)  # sequences whose token `step` (or </s>) is still due
            allowed = constraint.allowed(
                gold[rows, : step + 1], words[rows], max_len[rows], None if input_words is None else input_words[rows]
            )
            refused = ~allowed[torch.arange(len(rows)), gold[rows, step + 1]]
            assert not refused.any(), [" ".join(sequences[r]) for r in rows[refused][:1].tolist()]
