"""A verifiers 0.4 environment written against verifiers' own API, for the hub tests (run in
the hubs venv): a taskset of guessing tasks and an Env whose run plays the user: it answers
each wrong guess until the seat's max_turns (3) ends the exchange. Rewards: the last reply's
length (weight 0.5) and its exactness (weight 2.0) from the task, the turns from the env's
finalize (weight 0.1). Loaded as the taskset id "hub_guess" (this directory on sys.path)."""

import verifiers.v1 as vf
from pydantic import Field


class GuessData(vf.TaskData):
    answer: str = ""
    info: dict = Field(default_factory=dict)


class GuessTask(vf.Task[GuessData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=0.5)
    async def length(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))

    @vf.reward(weight=2.0)
    async def exact(self, trace: vf.Trace) -> float:
        return float(trace.last_reply == self.data.answer)

    @vf.metric
    async def replies(self, trace: vf.Trace) -> float:
        return float(len(trace.assistant_messages))


class GuessTaskset(vf.Taskset[GuessTask]):
    def load(self):
        yield GuessTask(GuessData(prompt="Guess my word.", answer="ascent"), self.config.task)


class GuessConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(max_turns=3)


class GuessEnv(vf.Env[GuessConfig]):
    async def run(self, task, agents):
        hint = task.data.info.get("hint", "none")
        async with agents.player.interaction(task) as talk:
            segment = await talk.turn()
            while not segment.terminated and segment.last_reply != task.data.answer:
                segment = await talk.turn(f"Not {segment.last_reply!r}. Hint: {hint}.")

    async def finalize(self, task, episode):
        for trace in episode.traces:
            trace.record_reward("turns", trace.num_turns, 0.1)


__all__ = ["GuessEnv", "GuessTaskset"]


def make_env():
    """The same env, built the way a user's function would."""
    return vf.load_environment(vf.resolve_env_config({"taskset": {"id": "hub_guess"}}))


def not_an_env():
    return 42


def two_seats():
    """verifiers' user-sim env over this taskset: a modeled user and an assistant."""
    config = vf.resolve_env_config({"id": "user-sim", "taskset": {"id": "hub_guess"}})
    return vf.load_environment(config)
