"""Settings of the rollout role."""

from typing import Literal

from pydantic import Field

from ascent.engine.config import ModelConfig, Strict
from ascent.rollout.types import SamplingParams


class RolloutConfig(Strict):
    """The generator: which engine, how much it holds at once, how it samples by default."""

    model: ModelConfig = Field(description="Checkpoint of the initial weights (ModelConfig).")
    engine: Literal["native", "transformers"] = Field(
        "native", description="native (continuous batching) or transformers (reference)."
    )
    sampling: SamplingParams = Field(
        SamplingParams(), description="Default sampling; a generate call may override fields."
    )
    stop_at_eos: bool = Field(True, description="Add the tokenizer's EOS to the stop tokens.")
    max_num_seqs: int = Field(64, ge=1, description="Sequences decoded at once (cache slots).")
    max_model_len: int = Field(2048, ge=2, description="Prompt + response limit.")
    kv_cache_bytes: int | None = Field(
        None, gt=0, description="KV cache budget; fewer slots than max_num_seqs if it binds."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Generation dtype; auto: bfloat16 on CUDA, float32 on CPU."
    )
    free_cache_after_generate: bool = Field(
        True, description="Release the KV cache after each generate (colocated training)."
    )
    cuda_graphs: bool = Field(True, description="Capture decode steps in CUDA graphs on CUDA.")
