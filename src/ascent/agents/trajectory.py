"""The token record of one training sample of a multi-turn episode.

A sample is ``prompt_ids`` followed by a response that interleaves two kinds of span:

- sampled: the engine's token ids exactly as generated, with their rollout log-probs and
  weight versions; ``response_mask`` 1. These are the tokens the policy is trained on.
- rendered: what the chat template adds between assistant turns (the end of the assistant's
  turn the model did not sample, tool results, user turns, the next assistant header);
  ``response_mask`` 0, log-prob 0, weight version -1. The model attends to them and is not
  trained on them. A rendered span may bring images (a tool's result, a user's picture):
  its image tokens already expanded, its images appended to ``images``.

``images`` are the sample's data URLs in the order of their image tokens (the prompt's first),
as the engine and the trainer take them: image k's features go on the k-th image's tokens.

Nothing here re-tokenizes sampled text: the ids are appended as they came.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Trajectory:
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    weight_versions: list[int] = field(default_factory=list)
    # (index into response_ids of a turn's last sampled token, that turn's reward)
    turn_rewards: list[tuple[int, float]] = field(default_factory=list)
    images: list[str] = field(default_factory=list)  # the prompt's, then the spans' in order
    # per image: the response length when the span holding it was added (-1: the prompt's)
    image_starts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.image_starts) != len(self.images):  # given only the prompt's images
            self.image_starts = [-1] * len(self.images)

    def add_sampled(
        self, token_ids: list[int], log_probs: list[float], weight_versions: list[int]
    ) -> None:
        if not (len(token_ids) == len(log_probs) == len(weight_versions)):
            raise ValueError(
                f"a sampled span needs one log-prob and one weight version per token: "
                f"{len(token_ids)} tokens, {len(log_probs)} log-probs, "
                f"{len(weight_versions)} versions"
            )
        self.response_ids += token_ids
        self.response_mask += [1] * len(token_ids)
        self.log_probs += log_probs
        self.weight_versions += weight_versions

    def add_rendered(self, token_ids: list[int], images: Sequence[str] = ()) -> None:
        """A rendered span; ``images``: its images, whose tokens ``token_ids`` hold expanded."""
        self.image_starts += [len(self.response_ids)] * len(images)
        self.images += images
        self.response_ids += token_ids
        self.response_mask += [0] * len(token_ids)
        self.log_probs += [0.0] * len(token_ids)
        self.weight_versions += [-1] * len(token_ids)

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` tokens of the response (and what belongs to them: the
        images of the spans that start before ``length``; a cut inside a span with images is
        followed by a rendering that sets ``images``, see ``Conversation``)."""
        del self.response_ids[length:], self.response_mask[length:]
        del self.log_probs[length:], self.weight_versions[length:]
        self.turn_rewards = [(i, r) for i, r in self.turn_rewards if i < length]
        kept = sum(start < length for start in self.image_starts)
        del self.images[kept:], self.image_starts[kept:]

    def drop_trailing_rendered(self) -> None:
        """Drop the rendered tokens after the last sampled one (an episode that ended after
        its environment answered): they train nothing, and the last token should be the
        policy's, where outcome rewards go."""
        keep = len(self.response_mask)
        while keep and not self.response_mask[keep - 1]:
            keep -= 1
        self.truncate(keep)

    @property
    def token_ids(self) -> list[int]:
        """Prompt and response: the sequence the model read and wrote."""
        return self.prompt_ids + self.response_ids

    @property
    def sampled_count(self) -> int:
        return sum(self.response_mask)
