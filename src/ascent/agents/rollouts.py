"""Agent episodes as the rollout role's rows (``rollout.agent``): ``params.n`` multi-turn
episodes per prompt played against the backend, each turned into training rows
(``episodes_batch``). The rollout role (``ascent.workers.rollout``) plugs this in where plain
samples would go. A vision-language policy's episodes carry images (the rows' own, those
the environment returns): ``ascent.agents.images``."""

from collections.abc import Callable

from ascent.agents.config import AgentConfig
from ascent.agents.episodes import environment_factory, episodes_batch
from ascent.agents.images import image_tokens_of
from ascent.agents.loop import AgentLimits, run_episodes
from ascent.batch import Batch
from ascent.rollout.protocol import Capability, RolloutBackend
from ascent.rollout.types import SamplingParams


class EpisodeRollouts:
    def __init__(
        self,
        config: AgentConfig,
        backend: RolloutBackend,
        tokenizer: object,
        *,
        max_model_len: int,
        pad_id: int,
        weight_version: Callable[[], int],
        model_dir: str | None = None,
    ) -> None:
        """``model_dir``: the policy's checkpoint (how many tokens an image takes, where the
        backend has no engine in this process to ask)."""
        if Capability.REQUEST_LEVEL not in backend.capabilities:
            raise ValueError(f"rollout.agent needs a request-level engine, not the {backend.name}")
        self.config, self.backend, self.tokenizer = config, backend, tokenizer
        self.max_model_len, self.pad_id, self.weight_version = max_model_len, pad_id, weight_version
        self.environments = environment_factory(config)  # a row -> a fresh environment
        self.images = image_tokens_of(backend, model_dir)  # None: the policy takes no images

    def generate(self, batch: Batch, params: SamplingParams) -> Batch:
        return self.collect(batch, self.backend.call(self.play(batch, params)), params)

    def submit(self, tag: str, batch: Batch, params: SamplingParams, together: bool) -> None:
        """Play the episodes beside training (the backend is a ``BackgroundBackend``;
        ``together`` does not apply: turns of many episodes interleave by nature)."""
        self.backend.submit_coroutine(tag, self.play(batch, params))

    def collect(self, batch: Batch, episodes: list, params: SamplingParams) -> Batch:
        out = episodes_batch(batch, episodes, params.n, params.max_new_tokens, self.pad_id)
        return out.with_meta(weight_version=self.weight_version())

    async def play(self, batch: Batch, params: SamplingParams) -> list:
        """Play ``params.n`` episodes of every row against the backend."""
        if self.images is None and any(batch.get("images") or []):
            raise ValueError(
                f"the rows hold images, which the {self.backend.name} or its model cannot "
                "take: train a vision-language model on an engine that takes images"
            )
        agent = self.config
        limits = AgentLimits(
            max_turns=agent.max_turns,
            max_response_tokens=params.max_new_tokens,
            max_tool_response_tokens=agent.max_tool_response_tokens,
            max_model_len=self.max_model_len,
            on_drift=agent.on_template_drift,
            tools_in_prompt=agent.tools_in_prompt,
        )
        rows = episode_rows(batch)
        return await run_episodes(
            self.backend, self.tokenizer, self.environments, rows, params, limits, self.images
        )


def episode_rows(batch: Batch) -> list[dict]:
    """The dataset rows of a rollout batch, as an episode's environment (or an outside
    agent) gets them: ``prompt``, ``data_source``, ``reward_model``, ``extra_info``,
    ``tools``, ``images`` (data URLs; those the prompt's ``<image>`` places show)."""
    return [
        {
            "prompt": batch["raw_prompt"][i],
            "data_source": batch["data_source"][i],
            "reward_model": {"ground_truth": batch["ground_truth"][i]},
            "extra_info": batch["extra_info"][i],
            "tools": batch["tools"][i] if "tools" in batch else None,
            "images": list(batch["images"][i]) if "images" in batch else [],
        }
        for i in range(len(batch))
    ]
