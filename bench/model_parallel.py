"""Data, tensor, sequence (Ulysses), ring context, pipeline and expert parallelism on CPU
processes (gloo), side by side: what each rank holds of the parameters and of the
activations.

Each layout is one ``ParallelConfig`` on a world of 2 or 4 ranks (the data-parallel degree
is what is left: ranks / (pipeline x tensor x sequence x context)):

- ``dense2``: a dense Qwen2-shaped model (8 heads, 2 key/value heads, 4 layers, untied
  head) on 2 ranks: data 2 (nothing split), sequence 2, context 2, tensor 2, data 2 in 4
  micro-batches, pipeline 2;
- ``dense4``: the same model on 4 ranks: data 4, tensor 2 x data 2, tensor 2 x context 2,
  context 4, pipeline 2 x data 2, tensor 2 x pipeline 2;
- ``moe``: a mixture of experts (8 experts, 2 per token; 4 heads, 2 key/value heads) on 2
  ranks: data 2, expert 2, tensor 2.

A replica (the tensor x sequence x context ranks that split one micro-batch) is given one
packed micro-batch of ``--tokens`` tokens per step (a multiple of 512: rows of 512 tokens,
the last quarter the response; the same rows on every rank of the replica, other rows on
other replicas) and runs the actor's forward and backward on it (``policy_forward`` on the
FSDP2 ``TrainEngine``, packed rows). A pipeline replica cuts its tokens into 4 micro-batches
(a pipeline needs several to keep its stages busy) and runs them through its stages under
the 1F1B schedule (``PipelineEngine.run``); ``data 2, 4 micro`` runs the same 4
micro-batches one after the other without stages, the pipeline's baseline. Measured per
rank, the largest over the ranks reported:

- parameters: the bytes of the rank's local shard of each of ``engine.module.parameters()``
  after construction (``DTensor.to_local()``: FSDP2 shards over every axis but tensor, the
  family's tensor plan splits over the tensor axis; it leaves a mixture-of-experts block
  whole on every tensor rank, experts being split over the expert axis instead);
- saved activations: the most bytes that the tensors autograd saves for the backward hold
  at once during the step (a DTensor by its local tensor, each storage once, held until the
  backward has used it): for a forward then a backward, all the forward saves; for a
  pipeline stage, which runs backwards between forwards, the peak over the schedule. Of
  these, the (..., n, n) constants (no gradient) over the packed tokens, n the
  micro-batch's length or the rank's share of it: the attention masks that transformers'
  packed SDPA path builds and CPU SDPA keeps per layer (tensor parallelism too: every
  tensor rank attends over all N tokens), which the Ulysses and ring paths do not have;
- RSS growth: how far a measured step raises the process's peak resident memory
  (``ru_maxrss``) above the peak of the steps before it, the largest over the measured
  steps. The warm-up step has set that peak already, so this is what a step adds beyond an
  identical step (allocator drift), not its footprint; the JSON also has the warm-up step's
  growth over the peak after construction (``rss_first_step_growth_mib_per_rank``), closer
  to a footprint but with one-time allocations in it;
- step seconds: from a barrier before the forward to a barrier after the backward.
  Tokens/s: every replica's tokens, (ranks / replica) x ``--tokens``, over the step's time.

Each layout runs in fresh processes, each with one thread (``torch.set_num_threads(1)``);
step seconds and saved bytes are medians over ``--repeats`` steps after one warm-up step.
The machine this was written for has 2 cores, so the 4-rank layouts run 4 single-threaded
processes on 2 cores: CPU tokens/s are for comparing memory, not speed, and 2- and 4-rank
rows are not comparable. Ratios are against the data-parallel row of the same model and
rank count.

    python bench/model_parallel.py                         # everything, 4096 tokens
    python bench/model_parallel.py --what dense2 --tokens 8192 --json results/dense2.json
"""

import argparse
import json
import os
import resource
import socket
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.tensor import DTensor

