"""``rollout.agent``: environments by name and import path, tools from config, and an
episode's outcome shared by its samples."""

import json

import pytest
import torch

from ascent.agents.config import AgentConfig
from ascent.agents.environment import ToolEnvironment
from ascent.agents.episodes import agent_prompt_check, environment_factory, episode_outcomes
from ascent.batch import Batch
from ascent.data.files import MalformedRow
from ascent.data.rl import RLDataConfig, load_rl_prompts
from ascent.errors import InputError
from ascent.models import load_tokenizer
from tests.agents.envs import Again
from tests.data.test_rl_data import verl_row

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
    with pytest.raises(MalformedRow, match=r"agent_name is 'chess'.*names \['again'\]"):
        make(with_agent("chess"))


def test_an_environment_that_is_not_one_is_refused_by_name():
    with pytest.raises(
        InputError, match=r"rollout\.agent\.environment='tests\.agents\.envs:ROWS' is not an"
    ):
        environment_factory(AgentConfig(environment="tests.agents.envs:ROWS"))


def test_every_sample_of_an_episode_gets_its_outcome_and_the_environments_rewards():
    """Episode 0 drifted into two samples (rows 0, 1); episode 1 is one sample (row 2). The
    scorer saw each row alone: only row 1 holds episode 0's final answer."""
    batch = Batch.from_dict(
        {
            "uid": ["p", "p", "p"],
            "episode": [0, 0, 1],
            "scores": torch.tensor([0.0, 1.0, 0.0]),
            "acc": torch.tensor([0.0, 1.0, 0.0]),
            "reward_extra/pred": torch.tensor([3.0, 7.0, 5.0]),
            "token_rewards": torch.tensor([[0.0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]]),
            "responses": torch.zeros(3, 4, dtype=torch.long),  # the last 4 columns
            "attention_mask": torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0], [1] * 6]),
            "turn_rewards": [[(0, 0.5)], [(1, 0.25)], [(2, -1.0), (3, 2.0)]],
        }
    )
    out = episode_outcomes(batch)
    assert out["scores"].tolist() == [1.75, 1.75, 1.0]  # outcome + the episode's env rewards
    assert out["acc"].tolist() == [1.0, 1.0, 0.0]
    assert out["reward_extra/pred"].tolist() == [7.0, 7.0, 5.0]
    assert out["env_reward"].tolist() == [0.75, 0.75, 1.0]
    assert out["token_rewards"].tolist() == [
        [0.5, 1.0, 0.0, 0.0],  # row 0: its turn's 0.5, and the outcome on its last token
        [0.0, 0.25, 1.0, 0.0],
        [0.0, 0.0, -1.0, 2.0],
    ]


def test_rows_whose_episodes_could_not_run_are_malformed_when_loaded(tiny_model, tmp_path):
    """Found before training, named by file and row: tools the tool environment does not have,
    an agent_name no environment has. A custom environment's rows keep their own tools."""
    config = AgentConfig(
        tools=["tests.agents.test_agent_loop:multiply"],
        environments={"again": "tests.agents.envs:Again"},
    )
    good = {"tools": [{"name": "multiply"}]}
    cases = [
        ({"tools": [{"name": "multiply"}, {"name": "search"}]}, r"row 1 of .*\['search'\], wh"),
        ({"extra_info": {"agent_name": "chess"}}, r"row 1 of .*agent_name is 'chess'"),
    ]
    tokenizer = load_tokenizer(tiny_model)
    for bad, message in cases:
        rows = [
            good,
            bad,
            {**good, "extra_info": {"agent_name": "again"}, "tools": [{"name": "x"}]},
        ]
        path = tmp_path / "train.jsonl"
        path.write_text("".join(json.dumps(verl_row("q", "1") | row) + "\n" for row in rows))
        data = RLDataConfig(train_files=[str(path)])
        with pytest.raises(MalformedRow, match=message):
            load_rl_prompts([str(path)], tokenizer, data, agent_prompt_check(config))
        kept, counts = load_rl_prompts(
            [str(path)],
            tokenizer,
            data.model_copy(update={"malformed": "skip"}),
            agent_prompt_check(config),
        )
        assert counts["skipped_malformed"] == 1 and len(kept) == 2
