"""Task `vaswani_translation`: fairseq's `translation` with §6.1's decoding (--search, --gnmt-alpha: build_generator
chooses among vaswani_plugin.generation's generators), parsing's tree constraint (§6.3, --parse-constrained),
training under bfloat16 autocast (--bf16-autocast auto|on|off, decided by vaswani_plugin.precision) and the dev
set's BLEU or F1 at validations (--dev-score, tasks/dev_scores.py).

It is the one place that attaches vaswani_plugin.training's hooks to a fairseq-train, under any model and criterion:
the progress (its meter, records and watchdog: progress_meter) and the stop after a signal (preemption's flag,
summed with the logging outputs). The recipes' own rules are a line at each hook here, their bodies modules of their
own: --leave-epochs (tasks/leave_epochs.py) and the tree constraint (generation/tree_constraint.py).

fairseq's --user-dir imports this module (every module of tasks/ and models/: fairseq.utils.import_user_module), and
with it the plugin's criterion, optimizer and scheduler; importing it sets fairseq up (fairseq_setup.py): the same
as vaswani_plugin.register()."""

import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from fairseq.logging import metrics
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from vaswani_plugin import paper
from vaswani_plugin.criterions import vaswani_label_smoothed_cross_entropy  # noqa: F401  (registers the criterion)
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.fairseq_internals import fairseq_precision
from vaswani_plugin.fairseq_setup import set_up_fairseq
from vaswani_plugin.generation.beam_search import BeamSearchGenerator
from vaswani_plugin.generation.generators import (
    GnmtSequenceGenerator,
    GnmtSequenceGeneratorWithAlignment,
    PlainSequenceGenerator,
    PlainSequenceGeneratorWithAlignment,
)
from vaswani_plugin.generation.tree_constraint import constrain_to_trees
from vaswani_plugin.lr_scheduler import noam  # noqa: F401  (registers the scheduler)
from vaswani_plugin.models import vaswani_transformer  # noqa: F401  (registers the model and architectures)
from vaswani_plugin.models.compiled_layers import compile_layers
from vaswani_plugin.optim import vaswani_adam  # noqa: F401  (registers the optimizer)
from vaswani_plugin.precision import bf16_autocast_enabled, bf16_autocast_setting, precision_line
from vaswani_plugin.progress_options import ProgressOptions
from vaswani_plugin.tasks.dev_scores import DevScoring
from vaswani_plugin.tasks.dictionary import VaswaniDictionary
from vaswani_plugin.tasks.leave_epochs import LeaveEpochs
from vaswani_plugin.tasks.length_buckets import LengthBuckets
from vaswani_plugin.tasks.resumable_iterator import resumable
from vaswani_plugin.training import preemption, progress_meter

set_up_fairseq()  # the error hook, the checkpoint allow-list, durable checkpoint writes
logger = logging.getLogger(__name__)

SEARCH_RULES = ("fairseq", "paper")
DEFAULT_PRECISION_WHY = "VASWANI_PRECISION_DEFAULT"  # the recipes' reason for a precision they chose (PRECISION unset)


