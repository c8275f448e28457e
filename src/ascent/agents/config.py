"""``rollout.agent``: multi-turn episodes instead of one response per prompt."""

from typing import Literal

from pydantic import Field, model_validator

from ascent.engine.config import Strict

DriftMode = Literal["new_sample", "repair"]
AGENT_HELP = (
    "Multi-turn episodes with tools or an environment (AgentConfig); None: one response per prompt."
)


class AgentConfig(Strict):
    """Episodes of assistant turns and environment steps (tools, users), trained as exact
    tokens: sampled tokens with mask 1, everything else with mask 0."""

    environment: str = Field(
        "tools",
        description="tools: run the functions listed in `tools` until the model answers "
        "without a call; or an ascent.agents.Environment subclass as 'module:Class' or "
        "'file.py:Class'; or a hub's environment, run in process (the hubs venv, `make "
        "hubs-venv`): 'verifiers:<taskset id>' or 'verifiers:<module:function>' returning a "
        "verifiers Env, 'openenv:<module:Class>' an OpenEnv Environment.",
    )
    environments: dict[str, str] = Field(
        default_factory=dict,
        description="More environments by name ('module:Class', 'verifiers:...', "
        "'openenv:...'); a row's extra_info.agent_name picks one (verl's agent_name); 'tools' "
        "and 'tool_agent' name the tool environment.",
    )
    tools: list[str] = Field(
        default_factory=list,
        description="Tool functions as 'module:function' or 'file.py:function' (schema from "
        "type hints and docstring); 'python' is a Python interpreter in the sandbox.",
    )
    tools_in_prompt: bool = Field(
        True,
        description="Show the tools' schemas to the chat template (false: the model knows its "
        "tools from training, and prompts stay short).",
    )
    tool_parser: str = Field(
        "hermes", description="How tool calls are read from text: hermes, or 'module:function'."
    )
    run: str | None = Field(
        None,
        description="An agent of your own, as 'module:function' or 'file.py:function': "
        "`async def run(base_url, row)` returning the reward (or a plain function), given an "
        "OpenAI base_url of its own per episode, served by the policy being trained "
        "(docs/guides/agents-from-outside.md). Replaces environment and tools.",
    )
    timeout_s: float = Field(
        600.0, gt=0, description="run: an episode's agent running longer is cancelled."
    )
    failed_reward: float = Field(
        0.0,
        description="run: the reward of an episode whose agent raised, ran past timeout_s "
        "or returned no reward.",
    )
    max_turns: int = Field(
        4, ge=1, description="Assistant turns per episode (run: the agent's calls)."
    )
    max_tool_response_tokens: int = Field(
        256, ge=1, description="A tool result longer than this is cut (and marked as cut)."
    )
    on_template_drift: DriftMode = Field(
        "new_sample",
        description="When the chat template rewrites earlier turns: new_sample (end the "
        "sample, start another from the template's rendering) or repair (follow the "
        "rendering from the first differing token).",
    )
    sandbox_workers: int = Field(4, ge=1, description="Sandboxes run at once (the python tool).")

    @model_validator(mode="after")
    def _run_replaces_environments(self) -> "AgentConfig":
        if self.run is None:
            return self
        given = [
            name
            for name, value in (
                ("tools", self.tools),
                ("environments", self.environments),
                ("environment", self.environment != "tools"),
            )
            if value
        ]
        if given:
            raise ValueError(
                f"rollout.agent.run plays your own agent, which brings its own tools and "
                f"environment: remove rollout.agent.{' and rollout.agent.'.join(given)}"
            )
        return self
