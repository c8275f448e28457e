"""Episodes in the rollout worker: the environment of each row (``rollout.agent``), and the
episodes' samples in the training batch layout.

Batch layout of a multi-turn sample: ``prompts`` / ``prompt_mask`` (left-padded) are its
prompt; ``responses`` (right-padded to R) interleave sampled and rendered tokens;
``attention_mask`` is 1 on every real token (the model reads tool output), ``response_mask``
1 only on sampled tokens (the losses see only the policy's own tokens); ``rollout_log_probs``
are 0 and ``rollout_weight_versions`` -1 on rendered tokens. An episode whose template
drifted gives several samples: each is a row with the prompt's uid (so its group), and
``episode`` says which episode it came from. ``images`` are each sample's own (its prompt's,
then those its rendered spans brought, in the order of their image tokens), as single-turn
image rows carry theirs: the actor and reference read them with the ids.
"""

from collections import Counter
from collections.abc import Callable

import torch

from ascent.agents.config import AgentConfig
from ascent.agents.environment import Environment, ToolEnvironment
from ascent.agents.loop import EPISODE_ENDS, Episode
from ascent.agents.tools import Tool, function_tool
from ascent.batch import Batch
from ascent.data.chat import tool_names
from ascent.data.files import MalformedRow
from ascent.data.rl import PromptCheck, RLPrompt
from ascent.errors import InputError
from ascent.importing import load_object
from ascent.rewards.tokens import token_rewards
from ascent.rollout.tool_calls import tool_call_parser

TOOL_ENVIRONMENTS = ("tools", "tool_agent")


def environment_factory(config: AgentConfig) -> Callable[[dict], Environment]:
    """A function from a row to a fresh environment for its episode."""
    tools = _tools(config)
    parser = tool_call_parser(config.tool_parser)
    classes: dict[str, Callable[[], Environment]] = {}
    for name, spec in _named_environments(config).items():
        if spec not in TOOL_ENVIRONMENTS:
            classes[spec] = _environment_class(spec, name)

    def make(row: dict) -> Environment:
        spec = _environment_spec(config, row.get("extra_info"))
        if spec in TOOL_ENVIRONMENTS:
            return ToolEnvironment(tools, parser)
        return classes[spec]()

    return make


def agent_prompt_check(config: AgentConfig) -> PromptCheck:
    """A check for data loading (``load_rl_prompts``): a row whose episode could not run is
    malformed, found before training rather than in the middle of a rollout. That is a row
    whose ``agent_name`` no environment has, or one whose ``tools`` list a tool the tool
    environment cannot run. Every environment class and the tool-call parser are loaded
    here too, so a wrong spec is refused on the driver, not in each rollout worker."""
    provided = _tool_names(config)
    for name, spec in _named_environments(config).items():
        if spec not in TOOL_ENVIRONMENTS:
            _environment_class(spec, name)
    try:
        tool_call_parser(config.tool_parser)
    except InputError as error:
        raise InputError(f"rollout.agent.tool_parser={config.tool_parser!r}: {error}") from error

    def check(prompt: RLPrompt) -> None:
        if _environment_spec(config, prompt.extra_info) not in TOOL_ENVIRONMENTS:
            return
        missing = [name for name in tool_names(prompt.tools) if name not in provided]
        if missing:
            raise MalformedRow(
                f"field 'tools' lists {missing}, which rollout.agent.tools does not provide "
                f"(it provides {sorted(provided)}): add each as 'module:function'"
            )

    return check


def _named_environments(config: AgentConfig) -> dict[str, str]:
    return {"default": config.environment, **config.environments}


def _environment_spec(config: AgentConfig, extra_info: dict | None) -> str:
    """The environment a row asks for (verl's ``extra_info.agent_name``): its spec."""
    name = (extra_info or {}).get("agent_name")
    named = _named_environments(config)
    if name is None:
        return named["default"]
    if name in named:
        return named[name]
    if name in TOOL_ENVIRONMENTS:
        return name
    raise MalformedRow(
        f"extra_info.agent_name is {name!r}, which rollout.agent.environments does not name "
        f"(it names {sorted(set(named) - {'default'})}; built in: tools)"
    )


