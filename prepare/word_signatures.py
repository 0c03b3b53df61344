"""Unknown words as signatures of their shape (Petrov et al. 2006's "unknown word classes"), for parsing.

A word outside the training vocabulary becomes one symbol that keeps what its spelling says about its category:
capitalised, all capitals, digits, a hyphen, an ending such as -ing or -ly ("brokering" -> "<unk-ing>",
"Fed-led" -> "<unk-C-h-ed>", "1.5" -> "<unk-N>"; a word with none of these, "<unk>" itself). Not in the paper
(§6.3 keeps 16K words, the rest one <unk>): docs/parsing.md says where the sample's recipe uses it and what it gave.
"""

from collections import Counter
from typing import Iterable, List, Set

# Longest first, so that -ness wins over -s; endings of English word classes (nouns, verbs, adjectives, adverbs).
SUFFIXES = (
    "ness",
    "ment",
    "able",
    "ible",
    "tion",
    "sion",
    "ing",
    "ity",
    "ous",
    "ive",
    "ful",
    "ism",
    "ist",
    "est",
    "ize",
    "ise",
    "ed",
    "er",
    "ly",
    "al",
    "ic",
    "en",
    "y",
    "s",
)
PREFIX = "<unk"


def signature(word: str) -> str:
    """The shape symbol standing for `word`: <unk[-A|-C][-N|-n][-h][-SUFFIX]>."""
    parts = []
    letters = [c for c in word if c.isalpha()]
    if letters and all(c.isupper() for c in letters) and len(letters) > 1:
        parts.append("A")
    elif letters and letters[0].isupper():
        parts.append("C")
    digits = sum(c.isdigit() for c in word)
    if digits:
        parts.append("N" if digits + sum(c in ",.-/:%" for c in word) == len(word) else "n")
    if "-" in word:
        parts.append("h")
    if letters and not digits:
        lower = word.lower()
        parts += [suffix for suffix in SUFFIXES if lower.endswith(suffix) and len(lower) > len(suffix) + 2][:1]
    return PREFIX + "".join("-" + part for part in parts) + ">"


def vocabulary(sentences: Iterable[List[str]], min_count: int = 2, most: int = None) -> Set[str]:
    """The words seen at least `min_count` times, the `most` most frequent of them."""
    counts = Counter(word for words in sentences for word in words)
    kept = [word for word, count in counts.most_common(most) if count >= min_count]
    return set(kept)


def replace_unknown(words: List[str], known: Set[str]) -> List[str]:
    """`words` with every word outside `known` replaced by its signature."""
    return [word if word in known else signature(word) for word in words]
