"""Prefill and decode passes of a model of a native family against a paged KV cache.

The model's family (``ascent.models.families``) says how to read it: the layers, their
attention and feed-forward halves, norms, embedding, head and rotary positions, and what a
prompt brings beyond its ids. This runner supplies what every family shares: the passes,
attention over the paged cache (``ascent.rollout.paged_attention``: causal, within a
layer's sliding window where it has one, at the layer's scale), the output head in slices,
and the route records of layers that route. The pieces read the model's own parameter
tensors, so a model whose parameters alias the trainer's generates with the trainer's
current weights without a copy.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ascent.models.families import native_family
from ascent.models.families.attention import AttentionKernel
from ascent.models.families.blocks import linears
from ascent.models.families.spec import PreparedPrompt
from ascent.rollout import packed_linears, paged_attention
from ascent.rollout.kv_cache import PagedKVCache
from ascent.rollout.packed_linears import PackedLinears
from ascent.rollout.paged_attention import PagedBatch

# (layer index, q, k, v, kernel) -> the attention output of that layer (B, heads, T, Dv)
LayerAttend = Callable[[int, Tensor, Tensor, Tensor, AttentionKernel], Tensor]
RouteSink = Callable[[int, Tensor], None]  # (sparse layer, experts (tokens, k)) -> None
HEAD_ROWS = 1024  # vocabulary rows per slice of the output head on a CPU (see logits)


class DecoderRunner:
    """Runs ``model`` (a transformers model of a native family) step by step; ``model_dir``
    is its checkpoint, for what its prompts need from it (a vision-language model's image
    processor)."""

    def __init__(self, model: nn.Module, model_dir: str | None = None) -> None:
        self.model = model
        self.family = native_family(model)
        try:
            self.decoder = self.family.read(model)
        except ValueError as error:
            raise ValueError(f"{type(model).__name__}: {error}") from None
        self.prompts = self.family.prompt_inputs(model, model_dir)
        self.layers = self.decoder.layers
        self.cache_shape = self.decoder.cache
        self.head = self.decoder.head
        # layer index -> its number among the layers that route (where its routes are kept)
        sparse = [index for index, layer in enumerate(self.layers) if layer.feed_forward.top_k]
        self.sparse_index = {index: number for number, index in enumerate(sparse)}
        top_k = max((self.layers[index].feed_forward.top_k for index in sparse), default=0)
        # What each cached position records: (sparse layers, experts per token), or None.
        self.route_shape = (len(sparse), top_k) if sparse else None
        # A captured step has fixed shapes: no per-row rotary shift, no per-expert counts.
        self.graphable = self.family.cuda_graphs and not sparse
        param = next(model.parameters())
        # On a CPU in float32, the passes' products run on prepacked weights (2-3x faster).
        self.packed = None
        if packed_linears.available(param.device, param.dtype):
            self.packed = PackedLinears()
        self.linear = self.packed or F.linear

    def weights_changed(self) -> None:
        """The model's weights were replaced or are about to be freed: packed copies of
        the old ones must not be used (they are built again from the new ones)."""
        if self.packed is not None:
            self.packed.clear()

    def logits(self, hidden: Tensor) -> Tensor:
        """(N, V) float32 logits of hidden states (N, hidden), soft-capped where the family
        caps them. On a CPU the head runs in slices of HEAD_ROWS vocabulary rows: the same
        dot products (bitwise equal on the CPUs tried), measured 20-25% faster than one
        (N x hidden) @ (hidden x 49k) matmul at N = 16-64 with torch 2.13's CPU kernels
        (where the products are not packed: packed, the head is one product)."""
        x = self.decoder.final_norm(hidden)
        vocab = self.head.shape[0]
        if self.packed is not None or x.device.type != "cpu" or vocab <= HEAD_ROWS:
            logits = self.linear(x, self.head).float()
        else:
            logits = x.new_empty(x.shape[0], vocab)
            for start in range(0, vocab, HEAD_ROWS):
                rows = self.head[start : start + HEAD_ROWS]
                torch.mm(x, rows.t(), out=logits[:, start : start + HEAD_ROWS])
            logits = logits.float()
        cap = self.decoder.final_softcap
        return logits if cap is None else torch.tanh(logits / cap) * cap

    def _layers(
        self, hidden: Tensor, rope: Tensor, attend: LayerAttend, remember: RouteSink | None
    ) -> Tensor:
        """Every layer over ``hidden`` (B, T, hidden) at rotary positions ``rope``;
        ``attend(index, q, k, v, kernel)`` stores the new keys and values in layer
        ``index``'s pool and returns the attention output; ``remember(sparse_layer,
        experts (B T, k))`` keeps a mixture of experts' choices."""
        rotations = self.decoder.rotary(hidden, rope)
        with linears(self.linear):
            for index, layer in enumerate(self.layers):
                sink = None
                if remember is not None and index in self.sparse_index:
                    sink = partial(remember, self.sparse_index[index])
                hidden = layer(hidden, rotations, partial(attend, index), sink)
        return hidden

    @torch.no_grad()
    def prefill(self, cache: PagedKVCache, chunk: "PrefillChunk") -> Tensor:
        """New tokens of P rows, right-padded (P, T), each row starting at position
        ``chunk.starts`` after keys already in its blocks -> logits of each row's last new
        token (P, V). Their keys and values are written to the cache at ``chunk.slots``.

        Rows without cached positions attend among their own new tokens (SDPA, causal: a
        valid position never sees the padding after it); otherwise over their blocks.
        """
        ids = chunk.ids
        positions = chunk.starts[:, None] + torch.arange(ids.shape[1], device=ids.device)
        hidden = self.decoder.embed(ids)
        hidden, rope = self.prompts.embed(hidden, positions, chunk.prompts, chunk.lengths)
        batch = PagedBatch.of(chunk.tables, positions, chunk.slots, cache.block_size)

        def attend(index: int, q: Tensor, k: Tensor, v: Tensor, kernel: AttentionKernel) -> Tensor:
            new_k = k.transpose(1, 2)[chunk.valid]  # (N, kv_heads, Dk)
            new_v = v.transpose(1, 2)[chunk.valid]
            paged_attention.write(cache.k[index], cache.v[index], batch, new_k, new_v)
            if chunk.fresh:
                return attend_fresh(q, k, v, kernel)
            return paged_attention.attend(
                q, cache.k[index], cache.v[index], batch, scale=kernel.scale, window=kernel.window
            )

        def remember(sparse_layer: int, experts: Tensor) -> None:
            valid = experts.view(*ids.shape, -1)[chunk.valid]  # (N, k), as chunk.slots
            cache.records.write(sparse_layer, chunk.slots, valid)

        hidden = self._layers(hidden, rope, attend, remember)
        last = hidden[torch.arange(ids.shape[0], device=ids.device), chunk.lengths - 1]
        return self.logits(last)

    @torch.no_grad()
    def teacher_forced(self, ids: Tensor) -> Tensor:
        """Final-layer hidden states (T, hidden) of one sequence ``ids`` (T,) computed from
        scratch: causal attention over its own tokens, nothing read from or written to a
        cache (scoring a given text, ``ascent.rollout.scoring``). Pass them to ``logits``."""
        ids = ids[None]
        positions = torch.arange(ids.shape[1], device=ids.device)[None]
        hidden = self.decoder.embed(ids)

        def attend(index: int, q: Tensor, k: Tensor, v: Tensor, kernel: AttentionKernel) -> Tensor:
            return attend_fresh(q, k, v, kernel)

        return self._layers(hidden, positions, attend, None)[0]

    @torch.no_grad()
    def decode(
        self,
        cache: PagedKVCache,
        tokens: Tensor,
        positions: Tensor,
        tables: Tensor,
        slots: Tensor,
        rope_shift: Tensor | None = None,
    ) -> Tensor:
        """One token for each of B sequences -> logits (B, V). tokens, positions and slots
        (the flat cache row each new key goes to) are (B,); tables (B, nb) list the blocks
        that hold positions 0..positions[b]. ``rope_shift`` (B,): how far each token's
        rotary position is from its index (``PreparedPrompt.rope_shift``; None: 0)."""
        hidden = self.decoder.embed(tokens[:, None])
        rope = positions if rope_shift is None else positions + rope_shift
        batch = PagedBatch.of(tables, positions[:, None], slots, cache.block_size)

        def attend(index: int, q: Tensor, k: Tensor, v: Tensor, kernel: AttentionKernel) -> Tensor:
            paged_attention.write(cache.k[index], cache.v[index], batch, k[:, :, 0], v[:, :, 0])
            return paged_attention.attend(
                q, cache.k[index], cache.v[index], batch, scale=kernel.scale, window=kernel.window
            )

        def remember(sparse_layer: int, experts: Tensor) -> None:
            cache.records.write(sparse_layer, slots, experts)

        hidden = self._layers(hidden, rope[:, None], attend, remember)
        return self.logits(hidden[:, 0])


def attend_fresh(q: Tensor, k: Tensor, v: Tensor, kernel: AttentionKernel) -> Tensor:
    """Causal attention of rows that start at position 0 among their own T tokens (right
    padding never seen by a valid position), within the layer's window where it has one."""
    if kernel.window is None:
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=kernel.scale, enable_gqa=True
        )
    index = torch.arange(q.shape[2], device=q.device)
    mask = paged_attention.visible(index, index, kernel.window)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=kernel.scale, enable_gqa=True
    )


@dataclass(frozen=True)
class PrefillChunk:
    """The new tokens of P rows for one prefill pass.

    ids (P, T) right-padded with lengths (P,); starts (P,): positions already cached per row;
    valid (P, T): the real tokens; slots (N,): the flat cache row of each valid token, in
    row-major order; tables (P, nb): each row's blocks after the write; fresh: no row has
    cached positions (attention needs no blocks); prompts: per row, what its family
    prepared from its inputs beyond the ids (``PreparedPrompt``).
    """

    ids: Tensor
    lengths: Tensor
    starts: Tensor
    valid: Tensor
    slots: Tensor
    tables: Tensor
    fresh: bool
    prompts: Sequence[PreparedPrompt] = ()
