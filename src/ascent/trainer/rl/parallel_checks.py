"""Each training role's ``parallel`` section, checked against its ranks, its checkpoint's
heads, MLP width and experts, and its model family before any worker starts; and the line
the step plan prints for it."""

import json
from pathlib import Path

from ascent.algos.needs import Needs
from ascent.config import ConfigError
from ascent.engine.config import ModelConfig, ParallelConfig
from ascent.models.families.registry import tensor_parallel_refusal
from ascent.moe.checkpoint import expert_count
from ascent.trainer.rl.config import RLConfig
from ascent.workers.config import pipeline_problem


def trained_roles(config: RLConfig, needs: Needs) -> list[tuple[str, ParallelConfig, ModelConfig]]:
    """(role, its parallel section, its checkpoint) of each role on the FSDP engine; the
    reference splits as the actor, the implicit PRM is not split."""
    roles = [("actor", config.actor.parallel, config.model)]
    if needs.values:
        critic = config.critic
        roles.append(("critic", critic.parallel, critic.model or config.model))
    if needs.process_rewards:
        prm = config.implicit_prm
        roles.append(("implicit_prm", ParallelConfig(), prm.model or config.model))
    return roles


def checkpoint_config(path: str) -> dict | None:
    """A local checkpoint's config.json, None where there is none to read."""
    config_file = Path(path) / "config.json"
    return json.loads(config_file.read_text()) if config_file.is_file() else None


def check_parallel(config: RLConfig, needs: Needs) -> None:
    """Every role's degrees divide what they split (module docstring)."""
    world = config.resources.world_size
    for role, parallel, model in trained_roles(config, needs):
        check_ranks(f"{role}.parallel", parallel, world)
        checkpoint = checkpoint_config(model.path)
        if checkpoint is None:
            continue  # the model's own loading names the missing checkpoint
        check_experts(f"{role}.parallel.expert", parallel.expert, checkpoint, model.path)
        for name, size in (("sequence", parallel.sequence), ("context", parallel.context)):
            if size > 1 and not model.packed:
                raise ConfigError(
                    f"{role}.parallel.{name}={size} splits packed rows: set "
                    f"model.packing=packed (with attn_implementation="
                    f"{model.attn_implementation} the rows stay padded)"
                )
        check_heads(f"{role}.parallel", parallel, checkpoint)
        check_stages(role, parallel, model, checkpoint)
        if parallel.tensor > 1:
            check_tensor_split(f"{role}.parallel.tensor={parallel.tensor}", parallel, checkpoint)


def check_ranks(field: str, parallel: ParallelConfig, world: int) -> None:
    problem = parallel.rank_problem(world, field)
    if problem is not None:
        raise ConfigError(problem)


def check_experts(field: str, expert: int, checkpoint: dict, path: str) -> None:
    if expert == 1:
        return
    experts = expert_count(checkpoint)
    if experts == 0:
        raise ConfigError(f"{field}={expert}: {path} is a dense model (no experts); set it to 1")
    if experts % expert:
        raise ConfigError(f"{field}={expert} must divide the model's {experts} experts ({path})")


def check_heads(field: str, parallel: ParallelConfig, checkpoint: dict) -> None:
    """Each tensor rank takes heads / tensor query heads and as many key/value heads; the
    sequence ranks then split those (a key/value head may be repeated for them)."""
    split = parallel.tensor * parallel.sequence
    if split == 1:
        return
    if "vision_config" in checkpoint:
        raise ConfigError(f"{field}: vision-language models are not split yet; set it to 1")
    heads = checkpoint.get("num_attention_heads", 0)
    kv_heads = checkpoint.get("num_key_value_heads") or heads
    if heads % split:
        raise ConfigError(
            f"{field}: tensor x sequence = {split} must divide the model's {heads} attention heads"
        )
    if kv_heads % parallel.tensor:
        raise ConfigError(
            f"{field}.tensor={parallel.tensor} must divide the model's {kv_heads} key/value heads"
        )
    per_rank = kv_heads // parallel.tensor
    if per_rank % parallel.sequence and parallel.sequence % per_rank:
        raise ConfigError(
            f"{field}.sequence={parallel.sequence} and the {per_rank} key/value heads of each "
            "tensor rank: one must divide the other (each rank takes whole key/value heads, "
            "or a repeated one)"
        )


def check_stages(role: str, parallel: ParallelConfig, model: ModelConfig, checkpoint: dict) -> None:
    """Pipeline stages take packed rows and no LoRA adapters (the role's own check,
    ``pipeline_problem``), a layer per stage at least, an untied head (it lives on the last
    stage, the embedding on the first) and a text model."""
    problem = pipeline_problem(role, model, parallel)
    if problem is not None:
        raise ConfigError(problem)
    if parallel.pipeline == 1:
        return
    field = f"{role}.parallel.pipeline={parallel.pipeline}"
    text = checkpoint.get("text_config", checkpoint)
    layers = text.get("num_hidden_layers", 0)
    if "vision_config" in checkpoint:
        raise ConfigError(f"{field}: vision-language models are not cut into stages yet")
    if layers and parallel.pipeline > layers:
        raise ConfigError(f"{field} exceeds the model's {layers} layers ({model.path})")
    if text.get("tie_word_embeddings", checkpoint.get("tie_word_embeddings", False)):
        raise ConfigError(
            f"{field}: {model.path} ties its head to the embedding, which would live on "
            "different stages; untie them in the checkpoint, or set it to 1"
        )


def check_tensor_split(field: str, parallel: ParallelConfig, checkpoint: dict) -> None:
    refusal = tensor_parallel_refusal(checkpoint)
    if refusal is not None:
        raise ConfigError(refusal)
    for key in ("intermediate_size", "shared_expert_intermediate_size"):
        width = checkpoint.get(key)
        if width and width % parallel.tensor:
            raise ConfigError(f"{field} must divide the model's {key} {width}")


def describe_parallel(role: str, parallel: ParallelConfig, world: int) -> str:
    """``role: 8 rank(s) = data 2 x tensor 2 x context 2 (experts over 2)``: the plan's
    line."""
    data = world // parallel.replica  # pipeline stages hold the same rows too
    axes = (("tensor", parallel.tensor), ("sequence", parallel.sequence))
    axes += (("context", parallel.context), ("pipeline", parallel.pipeline))
    parts = [f"data {data}"] + [f"{name} {size}" for name, size in axes if size > 1]
    experts = f" (experts over {parallel.expert})" if parallel.expert > 1 else ""
    return f"  {role}: {world} rank(s) = {' x '.join(parts)}{experts}"
