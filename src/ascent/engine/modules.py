"""Root modules that FSDP2 wraps: a transformers model plus the head computation.

Why a wrapper: with FSDP2 the output projection's weight is only gathered while its owning
module runs forward. Computing log-probs from the final hidden states in chunks (never the
whole micro-batch's logits) therefore has to happen *inside* a module's forward that owns that
weight; making this wrapper the root FSDP unit does exactly that, for tied and untied heads.
"""

from typing import Any

import torch
from torch import Tensor, nn

from ascent.algos.logprobs_hidden import token_log_probs_and_entropy_from_hidden
from ascent.algos.top_log_probs import top_log_probs_from_hidden
from ascent.engine.vocab_parallel import vocab_parallel_log_probs_and_entropy, vocabulary_split


def unwrap(model: nn.Module) -> nn.Module:
    """The transformers model inside a peft wrapper (or the model itself)."""
    get_base_model = getattr(model, "get_base_model", None)
    return get_base_model() if callable(get_base_model) else model


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated transformer blocks (one FSDP unit each), found by the model's own
    ``_no_split_modules`` so any transformers architecture works."""
    names = set(getattr(unwrap(model), "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"cannot find the decoder layers of {type(unwrap(model)).__name__}")
    return layers


def logit_softcap(model: nn.Module) -> float | None:
    """c of a model that soft-caps its logits to c tanh(l / c) (Gemma's
    ``final_logit_softcapping``), or None."""
    return getattr(model.config.get_text_config(), "final_logit_softcapping", None)


def embedded(model: nn.Module, extra_inputs: Any, input_ids: Tensor, inputs: dict) -> dict:
    """The forward's token inputs: the ids themselves, or for a model family with its own
    inputs what its ``extra_inputs.embed`` makes of them (a VLM: embeddings with image
    features on the image tokens)."""
    if extra_inputs is None:
        return {"input_ids": input_ids, **inputs}
    return extra_inputs.embed(model, input_ids, inputs)


def head_weight(head: nn.Module) -> tuple[Tensor, Tensor | None]:
    """The output head's weight (V, H) and bias as its forward applies them. With LoRA
    adapters on the head (peft's ``lora.Linear``: ``base_layer``, ``lora_A``, ``lora_B``)
    that is W + (alpha / r) B A summed over the active adapters: the chunked scorers read
    the weight, not the module's forward, so the adapters train only through this."""
    base = getattr(head, "base_layer", None)
    if base is None or not hasattr(head, "lora_A"):
        return head.weight, head.bias
    if head.merged or head.disable_adapters:  # merged into W, or off (the reference policy)
        return base.weight, base.bias
    weight = base.weight
    for adapter in head.active_adapters:
        if adapter in head.lora_A:
            delta = head.lora_B[adapter].weight @ head.lora_A[adapter].weight  # (V, r) (r, H)
            weight = weight + head.scaling[adapter] * delta
    return weight, base.bias


def score_targets(
    lm: nn.Module,
    hidden: Tensor,
    targets: Tensor,
    temperature: float,
    chunk_tokens: int,
    compute_entropy: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """log p(target) and the entropy (M,) float32 of the final hidden states (M, H) under
    ``lm``'s output head, in chunks of ``chunk_tokens`` (logits / temperature, soft-capped
    first where the model caps them); a head split by vocabulary over tensor ranks is
    scored split. Called inside the forward of the module owning the head (FSDP2 gathers
    its weight there)."""
    weight, bias = head_weight(lm.get_output_embeddings())
    score = (  # tensor parallelism: each rank holds rows of the vocabulary
        token_log_probs_and_entropy_from_hidden
        if vocabulary_split(weight) is None
        else vocab_parallel_log_probs_and_entropy
    )
    return score(
        hidden,
        weight,
        targets,
        bias=bias,
        temperature=temperature,
        chunk_tokens=chunk_tokens,
        compute_entropy=compute_entropy,
        softcap=logit_softcap(lm),
    )


class PolicyModule(nn.Module):
    """Per-token log-probs and entropy of target tokens, from a causal LM.

    forward(input_ids (1, N) or (B, L), position_ids like it, query_index (M,) into the
    flattened positions, targets (M,)) -> log_probs (M,), entropy (M,) (None when
    compute_entropy is False), float32, with logits / temperature exactly as the rollout
    samples them (soft-capped first where the model's config caps them:
    ``final_logit_softcapping``); a head split by vocabulary over tensor ranks is scored
    split (``ascent.engine.vocab_parallel``). A model family's own inputs (a vision-language
    model's ``pixel_values``, ``image_grid_thw``, and M-RoPE planes as ``position_ids``)
    pass through ``model_inputs``;
    ``extra_inputs`` is what builds them for this model (``__call__``, outside) and turns
    them into the forward's embeddings (``embed``, inside: it runs the vision tower; see
    ``ascent.vision.forward``), or None for a text model.
    """

    def __init__(
        self, model: nn.Module, chunk_tokens: int = 1024, extra_inputs: Any = None
    ) -> None:
        super().__init__()
        self.model = model
        self.chunk_tokens = chunk_tokens
        self.extra_inputs = extra_inputs

    def forward(
        self,
        input_ids: Tensor,
        position_ids: Tensor,
        query_index: Tensor,
        targets: Tensor,
        temperature: float = 1.0,
        attention_mask: Tensor | None = None,
        compute_entropy: bool = True,
        **model_inputs: Tensor,
    ) -> tuple[Tensor, Tensor | None]:
        lm = unwrap(self.model)
        hidden = self.query_hidden(
            input_ids, position_ids, query_index, attention_mask, model_inputs
        )
        log_probs, entropy = score_targets(
            lm, hidden, targets, temperature, self.chunk_tokens, compute_entropy
        )
        # Fresh tensors, not views: FSDP2 warns that in-place ops on a view output would
        # bypass its backward hooks.
        return log_probs.clone(), None if entropy is None else entropy.clone()

    def query_hidden(
        self,
        input_ids: Tensor,
        position_ids: Tensor,
        query_index: Tensor,
        attention_mask: Tensor | None,
        model_inputs: dict[str, Tensor],
    ) -> Tensor:
        """The final hidden states (M, H) at the query positions. Called inside ``forward``
        (FSDP2 gathers the root's weights around ``forward`` only)."""
        lm = unwrap(self.model)
        hidden = lm.base_model(
            position_ids=position_ids,
            attention_mask=attention_mask,
            use_cache=False,
            **embedded(lm, self.extra_inputs, input_ids, model_inputs),
        ).last_hidden_state
        return hidden.flatten(0, 1).index_select(0, query_index)


class TeacherModule(PolicyModule):
    """A frozen causal LM's view of another policy's tokens (a distillation teacher).

    forward(input_ids, position_ids, query_index, targets (M,), temperature, ...) ->
    log_probs (M,), top_ids (M, top_k), top_log_probs (M, top_k): log p(target) and the
    ``top_k`` most likely next tokens (ids below ``vocab_limit``) at each query, float32,
    no gradient (``ascent.algos.top_log_probs``).
    """

    def __init__(
        self,
        model: nn.Module,
        top_k: int,
        vocab_limit: int | None = None,
        chunk_tokens: int = 1024,
        extra_inputs: Any = None,
    ) -> None:
        super().__init__(model, chunk_tokens=chunk_tokens, extra_inputs=extra_inputs)
        self.top_k, self.vocab_limit = top_k, vocab_limit

    @torch.no_grad()
    def forward(  # type: ignore[override]
        self,
        input_ids: Tensor,
        position_ids: Tensor,
        query_index: Tensor,
        targets: Tensor,
        temperature: float = 1.0,
        attention_mask: Tensor | None = None,
        **model_inputs: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:
        lm = unwrap(self.model)
        hidden = self.query_hidden(
            input_ids, position_ids, query_index, attention_mask, model_inputs
        )
        weight, bias = head_weight(lm.get_output_embeddings())
        return top_log_probs_from_hidden(
            hidden,
            weight,
            targets,
            self.top_k,
            bias=bias,
            temperature=temperature,
            chunk_tokens=self.chunk_tokens,
            softcap=logit_softcap(lm),
            vocab_limit=self.vocab_limit,
        )


class ValueModule(nn.Module):
    """Per-position values of a token-classification model with one output (the critic).

    forward(input_ids, position_ids, query_index) -> values (M,) float32; ``model_inputs``
    and ``extra_inputs`` as for ``PolicyModule``.
    """

    def __init__(self, model: nn.Module, extra_inputs: Any = None) -> None:
        super().__init__()
        self.model = model
        self.extra_inputs = extra_inputs

    def forward(
        self,
        input_ids: Tensor,
        position_ids: Tensor,
        query_index: Tensor,
        attention_mask: Tensor | None = None,
        **model_inputs: Tensor,
    ) -> Tensor:
        scores = self.model(
            position_ids=position_ids,
            attention_mask=attention_mask,
            use_cache=False,
            **embedded(unwrap(self.model), self.extra_inputs, input_ids, model_inputs),
        ).logits  # (..., 1)
        values = scores.flatten(0, -2).index_select(0, query_index).squeeze(-1)
        return values.to(torch.float32).clone()  # not a view: see PolicyModule.forward


class SequenceScoreModule(nn.Module):
    """One score per sequence from a sequence-classification model with one label (a
    reward model): the model's own pooling (the last non-padding token for decoder models,
    the first token for encoders), so the score equals what transformers gives for the same
    ids.

    forward(input_ids (B, L) right-padded, attention_mask (B, L)) -> scores (B,) float32.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        logits = self.model(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False
        ).logits  # (B, 1)
        return logits[:, 0].to(torch.float32).clone()  # not a view: see PolicyModule.forward
