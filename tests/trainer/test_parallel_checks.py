"""A ``parallel`` section that cannot work (tensor, sequence or expert degrees that do not
divide the ranks, heads, MLP width or experts; a family without a tensor plan) is refused
when the run is planned, before any worker starts, with the field and what to change; one
that can is planned and printed."""

import pytest
from pydantic import ValidationError

from ascent.config import ConfigError
from ascent.trainer.rl.plan import make_plan
from ascent.workers.config import ActorConfig
from tests.families.models import build
from tests.trainer.rl_setup import config


def plan(path, prompts, tmp_path, *overrides):
    return make_plan(config(path, prompts, tmp_path / "run", *overrides))


def test_a_divisor_of_ranks_and_experts_is_accepted(tiny_moe, prompts, tmp_path):
    plan(tiny_moe, prompts, tmp_path, "resources.devices_per_node=2", "actor.parallel.expert=2")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ("resources.devices_per_node=2", "actor.parallel.expert=3"),
            "actor.parallel.expert=3 must divide the 2 rank(s) outside the tensor axis",
        ),
        (
            ("resources.devices_per_node=8", "actor.parallel.expert=8"),
            "actor.parallel.expert=8 must divide the model's 4 experts",
        ),
        (
            ("resources.devices_per_node=2", "algorithm.name=ppo", "critic.parallel.expert=4"),
            "critic.parallel.expert=4 must divide the 2 rank(s)",
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
            "actor.parallel.expert=2",
        )


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ("resources.devices_per_node=2", "actor.parallel.sequence=2"),
            "actor.parallel.sequence=2 splits packed rows: set model.packing=packed",
        ),
        (
            ("resources.devices_per_node=8", "model.packing=packed", "actor.parallel.sequence=8"),
            "actor.parallel: tensor x sequence = 8 must divide the model's 4 attention heads",
        ),
        (
            ("resources.devices_per_node=2", "model.packing=packed", "actor.parallel.sequence=4"),
            "actor.parallel.sequence=4 must divide the 2 rank(s)",
        ),
        (
            ("resources.devices_per_node=2", "actor.parallel.tensor=3"),
            "actor.parallel.tensor=3 must divide the 2 training rank(s)",
        ),
        (
            ("resources.devices_per_node=4", "actor.parallel.tensor=4"),
            "actor.parallel.tensor=4 must divide the model's 2 key/value heads",
        ),
        (
            (
                "resources.devices_per_node=4",
                "actor.parallel.tensor=2",
                "actor.parallel.sequence=4",
            ),
            "actor.parallel.sequence=4 must divide the 2 rank(s) outside the tensor axis",
        ),
        (
            ("resources.devices_per_node=2", "algorithm.name=ppo", "critic.parallel.tensor=3"),
            "critic.parallel.tensor=3 must divide the 2 training rank(s)",
        ),
        (
            ("resources.devices_per_node=2", "actor.parallel.context=2"),
            "actor.parallel.context=2 splits packed rows: set model.packing=packed",
        ),
        (
            ("resources.devices_per_node=4", "model.packing=packed", "actor.parallel.context=3"),
            "actor.parallel.context=3 must divide the 4 rank(s)",
        ),
        (
            (
                "resources.devices_per_node=4",
                "model.packing=packed",
                "actor.parallel.context=2",
                "actor.parallel.sequence=4",
            ),
            "actor.parallel: context x sequence = 8 must divide the 4 rank(s)",
        ),
    ],
)
def test_what_cannot_split_the_dense_model_is_refused(
    tiny_model, prompts, tmp_path, overrides, message
):
    """Sequence (packed rows, heads, ranks), tensor (ranks, key/value heads) and context
    (packed rows, ranks, with sequence) degrees that cannot work."""
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
        "actor.parallel.sequence=2",
        "algorithm.name=ppo",
        "critic.parallel.sequence=2",
    )


def test_experts_and_sequences_split_over_axes_that_nest(tiny_moe, prompts, tmp_path):
    """sp = ep: the same ranks split both; sp = 2, ep = 4 on 8 ranks: nested axes."""
    split = ("model.packing=packed", "actor.parallel.sequence=2")
    for ranks, ep in ((2, 2), (8, 4)):
        plan(
            tiny_moe,
            prompts,
            tmp_path,
            f"resources.devices_per_node={ranks}",
            *split,
            f"actor.parallel.expert={ep}",
        )


def test_a_vision_language_model_is_not_split_yet(tiny_vlm, prompts, tmp_path):
    with pytest.raises(ConfigError, match="vision-language models are not split yet"):
        plan(
            tiny_vlm,
            prompts,
            tmp_path,
            "resources.devices_per_node=2",
            "model.packing=packed",
            "actor.parallel.sequence=2",
        )


