"""The Hermes tool-call parser: calls in OpenAI form, malformed blocks reported (never
raised), calls inside reasoning ignored, and the registry's import paths."""

import json

import pytest

from ascent.rollout.tool_calls import ParsedTurn, parse_hermes, tool_call_parser


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_calls_are_parsed_and_taken_out_of_the_content():
    turn = parse_hermes(f"Let me compute.\n{call('multiply', a=12, b=34)}\n{call('add', a=1, b=2)}")
    assert turn.content == "Let me compute."
    assert [c["function"]["name"] for c in turn.calls] == ["multiply", "add"]
    assert json.loads(turn.calls[0]["function"]["arguments"]) == {"a": 12, "b": 34}
    assert turn.calls[0]["type"] == "function" and turn.calls[0]["id"].startswith("call_")
    assert turn.errors == []
    only = parse_hermes(call("noop"))
    assert only.content is None and json.loads(only.calls[0]["function"]["arguments"]) == {}


def test_arguments_written_as_a_json_string_are_read():
    turn = parse_hermes('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>')
    assert json.loads(turn.calls[0]["function"]["arguments"]) == {"x": 1}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('<tool_call>{"name": "f", "arguments": {"x": 1</tool_call>', "not valid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'a string "name"'),
        ("<tool_call>[1, 2]</tool_call>", 'a string "name"'),
        ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "f", "arguments": "x="}</tool_call>', "a string that is not JSON"),
        ('<tool_call>{"name": "f", "arguments": {}}', "was not closed"),
    ],
)
def test_a_malformed_block_is_an_error_message_and_stays_in_the_content(text, error):
    turn = parse_hermes(f"before {text} after")
    assert turn.calls == [] and len(turn.errors) == 1 and error in turn.errors[0]
    assert turn.content == f"before {text} after"


def test_a_malformed_block_beside_a_good_one_does_not_stop_the_good_one():
    turn = parse_hermes(f"<tool_call>{{oops</tool_call>{call('f', x=1)}")
    assert [c["function"]["name"] for c in turn.calls] == ["f"]
    assert turn.errors == [
        "tool call 1 was not run: its body is not valid JSON "
        "(Expecting property name enclosed in double quotes at character 1)"
    ]


def test_calls_inside_reasoning_are_thoughts_not_actions():
    thought = f"<think>maybe {call('rm', path='/')} no; {call('bad')[:20]}</think>"
    turn = parse_hermes(f"{thought}answer {call('f', x=1)}")
    assert [c["function"]["name"] for c in turn.calls] == ["f"] and turn.errors == []
    unfinished = parse_hermes(f"<think>still thinking {call('f', x=1)} and <tool_call>")
    assert unfinished.calls == [] and unfinished.errors == []


def test_the_registry_names_parsers_and_loads_import_paths():
    assert tool_call_parser("hermes") is parse_hermes
    assert tool_call_parser("tests.rollout.test_tool_calls:shout")("x").content == "X"
    with pytest.raises(ValueError, match=r"unknown tool-call parser 'qwen9'.*hermes"):
        tool_call_parser("qwen9")


def shout(text: str) -> ParsedTurn:
    return ParsedTurn(text.upper())
