"""Registries by name, user functions by import path, and the error messages."""

import sys
import textwrap

import pytest
import torch

from ascent.algos.advantages import ADVANTAGE_ESTIMATORS, compute_advantages, grpo
from ascent.algos.losses import POLICY_LOSSES, ppo
from ascent.algos.registry import Registry
from ascent.algos.types import AdvantageInputs, Advantages
from ascent.errors import InputError, InputNotFound
from ascent.importing import load_object

USER_MODULE = textwrap.dedent(
    '''
    import torch
    from ascent.algos.types import Advantages

    def sign_of_score(inputs, *, scale=1.0):
        """Advantage = scale * sign(sequence score) on every valid token."""
        mask = inputs.response_mask.bool()
        score = torch.where(mask, inputs.token_rewards, 0.0).sum(-1)
        adv = torch.where(mask, scale * torch.sign(score).unsqueeze(-1), 0.0)
        return Advantages(advantages=adv, returns=adv)

    NOT_CALLABLE = 3
    '''
)


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "my_estimators.py"
    path.write_text(USER_MODULE)
    return path


def inputs():
    return AdvantageInputs(
        token_rewards=torch.tensor([[0.0, 2.0], [0.0, -1.0]]),
        response_mask=torch.tensor([[1, 1], [1, 0]]),
        group_ids=torch.tensor([0, 0]),
    )


def test_builtins_by_name():
    assert ADVANTAGE_ESTIMATORS.get("grpo") is grpo
    assert POLICY_LOSSES.get("ppo") is ppo
    assert "gae" in ADVANTAGE_ESTIMATORS and "cispo" in POLICY_LOSSES


def test_user_function_by_file_path(user_file):
    out = compute_advantages(f"{user_file}:sign_of_score", inputs(), scale=2.0)
    assert out.advantages.tolist() == [[2.0, 2.0], [0.0, 0.0]]  # second row: r on a masked token


def test_user_function_by_module_path(user_file, monkeypatch):
    monkeypatch.syspath_prepend(str(user_file.parent))
    monkeypatch.delitem(sys.modules, "my_estimators", raising=False)
    fn = ADVANTAGE_ESTIMATORS.get("my_estimators:sign_of_score")
    assert isinstance(fn(inputs()), Advantages)


def test_unknown_name_suggests_the_nearest():
    with pytest.raises(KeyError, match=r"did you mean 'grpo'") as err:
        ADVANTAGE_ESTIMATORS.get("grpoo")
    assert "module:function" in str(err.value)


def test_import_path_errors_say_what_is_missing(user_file, tmp_path):
    """Each is a UserError: the command line prints the message without a traceback."""
    with pytest.raises(InputNotFound, match="no such file"):
        load_object(f"{tmp_path}/absent.py:fn")
    with pytest.raises(InputError, match="no attribute 'nope'"):
        load_object(f"{user_file}:nope")
    with pytest.raises(InputError, match="cannot import module 'no_such_pkg_x'"):
        load_object("no_such_pkg_x:fn")
    with pytest.raises(InputError, match="expected"):
        load_object("just_a_name")
    with pytest.raises(TypeError, match="not callable"):
        ADVANTAGE_ESTIMATORS.get(f"{user_file}:NOT_CALLABLE")


def test_register_refuses_to_shadow_unless_asked():
    registry = Registry("thing", {"a": len})
    registry.register("b", abs)

    @registry.register("c")
    def c(x):
        return x

    assert registry.get("b") is abs and registry.get("c") is c
    with pytest.raises(ValueError, match="already registered"):
        registry.register("a", abs)
    registry.register("a", abs, replace=True)
    assert registry.get("a") is abs and registry.names() == ["a", "b", "c"]
