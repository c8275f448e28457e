"""The RL config resolves every preset into a plan that names real estimators and losses, and
rejects impossible batch sizes and unknown names before any worker starts."""

import pytest

from ascent.algos.advantages import ADVANTAGE_ESTIMATORS
from ascent.algos.losses import POLICY_LOSSES
from ascent.config import ConfigError, load_config
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.plan import make_plan
from ascent.trainer.rl.presets import PRESETS

BASE = ["model.path=/m", "data.train_files=[t.parquet]"]


def plan_for(*overrides: str):
    config = load_config(RLConfig, None, [*BASE, *overrides])
    return config, make_plan(config)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_resolves_to_registered_pieces(name):
    config, plan = plan_for(f"algorithm.name={name}")
    ADVANTAGE_ESTIMATORS.get(plan.estimator)
    POLICY_LOSSES.get(plan.loss)
    assert plan.critic == (plan.estimator == "gae")
    # The reference serves a KL term, or PRIME's implicit PRM (its log-ratio).
    assert plan.reference == (plan.kl_mode != "none" or plan.implicit_prm)
    assert plan.greedy_baseline == (name == "remax")
    assert name in plan.describe(config)


def test_presets_set_what_their_papers_use():
    _, ppo = plan_for("algorithm.name=ppo")
    assert ppo.critic and not ppo.reference and ppo.estimator == "gae"
    _, grpo = plan_for("algorithm.name=grpo")
    assert (grpo.kl_mode, grpo.kl_estimator, grpo.kl_coef) == ("loss", "k3", 0.001)
    assert grpo.reference and not grpo.critic
    _, dapo = plan_for("algorithm.name=dapo", "rollout.max_response_length=100")
    assert dapo.dynamic_sampling and dapo.overlong_buffer == 25
    assert dapo.loss_params == {"clip_low": 0.2, "clip_high": 0.28}
    assert dapo.aggregation == "token-mean" and not dapo.reference
    _, drgrpo = plan_for("algorithm.name=drgrpo")
    assert drgrpo.aggregation == "seq-mean-token-sum-norm"
    _, vapo = plan_for("algorithm.name=vapo")
    assert vapo.critic and vapo.estimator_params["critic_lam"] == 1.0


def test_overrides_win_over_the_preset():
    _, plan = plan_for(
        "algorithm.name=dapo",
        "algorithm.dynamic_sampling=false",
        "algorithm.overlong_buffer=7",
        "algorithm.loss=gspo",
        "algorithm.kl.mode=reward",
        "algorithm.kl.estimator=k1",
    )
    assert not plan.dynamic_sampling and plan.overlong_buffer == 7
    # a different loss drops the preset's loss parameters (they belong to the ppo loss)
    assert plan.loss == "gspo" and plan.loss_params == {}
    assert plan.kl_mode == "reward" and plan.reference and plan.kl_estimator == "k1"
    _, grpo_no_kl = plan_for("algorithm.kl.mode=none")
    assert not grpo_no_kl.reference and grpo_no_kl.kl_coef == 0.0
    _, with_critic = plan_for("algorithm.estimator=gae")
    assert with_critic.critic


def test_old_log_probs_are_recomputed_only_when_the_update_is_off_policy():
    assert not plan_for()[1].recompute_log_probs  # one on-policy optimiser step
    assert plan_for("actor.recompute_log_probs=always")[1].recompute_log_probs
    assert plan_for("actor.epochs_per_step=2")[1].recompute_log_probs
    assert plan_for("data.prompts_per_step=8", "actor.prompts_per_update=4")[1].recompute_log_probs
    assert plan_for("algorithm.kl.mode=reward")[1].recompute_log_probs


def test_mini_batches_follow_prompts_per_update():
    _, plan = plan_for(
        "data.prompts_per_step=8", "rollout.samples_per_prompt=4", "actor.prompts_per_update=2"
    )
    assert plan.samples_per_step == 32 and plan.actor_mini_batches == 4
    assert plan.critic_mini_batches == 1


def test_indivisible_batch_sizes_fail_with_the_fields_named():
    with pytest.raises(ValueError, match=r"prompts_per_step=6 must be a multiple of actor\."):
        plan_for("data.prompts_per_step=6", "actor.prompts_per_update=4")
    with pytest.raises(ValueError, match=r"critic\.prompts_per_update=4"):
        plan_for("data.prompts_per_step=6", "critic.prompts_per_update=4")
    with pytest.raises(ValueError, match=r"split into 4 mini-batches on 2 rank"):
        plan_for(
            "data.prompts_per_step=4",
            "rollout.samples_per_prompt=1",
            "actor.prompts_per_update=1",
            "resources.devices_per_node=2",
        )
    with pytest.raises(ValueError, match=r"multiple of the rollout's 2 rank"):
        plan_for("data.prompts_per_step=3", "resources.devices_per_node=2")


