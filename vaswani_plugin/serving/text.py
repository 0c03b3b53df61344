"""Raw text <-> a model's subword tokens, as fairseq-interactive makes them: Moses (no escaping), then BPE."""

from pathlib import Path

from fairseq.data.encoders.moses_tokenizer import MosesTokenizer, MosesTokenizerConfig
from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE, SentencepieceConfig
from fairseq.data.encoders.subword_nmt_bpe import SubwordNMTBPE, SubwordNMTBPEConfig

from vaswani_plugin.errors import VaswaniConfigError


class TextPipeline:
    """fairseq's own encoders, `--tokenizer moses --moses-no-escape --bpe subword_nmt` (or sentencepiece)."""

    def __init__(self, source_lang: str, target_lang: str, bpe_codes=None, sentencepiece_model=None):
        for option, path in (("--bpe-codes", bpe_codes), ("--sentencepiece-model", sentencepiece_model)):
            if path is not None and not Path(path).is_file():
                raise VaswaniConfigError(f"{option} {path}: no such file")
        self.tokenizer = MosesTokenizer(
            MosesTokenizerConfig(source_lang=source_lang, target_lang=target_lang, moses_no_escape=True)
        )
        if bpe_codes is not None:
            self.subwords = SubwordNMTBPE(SubwordNMTBPEConfig(bpe_codes=str(bpe_codes)))
        else:
            self.subwords = SentencepieceBPE(SentencepieceConfig(sentencepiece_model=str(sentencepiece_model)))

    def encode(self, line: str):
        """A source line's subword tokens (a list of strings)."""
        return self.subwords.encode(self.tokenizer.encode(line)).split()

    def decode(self, tokens) -> str:
        """A target's subword tokens as text."""
        return self.tokenizer.decode(self.subwords.decode(" ".join(tokens)))
