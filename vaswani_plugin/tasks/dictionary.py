"""The task's dictionary: fairseq's, with the same text from `string` at a fraction of the time.

fairseq's Dictionary.string reads a tensor token by token (a torch call each), and fairseq-generate turns every
source, reference and hypothesis into text with it: on newstest2014 that took longer than the translation.
"""

import torch
from fairseq import utils
from fairseq.data import Dictionary, data_utils


class VaswaniDictionary(Dictionary):
    def string(
        self,
        tensor,
        bpe_symbol=None,
        escape_unk=False,
        extra_symbols_to_ignore=None,
        unk_string=None,
        include_eos=False,
        separator=" ",
    ):
        """fairseq's Dictionary.string, argument for argument and character for character, on ids read once."""
        if torch.is_tensor(tensor) and tensor.dim() == 2:  # one line a row; fairseq passes these arguments on
            return "\n".join(
                self.string(row, bpe_symbol, escape_unk, extra_symbols_to_ignore, include_eos=include_eos)
                for row in tensor
            )
        ignored = set(extra_symbols_to_ignore or [])
        if not include_eos:
            ignored.add(self.eos())
        ignored.add(self.bos())
        ids = tensor.tolist() if torch.is_tensor(tensor) else [utils.item(i) for i in tensor]
        unk, unknown = self.unk(), unk_string if unk_string is not None else self.unk_string(escape_unk)
        symbols, size = self.symbols, len(self.symbols)
        text = separator.join(
            unknown if i == unk else symbols[i] if i < size else self.unk_word for i in ids if i not in ignored
        )
        return data_utils.post_process(text, bpe_symbol)
