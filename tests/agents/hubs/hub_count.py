"""OpenEnv 0.3 environments written against OpenEnv's own server-side API, for the hub tests
(run in the hubs venv). ``Countdown`` takes ``turns`` steps of any text (its Action has one
text field), each rewarded by its rubric with the text's length; ``Numbers`` wants a JSON
integer and ends when it gets one; ``Untyped`` declares no Action type."""

from openenv.core.env_server import Action, Environment, Observation, State
from openenv.core.rubrics import Rubric

SAID: dict[str, list[str]] = {}  # episode id -> the texts Countdown got, for the test


class SayAction(Action):
    text: str


class NumberAction(Action):
    n: int


class CountObservation(Observation):
    prompt: str


class Length(Rubric):
    def forward(self, action, observation) -> float:
        return float(len(action.text))


class Countdown(Environment[SayAction, CountObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__(rubric=Length())
        self._state = State()

    def reset(self, seed=None, episode_id=None, turns: int = 3, **kwargs):
        self._reset_rubric()
        self.turns = turns
        self._state = State(episode_id=episode_id)
        SAID[episode_id] = []
        return CountObservation(prompt=f"Say anything, {turns} times.")

    def step(self, action, timeout_s=None, **kwargs):
        self._state.step_count += 1
        SAID[self._state.episode_id].append(action.text)
        left = self.turns - self._state.step_count
        observation = CountObservation(prompt=f"{left} to go.", done=left <= 0)
        observation.reward = self._apply_rubric(action, observation)
        return observation

    @property
    def state(self):
        return self._state


class Numbers(Environment[NumberAction, CountObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def reset(self, seed=None, episode_id=None, **kwargs):
        return CountObservation(prompt="Send a number as JSON, like 7.")

    async def step_async(self, action, timeout_s=None, **kwargs):
        return CountObservation(prompt="Thanks.", done=True, reward=1.0)

    def step(self, action, timeout_s=None, **kwargs):
        raise AssertionError("step_async is the one to call")

    @property
    def state(self):
        return State()


class Untyped(Environment):
    def reset(self, seed=None, episode_id=None, **kwargs):
        return CountObservation(prompt="")

    def step(self, action, timeout_s=None, **kwargs):
        return CountObservation(prompt="", done=True)

    @property
    def state(self):
        return State()
