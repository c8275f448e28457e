"""A deliberately short SFT warm start: train until greedy accuracy on the development
problems reaches ``target`` (about 30%), so RL starts from a policy that sometimes answers
right and has much to gain. Uses the SFT worker and a colocated rollout worker, which reads
the SFT weights in place to check progress."""

import random
import time
from pathlib import Path

import torch

from ascent.controller import ResourcePool, Role, spawn_groups
from ascent.data.rl import RLPrompt, prompts_batch
from ascent.data.sft import plain_example
from ascent.models.loading import load_tokenizer
from ascent.quickstart.task import Pair, answer, question
from ascent.rollout import RolloutConfig, RolloutWorker
from ascent.rollout.types import response_lengths
from ascent.trainer.sft import collate
from ascent.workers.sft import SFTWorker, SFTWorkerConfig


def greedy_accuracy(rollout: object, tokenizer: object, pairs: list[Pair]) -> float:
    prompts = [RLPrompt(_prompt_ids(tokenizer, pair), "arithmetic", answer(pair)) for pair in pairs]
    out = rollout.generate(
        prompts_batch(prompts, tokenizer.pad_token_id, "dev"), sampling={"n": 1, "temperature": 0.0}
    )
    correct = 0
    for row, (pair, length) in enumerate(zip(pairs, response_lengths(out).tolist(), strict=True)):
        text = tokenizer.decode(out["responses"][row][:length].tolist(), skip_special_tokens=True)
        correct += text.strip() == answer(pair)
    return correct / len(pairs)


def _prompt_ids(tokenizer: object, pair: Pair) -> list[int]:
    return tokenizer(question(pair), add_special_tokens=False)["input_ids"]


def warm_start(
    model_dir: str,
    out_dir: Path,
    train: list[Pair],
    dev: list[Pair],
    *,
    seed: int,
    target: float = 0.3,
    batch_size: int = 64,
    lr: float = 1e-3,
    check_every: int = 10,
    max_steps: int = 2000,
) -> dict:
    """Returns steps, seconds and the development accuracy reached; writes the model."""
    began = time.perf_counter()
    tokenizer = load_tokenizer(model_dir)
    examples = [plain_example(tokenizer, question(p), answer(p)) for p in train]
    sft_config = SFTWorkerConfig(model={"path": model_dir}, optim={"lr": lr, "warmup_steps": 20})
    rollout_config = RolloutConfig(
        model={"path": model_dir},
        max_model_len=64,
        max_num_seqs=256,
        free_cache_after_generate=False,
    )
    groups = spawn_groups(
        {
            "sft": Role(SFTWorker, args=(sft_config,)),
            "rollout": Role(RolloutWorker, args=(rollout_config,)),
        },
        ResourcePool(),
        backend="in-process",
    )
    sft, rollout = groups["sft"], groups["rollout"]
    rng = random.Random(seed)
    torch.manual_seed(seed)
    accuracy, step = 0.0, 0
    try:
        while step < max_steps:
            batch = collate(rng.sample(examples, batch_size), tokenizer.pad_token_id)
            sft.train_step(batch)
            step += 1
            if step % check_every == 0:
                rollout.sync_from_colocated("sft")
                accuracy = greedy_accuracy(rollout, tokenizer, dev)
                print(f"  SFT step {step}: development accuracy {accuracy:.0%}", flush=True)
                if accuracy >= target:
                    break
        sft.export(str(out_dir))
    finally:
        sft.shutdown()
    return {"steps": step, "dev_accuracy": accuracy, "seconds": time.perf_counter() - began}
