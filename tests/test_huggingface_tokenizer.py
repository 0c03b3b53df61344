"""The tokenizer files of the transformers export, loaded with AutoTokenizer.from_pretrained (no custom code),
checked against our own pipeline: prepare.tokenize.Tokenizer + subword-nmt (prepare.bpe.Segmenter) + the fairseq
dictionary + </s> for the ids, fairseq-interactive's decoding (serving.text.TextPipeline: remove "@@ ",
MosesDetokenizer) for the text; and for sentencepiece, sentencepiece's own pieces mapped through the dictionary.

- A hand-made case with every character Moses escapes (& | < > ' " [ ]), 1-character words, separate source and
  target dictionaries: equal ids, equal decoding; FSMT's BPE equals subword-nmt's on random words of those
  characters (entities inside words too, which Moses never makes).
- Real text (shared_data): codes learnt on 5,000 lines of Multi30k train; >= 99% of test2016 and newstest2014
  English lines give identical ids (measured: all of them), and German references decode as fairseq decodes them
  once the <unk> that skip_special_tokens drops is dropped on fairseq's side too.
- MarianTokenizer: sentencepiece on the raw text, pieces the dictionary lacks -> <unk> (3).

Broken on purpose, each failed here: no collapse merges, merges left unescaped, the word-final collapse merges
("&apos ;</w>") left out, merges.txt without its last newline (each: the hand-made ids, the random words, real
text); vocab-src unescaped (the ids); ids off by one (FSMT ids and decoding; Marian); vocab-tgt escaped (the
entity-text decoding); source and target dictionaries swapped; split_special_tokens off (a literal "<unk>" in
the text became id 3, FSMT and Marian); no version check on the codes.
"""

import gzip
import io
import random
from collections import Counter

import cli_helpers
import pytest
from fairseq.data import Dictionary
from subword_nmt.learn_bpe import learn_bpe

from prepare import bpe as prepare_bpe
from prepare import spm as prepare_spm
from prepare.tokenize import Tokenizer
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.serving.huggingface_tokenizer import escape, write_fsmt_tokenizer, write_marian_tokenizer
from vaswani_plugin.serving.text import TextPipeline

ENGLISH = [
    "The cat's toy & the dog's [ball] | \"yes\" <no> isn't it?",
    "A man & a woman: 'a' b c - x-y 5,300 U.S. I'm here.",
    "& | < > ' \" [ ] a I <unk> </s> <s>",
    "It's 'quoted' and \"double\" [x] <y> a|b a&b cat's dog's",
    "Unseen zebra words, quickly!",
    "",
]
GERMAN = [
    "Die Katze & der Hund [Ball] | \"ja\" <nein> Haus-Tür 5,300 z.B. 'a'",
    "& | < > ' \" [ ] a I",
    'Ein "Zitat" [x] <y> a|b a&b, der Hund\'s Ball.',
]


