"""An outside agent's calls as training samples, from the tokens the server recorded.

An agent that talks to the gateway's ``base_url`` sends text; the server renders each request
with the chat template and samples a response. What it recorded per call, in order, is all
this module reads (``RecordedCall``): the exact prompt ids the engine read, the sampled ids,
their log-probs and weight versions. Nothing is re-tokenised.

Calls become samples (``Trajectory``) by one rule, on tokens:

    sample = the current sample's prompt + response so far      (tokens T)
    call k joins it   if call k's prompt P starts with T (and its images with the sample's):
                          append P[len(T):]   rendered, mask 0  (tool results, user turns, the
                                                                 next assistant header)
                          append call k's response   sampled, mask 1
    otherwise         a new sample starts with P as its prompt, call k's response sampled

A call's images (a vision-language model's, data URLs in the order of their image tokens) are
its prompt's: a joining call's new ones come with its new prompt tokens, whose image tokens
the engine expanded; the same tokens with other images are another context, so a new sample.

So a client that sends its history back as the model wrote it (the usual agent loop) gives
one multi-turn sample per episode, the policy trained on its own tokens in the context it
saw. A client that rewrites history (drops old turns to fit a window, summarises, changes the
system prompt, or a template that renders an earlier turn differently) starts a new sample
at each rewrite: every sampled token stays in exactly one sample, in the context it was
sampled in, at the cost of prompt tokens repeated across samples (each is trained as its
own sequence). Merging a rewritten history would train tokens in a context the model never
saw; dropping the earlier calls would lose their tokens.

A reward given for one call (``RecordedCall.reward``) is kept at its last sampled token
(``Trajectory.turn_rewards``), where ``ascent.rewards.tokens`` places per-turn rewards.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from ascent.agents.trajectory import Trajectory


@dataclass(frozen=True)
class RecordedCall:
    """One call to the gateway as the engine ran it: ``prompt_ids`` (what it read),
    ``response_ids`` with one log-prob and one weight version each (what it sampled), and the
    call's own reward when the agent gave one."""

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    log_probs: tuple[float, ...]
    weight_versions: tuple[int, ...]
    reward: float | None = None
    images: tuple[str, ...] = ()


def calls_to_samples(calls: Iterable[RecordedCall]) -> list[Trajectory]:
    """The episode's samples, in call order (see the module docstring). A call that sampled
    nothing (aborted, or stopped at once) adds its prompt's new tokens and no trained token."""
    samples: list[Trajectory] = []
    for call in calls:
        prompt, images = list(call.prompt_ids), list(call.images)
        current = samples[-1] if samples else None
        if current is not None and _extends(current, prompt, images):
            held = len(current.token_ids)
            current.add_rendered(prompt[held:], images[len(current.images) :])
        else:
            current = Trajectory(prompt, images=images)
            samples.append(current)
        current.add_sampled(
            list(call.response_ids), list(call.log_probs), list(call.weight_versions)
        )
        if call.reward is not None and call.response_ids:
            current.turn_rewards.append((len(current.response_ids) - 1, float(call.reward)))
    for sample in samples:
        sample.drop_trailing_rendered()
    return [sample for sample in samples if sample.sampled_count]


def extends(held: list[int], prompt: list[int]) -> bool:
    """Whether ``prompt`` starts with the tokens ``held`` (a sample's so far) and goes on."""
    return len(prompt) >= len(held) and prompt[: len(held)] == held


def _extends(sample: Trajectory, prompt: list[int], images: list[str]) -> bool:
    """Whether a call with ``prompt`` and ``images`` continues ``sample``: its tokens and its
    images start with the sample's."""
    count = len(sample.images)
    return extends(sample.token_ids, prompt) and images[:count] == sample.images
