"""The model `vaswani_transformer` (§3) and its architectures (Table 3: base, big; §6.3: parsing)."""

import dataclasses
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)
from fairseq.utils import safe_getattr, safe_hasattr
from torch import Tensor, nn

from vaswani_plugin import paper
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.models.attention import attention_dtype
from vaswani_plugin.models.beam_cache import BeamCache
from vaswani_plugin.models.layers import (
    DecoderLayer,
    EncoderLayer,
    TokenEmbedding,
    causal_attention_mask,
    padding_attention_mask,
    position_indices,
)

BASE = paper.model_options("base")  # Table 3's base model: the defaults below


@dataclass
class VaswaniTransformerConfig(FairseqDataclass):
    """Defaults are the base model of Table 3. Option names are fairseq's `transformer` ones where it has one."""

    encoder_embed_dim: int = field(default=BASE["encoder_embed_dim"], metadata={"help": "encoder d_model (§3.1)"})
    encoder_ffn_embed_dim: int = field(
        default=BASE["encoder_ffn_embed_dim"], metadata={"help": "encoder d_ff, FFN inner size (§3.3)"}
    )
    encoder_layers: int = field(default=BASE["encoder_layers"], metadata={"help": "encoder N, number of layers (§3.1)"})
    encoder_attention_heads: int = field(
        default=BASE["encoder_attention_heads"], metadata={"help": "encoder h, attention heads (§3.2.2)"}
    )
    encoder_normalize_before: bool = field(
        default=False, metadata={"help": "pre-norm x + Sublayer(LayerNorm(x)) instead of the paper's post-norm"}
    )
    encoder_learned_pos: bool = field(
        default=False, metadata={"help": "learned positional embeddings instead of sinusoids (Table 3 row E)"}
    )
    decoder_embed_dim: int = field(default=BASE["decoder_embed_dim"], metadata={"help": "decoder d_model (§3.1)"})
    decoder_ffn_embed_dim: int = field(
        default=BASE["decoder_ffn_embed_dim"], metadata={"help": "decoder d_ff, FFN inner size (§3.3)"}
    )
    decoder_layers: int = field(default=BASE["decoder_layers"], metadata={"help": "decoder N, number of layers (§3.1)"})
    decoder_attention_heads: int = field(
        default=BASE["decoder_attention_heads"], metadata={"help": "decoder h, attention heads (§3.2.2)"}
    )
    decoder_normalize_before: bool = field(
        default=False, metadata={"help": "pre-norm x + Sublayer(LayerNorm(x)) instead of the paper's post-norm"}
    )
    decoder_learned_pos: bool = field(
        default=False, metadata={"help": "learned positional embeddings instead of sinusoids (Table 3 row E)"}
    )
    attention_key_dim: Optional[int] = field(
        default=None, metadata={"help": "d_k, query/key size per head (§3.2.2, Table 3 rows A, B); default d_model / h"}
    )
    attention_value_dim: Optional[int] = field(
        default=None, metadata={"help": "d_v, value size per head (§3.2.2, Table 3 row A); default d_model / h"}
    )
    dropout: float = field(
        default=BASE["dropout"], metadata={"help": "P_drop on every sub-layer output and on embedding + PE sums (§5.4)"}
    )
    attention_dropout: float = field(default=0.0, metadata={"help": "dropout on attention probabilities"})
    activation_dropout: float = field(default=0.0, metadata={"help": "dropout after the FFN's ReLU"})
    share_all_embeddings: bool = field(
        default=False,
        metadata={
            "help": "one matrix for source and target embeddings and the pre-softmax "
            "projection (§3.4); needs a joined dictionary"
        },
    )
    share_decoder_input_output_embed: bool = field(
        default=False, metadata={"help": "share the target embedding and the pre-softmax projection (§3.4)"}
    )
    max_source_positions: int = field(
        default=1024, metadata={"help": "longest source accepted (sinusoids themselves have no limit)"}
    )
    max_target_positions: int = field(
        default=1024, metadata={"help": "longest target accepted (sinusoids themselves have no limit)"}
    )


def head_dims(cfg, side: str):
    """(d_k, d_v) of one stack: the configured sizes, or d_model / h (§3.2.2) when left at default."""
    dim, heads = getattr(cfg, f"{side}_embed_dim"), getattr(cfg, f"{side}_attention_heads")
    key_dim, value_dim = cfg.attention_key_dim, cfg.attention_value_dim
    if (key_dim is None or value_dim is None) and dim % heads != 0:
        raise VaswaniConfigError(
            f"--{side}-embed-dim {dim} is not divisible by --{side}-attention-heads {heads}; change one, "
            "or set --attention-key-dim and --attention-value-dim (d_k, d_v) explicitly"
        )
    return key_dim or dim // heads, value_dim or dim // heads


