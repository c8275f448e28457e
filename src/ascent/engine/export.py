"""Export a trained engine's model as a plain transformers checkpoint (safetensors, config,
tokenizer, and a vision-language model's processor files) that ``from_pretrained`` loads.
LoRA adapters are merged into the weights."""

from pathlib import Path

import torch
import torch.distributed as dist

from ascent.engine.fsdp import TrainEngine
from ascent.engine.modules import unwrap
from ascent.vision.processing import copy_processor_files


def export_hf(engine: TrainEngine, source: str | Path, out_dir: str | Path) -> None:
    """All ranks gather the full weights; rank 0 writes them with the config and tokenizer
    of ``source`` (the checkpoint the model was loaded from) into ``out_dir``."""
    rank = dist.get_rank()
    weights = {}
    for name, tensor in engine.full_weights():
        if rank == 0:
            weights[name] = tensor.cpu().clone()
    if rank == 0:
        from transformers import AutoTokenizer

        config = unwrap(engine.module.model).config
        model = type(unwrap(engine.module.model))._from_config(config)
        missing, unexpected = model.load_state_dict(weights, strict=False)
        tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
        if set(missing) - tied or unexpected:
            raise RuntimeError(f"export: missing {missing}, unexpected {unexpected}")
        model.to(torch.float32).save_pretrained(out_dir)
        AutoTokenizer.from_pretrained(source, local_files_only=True).save_pretrained(out_dir)
        copy_processor_files(source, out_dir)  # a vision-language model's image processor
    dist.barrier()
