"""Beam search as §6.1 decodes (the task's --search paper), in one loop of tensor operations over the sentences.

Hypotheses are scored log P(Y|X) / lp(Y) (GNMT's penalty), each sentence has its own limit ⌊a·|x| + b⌋, and a
sentence ends by GNMT's early stop as tensor2tensor's `_is_not_finished`: when its worst of `beam` finished
hypotheses scores at least its best live log P / lp(limit + 1). In full: docs/reference.md#vaswani_translation-61.
Per step: one decoder call, fairseq's candidate selection (its search object, so the tree constraint applies),
one host sync; ended sentences leave the batch.
"""

import math
from typing import Dict, List, Optional, Tuple

import torch
from fairseq import utils
from fairseq.data import data_utils
from fairseq.models import FairseqIncrementalDecoder
from fairseq.search import BeamSearch
from torch import Tensor, nn

from vaswani_plugin import paper
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.generation.empty_sources import empty_output, empty_sources
from vaswani_plugin.generation.length import gnmt_length_penalty, length_limit


class BeamSearchGenerator(nn.Module):
    """fairseq's generator interface (generate(models, sample) -> per sentence a list of hypotheses, best first,
    each {"tokens", "score", "positional_scores", "attention", "alignment"}) for one encoder-decoder model."""

    def __init__(
        self,
        models,
        tgt_dict,
        beam_size: int = 1,
        max_len_a: float = 0,
        max_len_b: int = 200,
        min_len: int = 1,
        unk_penalty: float = 0.0,
        temperature: float = 1.0,
        gnmt_alpha: Optional[float] = None,
        print_alignment: Optional[str] = None,
        search_strategy=None,
    ):
        super().__init__()
        if len(models) != 1:
            raise VaswaniConfigError("the plugin's beam search decodes with one model, not an ensemble")
        self.model = models[0]
        self.tgt_dict = tgt_dict
        self.pad, self.unk, self.eos = tgt_dict.pad(), tgt_dict.unk(), tgt_dict.eos()
        self.symbols_to_strip_from_output = {self.eos}
        self.vocab_size = len(tgt_dict)
        self.beam_size = min(beam_size, self.vocab_size - 1)  # as fairseq: pad is never chosen
        self.max_len_a, self.max_len_b, self.min_len = max_len_a, max_len_b, min_len
        self.max_len = self.model.max_decoder_positions()
        self.unk_penalty = unk_penalty
        self.temperature = temperature
        self.extract_alignment = {
            None: None,
            "hard": utils.extract_hard_alignment,
            "soft": utils.extract_soft_alignment,
        }[print_alignment or None]
        self.gnmt_alpha = paper.ALPHA if gnmt_alpha is None else gnmt_alpha
        self.per_sentence_limits = True  # each sentence's own limit (the tree constraint reads it)
        self.search = BeamSearch(tgt_dict) if search_strategy is None else search_strategy
        self.should_set_src_lengths = getattr(self.search, "needs_src_lengths", False)
        self.incremental = isinstance(getattr(self.model, "decoder", None), FairseqIncrementalDecoder)
        if self.beam_size > 1 and hasattr(self.model, "set_beam_size"):
            self.model.set_beam_size(self.beam_size)
        self.model.eval()

    @property
    def plain_beam_search(self) -> bool:
        """fairseq's own BeamSearch, not a subclass such as --parse-constrained's: its step is `candidates`."""
        return type(self.search) is BeamSearch

    @torch.no_grad()
    def generate(
        self,
        models,
        sample: Dict[str, Dict[str, Tensor]],
        prefix_tokens: Optional[Tensor] = None,
        constraints: Optional[Tensor] = None,
        bos_token: Optional[int] = None,
        **kwargs,
    ):
        if prefix_tokens is not None or constraints is not None:
            raise VaswaniConfigError(
                "the plugin's beam search takes no prefix tokens or lexical constraints; "
                "the task gives --prefix-size and --constraints to fairseq's generator"
            )
        net_input = sample["net_input"]
        src_tokens = net_input["src_tokens"]
        src_lengths = net_input.get("src_lengths")
        if src_lengths is None:
            src_lengths = (src_tokens.ne(self.eos) & src_tokens.ne(self.pad)).long().sum(1)
        batch = src_tokens.size(0)
        ids = sample.get("id")
        ids = ids if isinstance(ids, Tensor) else torch.arange(batch, device=src_tokens.device)
        finalized: List[List[Dict[str, Tensor]]] = [[] for _ in range(batch)]
        # An empty source line: the empty output, not a sentence the model makes up from nothing.
        empty = empty_sources(src_tokens, self.pad, self.eos)
        for sentence in empty.nonzero().squeeze(1).tolist():
            finalized[sentence].append(empty_output(self.eos))
        keep = (~empty).nonzero().squeeze(1)
        if not len(keep):
            return finalized
        if len(keep) < batch:
            src_tokens, src_lengths, ids = src_tokens[keep], src_lengths[keep], ids[keep]
        limits = length_limit(self.max_len_a, self.max_len_b, src_lengths, self.max_len)
        if self.min_len > int(limits.min()):
            raise VaswaniConfigError(
                f"--min-len {self.min_len} is longer than the length limit "
                f"{int(limits.min())} (--max-len-a, --max-len-b)"
            )
        encoder_out = self.model.encoder.forward_torchscript({"src_tokens": src_tokens, "src_lengths": src_lengths})
        outputs = self.search_beams(encoder_out, src_lengths, limits, ids, bos_token)
        for sentence, hypotheses in zip(keep.tolist(), outputs):
            finalized[sentence] = hypotheses
        if self.extract_alignment is not None:
            self.align(net_input["src_tokens"], finalized)
        return finalized

    def align(self, src_tokens: Tensor, finalized: List[List[Dict[str, Tensor]]]):
        """--print-alignment: each hypothesis's alignment from one full pass over the finished hypotheses, as
        fairseq's SequenceGeneratorWithAlignment does for a model with full_context_alignment."""
        sentences = [index for index, hypotheses in enumerate(finalized) for _ in hypotheses]
        hypotheses = [hypothesis for each in finalized for hypothesis in each]
        source = src_tokens[sentences]
        lengths = source.ne(self.pad).long().sum(1)
        targets = [h["tokens"] for h in hypotheses]
        previous = data_utils.collate_tokens(targets, self.pad, self.eos, False, move_eos_to_beginning=True)
        target = data_utils.collate_tokens(targets, self.pad, self.eos, False)
        attention = self.model(source, lengths, previous)[1]["attn"][0].cpu()
        source, target = source.cpu(), target.cpu()
        for row, hypothesis in enumerate(hypotheses):
            hypothesis["alignment"] = self.extract_alignment(
                attention[row], source[row], target[row], self.pad, self.eos
            )

    def hypothesis(self, tokens: Tensor, score: Tensor, positional_scores: Tensor) -> Dict[str, Tensor]:
        return {
            "tokens": tokens,
            "score": score,
            "attention": torch.empty(0),
            "alignment": torch.empty(0),
            "positional_scores": positional_scores,
        }

    def log_probs(self, tokens: Tensor, encoder_out, state) -> Tensor:
        """log P(next token | prefix, source) of every row, (rows, vocabulary), as fairseq's EnsembleModel."""
        if self.incremental:
            out = self.model.decoder.forward(tokens, encoder_out=encoder_out, incremental_state=state)
        else:
            out = self.model.decoder.forward(tokens, encoder_out=encoder_out)
        logits = out[0][:, -1:, :]
        if self.temperature != 1.0:
            logits = logits.div_(self.temperature)
        return self.model.get_normalized_probs((logits, None), log_probs=True)[:, -1, :]

    def apply_rules(self, lprobs: Tensor, step: int, limits: Optional[Tensor], nan_to_inf: bool = True) -> Tensor:
        """fairseq's rules on a step's log-probabilities: NaN is -inf (or, nan_to_inf False, left to the caller,
        which then looks at a step's candidates only), never <pad>, --unkpen, only </s> for rows at their
        length limit (`limits`: each row's, None where none is reached), no </s> before --min-len."""
        if nan_to_inf:
            lprobs = torch.nan_to_num_(lprobs, nan=-math.inf, posinf=math.inf, neginf=-math.inf)
        lprobs[:, self.pad] = -math.inf
        if self.unk_penalty:
            lprobs[:, self.unk] -= self.unk_penalty
        if limits is not None:
            not_eos = torch.ones(lprobs.size(1), dtype=torch.bool, device=lprobs.device)
            not_eos[self.eos] = False
            lprobs = lprobs.masked_fill((limits <= step)[:, None] & not_eos, -math.inf)
        if step < self.min_len:
            lprobs[:, self.eos] = -math.inf
        return lprobs

    def candidates(self, step: int, lprobs: Tensor, scores: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """fairseq's BeamSearch.step: the 2·beam best (score, token, beam) of each sentence, its hypotheses'
        log P plus each next token's, over (sentences, beam, vocabulary) log-probabilities `lprobs` (rows of
        `scores`: each hypothesis's cumulative log P). Taken from each row's own 2·beam best: the candidates
        and their scores are fairseq's (the same sums), without adding the prefix to all of the vocabulary.
        NaN log-probabilities are -inf here, as fairseq's nan_to_num makes them."""
        sentences, k, vocabulary = lprobs.shape
        if step == 0:  # all beams are the same hypothesis: fairseq reads the first
            width = min(2 * k, vocabulary - 1)
            cand_scores, cand_indices = lprobs[:, 0].topk(width, dim=1)
            return (
                torch.nan_to_num_(cand_scores, nan=-math.inf, posinf=math.inf, neginf=-math.inf),
                cand_indices,
                torch.zeros_like(cand_indices),
            )
        width = min(2 * k, k * vocabulary - 1)
        row_width = min(width, vocabulary)
        row_scores, row_indices = lprobs.view(sentences * k, vocabulary).topk(row_width, dim=1)
        row_scores = torch.nan_to_num_(row_scores, nan=-math.inf, posinf=math.inf, neginf=-math.inf)
        row_scores = (row_scores + scores[:, step - 1 : step]).view(sentences, k * row_width)
        cand_scores, flat = row_scores.topk(width, dim=1)
        return cand_scores, row_indices.view(sentences, k * row_width).gather(1, flat), flat // row_width

    def search_beams(
        self, encoder_out, src_lengths: Tensor, limits: Tensor, ids: Tensor, bos_token: Optional[int]
    ) -> List[List[Dict[str, Tensor]]]:
        """The hypotheses of each sentence of the batch, best first."""
        k, vocabulary = self.beam_size, self.vocab_size
        sentences = src_lengths.numel()
        device = src_lengths.device
        max_len = int(limits.max())
        encoder_out = self.model.encoder.reorder_encoder_out(
            encoder_out, torch.arange(sentences, device=device).repeat_interleave(k)
        )
        tokens = torch.full((sentences * k, max_len + 2), self.pad, dtype=torch.long, device=device)
        tokens[:, 0] = self.eos if bos_token is None else bos_token
        scores = torch.zeros(sentences * k, max_len + 1, device=device)  # cumulative log P of each prefix
        ignored = torch.zeros(sentences, k, dtype=torch.bool, device=device)  # fairseq's cands_to_ignore
        finished = FinishedHypotheses(sentences, k, max_len, self.pad, device)
        bound_divisor = gnmt_length_penalty(limits.double() + 1, self.gnmt_alpha)
        live = torch.arange(sentences, device=device)  # each live row group's sentence
        outputs: List[Optional[List[Dict[str, Tensor]]]] = [None] * sentences
        state: Dict[str, Dict[str, Optional[Tensor]]] = {}
        reorder: Optional[Tensor] = None
        first_limit = int(limits.min())
        for step in range(max_len + 1):
            bsz = live.numel()
            if reorder is not None:
                if self.incremental:
                    self.model.decoder.reorder_incremental_state_scripting(state, reorder)
                encoder_out = self.model.encoder.reorder_encoder_out(encoder_out, reorder)
            lprobs = self.log_probs(tokens[:, : step + 1], encoder_out, state)
            row_limits = limits.repeat_interleave(k) if step >= first_limit else None
            if self.plain_beam_search:
                lprobs = self.apply_rules(lprobs, step, row_limits, nan_to_inf=False)
                cand_scores, cand_indices, cand_beams = self.candidates(step, lprobs.view(bsz, k, vocabulary), scores)
            else:
                lprobs = self.apply_rules(lprobs, step, row_limits)
                if self.should_set_src_lengths:
                    self.search.set_src_lengths(src_lengths)
                cand_scores, cand_indices, cand_beams = self.search.step(
                    step,
                    lprobs.view(bsz, -1, vocabulary),
                    scores.view(bsz, k, -1)[:, :, :step],
                    tokens[:, : step + 1],
                    ids,
                )
            candidates = cand_scores.size(1)
            cand_rows = cand_beams + (torch.arange(bsz, device=device) * k)[:, None]
            ends = cand_indices.eq(self.eos) & cand_scores.ne(-math.inf)
            ends[:, :k] &= ~ignored
            # Every </s> among the candidates may enter the finished set.
            entered = finished.merge(ends, cand_scores, gnmt_length_penalty(step + 1, self.gnmt_alpha), step)

            # The next live hypotheses: the best `beam` candidates that do not end (fairseq's active_hypos).
            ends[:, :k] |= ignored
            order = ends.long() * candidates + torch.arange(candidates, device=device)
            position, active = torch.topk(order, k=k, dim=1, largest=False)
            ignored = position >= candidates
            active_rows = cand_rows.gather(1, active).view(-1)
            active_scores = cand_scores.gather(1, active)
            active_scores = active_scores.masked_fill(ignored, -math.inf)
            done = finished.worst().double() >= active_scores.amax(1).double() / bound_divisor
            done |= limits <= step
            any_entered, any_done = torch.stack([entered, done.any()]).tolist()
            if any_entered:
                finished.write(tokens, scores, cand_rows, cand_scores, step, self.eos)
            tokens = tokens.index_select(0, active_rows)
            tokens[:, step + 1] = cand_indices.gather(1, active).view(-1)
            scores = scores.index_select(0, active_rows)
            scores[:, step] = active_scores.view(-1)
            reorder = active_rows
            if any_done:
                for row, hypotheses in finished.collect(done):
                    outputs[int(live[row])] = [self.hypothesis(*h) for h in hypotheses]
                if bool(done.all()):
                    break
                kept = (~done).nonzero().squeeze(1)
                kept_rows = (kept[:, None] * k + torch.arange(k, device=device)).view(-1)
                tokens, scores, reorder = tokens[kept_rows], scores[kept_rows], reorder[kept_rows]
                ignored, limits, live, ids, src_lengths = (t[kept] for t in (ignored, limits, live, ids, src_lengths))
                bound_divisor = bound_divisor[kept]
                finished.keep(kept)
                self.search.prune_sentences(kept)
                first_limit = int(limits.min())
        return [hypotheses or [] for hypotheses in outputs]


class FinishedHypotheses:
    """Each live sentence's finished hypotheses: `beam` slots (and a spare one that absorbs the writes of
    candidates that do not enter), their scores, lengths, tokens and cumulative log-probabilities."""

    def __init__(self, sentences: int, k: int, max_len: int, pad: int, device):
        self.k, self.pad = k, pad
        self.scores = torch.full((sentences, k + 1), -math.inf, device=device)
        self.lengths = torch.zeros(sentences, k + 1, dtype=torch.long, device=device)
        self.tokens = torch.full((sentences, k + 1, max_len + 1), pad, dtype=torch.long, device=device)
        self.cumulative = torch.zeros(sentences, k + 1, max_len + 1, device=device)
        self.count = torch.zeros(sentences, dtype=torch.long, device=device)
        self.sources: Optional[Tensor] = None  # where each slot's hypothesis comes from (merge)

    def merge(self, ends: Tensor, cand_scores: Tensor, penalty: float, step: int) -> Tensor:
        """§6.1's rule: the `beam` best of the finished set and of the candidates ending now, best first.
        Returns whether any entered."""
        new = torch.where(ends, cand_scores / penalty, -math.inf)
        best, self.sources = torch.cat([self.scores[:, : self.k], new], dim=1).topk(self.k, dim=1)
        self.scores[:, : self.k] = best
        lengths = torch.cat([self.lengths[:, : self.k], torch.full_like(ends, step + 1, dtype=torch.long)], 1)
        self.lengths[:, : self.k] = lengths.gather(1, self.sources)
        self.count = best.ne(-math.inf).sum(1)
        return (self.sources >= self.k).any()

    def worst(self) -> Tensor:
        """The lowest score of a full finished set, −∞ where fewer than `beam` have finished."""
        return self.scores[:, self.k - 1]

    def write(self, tokens: Tensor, scores: Tensor, cand_rows: Tensor, cand_scores: Tensor, step: int, eos: int):
        """Store the tokens (those so far, then </s>) and cumulative log-probabilities of the hypotheses that
        entered at this step (merge's)."""
        rows = cand_rows.reshape(-1)
        new_tokens = tokens.index_select(0, rows)[:, 1 : step + 2].view(*cand_rows.shape, step + 1)
        new_tokens[:, :, step] = eos
        new_cumulative = scores.index_select(0, rows)[:, : step + 1].view(*cand_rows.shape, step + 1)
        new_cumulative[:, :, step] = cand_scores
        # Each slot gathered from the old set or the new candidates.
        width = self.tokens.size(2)
        new_tokens = nn.functional.pad(new_tokens, (0, width - step - 1), value=self.pad)
        new_cumulative = nn.functional.pad(new_cumulative, (0, width - step - 1))
        index = self.sources[:, :, None].expand(-1, -1, width)
        self.tokens[:, : self.k] = torch.cat([self.tokens[:, : self.k], new_tokens], 1).gather(1, index)
        self.cumulative[:, : self.k] = torch.cat([self.cumulative[:, : self.k], new_cumulative], 1).gather(1, index)

    def keep(self, kept: Tensor):
        """Only the sentences `kept` stay live."""
        self.scores, self.lengths, self.tokens, self.cumulative, self.count = (
            t[kept] for t in (self.scores, self.lengths, self.tokens, self.cumulative, self.count)
        )

    def collect(self, done: Tensor):
        """(row, [(tokens, score, positional scores), ...] best first) for each sentence `done`."""
        rows = done.nonzero().squeeze(1)
        scores, lengths = self.scores[rows], self.lengths[rows]
        cumulative = self.cumulative[rows]
        positional = cumulative.clone()
        positional[:, :, 1:] = cumulative[:, :, 1:] - cumulative[:, :, :-1]
        tokens = self.tokens[rows]
        counts = scores[:, : self.k].ne(-math.inf).sum(1).tolist()
        all_lengths = lengths.tolist()
        for index, row in enumerate(rows.tolist()):
            n = counts[index]
            # fairseq sorts its finished list by score, best first, with torch.sort.
            order = torch.sort(scores[index, :n], descending=True)[1].tolist()
            yield (
                row,
                [
                    (
                        tokens[index, j, : all_lengths[index][j]],
                        scores[index, j],
                        positional[index, j, : all_lengths[index][j]],
                    )
                    for j in order
                ],
            )
