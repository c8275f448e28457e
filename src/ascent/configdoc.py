"""The configuration reference, generated from the config classes themselves.

Each documented class has a block in docs/reference/config.md between ``<!-- config:Name -->``
and ``<!-- /config -->``; ``python -m ascent.configdoc --update docs/reference/config.md``
rewrites the blocks and the test suite fails when they are out of date, so the reference cannot
drift from the code.
"""

import argparse
import re
import sys
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from ascent.agents.config import AgentConfig
from ascent.data.curriculum import PassRateConfig
from ascent.data.preference import PreferenceDataConfig
from ascent.data.rl import RLDataConfig
from ascent.data.sft import SFTDataConfig
from ascent.engine.config import (
    FSDPConfig,
    LoraSettings,
    LossScaleSettings,
    ModelConfig,
    OptimConfig,
    ParallelConfig,
)
from ascent.rewards.judge import JudgeConfig
from ascent.rewards.manager import RewardConfig
from ascent.rollout.config import ServerConfig
from ascent.rollout.types import SamplingParams
from ascent.service.config import SamplingSettings, ServiceConfig, TrainingSettings
from ascent.teacher.endpoint import TeacherEndpointConfig
from ascent.trainer.rl.config import (
    ActorSettings,
    AlgorithmSettings,
    CriticSettings,
    ImplicitPRMSettings,
    KLSettings,
    PFPPOSettings,
    RLConfig,
    RLTrainerSettings,
    RolloutSettings,
)
from ascent.trainer.rl.rewards import RewardModelSettings
from ascent.trainer.rl.teacher import TeacherSettings
from ascent.trainer.rm import RMConfig, RMTrainerSettings
from ascent.trainer.sft import SFTConfig, SFTTrainerSettings
from ascent.trainer.tracking import TrackingConfig
from ascent.workers.config import (
    ActorConfig,
    CriticConfig,
    DistillLossSettings,
    ImplicitPRMConfig,
    PolicyLossSettings,
    ReferenceConfig,
    RolloutCorrectionSettings,
    TeacherConfig,
)
from ascent.workers.resources import ResourcesConfig
from ascent.workers.rollout import RolloutConfig

DOCUMENTED: list[type[BaseModel]] = [
    RLConfig,
    RLDataConfig,
    PassRateConfig,
    RolloutSettings,
    ActorSettings,
    CriticSettings,
    ImplicitPRMSettings,
    AlgorithmSettings,
    KLSettings,
    PFPPOSettings,
    RewardConfig,
    RewardModelSettings,
    JudgeConfig,
    TeacherSettings,
    TeacherEndpointConfig,
    RLTrainerSettings,
    SFTConfig,
    SFTDataConfig,
    SFTTrainerSettings,
    RMConfig,
    PreferenceDataConfig,
    RMTrainerSettings,
    ServiceConfig,
    TrainingSettings,
    SamplingSettings,
    ResourcesConfig,
    TrackingConfig,
    ActorConfig,
    CriticConfig,
    ImplicitPRMConfig,
    ReferenceConfig,
    TeacherConfig,
    DistillLossSettings,
    RolloutConfig,
    ServerConfig,
    AgentConfig,
    SamplingParams,
    ModelConfig,
    LoraSettings,
    OptimConfig,
    FSDPConfig,
    ParallelConfig,
    LossScaleSettings,
    PolicyLossSettings,
    RolloutCorrectionSettings,
]
BLOCK = re.compile(r"<!-- config:(\w+) -->\n.*?<!-- /config -->", flags=re.DOTALL)


def _default(field: object) -> str:
    if getattr(field, "is_required", lambda: False)():
        return "required"
    default = field.default
    if default is PydanticUndefined:
        default = field.default_factory()  # type: ignore[misc]
    if isinstance(default, BaseModel):
        return f"see {type(default).__name__}"
    return f"`{default!r}`"


def table(model: type[BaseModel]) -> str:
    """A markdown table of the model's fields: name, default, description."""
    lines = ["| field | default | meaning |", "| --- | --- | --- |"]
    for name, field in model.model_fields.items():
        description = field.description or (
            f"see {field.annotation.__name__}" if isinstance(field.annotation, type) else ""
        )
        lines.append(f"| `{name}` | {_default(field)} | {description} |")
    return "\n".join(lines)


def render(text: str) -> str:
    """``text`` with every config block regenerated."""
    classes = {model.__name__: model for model in DOCUMENTED}

    def replace(match: re.Match) -> str:
        name = match.group(1)
        return f"<!-- config:{name} -->\n{table(classes[name])}\n<!-- /config -->"

    return BLOCK.sub(replace, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", metavar="PAGE", help="rewrite the blocks in this file")
    args = parser.parse_args(argv)
    if args.update:
        path = Path(args.update)
        path.write_text(render(path.read_text()))
        return 0
    for model in DOCUMENTED:
        sys.stdout.write(f"### {model.__name__}\n\n{table(model)}\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
