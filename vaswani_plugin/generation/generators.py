"""Which generator decodes for the task (--search, §6.1): the plugin's beam search (paper), or fairseq's
SequenceGenerator ranked by the GNMT length penalty (fairseq); either constrained to trees (§6.3)."""

from typing import Optional

from fairseq.sequence_generator import SequenceGenerator, SequenceGeneratorWithAlignment

from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.generation.beam_search import BeamSearchGenerator
from vaswani_plugin.generation.empty_sources import EmptySourcesUndecoded
from vaswani_plugin.generation.length import gnmt_length_penalty
from vaswani_plugin.generation.tree_constraint import constrain_to_trees

SEARCH_RULES = ("fairseq", "paper")


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

    def finalize_hypos(self, step, bbsz_idx, eos_scores, tokens, scores, finalized, finished, beam_size,
                       attn, src_lengths, max_len):
        counts = [len(hypotheses) for hypotheses in finalized]
        newly_finished = super().finalize_hypos(step, bbsz_idx, eos_scores, tokens, scores, finalized,
                                                finished, beam_size, attn, src_lengths, max_len)
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


class GeneratorChoice:
    """The task's side of decoding, mixed into a fairseq translation task (before it in the bases): its
    build_generator and inference_step. Reads the task's cfg.search, cfg.gnmt_alpha and cfg.parse_constrained."""

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        """--search paper: the plugin's beam search (§6.1); fairseq: fairseq's generator, GNMT-ranked."""
        if getattr(args, "score_reference", False):
            return super().build_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn)
        alpha = self.cfg.gnmt_alpha
        if self.cfg.search == "fairseq":
            if alpha is not None:
                self.check_no_fairseq_normalisation(args, f"--gnmt-alpha {alpha}")
            generator = self.build_ranked_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs,
                                                    prefix_allowed_tokens_fn)
        else:
            self.check_no_fairseq_normalisation(args, "--search paper" if alpha is None else f"--gnmt-alpha {alpha}")
            unsupported = self.unsupported_by_plugin_search(models, args, seq_gen_cls, extra_gen_cls_kwargs,
                                                            prefix_allowed_tokens_fn)
            if unsupported is not None:
                raise VaswaniConfigError(f"--search paper does not combine with {unsupported}: fairseq's generator "
                                         "would decode by its own rule; use --search fairseq")
            generator = BeamSearchGenerator(
                models, self.target_dictionary, beam_size=getattr(args, "beam", 5),
                max_len_a=getattr(args, "max_len_a", 0), max_len_b=getattr(args, "max_len_b", 200),
                min_len=getattr(args, "min_len", 1), unk_penalty=getattr(args, "unkpen", 0),
                temperature=getattr(args, "temperature", 1.0), gnmt_alpha=alpha,
                print_alignment=getattr(args, "print_alignment", None))
        if self.cfg.parse_constrained:
            generator = constrain_to_trees(generator, self.tgt_dict, self.datasets, self.src_dict)
        return generator

    @staticmethod
    def unsupported_by_plugin_search(models, args, seq_gen_cls, extra_gen_cls_kwargs,
                                     prefix_allowed_tokens_fn) -> Optional[str]:
        """What of this generation fairseq's SequenceGenerator must do (named as its option); None: nothing."""
        if len(models) != 1:
            return "an ensemble of models"
        # fairseq-generate always passes lm_model (None without --lm-path) and lm_weight.
        extra_options = set(extra_gen_cls_kwargs or {}) - {"lm_model", "lm_weight"}
        options = [("--sampling", getattr(args, "sampling", False)),
                   ("--diverse-beam-groups", getattr(args, "diverse_beam_groups", -1) > 0),
                   ("--diversity-rate", getattr(args, "diversity_rate", -1) > -1),
                   ("--match-source-len", getattr(args, "match_source_len", False)),
                   ("--constraints", getattr(args, "constraints", False)),
                   ("--prefix-size", getattr(args, "prefix_size", 0) > 0),
                   ("--no-repeat-ngram-size", getattr(args, "no_repeat_ngram_size", 0) > 0),
                   ("a prefix_allowed_tokens_fn", prefix_allowed_tokens_fn is not None
                    or getattr(args, "prefix_allowed_tokens_fn", None) is not None),
                   (f"generator class {getattr(seq_gen_cls, '__name__', '')}", seq_gen_cls is not None),
                   ("--lm-path", (extra_gen_cls_kwargs or {}).get("lm_model") is not None),
                   (f"generator options {', '.join(sorted(extra_options))}", bool(extra_options)),
                   ("--print-alignment with a model that aligns step by step (no full_context_alignment)",
                    getattr(args, "print_alignment", None) and not getattr(models[0], "full_context_alignment",
                                                                           False))]
        return next((option for option, present in options if present), None)

    @staticmethod
    def check_no_fairseq_normalisation(args, option: str):
        if getattr(args, "lenpen", 1) != 1 or getattr(args, "unnormalized", False):
            given = "--unnormalized" if getattr(args, "unnormalized", False) else f"--lenpen {args.lenpen}"
            raise VaswaniConfigError(f"{option} replaces fairseq's length normalisation; drop {given}")

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        begin_batch = getattr(getattr(generator, "search", None), "begin_batch", None)
        if begin_batch is not None:  # the tree constraint's word leaves are this batch's input words
            begin_batch(sample)
        return super().inference_step(generator, models, sample, prefix_tokens, constraints)

    def build_ranked_generator(self, models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn):
        """fairseq's generator, hypotheses ranked by the GNMT penalty when --gnmt-alpha is set (§6.1)."""
        alpha = self.cfg.gnmt_alpha
        if seq_gen_cls is not None:
            if alpha is not None:
                raise VaswaniConfigError(f"--gnmt-alpha ranks fairseq's SequenceGenerator, not {seq_gen_cls.__name__}")
            return super().build_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn)
        aligned = bool(getattr(args, "print_alignment", False))
        extra_gen_cls_kwargs = dict(extra_gen_cls_kwargs or {})
        if alpha is None:
            seq_gen_cls = PlainSequenceGeneratorWithAlignment if aligned else PlainSequenceGenerator
        else:
            seq_gen_cls = GnmtSequenceGeneratorWithAlignment if aligned else GnmtSequenceGenerator
            extra_gen_cls_kwargs["gnmt_alpha"] = alpha
        if aligned:
            extra_gen_cls_kwargs["print_alignment"] = args.print_alignment
        return super().build_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn)
