"""A model family, declared in one place: a family is one module.

A ``ModelFamily`` says, for the transformers model types it covers (a config's
``model_type``), everything the rest of ascent would otherwise have to ask by name:

- ``read(model) -> Decoder``: how the native engine runs it (attention shape and variants,
  norms and where they sit, MLP or experts and their routing, embedding and head, rotary
  positions, sliding windows, logit soft-capping: ``ascent.models.families.decoder``);
  None for a model only the transformers and vLLM engines run.
- ``prompt_inputs(model, model_dir) -> PromptInputs``: what a prompt brings beyond token
  ids and how it enters the prefill (images for a vision-language model; text by default).
- ``cuda_graphs``: whether its decode steps may be captured (not when a row's rotary
  positions shift per request); a family whose layers route is never captured either
  (the tokens per expert change every step).
- ``training``: the trainer's hooks (``TrainingHooks``): the forward's own inputs (pixel
  values, M-RoPE positions) and how a router's weights follow from replayed experts.
- ``tensor_parallel_plan(model) -> plan``: how its layers split over the mesh's tensor
  axis (``ascent.models.families.tensor_plan``); None: tensor parallelism refuses it.

Engines, the scheduler, the KV cache and the trainer ask the family; they never test an
architecture's name.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from torch import Tensor, nn

from ascent.models.families.decoder import Decoder
from ascent.moe.replay import RouterWeights, softmax_weights


@dataclass(frozen=True)
class PreparedPrompt:
    """What a family made of a prompt's inputs beyond its token ids (``PromptInputs.prepare``):
    ``rope_shift``, how far its generated tokens' rotary positions are from their indices
    (M-RoPE after images; 0 for text), and ``prefix_keys``, the prompt's ids as the prefix
    cache names them where they are not enough (None: the ids themselves). Image tokens all
    share one id, so each is keyed by its image: the same ids with another image are another
    prefix from that image's first token on, and a prompt that continues this one with the
    same images (an episode's next turn) still finds its cached blocks."""

    rope_shift: int = 0
    prefix_keys: tuple[int, ...] | None = None

    def prefix_tokens(self, tokens: Sequence[int], start: int = 0, stop: int | None = None) -> list:
        """``tokens[start:stop]`` (this prompt's ids, then what was generated after them) as
        the prefix cache names them."""
        stop = len(tokens) if stop is None else stop
        keys = self.prefix_keys
        if keys is None:
            return list(tokens[start:stop])
        return [*keys[start : min(stop, len(keys))], *tokens[max(start, len(keys)) : stop]]


TEXT_PROMPT = PreparedPrompt()


class PromptInputs:
    """How a family's prompts enter the native engine. This one: token ids only (a prompt
    with images is refused, naming the architecture); a vision-language family overrides
    both methods."""

    image_token_id: int | None = None  # the id that stands for image features (None: no images)

    def __init__(self, model: nn.Module) -> None:
        self.architecture = type(model).__name__

    def prepare(self, prompt: list[int], images: Sequence[str], where: str) -> PreparedPrompt:
        """A prompt's inputs, ready for its prefill; ValueError naming ``where``."""
        if images:
            raise ValueError(
                f"{where} has images but {self.architecture} is not a vision-language model"
            )
        return TEXT_PROMPT

    def with_image_tokens(self, ids: list[int], images: Sequence[str]) -> list[int]:
        """A rendered prompt's ids with each image's token repeated as often as the image
        takes tokens (a chat request's images); ValueError where the model takes none."""
        raise ValueError(f"{self.architecture} takes no images (not a vision-language model)")

    def embed(
        self,
        hidden: Tensor,
        positions: Tensor,
        prepared: Sequence[PreparedPrompt],
        lengths: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """A prefill chunk's token embeddings (P, T, H) and positions (P, T) (row p's new
        tokens, ``lengths[p]`` of them, starting at ``positions[p, 0]``) -> the embeddings
        the layers take and the positions the rotary module takes."""
        return hidden, positions


def text_prompts(model: nn.Module, model_dir: str | None) -> PromptInputs:
    return PromptInputs(model)


@dataclass(frozen=True)
class TrainingHooks:
    """What the trainer asks a family. ``extra_inputs(model, model_dir)`` builds the
    forward's own inputs beyond the ids (``ascent.engine.modules.PolicyModule``; None: the
    ids and positions are all); ``router_weights``: a router's weights for experts it is told
    to use (router replay, ``ascent.moe.replay``)."""

    extra_inputs: Callable[[nn.Module, str], object] | None = None
    router_weights: RouterWeights = softmax_weights


@dataclass(frozen=True)
class ModelFamily:
    """One family (module docstring)."""

    name: str
    model_types: tuple[str, ...]
    read: Callable[[nn.Module], Decoder] | None
    prompt_inputs: Callable[[nn.Module, str | None], PromptInputs] = text_prompts
    cuda_graphs: bool = True
    training: TrainingHooks = field(default_factory=TrainingHooks)
    tensor_parallel_plan: Callable | None = None
