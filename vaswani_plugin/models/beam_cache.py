"""Keys and values for step-by-step decoding that beam search reorders without copying them.

fairseq's incremental-state protocol reorders every layer's cached keys/values at every step (index_select)
and grows them by concatenation: O(length²) copying per sentence, a large part of §6.1's beam-search time on CPU
(docs/results.md, Speed). Here each position's keys/values are written once, into a preallocated slab with one
group of rows per sentence and one slot per beam. A hypothesis keeps, for each earlier position, the slot of
the beam that wrote it (its ancestry); attention scores every slot of the sentence's group and keeps the
hypothesis's own (§3.2.3: each position attends to all earlier positions of its own output).
"""

from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor

from vaswani_plugin.models.attention import attention

MINIMUM_CAPACITY = 16


class BeamCache:
    """One decoding run, all layers. Rows are hypotheses; groups of `group_size` consecutive rows are the beams
    of one sentence; `slab_group[g]` is where group g's keys/values live in the layers' slabs."""

    def __init__(self, rows: int, group_size: int, layers: int, source_length: int, device: torch.device):
        self.group_size = group_size
        self.slab_groups = rows // group_size
        self.slab_group = torch.arange(self.slab_groups, device=device)
        self.in_order = True  # slab_group == arange(slab_groups): no scatter/gather between rows and slabs
        # Positions allocated: twice the source length holds nearly every translation; longer ones double it.
        capacity = max(MINIMUM_CAPACITY, 2 * source_length)
        self.ancestry = torch.zeros(rows, capacity, dtype=torch.long, device=device)
        self.length = 0  # positions written
        self.layers = [LayerCache(self) for _ in range(layers)]
        # Set by begin_step for the position being computed, read by every layer's attention.
        self.write_groups: Optional[Tensor] = None
        self.write_slots: Optional[Tensor] = None
        self.allowed: Optional[Tensor] = None

    @classmethod
    def start(
        cls, layers: int, memory: Tensor, memory_padding: Tensor, beam_size: Optional[int]
    ) -> Tuple["BeamCache", Tensor, Tensor]:
        """A cache for decoding memory's rows. Where each run of `beam_size` rows holds one encoder output
        (beam search's layout), rows are grouped from the first step and the encoder-decoder keys/values are
        computed once per sentence: returns the cache and the memory and padding its groups attend to.
        Otherwise every row is its own group until beam search's first reorder shows the groups."""
        rows, k = memory.size(0), beam_size or 1
        if k > 1 and rows % k == 0 and all(_repeated_in_runs(t, k) for t in (memory, memory_padding)):
            memory, memory_padding = memory[::k], memory_padding[::k]
        else:
            k = 1
        return cls(rows, k, layers, memory.size(1), memory.device), memory, memory_padding

    @property
    def capacity(self) -> int:
        return self.ancestry.size(1)

    @property
    def rows(self) -> int:
        return self.ancestry.size(0)

    def begin_step(self, padding: Tensor):
        """Before the layers run position `length`. padding: (rows, length + 1), True at padding tokens."""
        if self.length == self.capacity:
            self.ancestry = torch.cat([self.ancestry, torch.zeros_like(self.ancestry)], dim=1)
        k = self.group_size
        own_slot = torch.arange(self.rows, device=padding.device) % k
        self.ancestry[:, self.length] = own_slot
        # Where each row writes this position: its group's slab group, its own slot.
        self.write_groups, self.write_slots = self.slab_group.repeat_interleave(k), own_slot
        # May not attend (`allowed` is the rest): (slab groups, 1, k queries, positions · k slots), the other
        # hypotheses' slots at each position, and padding. Shared by every layer of this step.
        positions = self.length + 1
        slots = self.to_slab(self.ancestry[:, :positions])
        blocked = None
        if k > 1:
            blocked = slots[..., None] != torch.arange(k, device=slots.device)
        if padding.any():
            is_padding = self.to_slab(padding, fill=False)[..., None]
            blocked = is_padding if blocked is None else blocked | is_padding
        self.allowed = None if blocked is None else ~blocked.flatten(2)[:, None]

    def end_step(self):
        self.length += 1

    def to_slab(self, rows: Tensor, fill=0) -> Tensor:
        """(rows, ...) -> (slab groups, group size, ...); slab groups no sentence uses any more hold `fill`."""
        grouped = rows.view(-1, self.group_size, *rows.shape[1:])
        if self.in_order:
            return grouped
        slab = grouped.new_full((self.slab_groups, *grouped.shape[1:]), fill)
        return slab.index_copy_(0, self.slab_group, grouped)

    def from_slab(self, slab: Tensor) -> Tensor:
        """(slab groups, ...) -> the live groups, in row order."""
        return slab if self.in_order else slab.index_select(0, self.slab_group)

    def reorder(self, new_order: Tensor):
        """Row i continues old row new_order[i] (fairseq's reorder_incremental_state)."""
        k = self.group_size
        if new_order.numel() % k == 0:
            parent_groups = (new_order // k).view(-1, k)
            first = parent_groups[:, 0]
            if bool((parent_groups == first[:, None]).all()) and first.unique().numel() == first.numel():
                # Beams moved within their sentence, finished sentences left: only indices change.
                self.slab_group = self.slab_group[first]
                self.ancestry = self.ancestry[new_order]
                self.in_order = self.slab_group.numel() == self.slab_groups and bool(
                    (self.slab_group == torch.arange(self.slab_groups, device=new_order.device)).all()
                )
                if self.slab_group.numel() <= self.slab_groups // 2:
                    self.compact()
                return
        self.regroup(new_order)

    def compact(self):
        """Drop the slab groups of finished sentences (once at most half of them are live)."""
        for layer in self.layers:
            layer.select_groups(self.slab_group)
        self.slab_groups = self.slab_group.numel()
        self.slab_group = torch.arange(self.slab_groups, device=self.slab_group.device)
        self.in_order = True

    def regroup(self, new_order: Tensor):
        """Any other reorder, and beam search's first one if its beam size was not known (each sentence's beams
        all continue its first row): copy each new group's history once, into slot 0 of a fresh slab."""
        run = int((new_order == new_order[0]).long().cumprod(0).sum())
        k = (
            run
            if new_order.numel() % run == 0 and bool((new_order.view(-1, run) == new_order[::run, None]).all())
            else 1
        )
        parents = new_order[::k]
        old_groups = self.slab_group[parents // self.group_size]
        history = self.ancestry[parents, : self.length]
        for layer in self.layers:
            layer.copy_history(old_groups, history, k)
        self.group_size, self.slab_groups = k, parents.numel()
        self.slab_group = torch.arange(self.slab_groups, device=new_order.device)
        self.in_order = True
        self.ancestry = torch.zeros(new_order.numel(), self.capacity, dtype=torch.long, device=new_order.device)


class LayerCache:
    """One decoder layer's slabs: self-attention keys/values (slab groups, heads, capacity, slots, d) and the
    encoder-decoder keys/values, one copy per sentence (slab groups, heads, source length, d)."""

    def __init__(self, cache: BeamCache):
        self.cache = cache
        self.self_k: Optional[Tensor] = None
        self.self_v: Optional[Tensor] = None
        self.memory_k: Optional[Tensor] = None
        self.memory_v: Optional[Tensor] = None
        self.memory_allowed: Optional[Tensor] = None  # False at the source's padding

    def _slab(self, slab: Optional[Tensor], new: Tensor) -> Tensor:
        """The slab for `new` (rows, heads, 1, d): (slab groups, heads, capacity, k slots, d), grown as needed.
        Positions before slots: the first `length` positions of all slots are one contiguous block."""
        cache = self.cache
        shape = (cache.slab_groups, new.size(1), cache.capacity, cache.group_size, new.size(-1))
        if slab is None or slab.size(2) < cache.capacity:
            # Not zeroed (page faults on fresh memory made zeroing costly, docs/results.md): every slot of a live
            # group is written at every position before it is read.
            grown = new.new_empty(shape)
            if slab is not None:
                grown[:, :, : slab.size(2)] = slab
            slab = grown
        return slab

    def attend_self(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Eq. 1 for the newest position over its hypothesis's positions so far. q, k, v: (rows, heads, 1, d);
        returns (rows, 1, heads · d_v)."""
        cache = self.cache
        self.self_k, self.self_v = self._slab(self.self_k, k), self._slab(self.self_v, v)
        for slab, new in ((self.self_k, k), (self.self_v, v)):
            slab[cache.write_groups, :, cache.length, cache.write_slots] = new[:, :, 0]
        positions = cache.length + 1
        keys, values = [slab[:, :, :positions].flatten(2, 3) for slab in (self.self_k, self.self_v)]
        # Every slot of the group is scored; the mask keeps the hypothesis's own.
        return self._attend(q, keys, values, cache.allowed, False)[0]

    def attend_memory(
        self,
        q: Tensor,
        keys_values: Callable[[], Tuple[Tensor, Tensor]],
        memory_mask: Optional[Tensor],
        need_weights: bool,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """Eq. 1 of encoder-decoder attention: the group's queries share their sentence's keys/values, which
        (with memory_mask) are taken at the first step only."""
        cache = self.cache
        if self.memory_k is None:
            # Contiguous once, or every step's matmul would copy them.
            self.memory_k, self.memory_v = [t.contiguous() for t in keys_values()]
            self.memory_allowed = memory_mask
        out, probs = self._attend(q, self.memory_k, self.memory_v, self.memory_allowed, need_weights)
        weights = None
        if need_weights:
            weights = cache.from_slab(probs.mean(dim=1)).reshape(cache.rows, 1, -1)
        return out, weights

    def _attend(
        self, q: Tensor, keys: Tensor, values: Tensor, allowed: Optional[Tensor], need_weights: bool
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """Eq. 1 for each slab group's k queries (q: rows, heads, 1, d_k) against the keys/values the group
        shares (slab groups, heads, keys, d). Returns the output rows (rows, 1, heads · d_v) and, with
        need_weights, the probabilities (slab groups, heads, k, keys)."""
        queries = self.cache.to_slab(q[:, :, 0]).transpose(1, 2)
        out, probs = attention(queries, keys, values, allowed, need_weights=need_weights)
        return self._rows(out), probs

    def _rows(self, out: Tensor) -> Tensor:
        """(slab groups, heads, k, d_v) -> (rows, 1, heads · d_v)."""
        out = self.cache.from_slab(out).transpose(1, 2)
        return out.reshape(self.cache.rows, 1, -1)

    def select_groups(self, groups: Tensor):
        """Keep slab groups `groups`, in that order."""
        self.self_k, self.self_v = _select_rows((self.self_k, self.self_v), groups)
        self.select_memory(groups)

    def select_memory(self, groups: Tensor):
        self.memory_k, self.memory_v, self.memory_allowed = _select_rows(
            (self.memory_k, self.memory_v, self.memory_allowed), groups
        )

    def copy_history(self, old_groups: Tensor, history: Tensor, group_size: int):
        """New group g continues one row: old slab group old_groups[g], slots history[g] at past positions."""
        positions = torch.arange(history.size(1), device=history.device)
        for name in ("self_k", "self_v"):
            slab = getattr(self, name)
            if slab is None:
                continue
            copied = slab[old_groups[:, None], :, positions[None], history]  # (groups, positions, heads, d)
            fresh = slab.new_empty(old_groups.numel(), slab.size(1), slab.size(2), group_size, slab.size(4))
            fresh[:, :, : history.size(1), 0] = copied.transpose(1, 2)
            # The other slots were never written at these positions: masked out, but must not be NaN (0 · NaN).
            fresh[:, :, : history.size(1), 1:] = 0
            setattr(self, name, fresh)
        self.select_memory(old_groups)


def _select_rows(tensors, rows: Tensor) -> List[Optional[Tensor]]:
    return [None if t is None else t.index_select(0, rows) for t in tensors]


def _repeated_in_runs(rows: Tensor, k: int) -> bool:
    """Whether rows 0..k-1, k..2k-1, ... are each k copies of one row."""
    runs = rows.view(-1, k, *rows.shape[1:])
    return torch.equal(runs, runs[:, :1].expand_as(runs))
