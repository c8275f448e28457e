"""An OpenEnv environment (openenv-core 0.3, the server side:
``openenv.core.env_server.Environment``) stepped in process by the policy's turns, one instance
per episode, as OpenEnv's server makes one per session:

    ascent                          OpenEnv
    "openenv:<module:Class>"        the Environment subclass, or a function that returns an
                                    instance, called with no arguments for each episode
    reset(row)                      env.reset(episode_id=..., **row extra_info["reset"]): only
                                    the arguments its signature takes, as the server passes a
                                    reset request's; messages: the row's prompt, then the
                                    observation as a user message
    step(assistant message)         the message as the env's Action (below), env.step(action);
                                    Step([the observation as a user message],
                                    observation.reward or 0, observation.done)
    the episode ends                env.close()
    reset_async / step_async        awaited where the env overrides them, else reset / step on
                                    a worker thread (one thread for all instances of a class
                                    that sets REQUIRES_SINGLE_THREAD_EXECUTOR), as the server

The reward is the observation's: an OpenEnv env's rubric (``self.rubric``, a trajectory
rubric too) is applied in its own ``step``. The Action type is the env's
``Environment[Action, Observation, State]`` parameter, else ``step``'s annotation. The message
becomes an Action as verifiers' OpenEnv taskset reads one: its text (or the fenced block it
is) as a JSON object of the Action's fields, or, for an Action with one required field, that
field's value. A reply that makes no valid Action is an observation saying why and what to
send, and the episode goes on (counted as a failed call, like a malformed tool call). An
observation reads as its fields but done, reward and metadata: one text field as itself,
else JSON. To map otherwise, subclass ``OpenEnvEpisode`` (``factory = YourEnv``; override
``action`` or ``messages``) and name it as 'module:Class' like any ascent environment.
"""

import asyncio
import inspect
import json
import logging
import uuid
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, get_args, get_type_hints

from ascent.agents.environment import Environment, Step
from ascent.errors import InputError
from ascent.importing import load_object

logger = logging.getLogger(__name__)
NOT_SHOWN = {"done", "reward", "metadata"}
_ONE_THREAD: dict[type, ThreadPoolExecutor] = {}


def openenv_environment(name: str, where: str) -> Callable[[], Environment]:
    """Episodes of the OpenEnv environment ``name`` ('module:Class' or 'module:function');
    ``where`` is the config entry, for errors."""
    from openenv.core.env_server import Environment as OpenEnvironment

    try:
        factory = load_object(name)
    except InputError as error:
        raise InputError(f"{where}: {error}") from error
    env_type = factory
    if callable(factory) and not isinstance(factory, type):  # one instance tells the type
        probe = factory()
        env_type = type(probe)
        if isinstance(probe, OpenEnvironment):
            probe.close()
    if not (isinstance(env_type, type) and issubclass(env_type, OpenEnvironment)):
        raise InputError(
            f"{where} is not an OpenEnv environment: name a subclass of "
            "openenv.core.env_server.Environment, or a function that returns one"
        )
    if action_type(env_type) is None:
        raise InputError(
            f"{where}: {env_type.__name__} declares no Action type: subclass "
            "Environment[YourAction, YourObservation, State], or annotate step's action"
        )
    if not env_type.SUPPORTS_CONCURRENT_SESSIONS:
        logger.warning(
            "%s: %s does not set SUPPORTS_CONCURRENT_SESSIONS; ascent plays many episodes at "
            "once, each with an instance of its own",
            where,
            env_type.__name__,
        )
    return partial(OpenEnvEpisode, factory)


def action_type(env_type: type) -> type | None:
    """The Action subclass an OpenEnv Environment class steps with, or None."""
    from openenv.core.env_server import Action

    for klass in env_type.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            for argument in get_args(base):
                if isinstance(argument, type) and issubclass(argument, Action):
                    return argument
    hint = get_type_hints(env_type.step).get("action")
    return hint if isinstance(hint, type) and issubclass(hint, Action) else None


def action_payloads(text: str, required: list[str]) -> list[dict]:
    """What an assistant's text may mean as an Action's fields, the first that validates
    wins: a JSON object (bare or in a ``` fence); for an Action with one required field,
    that field as the text's JSON value, then as the text itself."""
    text = text.strip()
    if text.startswith("```") and text.endswith("```"):
        text = "\n".join(text.splitlines()[1:-1]).strip()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    if isinstance(value, dict):
        return [value]
    if len(required) != 1:
        return []
    [name] = required
    return [{name: value}] if value == text else [{name: value}, {name: text}]


