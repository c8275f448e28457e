"""The roles and stages of a run follow from what its advantage estimator needs, not from its
name: every built-in estimator gets the roles it got when the plan compared names (the table
below was written from that code), and an estimator named by import path that declares
``values=True`` gets a critic that runs."""

import pytest

from ascent.algos.advantages import ADVANTAGE_ESTIMATORS
from ascent.config import load_config
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.loop import train_rl
from ascent.trainer.rl.plan import make_plan
from tests.trainer.rl_setup import config, metric

BASE = ["model.path=/m", "data.train_files=[t.parquet]", "algorithm.kl.mode=none"]

# Per estimator, with no KL term: (the roles and stages beyond actor and rollout; refused with
# one sample per prompt (leave-one-out baselines); refused on multi-turn episodes (the implicit
# PRM scores one response per prompt); refused when generating ahead (greedy baselines of the
# step's prompts)). Written from the name comparisons the plan made before.
TODAY = {
    "gae": ({"critic"}, False, False, False),
    "grpo": (set(), False, False, False),
    "drgrpo": (set(), False, False, False),
    "grpo_passk": (set(), False, False, False),
    "rloo": (set(), False, False, False),
    "reinforce_pp": (set(), False, False, False),
    "reinforce_pp_baseline": (set(), False, False, False),
    "remax": ({"greedy_baseline"}, False, False, True),
    "opo": (set(), False, False, False),
    "gpg": (set(), False, False, False),
    "prime": ({"implicit_prm", "reference"}, True, True, False),
    "sppo": (set(), False, False, False),
}
ROLES = ("critic", "implicit_prm", "reference", "greedy_baseline")
CUSTOM = "algorithm.estimator=tests.trainer.estimators:"


def plan_for(*overrides: str):
    return make_plan(load_config(RLConfig, None, [*BASE, *overrides]))


def refused(*overrides: str) -> bool:
    try:
        plan_for(*overrides)
    except ValueError:
        return True
    return False


def test_the_table_covers_every_built_in_estimator():
    assert set(TODAY) == set(ADVANTAGE_ESTIMATORS.names())


@pytest.mark.parametrize("estimator", sorted(TODAY))
def test_every_built_in_estimator_keeps_its_roles(estimator):
    roles, one_sample, agent, ahead = TODAY[estimator]
    chosen = f"algorithm.estimator={estimator}"
    plan = plan_for(chosen)
    assert {role for role in ROLES if getattr(plan, role)} == roles
    assert refused(chosen, "rollout.samples_per_prompt=1") == one_sample
    assert refused(chosen, "rollout.agent.max_turns=2", "data.chat_template=true") == agent
    assert refused(chosen, "trainer.mode=one_step_off") == ahead
    with_kl = plan_for(chosen, "algorithm.kl.mode=loss")
    assert with_kl.reference and with_kl.critic == plan.critic


def test_an_estimator_by_import_path_gets_the_roles_it_declares():
    plan = plan_for(f"{CUSTOM}value_baseline")
    assert plan.critic and not (plan.implicit_prm or plan.reference or plan.greedy_baseline)
    plain = plan_for(f"{CUSTOM}reward_to_go")
    assert not any(getattr(plain, role) for role in ROLES)


def test_the_critic_an_estimator_by_import_path_asks_for_runs(tiny_model, prompts, tmp_path):
    """Two steps: the critic's values reach the estimator and the critic trains."""
    run = config(
        tiny_model,
        prompts,
        tmp_path,
        f"{CUSTOM}value_baseline",
        "data.prompts_per_step=4",
        "rollout.samples_per_prompt=4",
        "trainer.total_steps=2",
    )
    assert "critic" in make_plan(run).describe(run)
    assert train_rl(run)["steps"] == 2
    assert len(metric(tmp_path, "critic/vf_loss")) == 2
    assert len(metric(tmp_path, "critic/values/mean")) == 2
