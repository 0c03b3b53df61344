"""tasks/dictionary.py: the same text as fairseq's own Dictionary.string, for every argument, on random ids."""

import itertools

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary

from vaswani_plugin.tasks.dictionary import VaswaniDictionary
from vaswani_plugin.tasks.vaswani_translation import VaswaniTranslationTask

WORDS = ["the@@", "cat", "▁sat", "▁on", "mat@@", "s", "_", "|", "<SIL>", "a_EOW"]


def both(path):
    return Dictionary.load(str(path)), VaswaniDictionary.load(str(path))


@pytest.fixture
def dictionaries(tmp_path):
    (tmp_path / "dict.txt").write_text("".join(f"{word} {100 - index}\n" for index, word in enumerate(WORDS)))
    return both(tmp_path / "dict.txt")


def random_ids(generator, rows=None):
    """Ids over every symbol and past the end (out of the dictionary: fairseq's unk word), specials included."""
    shape = (rows, 9) if rows else (int(torch.randint(0, 12, (1,), generator=generator)),)
    return torch.randint(0, len(WORDS) + 6, shape, generator=generator)


def test_every_argument_gives_fairseqs_text(dictionaries):
    theirs, ours = dictionaries
    generator = torch.Generator().manual_seed(0)
    post_processes = [
        None,
        "none",
        "subword_nmt",
        "@@ ",
        "@@",
        "sentencepiece",
        "wordpiece",
        "letter",
        "silence",
        "_EOW",
    ]
    checked = 0
    for bpe, escape, unk, eos, separator, extra in itertools.product(
        post_processes, (False, True), (None, "UNK"), (False, True), (" ", ""), (None, [], [5, 7], {6})
    ):
        for _ in range(3):
            for ids in (random_ids(generator), random_ids(generator, rows=3)):
                if ids.dim() == 2 and (unk is not None or separator != " "):
                    continue  # fairseq drops these two for a 2-D tensor; checked below
                arguments = dict(
                    bpe_symbol=bpe,
                    escape_unk=escape,
                    extra_symbols_to_ignore=extra,
                    unk_string=unk,
                    include_eos=eos,
                    separator=separator,
                )
                assert ours.string(ids, **arguments) == theirs.string(ids, **arguments), (ids, arguments)
                checked += 1
    assert checked > 2000


def test_other_inputs_and_what_fairseq_drops_for_rows(dictionaries):
    theirs, ours = dictionaries
    generator = torch.Generator().manual_seed(1)
    rows = random_ids(generator, rows=4)
    rows[0, :3] = theirs.unk()
    for arguments in (dict(unk_string="UNK"), dict(separator=""), dict(unk_string="UNK", separator="-")):
        assert ours.string(rows, **arguments) == theirs.string(rows, **arguments)
    ids = random_ids(generator, rows=1)[0]
    ids[2] = theirs.unk()
    empty = (np.array([], dtype=np.int64), torch.tensor([], dtype=torch.long))
    for given in (ids.tolist(), ids.numpy(), list(ids), *empty):
        assert ours.string(given, "subword_nmt", escape_unk=True) == theirs.string(
            given, "subword_nmt", escape_unk=True
        )


def test_the_task_loads_it(tmp_path):
    """Every dictionary of vaswani_translation (fairseq-generate's, -interactive's, the hub's) is this one."""
    (tmp_path / "dict.en.txt").write_text("a 1\n")
    assert type(VaswaniTranslationTask.load_dictionary(str(tmp_path / "dict.en.txt"))) is VaswaniDictionary
