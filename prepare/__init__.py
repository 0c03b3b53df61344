"""prepare: the data preparation of every recipe (WMT14; Multi30k for the quickstart), one module per step.

Each step is a module with a command line (``python -m prepare.<step> --help``) and a Python API, so that
it also serves your own data:

    prepare.download   fetch the upstream statmt.org archives (or Multi30k's): resumable, size-checked, or
                       offline (--raw-dir)
    prepare.extract    archives -> plain text: training corpora, newstest2013, newstest2014 from SGM
    prepare.tokenize   Moses punctuation normalisation + tokenisation (sacremoses), @-@ compound splits
    prepare.clean      clean-corpus-n: drop training pairs by length (1..250 tokens) and length ratio (1.5)
    prepare.bpe        joint BPE (subword-nmt): learn merges, apply them
    prepare.spm        sentencepiece: train a model, encode, write its fairseq dictionary
    prepare.binarize   fairseq-preprocess --joined-dictionary, then check sentence counts
    prepare.longest    the longest binarised example, which a batch budget (--max-tokens) must hold
    prepare.wmt14      all of the above for WMT14 En-De (BPE) or En-Fr (sentencepiece), idempotently
    prepare.multi30k   Multi30k task 1 En-De, the quickstart's data: the same stages as prepare.wmt14
    prepare.records    the records of a recipe's stages and of its data, which decide what a re-run does

User mistakes (missing files, bad options) end in one line, ``prepare: error: ...``, and exit status 1.
"""

from ._common import PrepareError

__all__ = ["PrepareError"]