def build_embedding(dictionary, dim: int) -> nn.Embedding:
    """N(0, d_model^-1/2), so that the embedding times √d_model (§3.4) has unit scale; padding row zero."""
    embedding = nn.Embedding(len(dictionary), dim, padding_idx=dictionary.pad())
    nn.init.normal_(embedding.weight, mean=0.0, std=dim**-0.5)
    nn.init.zeros_(embedding.weight[dictionary.pad()])
    return embedding


@register_model("vaswani_transformer", dataclass=VaswaniTransformerConfig)
class VaswaniTransformerModel(FairseqEncoderDecoderModel):
    """The Transformer of "Attention Is All You Need" (§3)."""

    # fairseq's SequenceGeneratorWithAlignment (--print-alignment) then takes the attention from one full pass
    # over the finished hypotheses (the same values, tests/test_beam_cache.py) instead of every decoding step.
    full_context_alignment = True

    def __init__(self, cfg, encoder, decoder):
        super().__init__(encoder, decoder)
        self.cfg = cfg  # the model's sizes, as the exporters and tools read them

    @classmethod
    def build_model(cls, cfg, task):
        source_dict, target_dict = task.source_dictionary, task.target_dictionary
        if cfg.share_all_embeddings:
            if source_dict != target_dict:
                raise VaswaniConfigError(
                    "--share-all-embeddings needs one dictionary for source and target; binarize with "
                    "fairseq-preprocess --joined-dictionary (or drop --share-all-embeddings)"
                )
            if cfg.encoder_embed_dim != cfg.decoder_embed_dim:
                raise VaswaniConfigError(
                    "--share-all-embeddings needs --encoder-embed-dim == --decoder-embed-dim "
                    f"(got {cfg.encoder_embed_dim} and {cfg.decoder_embed_dim})"
                )
            encoder_embedding = decoder_embedding = build_embedding(source_dict, cfg.encoder_embed_dim)
        else:
            encoder_embedding = build_embedding(source_dict, cfg.encoder_embed_dim)
            decoder_embedding = build_embedding(target_dict, cfg.decoder_embed_dim)
        encoder = VaswaniEncoder(cfg, source_dict, encoder_embedding)
        decoder = VaswaniDecoder(
            cfg,
            target_dict,
            decoder_embedding,
            share_output=cfg.share_all_embeddings or cfg.share_decoder_input_output_embed,
            right_padded=not getattr(getattr(task, "cfg", None), "left_pad_target", False),
        )
        return cls(cfg, encoder, decoder)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **kwargs):
        """§3.1: encoder, then decoder; the decoder's output as fairseq's models return it."""
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, **kwargs)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, **kwargs)

    def set_beam_size(self, beam_size: int):
        """fairseq's SequenceGenerator announces its beam size here; the decoder's beam cache uses it."""
        self.decoder.set_beam_size(beam_size)


def encoder_rows(encoder_out: Dict[str, List[Tensor]]) -> Tuple[Tensor, Tensor]:
    """The encoder output and its padding mask in the row order reorder_encoder_out noted, if any."""
    memory, padding = encoder_out["memory"][0], encoder_out["memory_padding_mask"][0]
    if "order" in encoder_out:
        order = encoder_out["order"][0]
        memory, padding = memory.index_select(0, order), padding.index_select(0, order)
    return memory, padding