def test_the_ring_is_not_bounded_by_the_key_value_heads(tiny_moe, prompts, tmp_path):
    """One key/value head, four ring ranks: planned (Ulysses alone would be capped)."""
    plan(
        tiny_moe,
        prompts,
        tmp_path,
        "resources.devices_per_node=4",
        "model.packing=packed",
        "actor.parallel.context=4",
    )
    with pytest.raises(ConfigError, match=r"does not split experts yet"):
        plan(
            tiny_moe,
            prompts,
            tmp_path,
            "resources.devices_per_node=4",
            "model.packing=packed",
            "actor.parallel.context=2",
            "actor.parallel.expert=2",
        )


def test_a_family_without_a_tensor_plan_is_refused_by_name(prompts, tmp_path):
    """Phi-3 fuses q, k and v into one projection: no plan yet, and the error says so."""
    phi3 = str(build("phi3", tmp_path / "phi3"))
    with pytest.raises(ConfigError, match=r"'phi3' \(family phi3\) has no tensor-parallel plan"):
        plan(phi3, prompts, tmp_path, "resources.devices_per_node=2", "actor.parallel.tensor=2")


def test_the_step_plan_prints_each_roles_split(tiny_model, prompts, tmp_path):
    config_overrides = (
        "resources.devices_per_node=4",
        "model.packing=packed",
        "actor.parallel.tensor=2",
        "actor.parallel.sequence=2",
        "algorithm.name=ppo",
        "critic.parallel.tensor=2",
    )
    run_config = config(tiny_model, prompts, tmp_path / "run", *config_overrides)
    described = make_plan(run_config).describe(run_config)
    assert "actor ranks: 4 rank(s) = data 1 x tensor 2 x sequence 2" in described
    assert "critic ranks: 4 rank(s) = data 2 x tensor 2" in described


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ("resources.devices_per_node=2", "actor.parallel.pipeline=2"),
            "actor.parallel.pipeline=2 runs packed rows: set model.packing=packed",
        ),
        (
            ("resources.devices_per_node=4", "model.packing=packed", "actor.parallel.pipeline=4"),
            "actor.parallel.pipeline=4 exceeds the model's 2 layers",
        ),
        (
            ("resources.devices_per_node=2", "model.packing=packed", "actor.parallel.pipeline=3"),
            "actor.parallel: pipeline x tensor = 3 must divide the 2 training rank(s)",
        ),
        (
            (
                "resources.devices_per_node=4",
                "model.packing=packed",
                "actor.parallel.pipeline=2",
                "actor.parallel.sequence=2",
            ),
            "actor.parallel.pipeline=2 does not combine with actor.parallel.sequence yet",
        ),
        (
            (
                "resources.devices_per_node=2",
                "model.packing=packed",
                "model.lora.rank=4",
                "actor.parallel.pipeline=2",
            ),
            "actor.parallel.pipeline=2 does not take LoRA adapters yet",
        ),
    ],
)
def test_stages_that_cannot_work_are_refused(tiny_model, prompts, tmp_path, overrides, message):
    """Pipeline stages need packed rows, a layer per stage, ranks that split into
    pipeline x tensor, no sequence split (yet) and no LoRA (yet)."""
    with pytest.raises(ConfigError) as error:
        plan(tiny_model, prompts, tmp_path, *overrides)
    assert message in str(error.value)


def test_a_tied_head_is_not_cut_into_stages(tiny_tied_model, prompts, tmp_path):
    with pytest.raises(ConfigError, match=r"ties its head to the embedding"):
        plan(
            tiny_tied_model,
            prompts,
            tmp_path,
            "resources.devices_per_node=2",
            "model.packing=packed",
            "actor.parallel.pipeline=2",
        )


def test_the_step_plan_prints_the_stages(tiny_model, prompts, tmp_path):
    overrides = (
        "resources.devices_per_node=4",
        "model.packing=packed",
        "actor.parallel.tensor=2",
        "actor.parallel.pipeline=2",
    )
    run_config = config(tiny_model, prompts, tmp_path / "run", *overrides)
    described = make_plan(run_config).describe(run_config)
    assert "actor ranks: 4 rank(s) = data 1 x tensor 2 x pipeline 2" in described


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"model": {"path": "m"}}, "actor.parallel.pipeline=2 runs packed rows"),
        (
            {"model": {"path": "m", "packing": "packed", "lora": {"rank": 4}}},
            "does not take LoRA adapters yet",
        ),
        (
            {"model": {"path": "m", "packing": "packed"}, "router_replay": "rollout"},
            "does not take router_replay yet",
        ),
        (
            {"model": {"path": "m", "packing": "packed"}, "router_aux_loss_coef": 0.01},
            "does not take router_aux_loss_coef yet",
        ),
    ],
)
def test_an_actor_in_stages_refuses_what_they_do_not_take(settings, message):
    """The role's own config refuses it too (a worker built without the RL plan)."""
    with pytest.raises(ValidationError, match=message):
        ActorConfig.model_validate(settings | {"parallel": {"pipeline": 2}})
