"""A conversation as exact tokens: the engine's sampled ids for assistant turns, the chat
template's rendering for everything between them.

The template renders text; the trajectory must hold the sampled ids. After an assistant turn
(sampled text S, ending in its end-of-turn token) and new messages M (tool results, a user
turn), the tokens to append are the template's own text between the two, found by rendering:

    A      = render(history, generation prompt)          what came before the turn
    H      = render(history + [assistant S])             the turn as the template writes it
    N      = render(history + [assistant S] + M, generation prompt)
    tail   = H[len(A) + len(S):]   if H starts with A + S  (e.g. the "\\n" after <|im_end|>)
    append   tokenize(tail + N[len(H):])   if N starts with H   (mask 0)

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

Nothing here re-tokenizes sampled text.
"""

from collections.abc import Sequence
from typing import Any

from ascent.agents.config import DriftMode
from ascent.agents.images import ImageTokens, message_images, template_messages
from ascent.agents.trajectory import Trajectory
from ascent.data.chat import render_chat
from ascent.rollout.protocol import TokenOut


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
        self._prompt_text = self._render(self.messages, generation=True)
        urls = self._images(self.messages)
        self.samples = [Trajectory(self.encode(self._prompt_text, urls), images=urls)]
        self.drifts = 0
        self.sampled_image_token = False  # a turn sampled it: no turn may follow
        self._turn: tuple[str, str] | None = None  # (text before the turn, sampled text)
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
        if self._turn is not None:
            raise RuntimeError("two assistant turns in a row: add the messages between them")
        self.current.add_sampled(out.token_ids, out.log_probs, out.weight_versions)
        if self.images is not None and self.images.token_id in out.token_ids:
            self.sampled_image_token = True
        text = self.tokenizer.decode(out.token_ids, skip_special_tokens=False)
        ends_turn = out.token_ids and out.token_ids[-1] in self._special
        content_ids = out.token_ids[:-1] if ends_turn else out.token_ids
        message = {
            "role": "assistant",
            "content": self.tokenizer.decode(content_ids, skip_special_tokens=False),
        }
        self.messages.append(message)
        self._turn = (self._prompt_text, text)
        return message

    def add_messages(self, messages: list[dict]) -> None:
        """Append the template's tokens for ``messages`` and the next assistant header after
        the last assistant turn (handling drift as configured)."""
        if self._turn is None:
            raise RuntimeError("add_messages needs an assistant turn before it")
        if self.sampled_image_token:
            raise ValueError("a turn sampled the image token: no turn may follow it")
        before, sampled = self._turn
        history = self._render(self.messages, generation=False)
        self.messages += messages
        self._prompt_text = self._render(self.messages, generation=True)
        self._turn = None
        turn_start = before + sampled
        if history.startswith(turn_start) and self._prompt_text.startswith(history):
            tail = history[len(turn_start) :] + self._prompt_text[len(history) :]
            urls = self._images(messages)
            self.current.add_rendered(self.encode(tail, urls), urls)
            return
        self.drifts += 1
        self._after_drift()

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