class VaswaniEncoder(FairseqEncoder):
    """§3.1: a stack of N identical layers over the embedded source."""

    def __init__(self, cfg, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.max_source_positions = cfg.max_source_positions
        dim = cfg.encoder_embed_dim
        key_dim, value_dim = head_dims(cfg, "encoder")
        self.embedding = TokenEmbedding(
            embed_tokens,
            dropout=cfg.dropout,
            learned_positions=cfg.max_source_positions if cfg.encoder_learned_pos else 0,
        )
        self.layers = nn.ModuleList(
            EncoderLayer(
                dim,
                ffn_dim=cfg.encoder_ffn_embed_dim,
                heads=cfg.encoder_attention_heads,
                key_dim=key_dim,
                value_dim=value_dim,
                dropout=cfg.dropout,
                attention_dropout=cfg.attention_dropout,
                activation_dropout=cfg.activation_dropout,
                normalize_before=cfg.encoder_normalize_before,
            )
            for _ in range(cfg.encoder_layers)
        )
        # Pre-norm leaves the last residual sum un-normalised; post-norm (the paper) needs no extra norm.
        self.final_norm = nn.LayerNorm(dim) if cfg.encoder_normalize_before else None

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, **kwargs):
        """Returns {"memory": [x (batch, src_len, d_model)], "memory_padding_mask": [(batch, src_len)]}."""
        padding = src_tokens.eq(self.padding_idx)
        x = self.embedding(src_tokens, position_indices(padding), padding.size(1))
        mask = padding_attention_mask(padding, attention_dtype(x) if self.training else None)
        for layer in self.layers:
            x = layer(x, mask)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return {"memory": [x], "memory_padding_mask": [padding]}

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """Rows for new_order, in any order. Beam search calls this every step: while the row count stays, the
        order is only noted ("order", composed with any noted before) and applied where the rows are read
        (encoder_rows), which step-by-step decoding does at its first step only; no copy, no host sync."""
        if "order" in encoder_out:
            new_order = encoder_out["order"][0].index_select(0, new_order)
        rows = {key: tensors for key, tensors in encoder_out.items() if key != "order"}
        if new_order.size(0) == rows["memory"][0].size(0):
            return {**rows, "order": [new_order]}
        return {key: [t.index_select(0, new_order) for t in tensors] for key, tensors in rows.items()}

    def max_positions(self):
        return self.max_source_positions


class VaswaniDecoder(FairseqIncrementalDecoder):
    """§3.1: a stack of N identical layers, each attending to the encoder output; then the softmax (§3.4)."""

    def __init__(self, cfg, dictionary, embed_tokens: nn.Embedding, share_output: bool, right_padded: bool = True):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        # Whether the task's training batches pad targets on the right (fairseq's left_pad_target false): a
        # training forward pass then needs no host sync to choose its self-attention mask (causal_attention_mask).
        self.right_padded = right_padded
        self.max_target_positions = cfg.max_target_positions
        # Announced by fairseq's SequenceGenerator through set_beam_size; None until then.
        self.beam_size: Optional[int] = None
        dim = cfg.decoder_embed_dim
        key_dim, value_dim = head_dims(cfg, "decoder")
        self.embedding = TokenEmbedding(
            embed_tokens,
            dropout=cfg.dropout,
            learned_positions=cfg.max_target_positions if cfg.decoder_learned_pos else 0,
        )
        self.layers = nn.ModuleList(
            DecoderLayer(
                dim,
                memory_dim=cfg.encoder_embed_dim,
                ffn_dim=cfg.decoder_ffn_embed_dim,
                heads=cfg.decoder_attention_heads,
                key_dim=key_dim,
                value_dim=value_dim,
                dropout=cfg.dropout,
                attention_dropout=cfg.attention_dropout,
                activation_dropout=cfg.activation_dropout,
                normalize_before=cfg.decoder_normalize_before,
            )
            for _ in range(cfg.decoder_layers)
        )
        self.final_norm = nn.LayerNorm(dim) if cfg.decoder_normalize_before else None
        # §3.4: the pre-softmax linear transformation, without bias; shares the embedding matrix if asked.
        self.output_projection = nn.Linear(dim, len(dictionary), bias=False)
        if share_output:
            self.output_projection.weight = embed_tokens.weight
        else:
            nn.init.normal_(self.output_projection.weight, mean=0.0, std=dim**-0.5)

    def forward(
        self,
        prev_output_tokens,
        encoder_out=None,
        incremental_state=None,
        features_only=False,
        return_attention: Optional[bool] = None,
        **kwargs,
    ):
        """(logits, extra), or with features_only (features, extra) whose extra also holds "output_weight", §3.4's
        W for the caller to apply (the criterion's chunked output layer and loss), as a view: a data-parallel
        wrapper traces it back to W among the outputs and counts W used (DDP's find_unused_parameters with an
        untied output layer; a bare parameter there is not traced)."""
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state, return_attention)
        if features_only:
            weight = self.output_projection.weight
            return x, dict(extra, output_weight=weight.view_as(weight) if torch.is_grad_enabled() else weight)
        return self.output_layer(x), extra

    def extract_features(
        self,
        prev_output_tokens,
        encoder_out=None,
        incremental_state=None,
        return_attention: Optional[bool] = None,
        **kwargs,
    ):
        """Returns (features, {"attn": [encoder-decoder attention of the last layer, averaged over heads]}).

        The attention is computed for full passes in eval mode (--print-alignment: fairseq aligns with a full
        pass over the finished hypotheses) or when return_attention is set. Training skips it so that every
        attention runs in SDPA's fused kernels; step-by-step decoding (the beam cache) so as not to average it.
        """
        padding = prev_output_tokens.eq(self.padding_idx)
        positions = position_indices(padding)
        tokens = prev_output_tokens
        cache = None
        if incremental_state is not None:
            # Only the newest position is computed; earlier keys/values come from the beam cache.
            tokens, positions = tokens[:, -1:], positions[:, -1:]
            cache, memory, memory_padding = self.beam_cache(incremental_state, encoder_out)
            cache.begin_step(padding)
            self_mask, self_is_causal = None, False
        else:
            memory, memory_padding = encoder_rows(encoder_out)
            self_mask, self_is_causal = causal_attention_mask(padding, self.right_padded if self.training else None)
        if return_attention is None:
            return_attention = not self.training and incremental_state is None

        x = self.embedding(tokens, positions, padding.size(1))
        # The encoder-decoder mask is only needed until the cache holds the encoder's keys/values.
        memory_mask = None
        if cache is None or cache.length == 0:
            memory_mask = padding_attention_mask(memory_padding, attention_dtype(x) if self.training else None)
        attention = None
        for index, layer in enumerate(self.layers):
            is_last = index == len(self.layers) - 1
            x, weights = layer(
                x,
                memory,
                self_mask,
                self_is_causal,
                memory_mask,
                cache=None if cache is None else cache.layers[index],
                need_weights=return_attention and is_last,
            )
            if weights is not None:
                attention = weights
        if cache is not None:
            cache.end_step()
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, {"attn": [attention]}

    def set_beam_size(self, beam_size: int):
        """fairseq's SequenceGenerator announces its beam size here; beam_cache groups each sentence's beams."""
        super().set_beam_size(beam_size)
        self.beam_size = beam_size

    def beam_cache(
        self, incremental_state: Dict[str, BeamCache], encoder_out: Dict[str, List[Tensor]]
    ) -> Tuple[BeamCache, Optional[Tensor], Optional[Tensor]]:
        """This decoding run's BeamCache, started at its first step, and the memory and padding its groups
        attend to (one row per sentence where beam search's layout allows, see BeamCache.start). Later steps
        get None for both: the layers' caches already hold the memory's keys/values."""
        cache = self.get_incremental_state(incremental_state, "beam_cache")
        if cache is not None:
            return cache, None, None
        cache, memory, memory_padding = BeamCache.start(len(self.layers), *encoder_rows(encoder_out), self.beam_size)
        # fairseq types the value Dict[str, Optional[Tensor]] (for TorchScript); its helpers store any object.
        self.set_incremental_state(incremental_state, "beam_cache", cache)
        return cache, memory, memory_padding

    def output_layer(self, features: Tensor) -> Tensor:
        return self.output_projection(features)

    def reorder_incremental_state(self, incremental_state: Dict[str, BeamCache], new_order: Tensor):
        """Beam search moved hypotheses around: row i now continues old row new_order[i]."""
        cache = self.get_incremental_state(incremental_state, "beam_cache")
        if cache is not None:
            cache.reorder(new_order)

    def max_positions(self):
        return self.max_target_positions


