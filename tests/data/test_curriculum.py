"""The pass-rate curriculum (``data.sampler=pass_rate``): easy and hard prompts weigh less
than unseen ones, and those whose groups disagree more; the floor starves none; draws are
distinct within a take and deterministic; its state continues it exactly."""

import json
from collections import Counter

import pytest
import torch

from ascent.batch import Batch
from ascent.data.curriculum import PassRateConfig, PassRateSampler, group_outcomes
from ascent.data.rl import PromptStream, RLDataConfig, RLPrompt, prompt_stream


def prompts(count):
    return [RLPrompt([i + 1], "s", str(i), prompt_id=f"train.jsonl#{i}") for i in range(count)]


def groups(outcomes, n=8):
    """A scored round: for each (prompt index, right answers), a group of n samples."""
    uid, ids, acc = [], [], []
    for group, (index, right) in enumerate(outcomes):
        uid += [f"1.0-{group}"] * n
        ids += [f"train.jsonl#{index}"] * n
        acc += [1.0] * right + [0.0] * (n - right)
    return Batch.from_dict({"uid": uid, "prompt_id": ids, "acc": torch.tensor(acc)})


def sampler(count=10, seed=0, **settings):
    return PassRateSampler(
        prompts(count), PassRateConfig(**settings), samples_per_prompt=8, seed=seed
    )


def test_easy_and_hard_prompts_weigh_less_than_unseen_and_mixed_ones_more():
    s = sampler()
    s.observe(groups([(0, 8), (1, 0), (2, 4), (3, 7)]), None)
    weights = s.weights()
    unseen = weights[9]
    assert weights[0] < 0.5 * unseen and weights[1] < 0.5 * unseen  # all right / all wrong
    assert torch.isclose(weights[0], weights[1])  # Beta(a, a) prior: symmetric
    assert weights[2] > unseen and weights[3] > weights[0]
    assert float(unseen) == pytest.approx(1 - 2 * 12870 / 4**8)  # a = 1/2: C(16, 8) / 4^8
    for _ in range(3):  # more evidence, less weight; a group that disagrees restores it
        s.observe(groups([(0, 8)]), None)
    assert s.weights()[0] < weights[0]
    s.observe(groups([(0, 4)]), None)
    assert s.weights()[0] > unseen


def test_the_floor_starves_no_prompt():
    s = sampler(count=20, floor=0.1, decay=1.0)
    for _ in range(50):  # prompts 0-9 certainly solved, 10-14 mixed, 15-19 unseen
        s.observe(groups([(i, 8) for i in range(10)] + [(i, 4) for i in range(10, 15)]), None)
    assert torch.all(s.weights()[:10] == 0.1)
    first_draw = s.probabilities()
    assert float(first_draw.min()) >= 0.1 / 20  # each draw: at least floor / N
    assert float(first_draw[10]) > 5 * float(first_draw[0])
    drawn = Counter(p.prompt_id for _ in range(2000) for p in s.take(4))
    for i in range(10):  # a first draw's chance alone gives 2000 * 0.1 / 20 = 10
        assert drawn[f"train.jsonl#{i}"] >= 0.5 * 2000 * float(first_draw[i])


def test_draws_are_distinct_within_a_take_and_deterministic():
    a, b, other = sampler(seed=3), sampler(seed=3), sampler(seed=4)
    for s in (a, b, other):
        s.observe(groups([(0, 8), (1, 3)]), None)
    takes = [[p.prompt_id for p in a.take(6)] for _ in range(5)]
    assert all(len(set(take)) == 6 for take in takes)
    assert takes == [[p.prompt_id for p in b.take(6)] for _ in range(5)]
    assert takes != [[p.prompt_id for p in other.take(6)] for _ in range(5)]
    assert len({tuple(take) for take in takes}) > 1  # each take its own draw
    twice = [p.prompt_id for p in a.take(15)]  # more than there are: every one, then 5 again
    assert len(twice) == 15 and len(set(twice[:10])) == 10


def test_one_sample_per_prompt_draws_uniformly():
    s = PassRateSampler(prompts(5), PassRateConfig(), samples_per_prompt=1, seed=0)
    s.observe(groups([(0, 1), (1, 0)], n=1), None)
    assert torch.allclose(s.probabilities(), torch.full((5,), 0.2, dtype=torch.float64))


def test_the_state_round_trips_through_json_and_continues_exactly():
    s = sampler(decay=0.7)
    s.observe(groups([(0, 8), (1, 2), (2, 5)]), None)
    s.take(4)
    s.observe(groups([(1, 1), (3, 0)]), None)
    saved = json.loads(json.dumps(s.state()))  # as trainer_state.json keeps it
    assert saved["takes"] == 1 and set(saved["pass_rate"]) == {f"train.jsonl#{i}" for i in range(4)}
    restored = sampler(decay=0.7)
    restored.load_state(saved)
    assert torch.equal(restored.weights(), s.weights())
    expected = [[p.prompt_id for p in s.take(4)] for _ in range(3)]
    assert [[p.prompt_id for p in restored.take(4)] for _ in range(3)] == expected


def test_a_checkpoint_of_the_other_sampler_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="resume with the sampler it was saved with"):
        sampler().load_state({"epoch": 0, "offset": 8})
    uniform = PromptStream(prompts(4), shuffle=True, seed=0)
    with pytest.raises(ValueError, match="resume with the sampler it was saved with"):
        uniform.load_state(sampler().state())


def test_an_episode_counts_once_and_acc_is_read_as_a_success():
    """Two episodes of one prompt: the first split into two rows (weights 1/2 each), right;
    the second one row, wrong. A third group's acc outside [0, 1] is clamped."""
    batch = Batch.from_dict(
        {
            "uid": ["a", "a", "a", "b", "b"],
            "prompt_id": ["p#0", "p#0", "p#0", "p#1", "p#1"],
            "acc": torch.tensor([1.0, 1.0, 0.0, -1.0, 2.0]),
        }
    )
    weights = torch.tensor([0.5, 0.5, 1.0, 1.0, 1.0])
    assert group_outcomes(batch, weights) == [("p#0", 1.0, 2.0), ("p#1", 1.0, 2.0)]


def test_the_data_config_picks_the_sampler():
    uniform = prompt_stream(prompts(4), RLDataConfig(train_files=["x"]), 8)
    curriculum = prompt_stream(
        prompts(4), RLDataConfig(train_files=["x"], sampler="pass_rate", seed=2), 8
    )
    assert isinstance(uniform, PromptStream) and uniform.observe(groups([(0, 8)]), None) == {}
    assert isinstance(curriculum, PassRateSampler) and curriculum.seed == 2
    metrics = curriculum.observe(groups([(0, 8), (1, 4)]), None)
    assert metrics["sampler/prompts_seen"] == 2.0
