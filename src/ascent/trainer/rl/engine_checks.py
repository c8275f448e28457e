"""What a config asks of its rollout engine, checked against what the engine declares it can
do (``ascent.rollout.backends``: each backend's capabilities, and the models it refuses),
before any worker starts. An error names the field that asks and the engines that can;
no check names an engine itself."""

from ascent.config import ConfigError
from ascent.models.families import model_type_of
from ascent.rollout.backends import engine_capabilities, engine_refuses_model, engines_with
from ascent.rollout.protocol import Capability
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.plan_checks import checkpoint_config

FOLLOWS_THE_POLICY = (Capability.REQUEST_LEVEL, Capability.REFRESH_WEIGHTS)


def require(config: RLConfig, asker: str, *capabilities: Capability) -> None:
    """ConfigError when ``rollout.engine`` lacks one of ``capabilities``, which ``asker``
    (the field that asks) needs."""
    engine = config.rollout.engine
    missing = [c.value for c in capabilities if c not in engine_capabilities(engine)]
    if missing:
        able = ", ".join(engines_with(*capabilities))
        raise ConfigError(
            f"{asker} cannot run on rollout.engine={engine}: it has no {', '.join(missing)}; "
            f"use rollout.engine={able} ({', '.join(c.value for c in capabilities)})"
        )


def check_engine(config: RLConfig) -> None:
    """Generating ahead of training and agent episodes need an engine that serves requests
    one by one and follows the policy (an outside agent's, one that ascent's OpenAI routes
    serve); router replay needs one that records routes; and
    the engine must run the checkpoint's model family."""
    if config.trainer.mode != "sync":
        require(config, f"trainer.mode={config.trainer.mode}", *FOLLOWS_THE_POLICY)
    if config.rollout.agent is not None:
        require(config, "rollout.agent", *FOLLOWS_THE_POLICY)
        if config.rollout.agent.run is not None:
            require(config, "rollout.agent.run", Capability.OPENAI_ROUTES)
    if config.actor.router_replay != "off":
        require(
            config, f"actor.router_replay={config.actor.router_replay}", Capability.ROUTE_RECORDING
        )
    checkpoint = checkpoint_config(config.model.path)
    if checkpoint is not None:
        refusal = engine_refuses_model(config.rollout.engine, model_type_of(checkpoint))
        if refusal is not None:
            raise ConfigError(
                f"rollout.engine={config.rollout.engine} for {config.model.path}: {refusal}"
            )
