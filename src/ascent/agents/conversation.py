"""A conversation as exact tokens: the engine's sampled ids for assistant turns, the chat
template's rendering for everything between them.

The template renders text; the trajectory must hold the sampled ids. After an assistant turn
(sampled text S, ending in its end-of-turn token) and new messages M (tool results, a user
turn), the tokens to append are the template's own text between the two, found by rendering:

    A      = render(history, generation prompt)          what came before the turn
    H      = render(history + [assistant S])             the turn as the template writes it
    N      = render(history + [assistant S] + M, generation prompt)
    append   tokenize(N[len(A) + len(S):])   if H starts with A + S and N starts with H

with mask 0: what the template writes after the turn (e.g. the "\\n" after <|im_end|>), M,
and the next assistant header.

The assistant message in the history carries S verbatim as its content (without the end token,
and with any tool calls left in the text), so the template writes the turn as it was sampled.

Images (``ascent.agents.images``): the template renders each image part of M as one image
token; the appended ids repeat it as often as the image takes tokens (the family's rule,
``ImageTokens.expand``), and the sample takes M's images, in order, with them. A rendering
(the first prompt, a new sample's) takes every image of the conversation. A turn whose
sampled ids hold the image token cannot be followed by another (``sampled_image_token``).

Drift: when H does not start with A + S (the template rewrites the turn it was given) or N
does not start with H (it rewrites history once more messages follow, e.g. by dropping earlier
``<think>`` blocks), appending would train on a context the model will never see at
inference. ``on_drift`` says what happens then:

- ``new_sample``: the sample ends here, and a new one starts with the template's full
  rendering of the conversation as its prompt. Every sampled token stays in exactly one sample.
- ``repair``: the sample keeps its tokens up to the first one where they differ from the
  template's full rendering, and continues with the rendering from there (mask 0). Sampled
  tokens past that point (such as a dropped ``<think>``) leave the sample. If the difference
  falls inside the prompt, a new sample starts as above.

Rendered short: where the template is local (``ascent.agents.locality``: it writes a turn
and what follows it the same after any history), A, H and N come from the opening messages,
the turn and M alone, and give the same checks and the same tokens to append; a turn then
costs as much at turn 20 as at turn 2. The whole history is rendered, as above, for a
template the check finds not local, for a conversation that shows images or a role the check
did not show it, and for a turn whose short renderings fail the checks (drift is decided,
and handled, on the whole rendering).

Nothing here re-tokenizes sampled text.
"""

from collections.abc import Sequence
from typing import Any

from ascent.agents.config import DriftMode
from ascent.agents.images import ImageTokens, message_images, template_messages
from ascent.agents.locality import local_roles
from ascent.agents.trajectory import Trajectory
from ascent.data.chat import render_chat
from ascent.rollout.protocol import TokenOut
from ascent.vision.prompts import IMAGE_PART_TYPES