def test_unknown_names_fail_before_any_worker_starts():
    with pytest.raises(ValueError, match=r"algorithm\.estimator: .*grpoo"):
        plan_for("algorithm.estimator=grpoo")
    with pytest.raises(ValueError, match=r"algorithm\.loss: .*pp0"):
        plan_for("algorithm.loss=pp0")
    with pytest.raises(ValueError, match=r"algorithm\.kl\.estimator: .*k9"):
        plan_for("algorithm.kl.estimator=k9")
    with pytest.raises(ConfigError, match=r"algorithm\.name"):
        load_config(RLConfig, None, [*BASE, "algorithm.name=ppo2"])
    with pytest.raises(ConfigError, match=r"did you mean 'rollout\.samples_per_prompt'"):
        load_config(RLConfig, None, [*BASE, "rollout.samples_per_promt=4"])


@pytest.mark.parametrize(
    ("conflict", "named"),
    [
        ("algorithm.name=dapo", "algorithm.dynamic_sampling"),
        ("algorithm.name=remax", "remax"),
        ("rollout.engine=transformers", "rollout.engine=transformers"),
        ("trainer.replay_rollouts=/saved", "trainer.replay_rollouts"),
        ("rollout.agent.max_turns=2 trainer.partial_rollouts=false", "rollout.agent"),
    ],
)
@pytest.mark.parametrize("mode", ["one_step_off", "async"])
def test_generating_ahead_refuses_what_needs_the_step_in_turn(mode, conflict, named):
    """Dynamic sampling's refills and ReMax's greedy baselines need the step's own scores or
    prompts at generation time; the transformers engine has no background decoding."""
    with pytest.raises(ValueError, match=rf"trainer\.mode={mode} cannot .*{named}"):
        plan_for(f"trainer.mode={mode}", *conflict.split())


def test_stale_rollouts_are_importance_weighted_unless_configured():
    from ascent.trainer.rl.roles import actor_config

    for mode, expected in (("sync", "none"), ("one_step_off", "truncate"), ("async", "truncate")):
        config, plan = plan_for(f"trainer.mode={mode}")
        assert actor_config(config, plan).rollout_correction.mode == expected
    config, plan = plan_for("trainer.mode=async", "actor.rollout_correction.mode=mask")
    assert actor_config(config, plan).rollout_correction.mode == "mask"


def test_a_reward_model_on_its_own_devices_is_counted_in_the_demand():
    """The capacity check before a local Ray starts sees the reward model's own pool."""
    from ascent.trainer.capacity import demand

    config, _ = plan_for(
        "reward_model.model.path=/rm",
        "reward_model.resources.devices_per_node=3",
        "reward_model.resources.cpus_per_worker=2",
    )
    cpus, gpus, fields = demand(config)
    assert (cpus, gpus) == (1 + 3 * 2, 0)
    assert "reward_model.resources.devices_per_node" in fields


def test_a_reward_model_cannot_score_agent_episodes_yet():
    with pytest.raises(ValueError, match=r"reward_model cannot score rollout\.agent episodes"):
        plan_for("reward_model.model.path=/rm", "rollout.agent.max_turns=2")


def test_prime_is_refused_where_its_baselines_or_prm_cannot_work():
    with pytest.raises(ValueError, match=r"prime needs rollout\.samples_per_prompt >= 2"):
        plan_for("algorithm.name=prime", "rollout.samples_per_prompt=1")
    with pytest.raises(ValueError, match=r"prime estimator cannot train on rollout\.agent"):
        plan_for("algorithm.name=prime", "rollout.agent.max_turns=2")
    _, plan = plan_for("algorithm.name=prime")
    assert plan.implicit_prm and plan.reference and plan.dynamic_sampling


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["trainer.mode=async", "rollout.engine=openai"],
            "trainer.mode=async cannot run on rollout.engine=openai: it has no refresh_weights; "
            "use rollout.engine=native, vllm, serve",
        ),
        (
            ["rollout.agent.max_turns=2", "rollout.engine=transformers"],
            "rollout.agent cannot run on rollout.engine=transformers: it has no request_level; "
            "use rollout.engine=native, vllm, serve",
        ),
        (
            ["actor.router_replay=rollout", "rollout.engine=vllm"],
            "actor.router_replay=rollout cannot run on rollout.engine=vllm: it has no "
            "route_recording; use rollout.engine=native",
        ),
    ],
)
def test_what_a_config_asks_of_its_engine_is_asked_of_its_capabilities(overrides, message):
    with pytest.raises(ConfigError) as error:
        plan_for(*overrides)
    assert message in str(error.value)


def test_a_model_the_engine_has_no_family_for_is_refused_naming_the_engines_that_run_it(
    tmp_path,
):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    overrides = [f"model.path={tmp_path}", "data.train_files=[t.parquet]"]
    for engine in ("native", "serve"):
        with pytest.raises(ConfigError) as error:
            make_plan(load_config(RLConfig, None, [*overrides, f"rollout.engine={engine}"]))
        assert f"rollout.engine={engine} for {tmp_path}: " in str(error.value)
        assert "no model family for model_type 'gpt2'" in str(error.value)
        assert "rollout.engine=transformers or vllm" in str(error.value)
    make_plan(load_config(RLConfig, None, [*overrides, "rollout.engine=transformers"]))
