"""fairseq's SequenceGenerator as the task's --search fairseq runs it (§6.1): ranked by the GNMT length penalty, or
plain (--lenpen); empty sources undecoded either way. The task (tasks/vaswani_translation.py) chooses among them."""

from fairseq.sequence_generator import SequenceGenerator, SequenceGeneratorWithAlignment

from vaswani_plugin.generation.empty_sources import EmptySourcesUndecoded
from vaswani_plugin.generation.length import gnmt_length_penalty


class GnmtLengthPenalty:
    """Scores each finished hypothesis log P(Y|X) / lp(Y) instead of fairseq's log P(Y|X) / |Y|^lenpen.

    fairseq divides the cumulative scores in place *after* deriving the positional scores from them, so
    normalisation is turned off and the stored scores of the hypotheses this step finalised are divided
    afterwards: positional scores stay the raw per-token log-probabilities, and fairseq's final sort
    (by "score") ranks by the penalised scores. Beam search itself never looks at normalised scores.
    """

    def __init__(self, *args, gnmt_alpha: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.normalize_scores = False
        self.gnmt_alpha = gnmt_alpha

    def finalize_hypos(
        self, step, bbsz_idx, eos_scores, tokens, scores, finalized, finished, beam_size, attn, src_lengths, max_len
    ):
        counts = [len(hypotheses) for hypotheses in finalized]
        newly_finished = super().finalize_hypos(
            step, bbsz_idx, eos_scores, tokens, scores, finalized, finished, beam_size, attn, src_lengths, max_len
        )
        penalty = gnmt_length_penalty(step + 1, self.gnmt_alpha)  # step + 1 tokens, </s> included
        for hypotheses, count in zip(finalized, counts):
            for hypothesis in hypotheses[count:]:
                hypothesis["score"] = hypothesis["score"] / penalty
        return newly_finished


class GnmtSequenceGenerator(EmptySourcesUndecoded, GnmtLengthPenalty, SequenceGenerator):
    """fairseq's beam search, hypotheses ranked by the GNMT length penalty (§6.1)."""


class GnmtSequenceGeneratorWithAlignment(EmptySourcesUndecoded, GnmtLengthPenalty, SequenceGeneratorWithAlignment):
    """The same, for --print-alignment (§6.1)."""


class PlainSequenceGenerator(EmptySourcesUndecoded, SequenceGenerator):
    """fairseq's beam search as it is (--lenpen), empty sources undecoded."""


class PlainSequenceGeneratorWithAlignment(EmptySourcesUndecoded, SequenceGeneratorWithAlignment):
    """The same, for --print-alignment."""
