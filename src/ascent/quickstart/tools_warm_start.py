"""The tools quickstart's warm start: SFT on demonstrations until the model reliably calls the
tool and copies its answer, a measured criterion rather than a fixed number of steps.

Competence is measured greedily on the development problems with each half of the tool path
forced, so it does not depend on whether the model would choose the tool:

- call: given the prompt and ``<tool_call>``, the model writes exactly the right call;
- copy: given the conversation up to the tool's answer, the model answers with that number.

The warm start ends when both reach ``COMPETENCE``; an attempt still short of it after
``plateau_steps`` starts again from a freshly initialised model (``warm_start``'s restart
rule, as in the addition quickstart). Why: with a fixed 250 steps, the copy accuracy it left
ranged from 13% (seed 6: GRPO then saw almost no right answer, drifted and ended at 0%) to
about 80%, and RL could not raise it past what the warm start gave (seed 4 ended at 80.8%).

What the model prefers is left to RL: only ``TOOL_SHARE`` of the demonstrations use the
tool, the rest answer directly (right, but the model cannot learn to multiply), so the warm
model, decoding greedily, mostly answers directly and wrong, while sampling it calls the tool
often enough for GRPO to find that the tool pays.
"""

import random
from dataclasses import replace

from ascent.data.chat import render_chat
from ascent.data.rl import RLPrompt, prompts_batch
from ascent.data.sft import chat_example
from ascent.quickstart.tools_task import (
    SOURCE,
    Pair,
    demonstration,
    question,
    tool_call,
)
from ascent.quickstart.warm_start import WarmStartTask
from ascent.rollout.types import response_lengths

TOOL_SHARE = 0.5  # of the demonstrations; the rest answer directly
OPENING_TRAINED = 0.2  # of the tool demonstrations: those that teach opening a call
COMPETENCE = 0.95  # forced call and copy accuracy on the development problems
CALL_OPENING = "<tool_call>"


def demonstrations(tokenizer: object, pairs: list[Pair], seed: int = 0, count: int = 8000) -> list:
    """``count`` demonstrations: a ``TOOL_SHARE`` with the tool, the rest direct. Every tool
    demonstration trains the call and the copy, but only ``OPENING_TRAINED`` of them the
    call's first token: the choice to call is taught by 0.5 x 0.2 = 0.1 of the examples
    against 0.5 answering directly, so the model learns to call well without learning to
    prefer calling."""
    rng = random.Random(seed)
    examples = []
    for pair in rng.sample(pairs, count):
        if rng.random() >= TOOL_SHARE:
            examples.append(chat_example(tokenizer, demonstration(pair, False)))
            continue
        example = chat_example(tokenizer, demonstration(pair, True))
        if rng.random() >= OPENING_TRAINED:
            mask = list(example.loss_mask)
            mask[mask.index(1)] = 0  # the first trained token opens the call
            example = replace(example, loss_mask=mask)
        examples.append(example)
    return examples


def forced_prompts(tokenizer: object, pair: Pair) -> tuple[list[int], list[int]]:
    """The call prompt (the question, the assistant's header and ``<tool_call>``) and the
    copy prompt (the conversation up to the tool's answer, and the assistant's header)."""
    call = render_chat(tokenizer, question(pair), generation=True) + CALL_OPENING
    copy = render_chat(tokenizer, demonstration(pair, True)[:3], generation=True)
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"] for text in (call, copy))


def forced_accuracies(rollout: object, tokenizer: object, pairs: list[Pair]) -> dict[str, float]:
    """Greedy call and copy accuracy on ``pairs`` (see the module's docstring)."""
    prompts = []
    for pair in pairs:
        answer = str(pair[0] * pair[1])
        for ids, kind in zip(forced_prompts(tokenizer, pair), ("call", "copy"), strict=True):
            prompts.append(RLPrompt(ids, SOURCE, answer, {"kind": kind, "pair": pair}))
    out = rollout.generate(
        prompts_batch(prompts, tokenizer.pad_token_id, "dev"), sampling={"n": 1, "temperature": 0.0}
    )
    right = {"call": 0, "copy": 0}
    for row, length in enumerate(response_lengths(out).tolist()):
        text = tokenizer.decode(out["responses"][row][:length].tolist(), skip_special_tokens=True)
        info = out["extra_info"][row]
        expected = (
            tool_call(tuple(info["pair"])) if info["kind"] == "call" else out["ground_truth"][row]
        )
        written = CALL_OPENING + text if info["kind"] == "call" else text
        right[info["kind"]] += written.strip() == expected
    return {kind: count / len(pairs) for kind, count in right.items()}


def competence(rollout: object, tokenizer: object, pairs: list[Pair]) -> float:
    """The lower of the forced call and copy accuracies: what the warm start's target reads."""
    return min(forced_accuracies(rollout, tokenizer, pairs).values())


TOOLS_WARM_START = WarmStartTask(
    examples=demonstrations,
    accuracy=competence,
    rollout={"max_model_len": 160, "sampling": {"max_new_tokens": 112}},
    measure="forced call and copy accuracy (the lower)",
)
