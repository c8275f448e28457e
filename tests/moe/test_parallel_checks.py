"""Expert parallelism that cannot work is refused when the run is planned, before any worker
starts, with the field and what to change."""

import pytest

from ascent.config import ConfigError
from ascent.trainer.rl.plan import make_plan
from tests.trainer.rl_setup import config


def plan(path, prompts, tmp_path, *overrides):
    return make_plan(config(path, prompts, tmp_path / "run", *overrides))


def test_a_divisor_of_ranks_and_experts_is_accepted(tiny_moe, prompts, tmp_path):
    plan(
        tiny_moe, prompts, tmp_path, "resources.devices_per_node=2", "actor.fsdp.expert_parallel=2"
    )


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ("resources.devices_per_node=2", "actor.fsdp.expert_parallel=3"),
            "actor.fsdp.expert_parallel=3 must divide the 2 training rank(s)",
        ),
        (
            ("resources.devices_per_node=8", "actor.fsdp.expert_parallel=8"),
            "actor.fsdp.expert_parallel=8 must divide the model's 4 experts",
        ),
        (
            ("resources.devices_per_node=2", "algorithm.name=ppo", "critic.fsdp.expert_parallel=4"),
            "critic.fsdp.expert_parallel=4 must divide the 2 training rank(s)",
        ),
    ],
)
def test_what_cannot_split_is_refused(tiny_moe, prompts, tmp_path, overrides, message):
    with pytest.raises(ConfigError) as error:
        plan(tiny_moe, prompts, tmp_path, *overrides)
    assert message in str(error.value)


def test_a_dense_model_has_no_experts_to_split(tiny_model, prompts, tmp_path):
    with pytest.raises(ConfigError, match=r"is a dense model .* set it to 1"):
        plan(
            tiny_model,
            prompts,
            tmp_path,
            "resources.devices_per_node=2",
            "actor.fsdp.expert_parallel=2",
        )


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ("resources.devices_per_node=2", "actor.sequence_parallel=2"),
            "actor.sequence_parallel=2 splits packed rows: set model.packing=packed",
        ),
        (
            ("resources.devices_per_node=8", "model.packing=packed", "actor.sequence_parallel=8"),
            "actor.sequence_parallel=8 must divide the model's 4 attention heads",
        ),
        (
            ("resources.devices_per_node=2", "model.packing=packed", "actor.sequence_parallel=4"),
            "actor.sequence_parallel=4 must divide the 2 training rank(s)",
        ),
    ],
)
def test_what_cannot_split_its_sequences_is_refused(
    tiny_model, prompts, tmp_path, overrides, message
):
    with pytest.raises(ConfigError) as error:
        plan(tiny_model, prompts, tmp_path, *overrides)
    assert message in str(error.value)


def test_split_sequences_are_planned(tiny_model, prompts, tmp_path):
    plan(
        tiny_model,
        prompts,
        tmp_path,
        "resources.devices_per_node=2",
        "model.packing=packed",
        "actor.sequence_parallel=2",
        "algorithm.name=ppo",
        "critic.sequence_parallel=2",
    )


def test_experts_and_sequences_split_over_axes_that_nest(tiny_moe, prompts, tmp_path):
    """sp = ep: the same ranks split both; sp = 2, ep = 4 on 8 ranks: nested axes."""
    split = ("model.packing=packed", "actor.sequence_parallel=2")
    for ranks, ep in ((2, 2), (8, 4)):
        plan(
            tiny_moe,
            prompts,
            tmp_path,
            f"resources.devices_per_node={ranks}",
            *split,
            f"actor.fsdp.expert_parallel={ep}",
        )


def test_a_vision_language_model_is_not_split_yet(tiny_vlm, prompts, tmp_path):
    with pytest.raises(ConfigError, match="vision-language models are not split yet"):
        plan(
            tiny_vlm,
            prompts,
            tmp_path,
            "resources.devices_per_node=2",
            "model.packing=packed",
            "actor.sequence_parallel=2",
        )
