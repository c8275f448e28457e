"""The tools quickstart's pieces: demonstrations train exactly the assistant's turns (the
tool's answer is context, not a target), and the score reads the final answer, not the
tool's output."""

from ascent.data.sft import chat_example
from ascent.models.tiny import build_byte_tokenizer
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