def observation_text(fields: dict) -> str:
    """An observation's shown fields as text: one text field as itself, else JSON."""
    if len(fields) == 1 and isinstance(text := next(iter(fields.values())), str):
        return text
    return json.dumps(fields, ensure_ascii=False, default=str)


def accepted(function: Callable, arguments: dict) -> dict:
    """The ``arguments`` that ``function`` takes (all, where it takes ``**kwargs``)."""
    parameters = inspect.signature(function).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(arguments)
    return {name: value for name, value in arguments.items() if name in parameters}


class OpenEnvEpisode(Environment):
    """One episode of an OpenEnv environment (see the module docstring)."""

    factory: Callable[[], Any] | None = None  # a subclass names its OpenEnv environment here

    def __init__(self, factory: Callable[[], Any] | None = None) -> None:
        self.factory = factory or type(self).factory
        if self.factory is None:
            raise InputError(f"{type(self).__name__} names no OpenEnv environment: set `factory`")
        self.calls = self.errors = 0

    async def reset(self, row: dict) -> list[dict]:
        self.env = self.factory()
        self.action_type = action_type(type(self.env))
        self.close_env = weakref.finalize(self, self.env.close)  # or when ascent cuts it
        given = {
            "episode_id": uuid.uuid4().hex,
            **((row.get("extra_info") or {}).get("reset") or {}),
        }
        observation = await self._call("reset", **given)
        prompt = row.get("prompt") or []
        opening = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        return [*opening, *self.messages(observation)]

    async def step(self, message: dict) -> Step:
        self.calls += 1
        try:
            action = self.action(message.get("content") or "")
        except ValueError as error:  # pydantic's ValidationError is one
            self.errors += 1
            return Step([{"role": "user", "content": f"Error: {error}"}], 0.0, False)
        observation = await self._call("step", action)
        if observation.done:
            self.close_env()
        reward = float(observation.reward or 0.0)
        return Step(self.messages(observation), reward, bool(observation.done))

    def action(self, text: str) -> Any:
        """The assistant's text as the env's Action; a ValueError says what to send instead."""
        from openenv.core.env_server import deserialize_action
        from pydantic import ValidationError

        fields = self.action_type.model_fields
        required = [name for name, field in fields.items() if field.is_required()]
        problem = "it is not a JSON object of the action's fields"
        for payload in action_payloads(text, required):
            try:
                return deserialize_action(payload, self.action_type)
            except ValidationError as error:
                problem = "; ".join(
                    f"{'.'.join(map(str, e['loc'])) or 'action'}: {e['msg']}"
                    for e in error.errors()
                )
        shown = sorted(set(fields) - {"metadata"})
        raise ValueError(
            f"your reply is not a valid {self.action_type.__name__} ({problem}); reply with a "
            f"JSON object of its fields {shown}"
        )

    def messages(self, observation: Any) -> list[dict]:
        """What the model reads of an observation: one user message."""
        shown = observation.model_dump(exclude=NOT_SHOWN)
        return [{"role": "user", "content": observation_text(shown)}]

    async def _call(self, method: str, *arguments: Any, **given: Any) -> Any:
        from openenv.core.env_server import Environment as OpenEnvironment

        env = self.env
        if getattr(type(env), f"{method}_async") is not getattr(OpenEnvironment, f"{method}_async"):
            function = getattr(env, f"{method}_async")
            return await function(*arguments, **accepted(function, given))
        function = getattr(env, method)
        call = partial(function, *arguments, **accepted(function, given))
        return await asyncio.get_running_loop().run_in_executor(_executor(type(env)), call)


def _executor(env_type: type) -> ThreadPoolExecutor | None:
    """One thread for a class that asks for it, as the server keeps one; else the default."""
    if not env_type.REQUIRES_SINGLE_THREAD_EXECUTOR:
        return None
    if env_type not in _ONE_THREAD:
        _ONE_THREAD[env_type] = ThreadPoolExecutor(max_workers=1)
    return _ONE_THREAD[env_type]