def _environment_class(spec: str, name: str) -> Callable[[], Environment]:
    field = (
        "rollout.agent.environment" if name == "default" else f"rollout.agent.environments.{name}"
    )
    if spec.startswith(("verifiers:", "openenv:")):  # a hub's environment, run in process
        from ascent.agents.hubs import hub_environment

        return hub_environment(spec, field)
    try:
        found = load_object(spec)
    except InputError as error:
        raise InputError(f"{field}={spec!r}: {error}") from error
    if not (isinstance(found, type) and issubclass(found, Environment)):
        raise InputError(f"{field}={spec!r} is not an ascent.agents.Environment subclass")
    return found


def _tools(config: AgentConfig) -> list[Tool]:
    tools = []
    for spec in config.tools:
        if spec == "python":
            from ascent.agents.python_tool import python_tool
            from ascent.sandbox.pool import SandboxPool

            tools.append(python_tool(SandboxPool(config.sandbox_workers)))
        else:
            tools.append(_function_tool(spec))
    return tools


def _function_tool(spec: str) -> Tool:
    """The tool of entry ``spec`` of ``rollout.agent.tools``; a function that cannot be one
    (no docstring, a parameter without a type hint) is refused naming the entry."""
    try:
        return function_tool(load_object(spec))
    except InputError as error:
        raise InputError(f"rollout.agent.tools entry {spec!r}: {error}") from error


def _tool_names(config: AgentConfig) -> set[str]:
    """The names of ``rollout.agent.tools``, without starting a sandbox for ``python``."""
    return {spec if spec == "python" else _function_tool(spec).name for spec in config.tools}


