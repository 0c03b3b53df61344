"""Tokenizer files of a transformers export, loaded by AutoTokenizer without custom code.

Moses + subword-nmt: FSMTTokenizer files. FSMT always XML-escapes Moses tokens (& -> &amp;), so merges.txt
first collapses each escaped entity into one symbol, then lists subword-nmt's merges in order, escaped;
its BPE then gives the escaped forms of subword-nmt's pieces, keyed in vocab-src.json with fairseq's ids
("x" inside a word, "y</w>" at its end). Sentencepiece: MarianTokenizer files with fairseq's ids; Marian
runs sentencepiece on raw text, without the Moses tokenisation that prepare runs first.
"""

import json
import re
import shutil
from pathlib import Path

from sacremoses import MosesTokenizer

from vaswani_plugin.errors import VaswaniConfigError

END_OF_WORD = "</w>"
SEPARATOR = "@@"
SPECIALS = dict(bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
PADDING_SYMBOL = re.compile(r"madeupword\d{4}")  # fairseq's Dictionary.pad_to_multiple_


def escape(text: str) -> str:
    """Moses' XML escaping (sacremoses' own table, & first), as FSMT's tokenizer applies it."""
    for regexp, entity in MosesTokenizer.MOSES_ESCAPE_XML_REGEXES:
        text = regexp.sub(entity, text)
    return text


# The entities that escape() writes, one per character it changes; none of them is escaped again.
ENTITIES = [escape(char) for char in "&|<>'\"[]"]


def escape_symbol(symbol: str) -> str:
    """A BPE symbol escaped; its end-of-word mark is BPE's, not text, so it stays as it is."""
    if symbol.endswith(END_OF_WORD):
        return escape(symbol[: -len(END_OF_WORD)]) + END_OF_WORD
    return escape(symbol)


def collapse_merges():
    """Merges that join each entity's characters into one symbol ("& a", "&a p", ... "&apos ;", "&apos ;</w>"),
    so that BPE starts from escape(character) where subword-nmt starts from the character."""
    merges = []
    for entity in ENTITIES:
        for end in range(1, len(entity)):
            merges.append((entity[:end], entity[end]))
        merges.append((entity[:-1], entity[-1] + END_OF_WORD))  # the entity ends a word
    return merges


def read_bpe_codes(path):
    """subword-nmt's merges, in order. Only version 0.2 codes: version 0.1 ends words with a separate "</w>"
    symbol, which FSMT's BPE (the last character carries "</w>") cannot reproduce."""
    path = Path(path)
    if not path.is_file():
        raise VaswaniConfigError(f"BPE codes {path}: no such file")
    try:
        lines = path.read_text(encoding="utf-8").rstrip("\n").split("\n")
    except UnicodeDecodeError:
        raise VaswaniConfigError(f"BPE codes {path}: not UTF-8 text, not subword-nmt codes") from None
    if lines[0].strip() != "#version: 0.2":
        raise VaswaniConfigError(
            f"BPE codes {path}: not subword-nmt codes of version 0.2 (first line "
            f"{lines[0][:40]!r}, expected '#version: 0.2')"
        )
    merges = [tuple(line.strip("\r\n ").split(" ")) for line in lines[1:]]
    for number, merge in enumerate(merges, start=2):
        if len(merge) != 2:
            raise VaswaniConfigError(f"BPE codes {path}, line {number}: not two symbols separated by a space")
    return merges


def fsmt_merges(codes):
    """merges.txt's pairs: the collapse merges, then the codes escaped. A pair listed twice keeps its first
    rank, as in subword-nmt (FSMT would keep the last)."""
    ranked = {}
    for first, second in collapse_merges() + [(escape_symbol(a), escape_symbol(b)) for a, b in codes]:
        ranked.setdefault((first, second), len(ranked))
    return list(ranked)


def piece_key(symbol: str, transform) -> str:
    """FSMT's form of a fairseq piece: "x@@" (inside a word) -> "x", "y" (ends a word) -> "y</w>"."""
    if symbol.endswith(SEPARATOR):
        return transform(symbol[: -len(SEPARATOR)])
    return transform(symbol) + END_OF_WORD


def fsmt_vocabulary(dictionary, transform) -> dict:
    """piece -> fairseq id. Specials and fairseq's padding symbols (madeupwordNNNN) are no BPE pieces: as they
    are. On a clash of keys the lower id wins."""
    vocabulary = {}
    for index, symbol in enumerate(dictionary.symbols):
        is_bpe_piece = index >= dictionary.nspecial and not PADDING_SYMBOL.fullmatch(symbol)
        vocabulary.setdefault(piece_key(symbol, transform) if is_bpe_piece else symbol, index)
    return vocabulary


def write_json(path: Path, content) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        json.dump(content, out, ensure_ascii=False, indent=1)
        out.write("\n")


def tokenizer_config(tokenizer_class: str, **fields) -> dict:
    # split_special_tokens: a literal "<unk>" in the input is text to tokenise, as prepare does, not the token;
    # clean_up_tokenization_spaces would join " ." and others after the detokeniser has done its work.
    return dict(
        tokenizer_class=tokenizer_class,
        clean_up_tokenization_spaces=False,
        split_special_tokens=True,
        **SPECIALS,
        **fields,
    )


def write_fsmt_tokenizer(
    output_dir, bpe_codes, source_dictionary, target_dictionary, source_lang: str, target_lang: str
) -> None:
    """FSMTTokenizer files for Moses (aggressive dash splits) + subword-nmt BPE + fairseq dictionaries."""
    output_dir = Path(output_dir)
    merges = fsmt_merges(read_bpe_codes(bpe_codes))
    with open(output_dir / "merges.txt", "w", encoding="utf-8", newline="\n") as out:
        out.writelines(f"{first} {second}\n" for first, second in merges)  # FSMT drops the text after the last \n
    write_json(output_dir / "vocab-src.json", fsmt_vocabulary(source_dictionary, escape))
    # Decoding only: FSMT's detokeniser unescapes, as fairseq's does, so the target pieces are kept unescaped,
    # and the text decodes as fairseq decodes it even where a piece holds an entity's text ("&quot;").
    write_json(output_dir / "vocab-tgt.json", fsmt_vocabulary(target_dictionary, lambda text: text))
    write_json(
        output_dir / "tokenizer_config.json",
        tokenizer_config(
            "FSMTTokenizer", langs=[source_lang, target_lang], do_lower_case=False, sep_token=SPECIALS["eos_token"]
        ),
    )


def check_sentencepiece_model(path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise VaswaniConfigError(f"sentencepiece model {path}: no such file")
    import sentencepiece

    try:
        sentencepiece.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError):
        raise VaswaniConfigError(f"sentencepiece model {path}: not a sentencepiece model") from None
    return path


def marian_vocabulary(dictionary) -> dict:
    """piece -> fairseq id, every symbol of the dictionary (specials at fairseq's ids)."""
    vocabulary = {}
    for index, symbol in enumerate(dictionary.symbols):
        vocabulary.setdefault(symbol, index)
    return vocabulary


def write_marian_tokenizer(
    output_dir, sentencepiece_model, source_dictionary, target_dictionary, source_lang: str, target_lang: str
) -> None:
    """MarianTokenizer files for a joint sentencepiece model + fairseq dictionaries. Pieces the dictionary
    lacks become <unk> (MarianTokenizer looks every piece up in vocab.json)."""
    output_dir = Path(output_dir)
    model = check_sentencepiece_model(sentencepiece_model)
    for name in ("source.spm", "target.spm"):
        shutil.copyfile(model, output_dir / name)
    source, target = marian_vocabulary(source_dictionary), marian_vocabulary(target_dictionary)
    separate = source != target
    write_json(output_dir / "vocab.json", source)
    if separate:
        write_json(output_dir / "target_vocab.json", target)
    write_json(
        output_dir / "tokenizer_config.json",
        tokenizer_config("MarianTokenizer", source_lang=source_lang, target_lang=target_lang, separate_vocabs=separate),
    )