class Conversation:
    """One episode's messages (the template's view) and its samples (the trainer's view)."""

    def __init__(
        self,
        tokenizer: Any,
        messages: list[dict],
        tools: list[dict] | None = None,
        on_drift: DriftMode = "new_sample",
        images: ImageTokens | None = None,
    ) -> None:
        self.tokenizer, self.tools, self.on_drift = tokenizer, tools or None, on_drift
        self.images = images  # None: the model takes no images
        self.messages = list(messages)
        self._opening = list(messages)
        self._opening_text = self._render(self.messages, generation=True)
        # A of the next turn, the whole history rendered; None after a turn rendered short
        self._prompt_text: str | None = self._opening_text
        # what the locality check was not shown: images anywhere, roles after the opening
        self._pictured = _shows_images(self.messages)
        self._roles: set[str] = set()
        self._local_roles: frozenset[str] | None = None  # the check's, once a turn asks
        urls = self._images(self.messages)
        self.samples = [Trajectory(self.encode(self._opening_text, urls), images=urls)]
        self.drifts = 0
        self.sampled_image_token = False  # a turn sampled it: no turn may follow
        self._sampled: str | None = None  # the last turn's sampled text, until M follows it
        self._special = set(getattr(tokenizer, "all_special_ids", []))

    @property
    def current(self) -> Trajectory:
        return self.samples[-1]

    def encode(self, text: str, images: Sequence[str] = ()) -> list[int]:
        """The ids of rendered ``text``, its image tokens expanded for ``images`` (in order)."""
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if not images:
            return ids
        if self.images is None:
            raise ValueError(
                f"the conversation shows {len(images)} image(s) but the model or the rollout "
                "engine takes none: train a vision-language model on an engine that takes "
                "images (rollout.engine=native)"
            )
        return list(self.images.expand(ids, list(images)))

    def _images(self, messages: list[dict]) -> list[str]:
        return message_images(messages, need_urls=self.images is not None)

    def _render(self, messages: list[dict], generation: bool) -> str:
        shown = template_messages(messages)
        return render_chat(self.tokenizer, shown, tools=self.tools, generation=generation)

    def add_assistant(self, out: TokenOut) -> dict:
        """Append a sampled turn exactly; returns its assistant message, whose content is the
        sampled text without the end-of-turn token."""
        if self._sampled is not None:
            raise RuntimeError("two assistant turns in a row: add the messages between them")
        self.current.add_sampled(out.token_ids, out.log_probs, out.weight_versions)
        if self.images is not None and self.images.token_id in out.token_ids:
            self.sampled_image_token = True
        # Two decodes, not one and a cut: a tokenizer may decode an end token differently
        # after text than alone (slow SentencePiece ones put a space before it).
        self._sampled = self.tokenizer.decode(out.token_ids, skip_special_tokens=False)
        ends_turn = out.token_ids and out.token_ids[-1] in self._special
        content_ids = out.token_ids[:-1] if ends_turn else out.token_ids
        message = {
            "role": "assistant",
            "content": self.tokenizer.decode(content_ids, skip_special_tokens=False),
        }
        self.messages.append(message)
        return message

    def add_messages(self, messages: list[dict]) -> None:
        """Append the template's tokens for ``messages`` and the next assistant header after
        the last assistant turn (handling drift as configured)."""
        if self._sampled is None:
            raise RuntimeError("add_messages needs an assistant turn before it")
        if self.sampled_image_token:
            raise ValueError("a turn sampled the image token: no turn may follow it")
        sampled, self._sampled = self._sampled, None
        turn = len(self.messages) - 1  # the sampled turn's message
        self.messages += messages
        self._pictured = self._pictured or _shows_images(messages)
        self._roles.update(message.get("role") for message in messages)
        tail = None
        if self._renders_short(turn):
            short = self._opening + self.messages[turn:]
            tail, _ = self._tail(short, len(self._opening), self._opening_text, sampled)
        if tail is not None:
            self._prompt_text = None  # rendered when a turn needs the whole history
        else:  # the whole conversation decides
            before = self._prompt_text
            if before is None:
                before = self._render(self.messages[:turn], generation=True)
            tail, self._prompt_text = self._tail(self.messages, turn, before, sampled)
        if tail is not None:
            urls = self._images(messages)
            self.current.add_rendered(self.encode(tail, urls), urls)
            return
        self.drifts += 1
        self._after_drift()

    def _renders_short(self, turn: int) -> bool:
        """Whether the turn at ``messages[turn]`` may be rendered with the opening messages
        alone before it (module docstring)."""
        if turn == len(self._opening) or self._pictured:  # the first turn: the same renderings
            return False
        if self._local_roles is None:
            self._local_roles = local_roles(self.tokenizer, self.tools)
        return self._roles <= self._local_roles

    def _tail(
        self, messages: list[dict], turn: int, before: str, sampled: str
    ) -> tuple[str | None, str]:
        """The text to append after the sampled turn ``messages[turn]`` (None: the template
        drifts) and N, from ``messages`` rendered (module docstring: ``before`` is A)."""
        after = self._render(messages, generation=True)
        turn_start = before + sampled
        # N starts with A + S whenever H does and N starts with H: render H only then.
        if after.startswith(turn_start):
            history = self._render(messages[: turn + 1], generation=False)
            if history.startswith(turn_start) and after.startswith(history):
                return after[len(turn_start) :], after
        return None, after

    def _after_drift(self) -> None:
        urls = self._images(self.messages)
        target = self.encode(self._prompt_text, urls)
        if self.on_drift == "repair":
            held = self.current.token_ids
            common = 0
            for a, b in zip(held, target, strict=False):
                if a != b:
                    break
                common += 1
            prompt_length = len(self.current.prompt_ids)
            if common >= prompt_length:
                self.current.truncate(common - prompt_length)
                kept = len(self.current.images)  # its tokens equal the rendering's so far
                self.current.add_rendered(target[common:], urls[kept:])
                return
        self.samples.append(Trajectory(target, images=urls))


def _shows_images(messages: list[dict]) -> bool:
    return any(
        part.get("type") in IMAGE_PART_TYPES
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
    )
