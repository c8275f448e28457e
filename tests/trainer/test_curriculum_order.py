"""What the pass-rate curriculum learns from, and when: every scored round's groups (those
dynamic sampling then drops too, an agent's episodes once each), in step order; generating
ahead at staleness k, step t's prompts are drawn once exactly the steps before t - k are
observed, so two runs on the fixed schedule draw the same prompts."""

import json
import string
from collections import defaultdict

import pytest
import torch

from ascent.batch import Batch
from ascent.data.curriculum import PassRateConfig, PassRateSampler
from ascent.data.rl import RLPrompt
from ascent.trainer.rl.ahead import RolloutsAhead
from ascent.trainer.rl.loop import train_rl
from ascent.trainer.rl.rows import SampleRows
from ascent.trainer.rl.sources import Ahead, Scoring
from ascent.trainer.rl.timing import StageTimes
from tests.trainer.rl_setup import config, metric

N = 4  # samples per prompt


class Recording(PassRateSampler):
    """The sampler, noting how many groups it had observed at each take."""

    def __init__(self) -> None:
        prompts = [RLPrompt([i + 1], "s", str(i), prompt_id=f"p#{i}") for i in range(64)]
        super().__init__(prompts, PassRateConfig(), samples_per_prompt=N, seed=0)
        self.observed, self.takes_at = 0, []

    def take(self, count):
        self.takes_at.append(self.observed)
        return super().take(count)

    def observe(self, batch, weights):
        self.observed += len(set(batch["uid"]))
        return super().observe(batch, weights)


class Generator:
    """A rollout group that answers at once: n copies of each prompt, the first half right."""

    def __init__(self) -> None:
        self.submitted: dict[str, Batch] = {}

    def start_rollouts(self, prompts, tag, sampling, together):
        self.submitted[tag] = prompts

    def take_rollouts(self, tag):
        prompts = self.submitted.pop(tag)
        rows = [row for row in range(len(prompts)) for _ in range(N)]
        acc = torch.tensor([float(i % N < N // 2) for i in range(len(rows))])
        return Batch.from_dict(
            {
                "uid": [prompts["uid"][r] for r in rows],
                "prompt_id": [prompts["prompt_id"][r] for r in rows],
                "acc": acc,
            }
        )

    def background_counters(self):
        return {"busy_s": 0.0, "restarted": 0}


class Rewards:
    def score(self, batch):
        return batch, {}


def test_generating_ahead_draws_step_t_after_the_steps_before_t_minus_k():
    stream, k, steps = Recording(), 2, 8
    ahead = RolloutsAhead(
        Generator(),
        stream,
        pad_id=0,
        prompts_per_step=3,
        total_steps=steps,
        seed=0,
        max_staleness=k,
        in_flight_updates=False,
    )
    source = Ahead(ahead, Scoring(Rewards(), SampleRows(), StageTimes(), stream.observe), int)
    ahead.start(0)
    for step in range(steps):
        _, metrics = source.collect(step)
        assert metrics["sampler/prompts_seen"] > 0
    # step t's prompts were drawn with the groups of steps 0 .. t-k-1 observed (3 a step)
    assert stream.takes_at == [3 * max(0, t - k) for t in range(steps)]


def test_scoring_hands_the_row_kinds_weights_to_the_sampler():
    """An episode split into k rows weighs 1/k in group statistics (``sample_weights``): the
    sampler gets those weights with the scored round, so the episode counts once."""

    class SplitEpisodes(SampleRows):
        def sample_weights(self, batch):
            return torch.tensor([0.5, 0.5, 1.0, 1.0])

    stream = Recording()
    scoring = Scoring(Rewards(), SplitEpisodes(), StageTimes(), stream.observe)
    acc = torch.tensor([1.0, 1.0, 0.0, 1.0])
    batch = Batch.from_dict({"uid": ["a"] * 4, "prompt_id": ["p#0"] * 4, "acc": acc})
    scoring(batch, defaultdict(float))
    assert (float(stream.right[0]), float(stream.wrong[0])) == (2.0, 1.0)


def test_a_pass_rate_run_learns_from_the_groups_dynamic_sampling_drops(
    tiny_model, prompts, tmp_path
):
    """Every round's 8 groups reach the sampler, those dropped for want of signal too (with
    decay 1 its counts add up: 8 samples a group)."""
    run = [
        "data.sampler=pass_rate",
        "data.pass_rate.decay=1.0",
        "algorithm.dynamic_sampling=true",
        "trainer.total_steps=2",
    ]
    train_rl(config(tiny_model, prompts, tmp_path, *run))
    state = json.loads((tmp_path / "checkpoints/step_00000002/trainer_state.json").read_text())
    observed = sum(right + wrong for right, wrong in state["data"]["pass_rate"].values()) / 8
    rounds = metric(tmp_path, "dynamic_sampling/rounds")
    assert observed == 8 * sum(rounds)
    assert sum(metric(tmp_path, "dynamic_sampling/groups")) < observed  # some were dropped


def test_two_runs_ahead_on_the_fixed_schedule_draw_the_same_prompts(tiny_model, prompts, tmp_path):
    run = [
        "data.sampler=pass_rate",
        "trainer.mode=async",
        "trainer.max_staleness=2",
        "trainer.async_schedule=fixed",
        "trainer.total_steps=5",
    ]
    for name in ("a", "b"):
        train_rl(config(tiny_model, prompts, tmp_path / name, *run))
    trained = [(tmp_path / name / "trained_prompts.jsonl").read_text() for name in ("a", "b")]
    assert trained[0] == trained[1]
    assert metric(tmp_path / "a", "sampler/pass_rate_mean") == metric(
        tmp_path / "b", "sampler/pass_rate_mean"
    )


def test_an_agent_episode_counts_once_however_many_rows_it_has(tiny_model, prompts, tmp_path):
    """Multi-turn episodes (rows split where a template drifted): each prompt's counts grow
    by one per episode, 4 a group (decay 1 adds them up)."""
    run = [
        "data.sampler=pass_rate",
        "data.pass_rate.decay=1.0",
        "trainer.total_steps=2",
        "data.chat_template=true",
        "data.prompts_per_step=4",
        "rollout.samples_per_prompt=4",
        "rollout.max_response_length=96",
        f"rollout.stop=[{', '.join(string.ascii_lowercase)}]",
        "rollout.agent.environment=tests.agents.envs:Again",
        "rollout.agent.max_turns=3",
    ]
    train_rl(config(tiny_model, prompts, tmp_path, *run))
    state = json.loads((tmp_path / "checkpoints/step_00000002/trainer_state.json").read_text())
    counts = [right + wrong for right, wrong in state["data"]["pass_rate"].values()]
    assert sum(counts) == pytest.approx(2 * 4 * 4)
    assert all(count / 4 == pytest.approx(round(count / 4)) for count in counts)
