"""Beam search that emits only trees over the input's words, for parsing (§6.3; the task's --parse-constrained).

The target is scoring.trees' sequence form, "(S (NP The cat )NP (VP sat )VP . )S" (or with XX leaves). A
hypothesis opens one root first; inside it, it may continue with the next word (or XX) while words remain, (LABEL
while the length limit leaves room, the innermost )LABEL once it holds a child (the root's once every word is
placed), and </s> once the root is closed: every finished hypothesis is one tree over exactly the input's words.
It is fairseq's prefix-constrained beam search as one boolean mask a step, inside fairseq's BeamSearch. Placing a
word scores all leaves' probability together (where the word goes, not which word). Details: docs/reference.md.
"""

import math
from typing import Optional, Sequence

import numpy as np
import torch
from fairseq.search import BeamSearch

from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.generation.length import length_limit
from vaswani_plugin.scoring.trees import PLACEHOLDER


class TreeConstraint:
    """The tokens each prefix of a tree sequence may continue with (§6.3; the module's docstring says which).
    XX leaves if the target dictionary holds XX and is not the source's, the input's words otherwise (then
    `source_dictionary` maps the input's tokens to the target's)."""

    def __init__(self, dictionary, source_dictionary=None):
        symbols = dictionary.symbols
        size = len(dictionary)
        self.eos, self.unk = dictionary.eos(), dictionary.unk()
        # XX leaves when the target dictionary has XX and is its own (prepare.wsj_parsing joins the dictionaries
        # for word leaves only: a word "XX" of the input must not make them XX leaves).
        joined = source_dictionary is not None and source_dictionary.symbols == symbols
        xx_leaves = PLACEHOLDER in dictionary.indices and not joined
        self.placeholder = dictionary.index(PLACEHOLDER) if xx_leaves else None
        self.source_to_target = None
        if self.placeholder is None:
            if source_dictionary is None:
                raise VaswaniConfigError(
                    f"--parse-constrained: this target dictionary has no {PLACEHOLDER}, so its "
                    "leaves are the input's words; placing them needs the source dictionary"
                )
            self.source_to_target = torch.tensor([dictionary.index(symbol) for symbol in source_dictionary.symbols])
        self.closing_of = torch.full((size,), -1, dtype=torch.long)  # opening symbol -> its closing symbol
        for index in range(dictionary.nspecial, size):
            symbol = symbols[index]
            closing = ")" + symbol[1:]
            if len(symbol) > 1 and symbol[0] == "(" and closing in dictionary.indices:
                self.closing_of[index] = dictionary.index(closing)
        self.is_opening = self.closing_of >= 0
        self.is_closing = torch.zeros(size, dtype=torch.bool)
        self.is_closing[self.closing_of[self.is_opening]] = True
        self.openings = self.is_opening.nonzero().squeeze(1)
        if not len(self.openings):
            raise VaswaniConfigError(
                "--parse-constrained needs a target dictionary of tree sequences; this one "
                "has no pair of (LABEL and )LABEL symbols"
            )
        # Leaves: XX, or every word (any token but brackets and special symbols, <unk> included).
        self.is_leaf = torch.zeros(size, dtype=torch.bool)
        if self.placeholder is None:
            # fairseq pads a dictionary with fillers (madeupword0000, ...) that are never in the data
            fillers = torch.tensor([symbol.startswith("madeupword") for symbol in symbols])
            self.is_leaf[dictionary.nspecial :] = ~(self.is_opening | self.is_closing | fillers)[dictionary.nspecial :]
            self.is_leaf[self.unk] = True
        else:
            self.is_leaf[self.placeholder] = True
        self.vocabulary_size = size

    @property
    def leaves_are_words(self) -> bool:
        return self.placeholder is None

    def move_to(self, device) -> None:
        """The symbol tables on the device the search runs on."""
        self.closing_of, self.is_opening, self.is_closing, self.openings, self.is_leaf = (
            tensor.to(device)
            for tensor in (self.closing_of, self.is_opening, self.is_closing, self.openings, self.is_leaf)
        )
        if self.source_to_target is not None:
            self.source_to_target = self.source_to_target.to(device)

    def input_words(self, src_tokens: torch.Tensor, pad: int, eos: int) -> torch.Tensor:
        """(sentences, longest) target tokens of each input's words, in order from column 0 (sources may be
        padded on either side; </s> and padding dropped; the rest is padding); a word that is no leaf of the
        target dictionary is <unk>."""
        if self.is_opening.device != src_tokens.device:
            self.move_to(src_tokens.device)
        is_word = (src_tokens != pad) & (src_tokens != eos)
        order = torch.sort((~is_word).to(torch.uint8), dim=1, stable=True).indices  # words first, in order
        words = self.source_to_target[src_tokens.gather(1, order)]
        words = torch.where(self.is_leaf[words], words, self.unk)  # a word like "(S" would be no leaf: <unk>
        return words.masked_fill(~is_word.gather(1, order), pad)

    def allowed(
        self, prefixes: torch.Tensor, words: torch.Tensor, max_len, input_words: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """(rows, dictionary) booleans: the tokens allowed next after each prefix (</s> first, then the tokens
        so far), for a sentence of `words` words whose hypotheses must end (</s> included) by step `max_len`
        (fairseq's limit: </s> at step max_len at the latest); with word leaves, `input_words` (rows, longest):
        each row's words as input_words gives them. A prefix with </s>, padding or anything that is no tree
        token after its first position gets nothing (a finished or dead hypothesis)."""
        rows, step = prefixes.size(0), prefixes.size(1) - 1
        body = prefixes[:, 1:]
        device = prefixes.device
        if self.is_opening.device != device:  # moved once, not at every step of a search on a GPU
            self.move_to(device)
        opening, closing = self.is_opening[body], self.is_closing[body]
        placed = self.is_leaf[body]
        depths = (opening.long() - closing.long()).cumsum(1)  # open brackets after each token
        if step:
            depth, after_opening = depths[:, -1], opening[:, -1]
        else:
            depth = torch.zeros(rows, dtype=torch.long, device=device)
            after_opening = torch.zeros(rows, dtype=torch.bool, device=device)
        left = words - placed.sum(1)
        alive = (opening | closing | placed).all(1) & (depths >= 0).all(1) & (left >= 0)
        if step:  # one root: the first token opens it, and no token but its closing one leaves it
            alive &= opening[:, 0] & (depths[:, :-1] > 0).all(1)
        inside = depth > 0
        allowed = torch.zeros(rows, self.vocabulary_size, dtype=torch.bool, device=device)
        if self.leaves_are_words:
            placing = (alive & inside & (left > 0)).nonzero().squeeze(1)
            allowed[placing, input_words[placing, placed[placing].sum(1)]] = True
        else:
            allowed[:, self.placeholder] = alive & inside & (left > 0)
        opens = alive & (left > 0) & (left + depth + 2 <= max_len - step) & (inside if step else True)
        allowed[:, self.openings] = opens[:, None]
        allowed[:, self.eos] = alive & (left == 0) & (depth == 0)
        closable = (alive & inside & ~after_opening & ((depth > 1) | (left == 0))).nonzero().squeeze(1)
        if len(closable):
            # The innermost open constituent: the last opening after which the depth is the current depth.
            innermost = opening[closable] & (depths[closable] == depth[closable, None])
            positions = torch.arange(step, device=device).expand_as(innermost)
            where = torch.where(innermost, positions, -1).amax(1)
            label = body[closable].gather(1, where[:, None]).squeeze(1)
            allowed[closable, self.closing_of[label]] = True
        return allowed


class TreeConstrainedBeamSearch(BeamSearch):
    """fairseq's beam search, each step restricted to the tokens TreeConstraint allows (§6.3 parsing)."""

    def __init__(self, dictionary, max_len_a: float, max_len_b: int, model_max_len: int, source_dictionary=None):
        super().__init__(dictionary)
        self.constraint = TreeConstraint(dictionary, source_dictionary)
        self.source_dictionary = source_dictionary
        self.batch_ids = self.batch_words = None  # with word leaves: the batch's sentence ids and input words
        self.max_len_a, self.max_len_b, self.model_max_len = max_len_a, max_len_b, model_max_len
        self.needs_src_lengths = True  # fairseq then passes each step's source lengths to set_src_lengths
        # A sentence whose every hypothesis has finished with fewer than beam size of them has nothing left to
        # extend: fairseq stops it at max_len instead of asserting that all sentences are finished there.
        self.stop_on_max_len = True
        self.batch_max_len = 0
        # The paper's search (--search paper) limits each sentence by its own length, not the batch's longest.
        self.per_sentence_limits = False

    def check_sources(self, source_lengths: Sequence[int], where: str) -> None:
        """A one-line error if a sentence (its length with </s>) has more words than any tree can hold within
        the length limit (its words and the root's two brackets); fairseq's limit grows with a batch's longest
        sentence, so this is the least it is."""
        lengths = np.asarray(source_lengths)
        self.refuse(lengths, length_limit(self.max_len_a, self.max_len_b, lengths, self.model_max_len), where)

    def refuse(self, lengths: np.ndarray, limits, where: str, ids: Optional[Sequence[int]] = None) -> None:
        """The error for the first sentence of `lengths` (their ids: `ids`, or their indices) over `limits`."""
        words = lengths - 1
        too_long = np.flatnonzero((words > 0) & (words + 2 > limits))
        if len(too_long):
            first = int(too_long[0])
            limit = int(np.broadcast_to(limits, lengths.shape)[first])
            others = f" (and {len(too_long) - 1} more)" if len(too_long) > 1 else ""
            name = first if ids is None else ids[first]
            raise VaswaniConfigError(
                f"sentence {name} of {where}{others} has {lengths[first] - 1} words, but decoding ends after "
                f"{limit} tokens (--max-len-a {self.max_len_a} --max-len-b {self.max_len_b}, the model's "
                f"{self.model_max_len} target positions): no tree over its words fits; raise --max-len-b"
            )

    def begin_batch(self, sample) -> None:
        """With word leaves, the words of this batch's inputs (the task's inference_step calls this)."""
        if self.constraint.leaves_are_words:
            src_tokens = sample["net_input"]["src_tokens"]
            self.batch_words = self.constraint.input_words(
                src_tokens, self.source_dictionary.pad(), self.source_dictionary.eos()
            )
            ids = sample.get("id")
            # fairseq's SequenceGenerator names the rows of a step by these (original_batch_idxs)
            self.batch_ids = ids if isinstance(ids, torch.Tensor) else torch.arange(len(src_tokens))
            self.batch_ids = self.batch_ids.to(src_tokens.device)

    def words_of_rows(self, original_batch_idxs, beam_size: int) -> torch.Tensor:
        if self.batch_words is None:
            raise VaswaniConfigError(
                "--parse-constrained with word leaves needs the batch's input words: decode "
                "through the task's inference_step (fairseq-generate, fairseq-interactive, the "
                "hub interface)"
            )
        rows = (self.batch_ids[None, :] == original_batch_idxs.to(self.batch_ids.device)[:, None]).int().argmax(1)
        return self.batch_words[rows].repeat_interleave(beam_size, 0)

    def step(
        self,
        step: int,
        lprobs,
        scores: Optional[torch.Tensor],
        prev_output_tokens=None,
        original_batch_idxs=None,
        candidate_multiple: int = 2,
    ):
        bsz, beam_size, _ = lprobs.size()
        if self.per_sentence_limits or step == 0:
            lengths = self.src_lengths.cpu().numpy()
            if self.per_sentence_limits:  # each sentence's own (the live ones')
                limits = length_limit(self.max_len_a, self.max_len_b, lengths, self.model_max_len)
            else:  # this batch's, as fairseq computes it from the longest source (at most that, if padded)
                self.batch_max_len = length_limit(
                    self.max_len_a, self.max_len_b, int(lengths.max()), self.model_max_len
                )
                limits = self.batch_max_len
            if step == 0:
                ids = None if original_batch_idxs is None else original_batch_idxs.tolist()
                self.refuse(lengths, limits, "the input", ids)
        if self.per_sentence_limits:
            limits = torch.from_numpy(limits).to(lprobs.device).repeat_interleave(beam_size)
        else:
            limits = self.batch_max_len
        words = (self.src_lengths.to(lprobs.device) - 1).repeat_interleave(beam_size)
        leaves_are_words = self.constraint.leaves_are_words
        input_words = self.words_of_rows(original_batch_idxs, beam_size) if leaves_are_words else None
        allowed = self.constraint.allowed(prev_output_tokens, words, limits, input_words)
        allowed = allowed.view(lprobs.shape)
        if leaves_are_words:
            # Where the next word goes is the decision, not which word: it scores all leaves' probability.
            is_leaf = self.constraint.is_leaf
            leaves = lprobs.masked_fill(~is_leaf, -math.inf).logsumexp(-1, keepdim=True)
            lprobs = torch.where(allowed & is_leaf, leaves, lprobs)
        if step == 0 and bool((words == 0).any()):
            # An empty sentence's only tree is the empty one; fairseq's --min-len 1 took </s> from it.
            lprobs = lprobs.clone()
            lprobs[(words == 0).view(bsz, beam_size), self.constraint.eos] = 0.0
        lprobs = lprobs.masked_fill(~allowed, -math.inf)
        return super().step(step, lprobs, scores, prev_output_tokens, original_batch_idxs, candidate_multiple)


def constrain_to_trees(generator, dictionary, datasets=None, source_dictionary=None):
    """Make a generator's beam search (fairseq's SequenceGenerator or the plugin's BeamSearchGenerator)
    tree-constrained; the sentences of `datasets` (name -> fairseq dataset with src_sizes) are checked to fit the
    length limit first. With word leaves the search needs `source_dictionary` and, before each batch,
    search.begin_batch(sample) (the task's inference_step calls it)."""
    if type(generator.search) is not BeamSearch:
        raise VaswaniConfigError(
            f"--parse-constrained is a beam search; it does not combine with "
            f"{type(generator.search).__name__} (--sampling, --diverse-beam-groups, "
            f"--match-source-len, --constraints, a prefix_allowed_tokens_fn, ...)"
        )
    search = TreeConstrainedBeamSearch(
        dictionary, generator.max_len_a, generator.max_len_b, generator.max_len, source_dictionary
    )
    search.per_sentence_limits = getattr(generator, "per_sentence_limits", False)
    for name, dataset in (datasets or {}).items():
        sizes = getattr(dataset, "src_sizes", None)
        if sizes is not None and len(sizes):
            search.check_sources(sizes, name)
    generator.search = search
    generator.should_set_src_lengths = True
    return generator
