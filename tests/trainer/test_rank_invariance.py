"""An RL update does not depend on the number of data-parallel ranks: the same rollouts
(dumped once, replayed) trained on one rank and on two ranks over Ray, with two mini-batches
per step for the actor and the critic, give the same losses and gradient norms, step after
step; so does one replica whose sequences are split over two ranks (Ulysses), and one whose
layers are split over two tensor ranks. Without
``for_ranks`` rank r's j-th slice would make global mini-batch j hold
different rows for one and two ranks."""

import json

import pytest

from ascent.trainer.rl.loop import train_rl
from tests.trainer.rl_setup import config, metric

TWO_MINI_BATCHES = [
    "algorithm.name=ppo",  # a critic too: its mini-batches are ordered the same way
    "actor.prompts_per_update=4",
    "critic.prompts_per_update=4",
    "critic.optim.lr=1e-3",
    "trainer.total_steps=2",
]


@pytest.mark.integration
def test_one_and_two_ranks_make_the_same_updates(tiny_model, prompts, tmp_path, local_ray):
    dumps = tmp_path / "dumps"
    train_rl(
        config(
            tiny_model,
            prompts,
            tmp_path / "live",
            *TWO_MINI_BATCHES,
            f"trainer.dump_rollouts={dumps}",
        )
    )
    split = ["model.packing=packed", "actor.parallel.sequence=2", "critic.parallel.sequence=2"]
    tensor = ["actor.parallel.tensor=2", "critic.parallel.tensor=2"]
    layouts = [("one", 1, []), ("two", 2, []), ("split", 2, split), ("tensor", 2, tensor)]
    for name, ranks, extra in layouts:
        train_rl(
            config(
                tiny_model,
                prompts,
                tmp_path / name,
                *TWO_MINI_BATCHES,
                f"trainer.replay_rollouts={dumps}",
                f"resources.devices_per_node={ranks}",
                *extra,
            )
        )
    for key in ["actor/pg_loss", "actor/grad_norm", "actor/pg_clipfrac", "critic/vf_loss"]:
        one = metric(tmp_path / "one", key)
        assert len(one) == 2, key
        for other in ("two", "split", "tensor"):  # split, tensor: one replica over two ranks
            assert metric(tmp_path / other, key) == pytest.approx(one, rel=1e-4, abs=1e-6), key
    workers = json.loads((tmp_path / "two" / "processes.json").read_text())
    assert {w["rank"] for w in workers if w["role"] == "actor"} == {0, 1}
