"""A verifiers environment (verifiers 0.4, ``verifiers.v1``) whose one seat the policy
plays, in process: no harness program, sandbox or model server in between.

In verifiers 0.4 a ``Taskset`` yields ``Task``s (data: ``prompt``, ``system_prompt``, the
task's own fields; hooks: weighted ``@vf.reward``s, ``@vf.metric``, ``@vf.stop``,
``@vf.intercept``), and an ``Env``'s ``run(task, agents)`` drives its seat: ``run(task)`` for
one reply, or ``interaction(task)`` and ``turn(message)`` for a conversation in which the env
plays the user (a game engine, a scripted user). What maps to what:

    "verifiers:<taskset id>"         vf.load_environment for that taskset, once per process
    "verifiers:<module:function>"    function() -> a vf.Env (or the vf.Env the name holds)
    row prompt                       task.data.prompt
    row reward_model.ground_truth    task.data.answer, where the task's data declares it
    row extra_info                   task.data.info, and the fields it names that the task's
                                     data adds to vf.TaskData
    reset(row)                       env.setup, env.run started; the opening messages are the
                                     seat's first model call: [system_prompt] + prompt
    step(assistant message)          that call's reply; the observations are the env's next
                                     user turn(s), in its next model call
    the seat's max_turns, @vf.stop   checked before each model call (verifiers' RolloutSession)
    env.run returns                  each trace scored (task.score without a runtime, as
                                     verifiers scores offline), env.finalize; Step(reward=the
                                     traces' weighted reward sum, done=True)

Not here: harness programs and their tools (MCP toolsets), sandboxes (hooks and rewards that
need a runtime are skipped), envs of several seats (a modeled user needs a model of its own).
Keep ``rollout.agent.max_turns`` at least the seat's: an episode ascent cuts is not scored.
"""

import asyncio
import weakref
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from ascent.agents.environment import Environment, Step
from ascent.agents.hubs.verifiers_seat import Bridge, Seat, trace_task
from ascent.errors import InputError
from ascent.importing import load_object


def verifiers_environment(name: str, where: str) -> Callable[[], Environment]:
    """Episodes of the verifiers Env ``name`` (a taskset id or 'module:function'), loaded once
    here; ``where`` is the config entry, for errors."""
    import verifiers.v1 as vf
    from verifiers.v1.configs.agent import agent_config_fields

    if ":" in name:
        try:
            found = load_object(name)
        except InputError as error:
            raise InputError(f"{where}: {error}") from error
        env = found() if callable(found) and not isinstance(found, vf.Env) else found
    else:
        try:
            env = vf.load_environment(vf.resolve_env_config({"taskset": {"id": name}}))
        except (ImportError, AttributeError, TypeError, ValueError) as error:
            raise InputError(f"{where}: verifiers cannot load taskset {name!r}: {error}") from error
    if not isinstance(env, vf.Env):
        raise InputError(
            f"{where} gives an object of type {type(env).__name__}, not a verifiers Env: name "
            "a taskset id, or a function that returns an Env (vf.load_environment(...), "
            "YourEnv(config))"
        )
    seats = sorted(agent_config_fields(env.config))
    if len(seats) != 1:
        raise InputError(
            f"{where}: {type(env).__name__} has the seats {seats}; the policy plays one seat "
            "in process, so only an env of one seat runs here"
        )
    return partial(VerifiersEpisode, env)


def task_fields(row: dict, own: Iterable[str]) -> dict:
    """The data of a verifiers task from an ascent (verl) row, given the fields ``own`` that the
    task's data type adds to ``vf.TaskData``: ``prompt``; ``answer`` from the ground truth;
    ``info`` the whole ``extra_info``; any other of ``own`` from ``extra_info`` by name."""
    own = set(own)
    extra = dict(row.get("extra_info") or {})
    fields = {name: value for name, value in extra.items() if name in own}
    if "info" in own and "info" not in extra:
        fields["info"] = extra
    truth = (row.get("reward_model") or {}).get("ground_truth")
    if "answer" in own and truth is not None:
        fields["answer"] = truth
    fields["prompt"] = row["prompt"]
    return fields


class VerifiersEpisode(Environment):
    """One episode of a verifiers Env: its ``run`` goes on in a task of its own, and each model
    call of its seat waits for the policy's next turn (``verifiers_seat.Bridge``)."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.bridge = Bridge()

    async def reset(self, row: dict) -> list[dict]:
        task = _task(self.env, row)
        run = asyncio.create_task(_play(self.env, task, self.bridge))
        weakref.finalize(self, run.cancel)  # an episode that ascent cut short ends with it
        kind, value = await self.bridge.next()
        if kind == "end":
            raise ValueError(f"{type(self.env).__name__} ended an episode before its first turn")
        return value

    async def step(self, message: dict) -> Step:
        self.bridge.replies.put_nowait(message.get("content") or "")
        kind, value = await self.bridge.next()
        return Step(value, 0.0, False) if kind == "ask" else Step([], float(value), True)


async def _play(env: Any, task: Any, bridge: Bridge) -> None:
    """``Env.run_episode`` with the seat in process: setup, run, finalize; then the reward."""
    import verifiers.v1 as vf

    episode = vf.Episode(env=vf.EnvInfo(id=env.config.env_id), task=trace_task(task))
    try:
        agents = vf.Agents(env.config, lambda name, spec: Seat(name, spec, bridge, episode))
        await env.setup(agents)
        await env.run(task, agents)
        if not episode.traces:
            raise ValueError(f"{type(env).__name__}.run() ran no agent")
        await env.finalize(task, episode)
    except Exception as error:  # the env's own failure: raised where ascent awaits the env
        bridge.events.put_nowait(("error", error))
        return
    bridge.events.put_nowait(("end", sum(trace.reward for trace in episode.traces)))


def _task(env: Any, row: dict) -> Any:
    """The taskset's task for an ascent row (``task_fields``), with the taskset's system
    prompt where its config sets one."""
    import verifiers.v1 as vf

    task_type = type(env.taskset).task_type()
    data_type = task_type.data_type()
    fields = task_fields(row, set(data_type.model_fields) - set(vf.TaskData.model_fields))
    if env.taskset.system_prompt is not None:
        fields["system_prompt"] = env.taskset.system_prompt
    try:
        data = data_type.model_validate(fields)
    except ValueError as error:
        raise InputError(
            f"a row does not make a {data_type.__name__} of the verifiers taskset "
            f"{type(env.taskset).__name__} (row prompt, reward_model.ground_truth -> answer, "
            f"extra_info -> info and the data's own fields): {error}"
        ) from error
    return task_type(data, env.taskset.config.task)