from ascent.batch import Batch
from ascent.engine import FSDPConfig, PolicyModule, TrainEngine, pack_for_responses
from ascent.engine.config import ParallelConfig
from ascent.engine.pipeline import PipelineEngine, make_engine
from ascent.models import load_causal_lm
from ascent.models.tiny import build_tiny_model
from ascent.models.tiny_moe import build_tiny_moe
from ascent.workers.common import policy_forward, split_plan

ROW_TOKENS = 512  # packed rows of this length (the last quarter is the response)
MICRO_BATCHES = 4  # a pipeline replica's tokens in this many micro-batches (and "4 micro")

# (model, ranks, layout label, ParallelConfig fields) per --what
LAYOUTS = {
    "dense2": [
        ("dense", 2, "data 2", {}),
        ("dense", 2, "sequence 2", {"sequence": 2}),
        ("dense", 2, "context 2", {"context": 2}),
        ("dense", 2, "tensor 2", {"tensor": 2}),
        ("dense", 2, "data 2, 4 micro", {"micro_batches": MICRO_BATCHES}),
        ("dense", 2, "pipeline 2", {"pipeline": 2}),
    ],
    "dense4": [
        ("dense", 4, "data 4", {}),
        ("dense", 4, "tensor 2 x data 2", {"tensor": 2}),
        ("dense", 4, "tensor 2 x context 2", {"tensor": 2, "context": 2}),
        ("dense", 4, "context 4", {"context": 4}),
        ("dense", 4, "pipeline 2 x data 2", {"pipeline": 2}),
        ("dense", 4, "tensor 2 x pipeline 2", {"tensor": 2, "pipeline": 2}),
    ],
    "moe": [
        ("moe", 2, "data 2", {}),
        ("moe", 2, "expert 2", {"expert": 2}),
        ("moe", 2, "tensor 2", {"tensor": 2}),
    ],
}


