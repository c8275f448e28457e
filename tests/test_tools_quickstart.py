"""The tools quickstart's pieces: demonstrations train exactly the assistant's turns (the
tool's answer is context, not a target), and the score reads the final answer, not the
tool's output; and (slow) the whole quickstart on one seed."""

import json

import pytest

from ascent.data.sft import chat_example
from ascent.models.tiny import build_byte_tokenizer
from ascent.quickstart.tools_run import run_tools_quickstart
from ascent.quickstart.tools_task import compute_score, demonstration, multiply, tool_call


def test_a_demonstration_trains_the_call_and_the_answer_not_the_tool_output():
    tokenizer = build_byte_tokenizer()
    example = chat_example(tokenizer, demonstration((123, 45), use_tool=True))
    trained = tokenizer.decode(
        [t for t, m in zip(example.input_ids, example.loss_mask, strict=True) if m]
    )
    assert trained == f"{tool_call((123, 45))}<|im_end|>\n5535<|im_end|>\n"
    assert tool_call((123, 45)) == (
        '<tool_call>{"name":"multiply","arguments":{"a":123,"b":45}}</tool_call>'
    )
    assert multiply(123, 45) == 5535


def test_the_score_is_the_final_answer_and_says_whether_the_tool_was_used():
    episode = f"{tool_call((123, 45))}\ntool\n5535\nassistant\n5535"
    assert compute_score("multiply_tool", episode, "5535") == {
        "score": 1.0,
        "acc": 1.0,
        "used_tool": 1.0,
    }
    wrong_copy = f"{tool_call((123, 45))}\ntool\n5535\nassistant\n5545"
    assert compute_score("multiply_tool", wrong_copy, "5535")["acc"] == 0.0
    direct = compute_score("multiply_tool", "5535", "5535")
    assert direct["acc"] == 1.0 and direct["used_tool"] == 0.0
    # A second call instead of an answer: the tool's output is not the model's answer.
    again = f"{tool_call((123, 45))}\ntool\n5535\nassistant\n{tool_call((123, 45))}"
    assert compute_score("multiply_tool", again, "5535")["acc"] == 0.0


def test_the_warm_start_teaches_calling_well_more_than_calling_first():
    """Half the demonstrations use the tool and train the whole call and the copy, but only a
    fifth of those train the call's opening token: what the model learns to prefer first is
    0.1 calls against 0.5 direct answers."""
    from ascent.quickstart.tools_warm_start import OPENING_TRAINED, TOOL_SHARE, demonstrations

    tokenizer = build_byte_tokenizer()
    pairs = [(100 + i, 10 + i % 90) for i in range(2000)]
    examples = demonstrations(tokenizer, pairs, seed=0, count=2000)
    opening = tokenizer("<", add_special_tokens=False)["input_ids"][0]
    tool, opened = 0, 0
    for example in examples:
        trained = [t for t, m in zip(example.input_ids, example.loss_mask, strict=True) if m]
        if "<tool_call>" not in tokenizer.decode(example.input_ids):
            assert opening not in trained
            continue
        tool += 1
        opened += trained[0] == opening
        assert tokenizer.decode(trained).lstrip("<").startswith("tool_call>{")
    assert abs(tool / len(examples) - TOOL_SHARE) < 0.05
    assert abs(opened / tool - OPENING_TRAINED) < 0.05


def test_the_competence_prompts_force_each_half_of_the_tool_path():
    from ascent.quickstart.tools_warm_start import forced_prompts

    tokenizer = build_byte_tokenizer()
    call, copy = (tokenizer.decode(ids) for ids in forced_prompts(tokenizer, (123, 45)))
    assert call.endswith("123*45=<|im_end|>\n<|im_start|>assistant\n<tool_call>")
    assert copy.endswith("<|im_start|>tool\n5535<|im_end|>\n<|im_start|>assistant\n")
    assert tool_call((123, 45)) in copy


@pytest.mark.learning
@pytest.mark.slow
def test_the_tools_quickstart_learns_to_use_the_tool(tmp_path):
    """The whole quickstart, seed 0 (about 6 minutes on 2 cores): on the AMD EPYC of the
    README's table it gained +88.2 points (11.2% -> 99.4%) and tool use rose from 12% to
    100%; seeds 0-7 gained at least +80. The assertions: the quickstart's own promise (+30,
    which leaves room for other CPUs' floating point), tool use rising, and no collapse."""
    assert run_tools_quickstart(seed=0, out_dir=str(tmp_path)) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["gain_points"] >= 30 and summary["collapsed"] is None
    assert summary["tool_use_after"] > summary["tool_use_before"] + 0.3
