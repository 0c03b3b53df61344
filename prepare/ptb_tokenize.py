"""Raw English to Penn Treebank tokens, the words the parsing model reads (prepare.silver_trees's input).

    echo 'He said "it's $5.3 billion (net)."' | python -m prepare.ptb_tokenize
    # -> He said `` it 's $ 5.3 billion -LRB- net -RRB- . ''

The rules of the treebank's own tokeniser (tokenizer.sed, as NLTK's TreebankWordTokenizer writes them): quotes as ``
and '', punctuation, brackets, -- and the clitics ('s 're 'll n't ...) split off, "cannot" as "can not", a full stop
split only at the sentence's end; brackets as the treebank writes them (-LRB-, -RRB-, -LSB- ...), typographic quotes,
apostrophes and dashes as their ASCII forms first. sacremoses' MosesTokenizer.penn_tokenize would do this, but fails
in sacremoses 0.2 (a regex left a string).
"""

import re
import sys

TYPOGRAPHIC = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2018": "`", "\u2019": "'",
                             "\u2013": "--", "\u2014": "--", "\u00a0": " "})  # fmt: skip
BRACKETS = {"(": "-LRB-", ")": "-RRB-", "[": "-LSB-", "]": "-RSB-", "{": "-LCB-", "}": "-RCB-"}
RULES = [
    (r'^"', r"``"),  # opening quotes
    (r"(``)", r" \1 "),
    (r'([ (\[{<])("|\'{2})', r"\1 `` "),
    (r"([:,])([^\d])", r" \1 \2"),  # punctuation; 1,000 and 10:30 stay whole
    (r"([:,])$", r" \1 "),
    (r"\.\.\.", r" ... "),
    (r"[;@#$%&]", r" \g<0> "),
    (r'([^.])(\.)([\]\)}>"\']*)\s*$', r"\1 \2\3 "),  # the sentence's full stop, before closing quotes
    (r"[?!]", r" \g<0> "),
    (r"([^'])' ", r"\1 ' "),
    (r"[\]\[(){}<>]", r" \g<0> "),  # brackets
    (r"--", r" -- "),
    (r"^", " "),
    (r"$", " "),
    (r'"', " '' "),  # closing quotes
    (r"(\S)('')", r"\1 \2 "),
    (r"([^' ])('[sS]|'[mM]|'[dD]|') ", r"\1 \2 "),  # clitics
    (r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ", r"\1 \2 "),
    (r"(?i)\b(can)(not)\b", r" \1 \2 "),
    (r"(?i)\b(gon|wan)(na)\b", r" \1 \2 "),
]
RULES = [(re.compile(pattern), replacement) for pattern, replacement in RULES]


def ptb_tokenize(text: str) -> list:
    """One sentence's Penn Treebank tokens."""
    text = text.translate(TYPOGRAPHIC).strip()
    for pattern, replacement in RULES:
        text = pattern.sub(replacement, text)
    return [BRACKETS.get(token, token) for token in text.split()]


if __name__ == "__main__":
    for line in sys.stdin:
        print(" ".join(ptb_tokenize(line)))
