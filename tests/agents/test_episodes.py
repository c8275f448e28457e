"""``rollout.agent``: environments by name and import path, tools from config."""

import pytest

from ascent.agents.config import AgentConfig
from ascent.agents.environment import ToolEnvironment
from ascent.agents.episodes import environment_factory
from tests.agents.envs import Again

ROW = {"prompt": [{"role": "user", "content": "hi"}]}


def with_agent(name):
    return {**ROW, "extra_info": {"agent_name": name}}


def test_rows_pick_their_environment_and_tools_come_from_import_paths():
    make = environment_factory(
        AgentConfig(
            tools=["tests.agents.test_agent_loop:multiply", "python"],
            environments={"again": "tests.agents.envs:Again"},
        )
    )
    default = make(ROW)
    assert isinstance(default, ToolEnvironment)
    assert [tool.name for tool in default.tools] == ["multiply", "python"]
    assert make(ROW) is not default  # a fresh environment per episode
    assert isinstance(make(with_agent("again")), Again)
    assert isinstance(make(with_agent("tool_agent")), ToolEnvironment)
    with pytest.raises(KeyError, match=r"agent_name 'chess'.*names \['again'\]"):
        make(with_agent("chess"))


def test_an_environment_that_is_not_one_is_refused_by_name():
    with pytest.raises(TypeError, match=r"'default' = 'tests\.agents\.envs:ROWS' is not an"):
        environment_factory(AgentConfig(environment="tests.agents.envs:ROWS"))