def rows_batch(tokens: int, vocab: int, seed: int) -> Batch:
    rows = max(tokens // ROW_TOKENS, 1)
    ids = torch.randint(3, vocab, (rows, ROW_TOKENS), generator=torch.Generator().manual_seed(seed))
    return Batch.from_dict(
        {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "responses": ids[:, -ROW_TOKENS // 4 :],
        }
    )


def local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def parameter_bytes(module: nn.Module) -> int:
    """Bytes of this rank's shard of each of ``module``'s parameters."""
    return sum(local(p).numel() * local(p).element_size() for p in module.parameters())


class SavedBytes:
    """The most bytes that tensors saved for the backward hold at once (each storage once),
    and of those the constants (no gradient) of shape (..., n, n) with n in ``sides``
    (attention masks). A storage is held while autograd holds a save of it: from the first
    save until the backward has used every save (or the graph that saved it is dropped). For
    a forward then a backward that is everything the forward saved; for a pipeline schedule,
    whose stage runs backwards between forwards, the peak."""

    def __init__(self, sides: set[int]) -> None:
        self.sides = sides
        self.held: dict[int, list] = {}  # storage -> [saves held, bytes, is a mask]
        self.peak = self.peak_squares = 0

    def pack(self, tensor):
        plain = local(tensor)
        storage = plain.untyped_storage()
        key = storage.data_ptr()
        if key in self.held:
            self.held[key][0] += 1
        else:
            # a mask is a constant; an (n, n) that needs a gradient is an activation or a
            # weight whose sizes happen to match n
            constant = not plain.requires_grad
            square = plain.dim() >= 2 and plain.shape[-1] == plain.shape[-2] in self.sides
            self.held[key] = [1, storage.nbytes(), square and constant]
        total = sum(n for _, n, _ in self.held.values())
        if total > self.peak:
            self.peak = total
            self.peak_squares = sum(n for _, n, square in self.held.values() if square)
        return _Held(tensor, key, self)

    def release(self, key: int) -> None:
        entry = self.held.get(key)
        if entry is not None:
            entry[0] -= 1
            if entry[0] == 0:
                del self.held[key]


class _Held:
    """A save as autograd holds it: released when autograd lets go of it."""

    __slots__ = ("key", "saved", "tensor")

    def __init__(self, tensor: torch.Tensor, key: int, saved: SavedBytes) -> None:
        self.tensor, self.key, self.saved = tensor, key, saved

    def __del__(self) -> None:
        self.saved.release(self.key)


def saved_bytes_of(step, sides: set[int]) -> tuple[int, int]:
    """``SavedBytes`` of ``step`` (its forward and backward): (peak bytes, of which masks)."""
    saved = SavedBytes(sides)
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda held: held.tensor):
        step()
    return saved.peak, saved.peak_squares


def worker(rank: int, config: dict, port: int, results: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=config["ranks"])
    parallel = ParallelConfig(**config["parallel"])
    model = load_causal_lm(config["model"], attn_implementation="sdpa")
    module = PolicyModule(model, chunk_tokens=1024)
    engine = make_engine(
        module,
        device=torch.device("cpu"),
        fsdp=FSDPConfig(),
        optim=None,
        parallel=parallel,
        tensor_plan=split_plan(module, parallel),
    )
    params = parameter_bytes(engine.module)
    # a replica is consecutive ranks (ascent.engine.mesh): the same rows within, others across
    batch = rows_batch(config["tokens"], model.config.vocab_size, rank // parallel.replica)
    packed_tokens = max(config["tokens"] // ROW_TOKENS, 1) * ROW_TOKENS
    split = parallel.sequence * parallel.context
    sides = {packed_tokens, packed_tokens // split, packed_tokens // MICRO_BATCHES}
    if parallel.pipeline > 1:
        step = pipeline_step(engine, batch)
    else:
        step = whole_step(engine, batch, config["micro_batches"])

    times, saved, masks, rss, first_rss = [], [], [], [], 0
    for repeat in range(config["repeats"] + 1):
        dist.barrier()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        began = time.perf_counter()
        kept, square = saved_bytes_of(step, sides)
        dist.barrier()
        took = time.perf_counter() - began
        engine.zero_grad()
        for param in engine.module.parameters():
            param.grad = None
        if not repeat:  # the first step warms up
            first_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        else:
            times.append(took)
            saved.append(kept)
            masks.append(square)
            rss.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
    results[rank] = {
        "seconds": statistics.median(times),
        "params_mib": params / 2**20,
        "saved_mib": statistics.median(saved) / 2**20,
        "mask_mib": statistics.median(masks) / 2**20,
        "rss_growth_mib": max(rss) / 1024,
        "rss_first_step_growth_mib": first_rss / 1024,
    }
    dist.destroy_process_group()


def whole_step(engine: TrainEngine, batch: Batch, micro_batches: int = 1):
    """The replica's tokens as one packed micro-batch (or ``micro_batches``, one after the
    other): forward, then backward."""

    def step() -> None:
        for part in batch.split(min(micro_batches, len(batch))):
            log_probs, entropy = policy_forward(engine, part, torch.device("cpu"), 1.0, True)
            (log_probs.sum() - 0.01 * entropy.sum()).backward()

    return step


def pipeline_step(engine: PipelineEngine, batch: Batch):
    """The replica's tokens as ``MICRO_BATCHES`` packed micro-batches through the
    stages (1F1B), the same loss."""
    parts = batch.split(min(MICRO_BATCHES, len(batch)))
    layouts = [
        pack_for_responses(part["input_ids"], part["attention_mask"], ROW_TOKENS // 4)
        for part in parts
    ]

    def loss(index: int, outputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, dict]:
        log_probs, entropy = outputs
        return log_probs.sum() - 0.01 * entropy.sum(), {}

    return lambda: engine.run(layouts, loss)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def measure(config: dict) -> dict:
    manager = mp.Manager()
    results = manager.dict()
    mp.spawn(worker, args=(config, free_port(), results), nprocs=config["ranks"])
    per_rank = [results[rank] for rank in range(config["ranks"])]
    seconds = max(r["seconds"] for r in per_rank)  # a step ends when every rank is done
    replica = ParallelConfig(**config["parallel"]).replica
    tokens = config["tokens"] * (config["ranks"] // replica)  # every replica's tokens
    return {
        **config,
        "replica": replica,
        "step_s": seconds,
        "tokens_per_s": tokens / seconds,
        "params_mib_per_rank": max(r["params_mib"] for r in per_rank),
        "saved_mib_per_rank": max(r["saved_mib"] for r in per_rank),
        "mask_mib_per_rank": max(r["mask_mib"] for r in per_rank),
        "rss_growth_mib_per_rank": max(r["rss_growth_mib"] for r in per_rank),
        "rss_first_step_growth_mib_per_rank": max(r["rss_first_step_growth_mib"] for r in per_rank),
    }


def models(root: Path) -> dict[str, str]:
    dense = build_tiny_model(
        root / "dense", hidden_size=256, layers=4, heads=8, kv_heads=2, intermediate_size=1024
    )
    moe = build_tiny_moe(
        root / "moe",
        hidden_size=256,
        layers=4,
        heads=4,
        kv_heads=2,
        experts=8,
        experts_per_token=2,
        expert_size=512,
    )
    return {"dense": str(dense), "moe": str(moe)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", choices=[*LAYOUTS, "all"], default="all")
    parser.add_argument("--tokens", type=int, default=4096, help="tokens per replica and step")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    runs = [run for what, runs in LAYOUTS.items() if args.what in (what, "all") for run in runs]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = models(Path(tmp))
        for model, ranks, layout, fields in runs:
            config = {"model_name": model, "model": paths[model], "ranks": ranks}
            micro_batches = fields.get("micro_batches", 1)
            parallel = {k: v for k, v in fields.items() if k != "micro_batches"}
            config |= {"layout": layout, "parallel": parallel, "micro_batches": micro_batches}
            config |= {"tokens": args.tokens, "repeats": args.repeats}
            rows.append(measure(config))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "model"}), flush=True)
    # the model's path was in the temporary directory, gone now
    rows = [{k: v for k, v in row.items() if k != "model"} for row in rows]
    print_table(rows)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=1))


def print_table(rows: list[dict]) -> None:
    print(
        f"\n{'model':<7}{'ranks':>6}  {'layout':<22}{'tokens/replica':>15}{'step s':>9}"
        f"{'tok/s':>8}{'params MiB/rank':>17}{'saved MiB/rank':>16}{'of which N x N':>16}"
        f"{'RSS growth MiB/rank':>21}"
    )
    for row in rows:
        print(
            f"{row['model_name']:<7}{row['ranks']:>6}  {row['layout']:<22}{row['tokens']:>15}"
            f"{row['step_s']:>9.3f}{row['tokens_per_s']:>8.0f}{row['params_mib_per_rank']:>17.2f}"
            f"{row['saved_mib_per_rank']:>16.1f}{row['mask_mib_per_rank']:>16.1f}"
            f"{row['rss_growth_mib_per_rank']:>21.1f}"
        )
    print(
        f"One thread per process on {os.cpu_count()} CPU cores (4-rank rows oversubscribe a "
        "2-core machine): tok/s are for comparing memory, not speed, and are not comparable "
        "between 2- and 4-rank rows."
    )
    for row in rows:
        data = [
            other
            for other in rows
            if other["model_name"] == row["model_name"]
            and other["ranks"] == row["ranks"]
            and not other["parallel"]
        ]
        if not data or row is data[0]:
            continue
        base = data[0]
        print(
            f"{row['model_name']} on {row['ranks']}, {row['layout']} / {base['layout']}: "
            f"params x{row['params_mib_per_rank'] / base['params_mib_per_rank']:.2f}, "
            f"saved x{row['saved_mib_per_rank'] / base['saved_mib_per_rank']:.2f}, "
            f"tok/s x{row['tokens_per_s'] / base['tokens_per_s']:.2f}"
        )


if __name__ == "__main__":
    main()