def episodes_batch(batch: Batch, episodes: list[Episode], n: int, width: int, pad_id: int) -> Batch:
    """The rows of ``episodes`` (``n`` per input row, in order) in the layout above, every
    other field of the input row copied along, and per row: ``episode`` (its index in this
    call), ``turns``, ``tool_calls``, ``tool_errors`` and ``finish_reason`` (how the episode
    ended: ``EPISODE_ENDS``)."""
    rows, samples, episode_ids = [], [], []
    for index, episode in enumerate(episodes):
        # A sample that drift started and the budget ended before a turn trains nothing.
        for sample in [s for s in episode.samples if s.sampled_count] or episode.samples[:1]:
            rows.append(index // n)
            samples.append(sample)
            episode_ids.append(index)
    prompt_width = max(len(s.prompt_ids) for s in samples)
    count = len(samples)
    prompts = torch.full((count, prompt_width), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros(count, prompt_width, dtype=torch.long)
    responses = torch.full((count, width), pad_id, dtype=torch.long)
    attention = torch.zeros(count, width, dtype=torch.long)
    response_mask = torch.zeros(count, width, dtype=torch.long)
    log_probs = torch.zeros(count, width, dtype=torch.float32)
    versions = torch.zeros(count, width, dtype=torch.int32)  # read only under response_mask
    for row, sample in enumerate(samples):
        p, r = len(sample.prompt_ids), len(sample.response_ids)
        if r > width:
            raise ValueError(f"an episode's sample has {r} response tokens, over the {width} limit")
        prompts[row, prompt_width - p :] = torch.tensor(sample.prompt_ids)
        prompt_mask[row, prompt_width - p :] = 1
        responses[row, :r] = torch.tensor(sample.response_ids)
        attention[row, :r] = 1
        response_mask[row, :r] = torch.tensor(sample.response_mask)
        log_probs[row, :r] = torch.tensor(sample.log_probs)
        versions[row, :r] = torch.tensor(sample.weight_versions, dtype=torch.int32)
    out = batch.drop(*(k for k in ("prompts", "prompt_mask") if k in batch)).index(rows)
    out = out.assign(
        prompts=prompts,
        prompt_mask=prompt_mask,
        responses=responses,
        response_mask=response_mask,
        rollout_log_probs=log_probs,
        rollout_weight_versions=versions,
        input_ids=torch.cat([prompts, responses], dim=1),
        attention_mask=torch.cat([prompt_mask, attention], dim=1),
        finish_reason=[episodes[e].end for e in episode_ids],
        episode=episode_ids,
        turns=[episodes[e].turns for e in episode_ids],
        tool_calls=[episodes[e].tool_calls for e in episode_ids],
        tool_errors=[episodes[e].tool_errors for e in episode_ids],
        turn_rewards=[sample.turn_rewards for sample in samples],
        images=[list(sample.images) for sample in samples],
    )
    return out


def episode_keys(batch: Batch) -> list[tuple]:
    """Each row's episode: (prompt uid, episode index within its rollout call)."""
    return list(zip(batch["uid"], batch["episode"], strict=True))


def episode_weights(batch: Batch) -> torch.Tensor:
    """(B,) 1/k for each of an episode's k samples: group statistics then count each episode
    once, however many samples drift split it into."""
    keys = episode_keys(batch)
    counts = Counter(keys)
    return torch.tensor([1.0 / counts[key] for key in keys], dtype=torch.float32)


def last_rows(batch: Batch) -> dict[tuple, int]:
    """Each episode's last row (its last sample, which holds the final answer)."""
    return {key: row for row, key in enumerate(episode_keys(batch))}


def episode_outcomes(batch: Batch) -> Batch:
    """After scoring, in place of each row's own: the episode's outcome. The scorer saw each
    row's own response, and an episode's last sample holds its final answer, so that row's
    ``scores``, ``acc`` and ``reward_extra/*`` become every sample's. The environment's
    rewards are added: each turn's on its last sampled token in ``token_rewards`` (of the
    sample that holds the turn), and the episode's total (``env_reward``) to ``scores``.
    ``token_rewards`` carries the outcome on each row's last token, as the scorer put it."""
    keys = episode_keys(batch)
    last = last_rows(batch)
    source = torch.tensor([last[key] for key in keys])
    names = batch.keys()
    shared = [k for k in names if k in ("scores", "acc") or k.startswith("reward_extra/")]
    fields = {k: batch[k][source] for k in shared}
    totals: dict[tuple, float] = {}
    for key, turns in zip(keys, batch["turn_rewards"], strict=True):
        totals[key] = totals.get(key, 0.0) + sum(reward for _, reward in turns)
    env = torch.tensor([totals[key] for key in keys], dtype=torch.float32)
    fields["scores"] = fields["scores"] + env
    on_tokens = token_rewards(batch, batch["scores"][source], batch["turn_rewards"])
    return batch.assign(token_rewards=on_tokens, env_reward=env, **fields)


def agent_metrics(batch: Batch) -> dict[str, float]:
    """Means over a rollout batch's episodes (one row each): turns, tool calls and
    errors, how episodes ended; samples per episode (above 1 where templates drifted); and the
    share of all tool calls that failed (``agent/tool_error_rate``, 0 without calls)."""
    rows = list(last_rows(batch).values())
    count = len(rows)

    def sum_of(field: str) -> float:
        return sum(float(batch[field][r]) for r in rows)

    def mean(field: str) -> float:
        return sum_of(field) / count

    ends = [batch["finish_reason"][r] for r in rows]
    metrics = {
        "agent/turns/mean": mean("turns"),
        "agent/used_tools": sum(batch["tool_calls"][r] > 0 for r in rows) / count,
        "agent/tool_calls/mean": mean("tool_calls"),
        "agent/tool_errors/mean": mean("tool_errors"),
        "agent/tool_error_rate": sum_of("tool_errors") / max(sum_of("tool_calls"), 1.0),
        "agent/samples_per_episode": len(batch) / count,
    }
    for end in EPISODE_ENDS:
        metrics[f"agent/end/{end}"] = ends.count(end) / count
    return metrics
