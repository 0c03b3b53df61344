"""An empty source (only </s>) gets the empty output, score 0, undecoded: the one rule both searches follow."""

from typing import Dict

import torch
from torch import Tensor


def empty_sources(src_tokens: Tensor, pad: int, eos: int) -> Tensor:
    """Which rows of `src_tokens` hold no token but padding and </s>."""
    return (src_tokens.ne(pad) & src_tokens.ne(eos)).sum(1).eq(0)


def empty_output(eos: int) -> Dict[str, Tensor]:
    """The hypothesis of an empty source: </s> alone, score 0."""
    return {
        "tokens": torch.tensor([eos]),
        "score": torch.tensor(0.0),
        "attention": torch.empty(0),
        "alignment": torch.empty(0),
        "positional_scores": torch.zeros(1),
    }


class EmptySourcesUndecoded:
    """Mixed into fairseq's generators (before them in the bases): empty sources get empty_output, the other
    sentences go to fairseq's generate."""

    def generate(self, models, sample, **kwargs):
        empty = empty_sources(sample["net_input"]["src_tokens"], self.tgt_dict.pad(), self.tgt_dict.eos())
        if not bool(empty.any()):
            return super().generate(models, sample, **kwargs)
        finalized = [[empty_output(self.tgt_dict.eos())] if is_empty else [] for is_empty in empty.tolist()]
        keep = (~empty).nonzero().squeeze(1)
        if len(keep):
            net_input = {
                key: value[keep] if torch.is_tensor(value) and len(value) == len(empty) else value
                for key, value in sample["net_input"].items()
            }
            rest = {**sample, "net_input": net_input}
            if torch.is_tensor(sample.get("id")):
                rest["id"] = sample["id"][keep]
            kwargs = {key: value[keep] if torch.is_tensor(value) else value for key, value in kwargs.items()}
            for sentence, hypotheses in zip(keep.tolist(), super().generate(models, rest, **kwargs)):
                finalized[sentence] = hypotheses
        return finalized