def read_lines(path):
    with (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8") as lines:
        return [line.rstrip("\n") for line in lines]


def auto_tokenizer(folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def learn_codes(path, lines, merges):
    """subword-nmt's codes over the words of `lines` (already tokenised)."""
    counts = Counter(word for line in lines for word in line.split())
    with open(path, "w", encoding="utf-8") as out:
        learn_bpe(
            io.StringIO("".join(f"{word} {count}\n" for word, count in counts.items())), out, merges, is_dict=True
        )
    return path


def build_dictionary(segmented_lines) -> Dictionary:
    dictionary = Dictionary()
    for line in segmented_lines:
        for piece in line.split():
            dictionary.add_symbol(piece)
    dictionary.finalize(padding_factor=8)  # as fairseq-preprocess: madeupwordNNNN symbols at the end
    return dictionary


def prepare_ids(line, tokenizer, segmenter, dictionary):
    """Our data preparation's ids of a raw line (fairseq-preprocess appends </s>)."""
    return [dictionary.index(piece) for piece in segmenter(tokenizer(line)).split()] + [dictionary.eos()]


def fairseq_decode(ids, dictionary, pipeline):
    """fairseq-interactive's text for ids (</s> stripped)."""
    return pipeline.decode([dictionary[index] for index in ids if index != dictionary.eos()])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """FSMT files of the hand-made case: joint codes, one dictionary per side."""
    folder = tmp_path_factory.mktemp("fsmt")
    english, german = Tokenizer("en"), Tokenizer("de")
    tokenised = [english(line) for line in ENGLISH] * 2 + [german(line) for line in GERMAN] * 2
    codes = learn_codes(folder / "codes", tokenised, 60)
    segmenter = prepare_bpe.Segmenter(str(codes))
    source = build_dictionary(segmenter(english(line)) for line in ENGLISH[:-2])  # the last two: unknown words
    target = build_dictionary(segmenter(german(line)) for line in GERMAN)
    write_fsmt_tokenizer(folder, codes, source, target, "en", "de")
    return folder, codes, segmenter, source, target


def test_tiny_case_exercises_the_escaping(tiny):
    folder, codes, _, source, _ = tiny
    assert "' s</w>" in codes.read_text().splitlines()  # a merge with a character Moses escapes
    merges = (folder / "merges.txt").read_text().splitlines()
    assert merges.index("&apos; s</w>") > merges.index("&apos ;</w>")
    assert {"&", "|", "<", ">", "'", '"', "[", "]", "a", "I"} <= set(source.symbols)


def test_fsmt_ids_equal_prepares(tiny):
    folder, _, segmenter, source, _ = tiny
    hf = auto_tokenizer(folder)
    assert type(hf).__name__ == "FSMTTokenizer"
    english = Tokenizer("en")
    for line in ENGLISH:
        assert hf(line)["input_ids"] == prepare_ids(line, english, segmenter, source), line
    assert source.unk() in hf(ENGLISH[-2])["input_ids"]  # unknown pieces: <unk> on both sides


def test_fsmt_decodes_as_fairseq(tiny):
    folder, codes, segmenter, _, target = tiny
    hf = auto_tokenizer(folder)
    german, pipeline = Tokenizer("de"), TextPipeline("en", "de", bpe_codes=codes)
    for line in GERMAN:
        ids = prepare_ids(line, german, segmenter, target)
        assert target.unk() not in ids
        assert hf.decode(ids, skip_special_tokens=True) == fairseq_decode(ids, target, pipeline), line


def test_target_pieces_holding_entity_text_decode_as_fairseq(tmp_path):
    """fairseq's detokeniser unescapes its (unescaped) pieces: "&quot;" in a piece decodes to '"'."""
    (tmp_path / "codes").write_text("#version: 0.2\nq r</w>\n")
    dictionary = Dictionary()
    for symbol in ("&amp;@@", "x", "&quot;", "a", "&lt;b&gt;"):
        dictionary.add_symbol(symbol)
    write_fsmt_tokenizer(tmp_path, tmp_path / "codes", dictionary, dictionary, "en", "de")
    ids = [dictionary.index(symbol) for symbol in ("a", "&amp;@@", "x", "&quot;", "&lt;b&gt;")] + [2]
    pipeline = TextPipeline("en", "de", bpe_codes=tmp_path / "codes")
    decoded = auto_tokenizer(tmp_path).decode(ids, skip_special_tokens=True)
    assert decoded == fairseq_decode(ids, dictionary, pipeline) == 'a &x "<b>'


def test_fsmt_bpe_equals_subword_nmt_on_random_words(tmp_path):
    """FSMT's BPE on escape(word) gives the escaped subword-nmt pieces, "</w>" on the last one."""
    rng = random.Random(0)
    alphabet = "ab'&|<>\"[]"
    words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))) for _ in range(3000)]
    codes = learn_codes(tmp_path / "codes", words, 300)
    merged = {char for line in codes.read_text().splitlines()[1:] for char in line}
    assert set(alphabet) <= merged
    segmenter = prepare_bpe.Segmenter(str(codes))
    write_fsmt_tokenizer(tmp_path, codes, Dictionary(), Dictionary(), "en", "de")
    hf = auto_tokenizer(tmp_path)
    for word in set(words[:1000]):
        pieces = segmenter(word).split()
        expected = [escape(piece[:-2]) for piece in pieces[:-1]] + [escape(pieces[-1]) + "</w>"]
        assert hf.bpe(escape(word)).split(" ") == expected, word


def test_bpe_codes_errors(tmp_path):
    dictionary = Dictionary()
    with pytest.raises(VaswaniConfigError, match="no such file"):
        write_fsmt_tokenizer(tmp_path, tmp_path / "missing", dictionary, dictionary, "en", "de")
    (tmp_path / "old").write_text("a b\nab c</w>\n")  # version 0.1: no header
    with pytest.raises(VaswaniConfigError, match="version 0.2"):
        write_fsmt_tokenizer(tmp_path, tmp_path / "old", dictionary, dictionary, "en", "de")
    (tmp_path / "bad").write_text("#version: 0.2\na b\nabc\n")
    with pytest.raises(VaswaniConfigError, match="line 3"):
        write_fsmt_tokenizer(tmp_path, tmp_path / "bad", dictionary, dictionary, "en", "de")
    (tmp_path / "binary").write_bytes(b"\x80\x81 model")
    with pytest.raises(VaswaniConfigError, match="not UTF-8"):
        write_fsmt_tokenizer(tmp_path, tmp_path / "binary", dictionary, dictionary, "en", "de")


