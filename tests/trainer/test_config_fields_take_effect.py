"""Config fields that were documented but did nothing now change the run: the overlong
penalty's factor, PF-PPO, the critic's packing; estimator and loss parameters are checked
against the function's signature at start, naming what it takes."""

import pytest
import torch

from ascent.batch import Batch
from ascent.trainer.rl.advantage import AdvantageStage
from ascent.trainer.rl.roles import critic_config
from tests.trainer.test_rl_config import plan_for


def rollout_batch(lengths: list[int], scores: list[float], width: int = 8) -> Batch:
    """A scored rollout batch as the trainer holds it before the advantage stage: two groups
    (uid a, b), prompts of 2 tokens, responses of ``lengths`` tokens out of ``width``, each
    score on its last token."""
    rows = len(lengths)
    response_mask = (torch.arange(width) < torch.tensor(lengths)[:, None]).float()
    token_rewards = torch.zeros(rows, width)
    token_rewards[torch.arange(rows), torch.tensor(lengths) - 1] = torch.tensor(scores)
    return Batch.from_dict(
        {
            "responses": torch.ones(rows, width, dtype=torch.long),
            "response_mask": response_mask,
            "attention_mask": torch.cat([torch.ones(rows, 2), response_mask], dim=1).long(),
            "prompt_mask": torch.ones(rows, 2),
            "token_rewards": token_rewards,
            "scores": torch.tensor(scores),
            "acc": (torch.tensor(scores) > 0).float(),
            "uid": ["a"] * (rows // 2) + ["b"] * (rows - rows // 2),
        }
    )


def stage(*overrides: str, seed: int = 0) -> AdvantageStage:
    config, plan = plan_for("rollout.max_response_length=8", *overrides)
    return AdvantageStage(plan, config.algorithm.kl, config.rollout.max_response_length, seed)


def test_overlong_penalty_sets_the_penalty_at_the_length_limit():
    """DAPO's soft overlong shaping over the last 4 tokens: a response that reaches the limit
    (8 tokens) loses exactly ``overlong_penalty``; one that ends before the zone loses
    nothing. (The field was documented and ignored: the penalty was always 1.)"""
    batch = rollout_batch([8, 3, 8, 3], [1.0, 1.0, 0.0, 0.0])
    for factor in (0.25, 1.0, 2.0):
        shaped, metrics = stage(
            "algorithm.name=dapo",
            "algorithm.overlong_buffer=4",
            f"algorithm.overlong_penalty={factor}",
        )(batch, step=0)
        total = (shaped["rewards"] * batch["response_mask"]).sum(-1)
        assert torch.allclose(total, torch.tensor([1.0 - factor, 1.0, -factor, 0.0]))
        assert metrics["critic/overlong_penalty/mean"] == pytest.approx(-factor / 2)


def test_pf_ppo_resamples_the_batch_by_score_reproducibly():
    """max_min keeps only the best and worst responses (drawn with replacement); the draw
    depends on the seed and step, so a resumed step draws the same rows."""
    batch = rollout_batch([4] * 8, [0.1, 0.9, 0.5, 0.2, 0.3, 0.0, 0.6, 0.4])
    batch = batch.assign(rank=torch.arange(8))
    resampled, metrics = stage("algorithm.pf_ppo={method: max_min}")(batch, step=3)
    assert len(resampled) == 8
    assert set(resampled["rank"].tolist()) <= {1, 5}  # the max and the min score
    assert metrics["pf_ppo/unique_share"] <= 2 / 8
    # The advantages were computed on the batch as collected, then rows were drawn.
    plain, _ = stage()(batch, step=3)
    rows = resampled["rank"]
    assert torch.equal(resampled["advantages"], plain["advantages"][rows])

    again, _ = stage("algorithm.pf_ppo={method: pow, power: 1}")(batch, step=3)
    same, _ = stage("algorithm.pf_ppo={method: pow, power: 1}")(batch, step=3)
    other, _ = stage("algorithm.pf_ppo={method: pow, power: 1}")(batch, step=4)
    assert torch.equal(again["rank"], same["rank"])
    assert not torch.equal(again["rank"], other["rank"])
    assert 5 not in again["rank"].tolist()  # score 0 has weight ~1e-8


def test_without_pf_ppo_the_batch_is_not_resampled():
    batch = rollout_batch([4] * 4, [1.0, 0.0, 1.0, 0.0]).assign(rank=torch.arange(4))
    out, metrics = stage()(batch, step=0)
    assert torch.equal(out["rank"], torch.arange(4)) and "pf_ppo/unique_share" not in metrics


def test_the_critic_inherits_the_policy_models_settings_but_not_its_lora():
    config, plan = plan_for(
        "algorithm.name=ppo",
        "model.packing=padded",
        "model.gradient_checkpointing=true",
        "model.lora={rank: 4}",
    )
    critic = critic_config(config, plan).model
    assert critic.packing == "padded" and critic.gradient_checkpointing
    assert critic.path == config.model.path and critic.lora is None
    expected = config.model.model_dump(exclude={"lora"})
    assert critic.model_dump(exclude={"lora"}) == expected  # every field, including new ones


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("algorithm.loss_params={clip_ratio: 0.2}", "clip_low"),
        ("algorithm.estimator_params={gamma: 0.9}", "norm_by_std, eps"),
    ],
)
def test_unknown_estimator_or_loss_params_fail_at_start_naming_what_is_taken(override, named):
    with pytest.raises(ValueError, match=named) as error:
        plan_for(override)
    assert override.split("=")[0] in str(error.value)


def test_known_params_pass_the_start_check():
    _, plan = plan_for("algorithm.loss_params={clip_low: 0.1, clip_high: 0.3}")
    assert plan.loss_params == {"clip_low": 0.1, "clip_high": 0.3}
