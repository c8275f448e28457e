"""Pipeline stages of a transformers causal LM: the first step of pipeline parallelism
(issue 53; the schedule's wiring into the roles comes next).

Stage s of S keeps its consecutive share of the decoder layers and runs them through the
model's own forward, so every family's masks, rotary positions and embedding scale come
from transformers as they do unsplit:

- its decoder stack (``model.base_model``) keeps layers [lo, hi) (``layer_ranges``), with
  ``num_hidden_layers`` and ``layer_types`` sliced to match (a config of its own);
- the first stage embeds the ids; the others take the previous stage's hidden states as
  ``inputs_embeds``;
- the last stage applies the final norm and scores each position's target token with the
  chunked log-prob head (inside its own forward, where FSDP gathers the head's weight);
  the others pass (hidden states, positions, targets) on.

Positions and targets travel with the hidden states, so every stage sees the packed rows'
positions (rows never attend across) and the last stage the tokens to score: (1, T) each,
T fixed for a schedule (``torch.distributed.pipelining`` infers the shapes once). A target
below 0 marks a position with nothing to score; its log-prob is 0.

Layers keep their global index in ``global_name``: checkpoints and the weight refresh use
the unsplit model's names. A head tied to the embedding is refused: the two would live on
different stages.
"""

import copy

import torch
from torch import Tensor, nn

from ascent.algos.logprobs_hidden import token_log_probs_and_entropy_from_hidden
from ascent.engine.modules import logit_softcap, unwrap


def layer_ranges(layers: int, stages: int) -> list[range]:
    """Consecutive shares of ``layers`` over ``stages``, the earlier ones a layer longer
    when they do not divide (the last stage also holds the head)."""
    if stages > layers:
        raise ValueError(f"parallel.pipeline={stages} exceeds the model's {layers} layers")
    size, extra = divmod(layers, stages)
    starts = [s * size + min(s, extra) for s in range(stages + 1)]
    return [range(starts[s], starts[s + 1]) for s in range(stages)]


class PipelineStageModule(nn.Module):
    """Stage ``stage`` of ``stages`` of ``model`` (module docstring). forward(x, positions,
    targets) -> (hidden, positions, targets) on all but the last stage; log-probs (T,) and
    entropy (T,) (float32, 0 where the target is below 0) on the last."""

    def __init__(
        self,
        model: nn.Module,
        stage: int,
        stages: int,
        temperature: float = 1.0,
        chunk_tokens: int = 1024,
    ) -> None:
        super().__init__()
        lm = unwrap(model)
        if getattr(lm.config.get_text_config(), "tie_word_embeddings", False):
            raise ValueError(
                "parallel.pipeline > 1 with a head tied to the embedding: the two would live "
                "on different stages; untie them in the checkpoint, or set parallel.pipeline=1"
            )
        stack = lm.base_model
        kept = layer_ranges(len(stack.layers), stages)[stage]
        config = copy.deepcopy(stack.config)
        config.num_hidden_layers = len(kept)
        if getattr(config, "layer_types", None):
            config.layer_types = [config.layer_types[i] for i in kept]
        stack.config = config
        stack.layers = nn.ModuleList([stack.layers[i] for i in kept])
        self.first, self.last = stage == 0, stage == stages - 1
        if not self.first:
            stack.embed_tokens = None
        if not self.last:
            stack.norm = nn.Identity()
        self.stack, self.kept = stack, kept
        self.head = lm.get_output_embeddings() if self.last else None
        self.softcap = logit_softcap(lm)
        self.temperature, self.chunk_tokens = temperature, chunk_tokens

    def global_name(self, name: str) -> str:
        """A parameter's name under this stage's stack -> its name in the unsplit stack."""
        if name.startswith("layers."):
            local, rest = name[len("layers.") :].split(".", 1)
            return f"layers.{self.kept[int(local)]}.{rest}"
        return name

    def forward(self, x: Tensor, positions: Tensor, targets: Tensor) -> tuple[Tensor, ...]:
        inputs = {"input_ids": x} if self.first else {"inputs_embeds": x}
        hidden = self.stack(position_ids=positions, use_cache=False, **inputs).last_hidden_state
        if not self.last:
            return hidden, positions, targets
        scored = targets[0] >= 0
        # The schedule infers shapes from uninitialised buffers: clamp what is not scored.
        safe = targets[0].clamp(0, self.head.weight.shape[0] - 1)
        log_probs, entropy = token_log_probs_and_entropy_from_hidden(
            hidden[0],
            self.head.weight,
            safe,
            bias=self.head.bias,
            temperature=self.temperature,
            chunk_tokens=self.chunk_tokens,
            softcap=self.softcap,
        )
        zero = torch.zeros_like(log_probs)
        return torch.where(scored, log_probs, zero), torch.where(scored, entropy, zero)