def set_sizes(args, **sizes):
    """An architecture's own sizes, where the command line left them unset."""
    for name, value in sizes.items():
        if safe_getattr(args, name, None) is None:
            setattr(args, name, value)


# `--arch vaswani_transformer` is the base model of Table 3 (N = 6, d_model = 512, d_ff = 2048, h = 8,
# d_k = d_v = 64, P_drop = 0.1): the config dataclass's defaults, registered by register_model itself.
def base_defaults(args):
    """Every option still unset takes the base model's value (the other architectures end here)."""
    for config_field in dataclasses.fields(VaswaniTransformerConfig):
        if not safe_hasattr(args, config_field.name):
            setattr(args, config_field.name, config_field.default)


@register_model_architecture("vaswani_transformer", "vaswani_transformer_big")
def vaswani_transformer_big(args):
    """Big model, Table 3 (WMT14 En-De): d_model = 1024, d_ff = 4096, h = 16, P_drop = 0.3."""
    set_sizes(args, **paper.model_options("big"))
    base_defaults(args)


@register_model_architecture("vaswani_transformer", "vaswani_transformer_big_en_fr")
def vaswani_transformer_big_en_fr(args):
    """Big model for WMT14 En-Fr (§6.1): as big, with P_drop = 0.1."""
    set_sizes(args, **paper.model_options("big_en_fr"))
    base_defaults(args)


@register_model_architecture("vaswani_transformer", "vaswani_transformer_parsing")
def vaswani_transformer_parsing(args):
    """Constituency parsing (§6.3): 4 layers, d_model = 1024, other settings as the base model."""
    set_sizes(args, **paper.model_options("parsing"))
    base_defaults(args)
