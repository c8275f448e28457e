"""The hub adapters' mappings that need neither library (``ascent.agents.hubs``): a verl row
as a verifiers task's data, an assistant's text as an OpenEnv action's fields, an observation
as text; and, in a venv without the libraries (the main one), a hub spec refused with what to
do. The episodes themselves are in ``test_hubs.py`` (the hubs venv)."""

import importlib.util

import pytest

from ascent.agents.config import AgentConfig
from ascent.agents.episodes import environment_factory
from ascent.agents.hubs.openenv_hub import (
    OpenEnvEpisode,
    accepted,
    action_payloads,
    observation_text,
)
from ascent.agents.hubs.verifiers_hub import task_fields
from ascent.errors import InputError

ROW = {
    "prompt": [{"role": "user", "content": "Guess."}],
    "reward_model": {"ground_truth": "7"},
    "extra_info": {"seed": 3, "index": 0},
}


def test_a_row_fills_the_fields_the_task_data_declares():
    assert task_fields(ROW, {"answer", "info", "seed"}) == {
        "prompt": ROW["prompt"],
        "answer": "7",
        "info": {"seed": 3, "index": 0},
        "seed": 3,
    }
    # Nothing the data does not declare; a row without ground truth leaves answer to it.
    assert task_fields({"prompt": "Hi.", "reward_model": {}}, {"answer"}) == {"prompt": "Hi."}
    assert task_fields(ROW, ()) == {"prompt": ROW["prompt"]}


def test_a_reply_as_an_actions_fields():
    assert action_payloads('{"n": 7}', ["n"]) == [{"n": 7}]
    assert action_payloads('```json\n{"n": 7}\n```', []) == [{"n": 7}]
    # One required field: the JSON value, then the text itself (a str field takes "7").
    assert action_payloads(" 7 ", ["text"]) == [{"text": 7}, {"text": "7"}]
    assert action_payloads("crane", ["guess"]) == [{"guess": "crane"}]
    assert action_payloads("crane", ["a", "b"]) == []


def test_an_observation_as_text():
    assert observation_text({"board": "X.O"}) == "X.O"
    assert observation_text({"board": "X.O", "turn": 2}) == '{"board": "X.O", "turn": 2}'
    assert observation_text({"count": 2}) == '{"count": 2}'


def test_reset_gets_only_the_arguments_it_takes():
    def reset(seed=None, episode_id=None, word="crane"):
        return None

    def open_reset(seed=None, **kwargs):
        return None

    given = {"seed": 1, "word": "slate", "split": "train"}
    assert accepted(reset, given) == {"seed": 1, "word": "slate"}
    assert accepted(open_reset, given) == given


def test_an_openenv_episode_class_must_name_its_environment():
    with pytest.raises(InputError, match="set `factory`"):
        OpenEnvEpisode()


@pytest.mark.parametrize(
    ("spec", "package"), [("verifiers:wordle", "verifiers"), ("openenv:game:Env", "openenv-core")]
)
def test_a_hub_spec_without_its_library_says_how_to_get_it(spec, package):
    module = package.replace("-core", "")
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{package} is installed here")
    with pytest.raises(InputError) as raised:
        environment_factory(AgentConfig(environments={"game": spec}))
    message = str(raised.value)
    assert f"rollout.agent.environments.game={spec!r}" in message
    assert f"needs the {package} package" in message and "make hubs-venv" in message


def test_a_hub_spec_must_name_an_environment():
    with pytest.raises(InputError, match="names no environment after 'openenv:'"):
        environment_factory(AgentConfig(environment="openenv:"))
