"""Whether a chat template writes a turn the same after any history: then a conversation
renders only its opening and its last turn, not its whole history, after every turn.

``Conversation`` (see its module) finds the tokens to append after a sampled turn S from three
renderings: A (the history before the turn, with the generation prompt), H (the history and
the turn) and N (that and the new messages M, with the generation prompt). Rendered whole,
each costs time in proportion to the history, so an episode costs time quadratic in its
turns, on the event loop's thread, beside the engine's step thread.

A template is *local* when, for the opening messages o, any turns m after them, an assistant
turn a and new messages M (A, H, N rendered from o + m, and A', H', N' from o alone):

    H  starts with A,  N  with H                    it only appends
    H' starts with A', N' with H'
    H[len(A):] == H'[len(A'):]                      the turn's text does not depend on m
    N[len(A):] == N'[len(A'):]                      nor does the text after it

Then, whatever S is, the checks ``H starts with A + S`` and ``N starts with H`` and the text
appended, ``N[len(A + S):]``, come out the same from the short conversation o + [a] + M as
from the whole one (A' is the conversation's first prompt, rendered once).

No finite test proves a Jinja template local. ``local_roles`` checks the definition on two
synthetic conversations of five turns (with and without a system message, with the
conversation's own tools; thoughts, tool calls, one and two tool results, user turns) and,
for a template that refuses those (Gemma's takes no tool results), on the same turns
answered by user messages only. A template that rewrites history there (drops an earlier
``<think>``, moves the system prompt to the last user turn, numbers turns or tool results),
writes a turn differently after a tool result than after a user turn, or refuses the
conversations, is not local with those roles; a conversation renders short only while every
message after its opening has a role the check showed, and no image. What a template might
do only on text it was not shown is the residue: the conversation's own short renderings
still catch any rewriting of the last turn and of what follows it, not a rewrite of an
earlier turn that only such text would set off.
"""

import json
from typing import Any

from ascent.data.chat import render_chat
from ascent.data.files import MalformedRow

_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": %d, "b": %d}}\n</tool_call>'
OPENINGS = (
    [{"role": "user", "content": "What are 2 + 3 and 4 + 5?"}],
    [
        {"role": "system", "content": "You add numbers with the tool."},
        {"role": "user", "content": "What are 2 + 3 and 4 + 5?"},
    ],
)
# (assistant content, the messages that answer it): after tool results and user turns
TURNS = (
    (
        "<think>\nTwo sums: call the tool.\n</think>\n\n" + _CALL % (2, 3),
        [{"role": "tool", "content": "5"}],
    ),
    (
        _CALL % (2, 3) + "\n" + _CALL % (4, 5),
        [{"role": "tool", "content": "5"}, {"role": "tool", "content": "9"}],
    ),
    ("They are 5 and 9.", [{"role": "user", "content": "Now add 1 to each."}]),
    (
        "<think>\nAdd 1 to each.\n</think>\n\nThey are 6 and 10.",
        [{"role": "user", "content": "Thanks."}],
    ),
    ("You are welcome.", [{"role": "tool", "content": "done"}]),
)
# after user turns only, for templates that take no tool results (Gemma's)
USER_TURNS = tuple(
    (content, [{"role": "user", "content": f"Go on ({index})."}])
    for index, (content, _) in enumerate(TURNS)
)
SHOWN = ((frozenset({"user", "tool"}), TURNS), (frozenset({"user"}), USER_TURNS))

_verdicts: dict[tuple[str, ...], frozenset[str]] = {}


def local_roles(tokenizer: Any, tools: list[dict] | None) -> frozenset[str]:
    """The roles of messages after assistant turns with which the tokenizer's chat template,
    given ``tools``, is local on the synthetic conversations (module docstring): user and
    tool, user only, or none. Checked once per template, special tokens and tools."""
    key = tuple(
        json.dumps(value, sort_keys=True, default=str)
        for value in (tokenizer.chat_template, tokenizer.special_tokens_map, tools)
    )
    if key not in _verdicts:
        if len(_verdicts) >= 256:  # rows that each bring their own tools
            _verdicts.clear()
        _verdicts[key] = next(
            (
                roles
                for roles, turns in SHOWN
                if all(_local_on(tokenizer, tools, opening, turns) for opening in OPENINGS)
            ),
            frozenset(),
        )
    return _verdicts[key]


def _local_on(tokenizer: Any, tools: list[dict] | None, opening: list[dict], turns: tuple) -> bool:
    def render(messages: list[dict], generation: bool) -> str:
        return render_chat(tokenizer, messages, tools=tools, generation=generation)

    try:
        first = before = render(opening, True)
        messages = list(opening)
        for content, answers in turns:
            turn = {"role": "assistant", "content": content}
            history = render([*messages, turn], False)
            after = render([*messages, turn, *answers], True)
            short_history = render([*opening, turn], False)
            short_after = render([*opening, turn, *answers], True)
            if not (
                history.startswith(before)
                and after.startswith(history)
                and short_history.startswith(first)
                and short_after.startswith(short_history)
                and history[len(before) :] == short_history[len(first) :]
                and after[len(before) :] == short_after[len(first) :]
            ):
                return False
            messages += [turn, *answers]
            before = after
    except MalformedRow:  # a template that refuses these conversations is not known to be local
        return False
    return True
