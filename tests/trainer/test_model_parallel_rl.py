"""Live RL runs with the actor (and its reference) split over two ranks: two GRPO steps with
the native engine colocated, generating with weights gathered from the split actor; the
engine's log-probs agree with the trainer's after the first update too (the refresh reached
it). Layers split over two tensor ranks (padded and packed rows), sequences split over a
ring of two, and the layers cut into two pipeline stages. And exact resume under a split:
PPO with the actor, reference and critic split, four steps straight equal two, a resume,
and two more, bitwise."""

import pytest

from ascent.trainer.rl.loop import train_rl
from tests.trainer.rl_setup import config, metric

pytestmark = pytest.mark.integration

LAYOUTS = {
    "tensor_padded": ("actor.parallel.tensor=2", "model.packing=padded"),
    "tensor_packed": ("actor.parallel.tensor=2", "model.packing=packed"),
    "ring": ("actor.parallel.context=2", "model.packing=packed"),
    "pipeline": ("actor.parallel.pipeline=2", "model.packing=packed"),
}


@pytest.mark.parametrize(
    "layout",
    [
        "tensor_packed",
        "ring",
        "pipeline",
        pytest.param("tensor_padded", marks=pytest.mark.slow),  # the padding is in tests/workers
    ],
)
def test_two_grpo_steps_split_over_two_ranks(tiny_model, layout, prompts, tmp_path, local_ray):
    overrides = ("trainer.total_steps=2", "resources.devices_per_node=2", *LAYOUTS[layout])
    train_rl(config(tiny_model, prompts, tmp_path, *overrides))
    assert len(metric(tmp_path, "actor/pg_loss")) == 2
    mismatch = metric(tmp_path, "actor/rollout_mismatch_max_abs")
    assert len(mismatch) == 2 and max(mismatch) < 1e-4, mismatch


@pytest.mark.parametrize(
    "split",
    [
        ("actor.parallel.tensor=2", "critic.parallel.tensor=2"),
        pytest.param(
            ("actor.parallel.context=2", "critic.parallel.context=2", "model.packing=packed"),
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ("actor.parallel.pipeline=2", "critic.parallel.pipeline=2", "model.packing=packed"),
            marks=pytest.mark.slow,  # the stages' checkpoints: tests/workers too
        ),
    ],
    ids=["tensor", "ring", "pipeline"],
)
def test_a_split_run_resumes_exactly(tiny_model, prompts, tmp_path, local_ray, split):
    """PPO (actor, reference and critic split) on two ranks: four steps straight and two +
    resume + two log identical metrics, every value of every step."""
    from tests.trainer.test_resume import EXACT, records

    run = ["algorithm.name=ppo", "resources.devices_per_node=2", *split, *EXACT]
    whole, halves = tmp_path / "whole", tmp_path / "halves"
    train_rl(config(tiny_model, prompts, whole, "trainer.total_steps=4", *run))
    train_rl(config(tiny_model, prompts, halves, "trainer.total_steps=2", *run))
    assert (
        train_rl(config(tiny_model, prompts, halves, "trainer.total_steps=4", *run))["steps"] == 4
    )
    assert records(halves) == records(whole)
