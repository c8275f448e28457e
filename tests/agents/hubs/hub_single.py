"""A verifiers 0.4 taskset without an Env of its own (verifiers' SingleAgentEnv: one reply
per task, ``agents.agent.run(task)``), for the hub tests: the reward is whether the reply is
the answer (weight 1.0) plus its length (weight 0.25)."""

import verifiers.v1 as vf


class SingleData(vf.TaskData):
    answer: str = ""


class SingleTask(vf.Task[SingleData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=0.25)
    async def length(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))

    @vf.reward
    async def exact(self, trace: vf.Trace) -> float:
        return float(trace.last_reply == self.data.answer)


class SingleTaskset(vf.Taskset[SingleTask]):
    def load(self):
        yield SingleTask(SingleData(prompt="Say yes.", answer="yes"), self.config.task)


__all__ = ["SingleTaskset"]
