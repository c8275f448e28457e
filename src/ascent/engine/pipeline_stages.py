"""Pipeline stages of a transformers model: stage s of S keeps its consecutive share of
the decoder layers and runs them through the model's own decoder forward, so every
family's masks, rotary positions and embedding scale come from transformers as unsplit.

The stage keeps the model object (``self.model``, as ``PolicyModule`` and ``ValueModule``
do, so FSDP, the tensor plan, checkpoints and the weight refresh find it under the same
names), cut in place:

- its decoder stack (``model.base_model``) keeps layers [lo, hi) (``layer_ranges``), with
  ``num_hidden_layers`` and ``layer_types`` sliced to match (a config of its own);
- the first stage embeds the ids; the others take the previous stage's hidden states as
  ``inputs_embeds`` (``embed_tokens`` is dropped);
- the last stage applies the final norm and its head: the log-prob head (chunked, over the
  whole vocabulary or a tensor rank's rows of it: ``score_targets``) for a causal LM, the
  value head (``score``) for a critic; the others keep no norm and no head, and pass
  (hidden states, positions, targets) on.

Positions and targets travel with the hidden states, so every stage sees the packed rows'
positions (rows never attend across) and the last stage the tokens to score: (1, T) each,
T fixed for one schedule run (``ascent.engine.pipeline`` pads every micro-batch to it). A
target below 0 marks a position with nothing to score; its log-prob is 0.

Layers keep their global index through ``global_name``: checkpoints and the weight refresh
use the unsplit model's names. A head tied to the embedding is refused: the two would live
on different stages.
"""

import copy

import torch
from torch import Tensor, nn

from ascent.engine.modules import score_targets, unwrap


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
    targets) -> (hidden, positions, targets) on all but the last stage; on the last, the
    log-probs (T,) and entropy (T,) of ``targets`` at ``temperature`` (float32, 0 where the
    target is below 0), or with ``values=True`` the values (T,) float32."""

    def __init__(
        self,
        model: nn.Module,
        stage: int,
        stages: int,
        chunk_tokens: int = 1024,
        values: bool = False,
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
            for name, child in list(lm.named_children()):  # the head: lm_head, or score
                if child is not stack and any(True for _ in child.parameters()):
                    setattr(lm, name, None)
        self.model, self.kept = model, kept
        self.layers_prefix = _prefix_of(self, stack.layers)
        self.values, self.chunk_tokens = values, chunk_tokens
        self.temperature = 1.0  # set by the engine before a run (the rollout's)

    def global_name(self, name: str) -> str:
        """A parameter's name under this stage module -> its name in the unsplit module
        (a ``PolicyModule`` or ``ValueModule`` of the whole model)."""
        head = self.layers_prefix + "."
        if not name.startswith(head):
            return name
        local, rest = name[len(head) :].split(".", 1)
        return f"{head}{self.kept[int(local)]}.{rest}"

    def forward(self, x: Tensor, positions: Tensor, targets: Tensor) -> tuple[Tensor, ...]:
        lm = unwrap(self.model)
        inputs = {"input_ids": x} if self.first else {"inputs_embeds": x}
        hidden = lm.base_model(position_ids=positions, use_cache=False, **inputs).last_hidden_state
        if not self.last:
            return hidden, positions, targets
        if self.values:
            return (lm.score(lm.dropout(hidden))[0, :, 0].float().clone(),)
        scored = targets[0] >= 0
        # Positions with no target score token 0 (their results are zeroed); the schedule's
        # shape inference runs on uninitialised buffers, whatever they hold.
        safe = targets[0].clamp(0, lm.get_output_embeddings().weight.shape[0] - 1)
        log_probs, entropy = score_targets(lm, hidden[0], safe, self.temperature, self.chunk_tokens)
        zero = torch.zeros_like(log_probs)
        return torch.where(scored, log_probs, zero), torch.where(scored, entropy, zero)


def _prefix_of(root: nn.Module, target: nn.Module) -> str:
    """The qualified name of ``target`` under ``root``."""
    for name, module in root.named_modules():
        if module is target:
            return name
    raise ValueError("the decoder layers are not under the stage module")
