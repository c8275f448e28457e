"""What a generate call takes and what it gives back."""

from dataclasses import dataclass
from typing import Literal

from pydantic import Field
from torch import Tensor

from ascent.batch import Batch, Padding
from ascent.engine.config import Strict


class SamplingParams(Strict):
    """How to sample, shared by every prompt of one ``generate`` call."""

    n: int = Field(1, ge=1, description="Samples per prompt (the prompt is prefilled once).")
    temperature: float = Field(
        1.0, ge=0, description="Logits are divided by it; 0 means greedy (argmax)."
    )
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus: smallest set with this mass.")
    top_k: int = Field(0, ge=0, description="Keep the k most likely tokens (0: all).")
    max_new_tokens: int = Field(256, ge=1, description="Response length limit.")
    stop_token_ids: list[int] = Field(
        default_factory=list, description="Tokens that end a response (kept in it)."
    )
    stop: list[str] = Field(
        default_factory=list,
        description="Strings that end a response once its decoded text (special tokens "
        "left out, as in vLLM) contains one; the token that completes the string is kept "
        "(needs a tokenizer).",
    )
    seed: int | None = Field(None, description="Seed of the sampling generator (None: random).")
    logprobs: bool = Field(True, description="Return each sampled token's log-prob.")


FinishReason = Literal["stop", "length", "abort", "error"]


@dataclass(frozen=True)
class Sample:
    """One response. ``log_probs[t]`` is log p(token_ids[t]) under the distribution it was
    sampled from: softmax(logits / T) restricted to the top-k / top-p set and renormalised
    (with top_k = 0 and top_p = 1, exactly the trainer's log_softmax(logits / T)); for
    greedy decoding (T = 0), log_softmax(logits).

    ``weight_versions[t]`` is the engine's weight version when token t was sampled: weights
    may change while a response is in flight (a refresh in keep mode), and this says which
    tokens each version produced. ``weight_version`` is the version of the last token.
    ``finish_reason`` "abort" marks a response cut short by ``abort`` or ``pause(mode="abort")``,
    "error" one the engine failed (the request's error says why).

    ``routed_experts`` (a mixture of experts on the native engine): (T, S, k) int16, the k
    experts each of the T positions whose keys the engine computed (the prompt, then every
    generated token but the last) went to in each of the S sparse layers; -1 where none.

    ``top_logprobs[t]`` (requests that ask, ``EngineRequest.top_logprobs`` k): the k most
    likely tokens of the distribution token t was sampled from, (id, log-prob) pairs, most
    likely first; None when not asked.
    """

    prompt_index: int
    sample_index: int
    token_ids: list[int]
    log_probs: list[float] | None
    finish_reason: FinishReason
    weight_version: int
    weight_versions: list[int] | None = None
    routed_experts: Tensor | None = None
    top_logprobs: list[list[tuple[int, float]]] | None = None


def response_lengths(batch: Batch) -> Tensor:
    """Generated tokens per row (B,) of a rollout batch (``RolloutWorker.generate``'s layout:
    ``responses`` (B, R) are the last R columns of ``attention_mask``), tool tokens included."""
    return batch["attention_mask"][:, -batch["responses"].shape[1] :].sum(-1)


def rollout_padding(pad_id: int) -> dict[str, Padding]:
    """How rollout batches of different prompt widths concatenate (``Batch.concat(pad=)``):
    prompt-side fields widen on the left, which keeps prompts left-padded and ``responses``
    the last R columns of ``input_ids`` / ``attention_mask``."""
    return {
        "prompts": Padding(pad_id, "left"),
        "prompt_mask": Padding(0, "left"),
        "input_ids": Padding(pad_id, "left"),
        "attention_mask": Padding(0, "left"),
        "routed_experts": Padding(-1, "left"),
    }
