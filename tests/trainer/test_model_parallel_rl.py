"""Live RL runs with the actor (and its reference) split over two ranks: two GRPO steps with
the native engine colocated, generating with weights gathered from the split actor; the
engine's log-probs agree with the trainer's after the first update too (the refresh reached
it). Layers split over two tensor ranks (padded and packed rows), and sequences split over a
ring of two."""

import pytest

from ascent.trainer.rl.loop import train_rl
from tests.trainer.rl_setup import config, metric

pytestmark = pytest.mark.integration

LAYOUTS = {
    "tensor_padded": ("actor.parallel.tensor=2", "model.packing=padded"),
    "tensor_packed": ("actor.parallel.tensor=2", "model.packing=packed"),
    "ring": ("actor.parallel.context=2", "model.packing=packed"),
}


@pytest.mark.parametrize(
    "layout",
    [
        "tensor_packed",
        "ring",
        pytest.param("tensor_padded", marks=pytest.mark.slow),  # the padding is in tests/workers
    ],
)
def test_two_grpo_steps_split_over_two_ranks(tiny_model, layout, prompts, tmp_path, local_ray):
    overrides = ("trainer.total_steps=2", "resources.devices_per_node=2", *LAYOUTS[layout])
    train_rl(config(tiny_model, prompts, tmp_path, *overrides))
    assert len(metric(tmp_path, "actor/pg_loss")) == 2
    mismatch = metric(tmp_path, "actor/rollout_mismatch_max_abs")
    assert len(mismatch) == 2 and max(mismatch) < 1e-4, mismatch