@dataclass
class VaswaniTranslationConfig(TranslationConfig, ProgressOptions):
    gnmt_alpha: Optional[float] = field(
        default=None,
        metadata={
            "help": "rank beam-search hypotheses by log P(Y|X) / ((5+|Y|)/6)^alpha, the GNMT "
            f"length penalty of §6.1 ({paper.ALPHA} in the paper); replaces --lenpen"
        },
    )
    search: str = field(
        default="fairseq",
        metadata={
            "help": "the beam search's rule: fairseq (default), fairseq-generate's hypotheses; paper, §6.1's (GNMT "
            "penalty and early stop, each sentence's own limit); docs/reference.md#vaswani_translation-61"
        },
    )
    parse_constrained: bool = field(
        default=False,
        metadata={
            "help": "parsing (§6.3): beam search emits only well-formed trees over exactly the "
            "input's words (docs/reference.md)"
        },
    )
    bf16_autocast: str = field(
        default="off",
        metadata={
            "argparse_const": "on",
            "help": "auto, on or off (default off; bare: on): train under bfloat16 autocast, weights, loss and Adam "
            "in float32; auto: on a GPU of compute capability 8.0 or more and a CPU with AVX512-BF16 or AMX. Not "
            "fairseq's --bf16 (TPUs)",
        },
    )
    tf32: bool = field(
        default=False,
        metadata={
            "help": "float32 matrix products and convolutions on a GPU's TF32 tensor cores (compute capability 8.0 "
            "or more; torch leaves them off); no effect on a CPU"
        },
    )
    compile_layers: str = field(
        default="off",
        metadata={
            "help": "off (default), dynamic or reduce-overhead: train with each encoder and decoder layer under "
            "torch.compile (dynamic=True, inductor; reduce-overhead: CUDA graphs, a GPU only); eval passes eager"
        },
    )
    length_buckets: int = field(
        default=0,
        metadata={
            "help": "pad each training batch's source and target lengths up to one of N sizes (geometric up to the "
            "longest) and its rows to what --max-tokens allows there: a few shapes for --compile-layers' CUDA "
            "graphs; the loss, gradients and counts stay the batch's (0: off; tasks/length_buckets.py)"
        },
    )
    dev_score: str = field(
        default="none",
        metadata={
            "help": "none (default), bleu (sacreBLEU as `bleu`, tokenised as `tok_bleu`) or f1 "
            "(parsing): score the valid split at validations while training"
        },
    )
    dev_score_interval_updates: int = field(
        default=0, metadata={"help": "--dev-score at the first validation after every N updates (0: every one)"}
    )
    dev_score_sentences: int = field(
        default=0,
        metadata={
            "help": "validate on N sentences spread evenly over the valid split, loss and score (0: all of them)"
        },
    )
    dev_score_reference: Optional[str] = field(
        default=None,
        metadata={
            "help": "bleu: the valid split's plain reference text; f1: the folder "
            "prepare.wsj_parsing wrote (text/valid.words, gold/valid.{tags,trees})"
        },
    )
    dev_score_args: str = field(
        default="{}",
        metadata={
            "help": 'the decoding of --dev-score as JSON, e.g. \'{"beam": 4, "max_len_a": 1, '
            '"max_len_b": 50}\'; --search, --gnmt-alpha and --parse-constrained apply'
        },
    )
    dev_score_post_process: Optional[str] = field(
        default=None,
        metadata={"help": "join subwords before scoring: subword_nmt or sentencepiece (fairseq's --post-process)"},
    )
    leave_epochs: float = field(
        default=0,
        metadata={
            "help": "stop before --max-update by N epochs of --leave-epochs-of's updates, or before "
            "--stop-time-hours by the time they take at this run's measured pace (0: off; the parsing recipe's "
            "pre-training leaves its fine-tuning 10)"
        },
    )
    leave_epochs_of: str = field(default="", metadata={"help": "the split whose epochs --leave-epochs leaves time for"})


def unsupported_by_plugin_search(
    models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn
) -> Optional[str]:
    """What of this generation fairseq's SequenceGenerator must do (named as its option); None: nothing."""
    if len(models) != 1:
        return "an ensemble of models"
    # fairseq-generate always passes lm_model (None without --lm-path) and lm_weight.
    extra_options = set(extra_gen_cls_kwargs or {}) - {"lm_model", "lm_weight"}
    options = [
        ("--sampling", getattr(args, "sampling", False)),
        ("--diverse-beam-groups", getattr(args, "diverse_beam_groups", -1) > 0),
        ("--diversity-rate", getattr(args, "diversity_rate", -1) > -1),
        ("--match-source-len", getattr(args, "match_source_len", False)),
        ("--constraints", getattr(args, "constraints", False)),
        ("--prefix-size", getattr(args, "prefix_size", 0) > 0),
        ("--no-repeat-ngram-size", getattr(args, "no_repeat_ngram_size", 0) > 0),
        (
            "a prefix_allowed_tokens_fn",
            prefix_allowed_tokens_fn is not None or getattr(args, "prefix_allowed_tokens_fn", None) is not None,
        ),
        (f"generator class {getattr(seq_gen_cls, '__name__', '')}", seq_gen_cls is not None),
        ("--lm-path", (extra_gen_cls_kwargs or {}).get("lm_model") is not None),
        (f"generator options {', '.join(sorted(extra_options))}", bool(extra_options)),
        (
            "--print-alignment with a model that aligns step by step (no full_context_alignment)",
            getattr(args, "print_alignment", None) and not getattr(models[0], "full_context_alignment", False),
        ),
    ]
    return next((option for option, present in options if present), None)


def check_no_fairseq_normalisation(args, option: str):
    if getattr(args, "lenpen", 1) != 1 or getattr(args, "unnormalized", False):
        given = "--unnormalized" if getattr(args, "unnormalized", False) else f"--lenpen {args.lenpen}"
        raise VaswaniConfigError(f"{option} replaces fairseq's length normalisation; drop {given}")


