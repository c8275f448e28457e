"""Environments from hubs, run in process as ascent environments: a config names one as

    rollout.agent.environment: "verifiers:<taskset id>"        # vf.load_environment
    rollout.agent.environment: "verifiers:<module:function>"   # returns a verifiers Env
    rollout.agent.environment: "openenv:<module:Class>"        # an OpenEnv Environment

(or under ``rollout.agent.environments``). ``verifiers_hub`` plays a verifiers 0.4 Env's
seat with the policy; ``openenv_hub`` steps an OpenEnv server-side Environment with the
policy's actions. A library is imported only when a spec names its hub: they live in a venv
of their own (``make hubs-venv``, the ``hubs`` extra), since verifiers needs openai<3 and
OpenEnv's gradio another pillow than the main venv's pins.
"""

from collections.abc import Callable

from ascent.agents.environment import Environment
from ascent.errors import InputError


def hub_environment(spec: str, field: str) -> Callable[[], Environment]:
    """A no-argument factory of episodes of the hub environment ``spec`` names; ``field``
    (the config field that holds it) names it in errors."""
    hub, _, name = spec.partition(":")
    where = f"{field}={spec!r}"
    if not name:
        raise InputError(f"{where} names no environment after '{hub}:'")
    if hub == "verifiers":
        require("verifiers.v1", "verifiers", where)
        from ascent.agents.hubs.verifiers_hub import verifiers_environment

        return verifiers_environment(name, where)
    require("openenv.core.env_server", "openenv-core", where)
    from ascent.agents.hubs.openenv_hub import openenv_environment

    return openenv_environment(name, where)


def require(module: str, package: str, where: str) -> None:
    """Import ``module`` or say how to get ``package``."""
    try:
        __import__(module)
    except ImportError as error:
        raise InputError(
            f"{where} needs the {package} package, which is not installed ({error}). It "
            f"conflicts with the main venv's pins: install ascent in a venv of its own with "
            f"`make hubs-venv` (or `pip install -e '.[hubs]'` in a fresh venv) and run from it"
        ) from error
