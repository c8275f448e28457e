"""An outside agent trains end to end (``rollout.agent.run``): the official ``openai`` client
with tools, through the gateway, in sync and fixed-schedule async runs. The batch holds the
calls as the engine ran them (mask 1 on sampled tokens only, the trainer's log-probs equal
to the engine's), and the agent's rewards reach the tokens: the episode's on the last one, a
call's on that call's last sampled token."""

import json

import pytest
import torch

from ascent.batch import Batch
from ascent.config import ConfigError, dump_config
from ascent.trainer.rl.loop import train_rl
from ascent.trainer.rl.plan import make_plan
from tests.gateway.agents import FIRST_CALL_REWARD, row_reward
from tests.trainer.rl_setup import config, metric
from tests.trainer.test_async_rl import killed_after, trained
from tests.trainer.test_interruptions import start
from tests.trainer.test_rl_trainer import assert_learned

AGENT = (
    "data.chat_template=true",
    "data.prompts_per_step=4",
    "rollout.samples_per_prompt=2",
    "rollout.max_response_length=96",
    "rollout.agent.run=tests.gateway.agents:openai_tools_agent",
    "rollout.agent.max_turns=2",
    "reward.function=null",
)


def spans(mask: torch.Tensor) -> list[tuple[int, int]]:
    """[start, end) of each run of 1s in a row's response mask."""
    found, start = [], None
    for index, bit in enumerate([*mask.tolist(), 0]):
        if bit and start is None:
            start = index
        elif not bit and start is not None:
            found.append((start, index))
            start = None
    return found


def check_rewards_on_tokens(batch: Batch) -> None:
    """Each row's score is its agent's: the episode's reward plus its first call's; the
    first call's sits on that call's last token, the episode's on the row's last."""
    for row in range(len(batch)):
        expected = row_reward({"prompt": batch["raw_prompt"][row]})
        assert float(batch["agent_reward"][row]) == expected
        assert float(batch["scores"][row]) == pytest.approx(expected + FIRST_CALL_REWARD)
        sampled = spans(batch["response_mask"][row])
        if len(sampled) < 2:  # a rewritten history: the calls went to samples of their own
            continue
        rewards = batch["token_rewards"][row]
        first_end, last_end = sampled[0][1] - 1, sampled[-1][1] - 1
        assert float(rewards[first_end]) == pytest.approx(FIRST_CALL_REWARD)
        assert float(rewards[last_end]) == pytest.approx(expected)


def test_an_openai_client_agent_trains(tiny_model, prompts, tmp_path):
    dump = tmp_path / "rollouts"
    run = tmp_path / "run"
    train_rl(
        config(
            tiny_model,
            prompts,
            run,
            *AGENT,
            "trainer.total_steps=2",
            f"trainer.dump_rollouts={dump}",
            "trainer.val_every=2",
        )
    )
    assert metric(run, "agent/end/done") == [1.0, 1.0]
    assert metric(run, "agent/turns/mean") == [2.0, 2.0]
    assert max(metric(run, "rollout/mismatch_kl")) < 1e-3  # the engine's log-probs, trained
    assert metric(run, "val/agent/end/done") == [1.0]
    batch = Batch.load(dump / "step_00000002")
    assert sorted(set(batch["episode"])) == list(range(8))
    mask, versions = batch["response_mask"], batch["rollout_weight_versions"]
    assert bool((batch["rollout_log_probs"][mask == 0] == 0).all())
    assert set(versions[mask == 1].tolist()) == {1}  # sampled after step 1's update
    check_rewards_on_tokens(batch)


def test_an_outside_agent_trains_on_a_fixed_async_schedule(tiny_model, prompts, tmp_path):
    dump = tmp_path / "rollouts"
    run = tmp_path / "run"
    train_rl(
        config(
            tiny_model,
            prompts,
            run,
            *AGENT,
            "trainer.total_steps=3",
            "trainer.mode=async",
            "trainer.max_staleness=1",
            "trainer.async_schedule=fixed",
            f"trainer.dump_rollouts={dump}",
        )
    )
    assert metric(run, "agent/end/done") == [1.0, 1.0, 1.0]
    for step in (1, 2, 3):
        batch = Batch.load(dump / f"step_{step:08d}")
        mask = batch["response_mask"]
        # step s is sampled wholly by version max(0, s - 1 - k) with k = 1 (steps from 0)
        assert set(batch["rollout_weight_versions"][mask == 1].tolist()) == {max(0, step - 2)}
        check_rewards_on_tokens(batch)
    assert metric(run, "async/staleness_max") == [0.0, 1.0, 1.0]