@pytest.mark.shared_data
def test_fsmt_on_real_text(tmp_path):
    """Codes and dictionary from 5,000 lines of Multi30k train: ids of test2016 and newstest2014 (English), decoding
    of test2016 (German)."""
    data = cli_helpers.SHARED_DATA
    english, german = Tokenizer("en"), Tokenizer("de")
    train = {lang: read_lines(data / f"multi30k/train.{lang}.gz")[:5000] for lang in ("en", "de")}
    tokenised = [english(line) for line in train["en"]] + [german(line) for line in train["de"]]
    codes = learn_codes(tmp_path / "codes", tokenised, 2000)
    segmenter = prepare_bpe.Segmenter(str(codes))
    dictionary = build_dictionary(segmenter(line) for line in tokenised)
    write_fsmt_tokenizer(tmp_path, codes, dictionary, dictionary, "en", "de")
    hf = auto_tokenizer(tmp_path)
    for name in ("multi30k/test_2016_flickr.en.gz", "wmt14/newstest2014.en"):
        lines = read_lines(data / name)
        same = sum(hf(line)["input_ids"] == prepare_ids(line, english, segmenter, dictionary) for line in lines)
        assert same >= 0.99 * len(lines), f"{name}: {same} of {len(lines)} lines give prepare's ids"
    pipeline = TextPipeline("en", "de", bpe_codes=codes)
    for line in read_lines(data / "multi30k/test_2016_flickr.de.gz"):
        ids = [index for index in prepare_ids(line, german, segmenter, dictionary) if index != dictionary.unk()]
        assert hf.decode(ids, skip_special_tokens=True) == fairseq_decode(ids, dictionary, pipeline), line


@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spm")
    rng = random.Random(0)
    words = (
        "the a dog cat runs sleeps on grass under tree little big red ball with man woman child plays "
        "in front of house street water blue green young old girl boy jumps sits stands near two three"
    ).split()
    (folder / "train.txt").write_text(
        "".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))) + " .\n" for _ in range(500))
    )
    return prepare_spm.train([folder / "train.txt"], folder / "spm", vocab_size=80, model_type="bpe")


def test_marian_ids_equal_sentencepieces_through_the_dictionary(sentencepiece_model, tmp_path):
    import sentencepiece

    pieces = sentencepiece.SentencePieceProcessor(model_file=str(sentencepiece_model))
    prepare_spm.write_fairseq_dict(sentencepiece_model, tmp_path / "dict.txt")
    dictionary = Dictionary.load(str(tmp_path / "dict.txt"))
    dog = pieces.encode("dog", out_type=str)[0]
    missing = Dictionary()  # the source side lacks the first piece of "dog": it must become <unk>
    for symbol in dictionary.symbols[dictionary.nspecial :]:
        if symbol != dog:
            missing.add_symbol(symbol)
    write_marian_tokenizer(tmp_path, sentencepiece_model, missing, dictionary, "en", "de")
    hf = auto_tokenizer(tmp_path)
    assert type(hf).__name__ == "MarianTokenizer"
    for text in ("the dog runs on the grass .", "a big red zebra, under 3 trees!", "the </s> <unk> cat", ""):
        expected = [missing.index(piece) for piece in pieces.encode(text, out_type=str)] + [missing.eos()]
        assert hf(text)["input_ids"] == expected, text
    assert hf("dog")["input_ids"][0] == missing.unk() == 3
    # decoding reads the target dictionary, which has that piece
    ids = [dictionary.index(piece) for piece in pieces.encode("the dog runs", out_type=str)] + [2]
    assert dictionary.unk() not in ids
    assert hf.decode(ids, skip_special_tokens=True) == "the dog runs"


def test_sentencepiece_model_errors(tmp_path):
    dictionary = Dictionary()
    with pytest.raises(VaswaniConfigError, match="no such file"):
        write_marian_tokenizer(tmp_path, tmp_path / "missing.model", dictionary, dictionary, "en", "de")
    (tmp_path / "bad.model").write_text("not a model")
    with pytest.raises(VaswaniConfigError, match="not a sentencepiece model"):
        write_marian_tokenizer(tmp_path, tmp_path / "bad.model", dictionary, dictionary, "en", "de")