@register_task("vaswani_translation", dataclass=VaswaniTranslationConfig)
class VaswaniTranslationTask(TranslationTask):
    """fairseq's `translation`, plus --gnmt-alpha for beam search as in §6.1, --parse-constrained for parsing
    (§6.3) and --bf16-autocast for training."""

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        bf16_autocast_setting(cfg.bf16_autocast)  # a bad value: an error before the model and data load
        self.bf16_autocast = None  # decided at the first training step, where the device and optimizer are known
        progress_meter.configure_from(cfg)  # its training's progress, on rank 0, whatever the model and criterion
        preemption.install()  # SIGUSR1, SIGTERM, SIGINT stop fairseq-train after the next update (train_step's flag)
        if cfg.search not in SEARCH_RULES:
            raise VaswaniConfigError(f"--search {cfg.search}: choose one of {', '.join(SEARCH_RULES)}")
        self.inputs_seen = 0  # sentences given to build_dataset_for_inference so far (fairseq-interactive's lines)
        self.dev_scoring = DevScoring(cfg, cfg.target_lang)
        root = cfg._get_root() if hasattr(cfg, "_get_root") else None  # fairseq-train's whole configuration
        self.leave_epochs = LeaveEpochs(cfg.leave_epochs, cfg.leave_epochs_of, root)
        self.updates_done = None  # set by training steps: None outside fairseq-train
        if cfg.length_buckets < 0 or cfg.length_buckets == 1:
            raise VaswaniConfigError(f"--length-buckets {cfg.length_buckets}: give 0 (off) or 2 sizes or more")
        self.root = root
        self.buckets = None  # --length-buckets' sizes, from the training's --max-tokens when it first needs them

    @classmethod
    def load_dictionary(cls, filename):
        """fairseq's dictionary, whose text (fairseq-generate's, -interactive's) comes faster: tasks/dictionary.py."""
        return VaswaniDictionary.load(filename)

    def decide_bf16_autocast(self, model, optimizer) -> bool:
        """The precision of this run, decided once and logged as one line."""
        if self.bf16_autocast is None:
            parameter = next(model.parameters())
            half = fairseq_precision(optimizer, parameter.dtype)
            self.bf16_autocast, reason = bf16_autocast_enabled(self.cfg.bf16_autocast, parameter.device, half)
            tf32 = self.cfg.tf32 and parameter.device.type == "cuda"
            if tf32:  # before the first product: torch leaves TF32 off for them
                torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
            line = precision_line(self.bf16_autocast, reason, half, tf32, os.environ.get(DEFAULT_PRECISION_WHY, ""))
            logger.info(line)
            progress_meter.note({"kind": "precision", "precision": line.removeprefix("precision: ")})
        return self.bf16_autocast

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        self.updates_done = update_num + 1  # once this step is done: what a validation after it reports
        progress_meter.training_step(update_num)  # the first: where the run starts (a resumption's record)
        if self.dev_scoring.enabled:
            self.dev_scoring.before_training_step(update_num)
        self.leave_epochs.count(self, model)
        compile_layers(model, self.cfg.compile_layers)
        if self.cfg.length_buckets:
            sample, criterion = self.length_buckets().padded(sample, criterion, self.src_dict, self.tgt_dict)
        if self.decide_bf16_autocast(model, optimizer):
            device = next(model.parameters()).device.type

            def criterion_under_autocast(model, sample):
                # Only the forward pass: fairseq's train_step runs the backward pass outside, as autocast asks.
                with torch.autocast(device, dtype=torch.bfloat16):
                    return criterion(model, sample)

            step = super().train_step(sample, model, criterion_under_autocast, optimizer, update_num, ignore_grad)
        else:
            step = super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
        self.leave_epochs.output(step[2])
        step[2][preemption.KEY] = preemption.flag()  # summed over the ranks: every rank stops after the same update
        return step

    def length_buckets(self) -> LengthBuckets:
        """--length-buckets of this training, made once."""
        if self.buckets is None:
            self.buckets = LengthBuckets(self.cfg.length_buckets, self.cfg, self.root)
        return self.buckets

    def valid_step(self, sample, model, criterion):
        """fairseq's, plus the dev score's statistics when one is due (--dev-score)."""
        loss, sample_size, logging_output = super().valid_step(sample, model, criterion)
        if self.dev_scoring.due(self.updates_done):
            logging_output.update(self.dev_scoring.statistics(self, sample, model, self.updates_done))
        return loss, sample_size, logging_output

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        progress_meter.observe()
        signals = preemption.summed(sum(log.get(preemption.KEY, 0) for log in logging_outputs))  # the job's ranks'
        if signals:
            progress_meter.stop_for_signal(preemption.name(signals))
        self.dev_scoring.log(logging_outputs, metrics)
        self.leave_epochs.reduce(logging_outputs, self.updates_done)

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, prefix_allowed_tokens_fn=None):
        """--search paper: the plugin's beam search (§6.1); fairseq: fairseq's generator, GNMT-ranked."""
        if getattr(args, "score_reference", False):
            return super().build_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn)
        alpha = self.cfg.gnmt_alpha
        if self.cfg.search == "fairseq":
            if alpha is not None:
                check_no_fairseq_normalisation(args, f"--gnmt-alpha {alpha}")
            generator = self.build_ranked_generator(
                models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn
            )
        else:
            check_no_fairseq_normalisation(args, "--search paper" if alpha is None else f"--gnmt-alpha {alpha}")
            unsupported = unsupported_by_plugin_search(
                models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn
            )
            if unsupported is not None:
                raise VaswaniConfigError(
                    f"--search paper does not combine with {unsupported}: fairseq's generator "
                    "would decode by its own rule; use --search fairseq"
                )
            generator = BeamSearchGenerator(
                models,
                self.target_dictionary,
                beam_size=getattr(args, "beam", 5),
                max_len_a=getattr(args, "max_len_a", 0),
                max_len_b=getattr(args, "max_len_b", 200),
                min_len=getattr(args, "min_len", 1),
                unk_penalty=getattr(args, "unkpen", 0),
                temperature=getattr(args, "temperature", 1.0),
                gnmt_alpha=alpha,
                print_alignment=getattr(args, "print_alignment", None),
            )
        if self.cfg.parse_constrained:
            generator = constrain_to_trees(generator, self.tgt_dict, self.datasets, self.src_dict)
        return generator

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

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        begin_batch = getattr(getattr(generator, "search", None), "begin_batch", None)
        if begin_batch is not None:  # the tree constraint's word leaves are this batch's input words
            begin_batch(sample)
        return super().inference_step(generator, models, sample, prefix_tokens, constraints)

    def get_batch_iterator(self, dataset, *args, epoch=1, **kwargs):
        """fairseq's, resumable on another number of processes or --max-tokens (resumable_iterator.py), and batched
        as an unbroken run batches it. fairseq orders the examples (length ties broken at random) under seed +
        the epoch it first iterates, then reuses those batches for every later epoch (FairseqTask's
        can_reuse_epoch_itr): a run resumed in epoch 2 or later would otherwise batch them anew, and the epoch it
        goes on with would read some examples twice and others not at all. Here they are batched as for epoch 1,
        as the run being resumed did (under fairseq's default seed; --update-ordered-indices-seed is not).
        --length-buckets: the training split's new iterator logs the shapes its batches take (length_buckets.py)."""
        new = dataset not in self.dataset_to_epoch_iter
        reused = self.can_reuse_epoch_itr(dataset) and new
        reused = reused and not kwargs.get("disable_iterator_cache") and not kwargs.get("update_epoch_batch_itr")
        iterator = super().get_batch_iterator(dataset, *args, epoch=1 if reused else epoch, **kwargs)
        if self.cfg.length_buckets and new and dataset is self.datasets.get(self.cfg.train_subset):
            sizes = getattr(dataset, "src_sizes", None), getattr(dataset, "tgt_sizes", None)
            if all(size is not None for size in sizes) and iterator.frozen_batches:
                logger.info(self.length_buckets().described(iterator.frozen_batches, *sizes))
        if reused and epoch > 1:
            iterator.epoch = epoch
            dataset.set_epoch(epoch)
        return resumable(iterator)

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        """fairseq's, remembering where its sentences start among all inputs so far (fairseq-interactive reads
        its input in chunks, one dataset each): a sentence too long is then named by its input line."""
        dataset = super().build_dataset_for_inference(src_tokens, src_lengths, constraints)
        dataset.first_input_line = self.inputs_seen + 1
        self.inputs_seen += len(src_lengths)
        return dataset

    def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
        """fairseq's, with a sentence longer than the model's positions reported as one line naming it (by its
        input line for fairseq-interactive's and the hub's inputs)."""
        if self.dev_scoring.sentences and dataset is self.datasets.get("valid"):
            indices = self.dev_scoring.subset(indices, len(dataset))  # --dev-score-sentences
        kept, too_long = dataset.filter_indices_by_size(indices, max_positions)
        if not len(too_long):
            return kept
        if not ignore_invalid_inputs:
            others = f" (and {len(too_long) - 1} more)" if len(too_long) > 1 else ""
            sizes = np.asarray(dataset.size(too_long[0])).tolist()
            first_line = getattr(dataset, "first_input_line", None)
            name = f"sentence {too_long[0]}" if first_line is None else f"input line {first_line + too_long[0]}"
            raise VaswaniConfigError(
                f"{name}{others} is longer than the model takes: {sizes} tokens (source, target: "
                f"</s> included), positions {max_positions}; --skip-invalid-size-inputs-valid-test leaves such "
                "sentences out"
            )
        return super().filter_indices_by_size(indices, dataset, max_positions, ignore_invalid_inputs)