def test_an_outside_agent_is_refused_where_it_cannot_run(tiny_model, prompts, tmp_path):
    with pytest.raises(ConfigError, match=r"rollout\.agent\.run.*remove rollout\.agent\.tools"):
        config(tiny_model, prompts, tmp_path, *AGENT, "rollout.agent.tools=[python]")
    with pytest.raises(ConfigError, match=r"rollout\.agent\.run cannot run on rollout\.engine"):
        make_plan(config(tiny_model, prompts, tmp_path, *AGENT, "rollout.engine=serve"))
    with pytest.raises(ConfigError, match=r"remax estimator cannot train an outside agent"):
        make_plan(config(tiny_model, prompts, tmp_path, *AGENT, "algorithm.estimator=remax"))


def test_the_agent_row_is_the_dataset_row(tiny_model, prompts, tmp_path):
    """What the agent is given: the row's prompt, data_source, ground truth, extra_info."""
    from ascent.gateway.rollouts import load_agent

    with pytest.raises(Exception, match=r"rollout\.agent\.run='tests\.gateway\.agents:nope'"):
        load_agent("tests.gateway.agents:nope")
    row = json.loads((prompts / "train.jsonl").read_text().splitlines()[0])
    assert row_reward(row) in (0.0, 0.5, 1.0)


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_an_outside_agents_success_rate_rises(tiny_model, prompts, tmp_path, seed):
    """An agent of three one-token calls, rewarded for the share of its replies that are
    digits (``tests.gateway.agents:digit_agent``): the policy learns it only if the agent's
    reward reaches the tokens of every call, through the gateway's samples. Seed 0 went
    from 0.04 to 0.70 in 30 steps (32 s) on the AMD EPYC; ``assert_learned`` asks for 0.4."""
    run = tmp_path / "run"
    train_rl(
        config(
            tiny_model,
            prompts,
            run,
            *AGENT,
            "rollout.agent.run=tests.gateway.agents:digit_agent",
            "rollout.agent.max_turns=3",
            "rollout.samples_per_prompt=8",
            "trainer.total_steps=30",
            f"trainer.seed={seed}",
        )
    )
    # The calls merge into one sample, but for a turn the template cannot write back (an
    # end-of-text token sampled where it writes <|im_end|>): about 1 episode in 30.
    assert max(metric(run, "agent/samples_per_episode")) < 1.25
    assert_learned(run)


@pytest.mark.integration
@pytest.mark.slow
def test_an_outside_agent_run_killed_with_sigkill_resumes_onto_the_same_rows(
    tiny_model, prompts, tmp_path
):
    """Async, killed with SIGKILL after a checkpoint, with episodes of later steps submitted
    (some in flight, their agents mid-call): the resumed run plays those steps' rows again,
    whole episodes from their rows, and trains on exactly the rows a run that never
    stopped trained on (none lost, none twice)."""
    steps = (
        *AGENT,
        "trainer.total_steps=12",
        "trainer.save_every=2",
        "trainer.resume=auto",
        "trainer.mode=async",
        "trainer.max_staleness=2",
    )
    train_rl(config(tiny_model, prompts, tmp_path / "straight", *steps))
    run_dir = tmp_path / "killed"
    config_file = tmp_path / "killed.yaml"
    dump_config(config(tiny_model, prompts, run_dir, *steps), config_file)
    latest = killed_after(config_file, run_dir / "checkpoints" / "step_00000004")
    killed_at = int(latest.name.removeprefix("step_"))
    assert 4 <= killed_at < 12
    assert (latest / "rollouts_ahead").is_dir(), "the checkpoint holds the rows in flight"
    rerun = start(config_file)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    assert f"at step {killed_at}" in out
    assert trained(run_dir) == trained(tmp_path / "straight"), "none lost, none twice"
    assert metric(run_dir, "agent/end/done")[-1] == 1.0
