"""Sequence and expert parallelism on two processes (gloo), side by side with their absence.

- ``sp``: one packed micro-batch of ``--tokens`` tokens through the actor's forward and
  backward (``policy_forward`` on the FSDP2 engine), whole on each rank (sequence_parallel
  1: each rank has a micro-batch of its own) or split over the two ranks (Ulysses, 2).
  Activation memory per rank: the bytes the forward keeps for the backward (every tensor
  autograd saves, counted once per storage; of which the (N, N) attention masks that
  transformers' packed SDPA path builds and CPU SDPA keeps per layer, which the Ulysses
  path, attending row by row, does not have), and the peak RSS growth of the step. Tokens/s:
  tokens of the micro-batch over the step's time (for sp=2, the two ranks work on one
  micro-batch).
- ``ep``: a mixture of experts, ``--tokens`` tokens per rank through forward and backward,
  every expert on every rank (FSDP shards; transformers' experts loop) or half of them on
  each (fsdp.expert_parallel 2; ascent's batched dispatch and two all-to-alls per layer).
  Tokens/s per rank.

Each configuration runs in fresh processes (one thread each: two processes on two cores);
the medians over ``--repeats`` steps after one warm-up step are printed with their ratios.

    python bench/model_parallel.py                         # both, 4096 tokens
    python bench/model_parallel.py --what sp --tokens 8192 --json results/sp.json
"""

import argparse
import json
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ascent.batch import Batch
from ascent.engine import FSDPConfig, PolicyModule, TrainEngine
from ascent.models import load_causal_lm
from ascent.models.tiny import build_tiny_model
from ascent.models.tiny_moe import build_tiny_moe
from ascent.workers.common import policy_forward

ROW_TOKENS = 512  # packed rows of this length (the last quarter is the response)


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


def saved_bytes_of(step, packed_tokens: int) -> tuple[int, int, torch.Tensor]:
    """Bytes of the tensors autograd saves for the backward while ``step`` runs its forward
    (each storage once), of which those (..., N, N) over the packed sequence (attention
    masks), and the step's loss."""
    storages: dict[int, int] = {}
    squares: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        if tensor.dim() >= 2 and tensor.shape[-1] == tensor.shape[-2] == packed_tokens:
            squares[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = step()
    return sum(storages.values()), sum(squares.values()), loss


def worker(rank: int, config: dict, port: int, results: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    model = load_causal_lm(config["model"], attn_implementation="sdpa")
    engine = TrainEngine(
        PolicyModule(model, chunk_tokens=1024),
        device=torch.device("cpu"),
        fsdp=FSDPConfig(expert_parallel=config["ep"]),
        optim=None,
        sequence_parallel=config["sp"],
    )
    # sp=2: both ranks take the same micro-batch; otherwise each rank has its own
    seed = 0 if config["sp"] > 1 else rank
    batch = rows_batch(config["tokens"], model.config.vocab_size, seed)

    def step():
        log_probs, entropy = policy_forward(engine, batch, torch.device("cpu"), 1.0, True)
        return log_probs.sum() - 0.01 * entropy.sum()

    times, saved, masks, rss = [], [], [], []
    for repeat in range(config["repeats"] + 1):
        dist.barrier()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        began = time.perf_counter()
        kept, square, loss = saved_bytes_of(step, config["tokens"])
        loss.backward()
        dist.barrier()
        took = time.perf_counter() - began
        engine.zero_grad()
        for param in engine.module.parameters():
            param.grad = None
        if repeat:  # the first step warms up
            times.append(took)
            saved.append(kept)
            masks.append(square)
            rss.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
    results[rank] = {
        "seconds": statistics.median(times),
        "saved_mib": statistics.median(saved) / 2**20,
        "mask_mib": statistics.median(masks) / 2**20,
        "rss_growth_mib": max(rss) / 1024,
    }
    dist.destroy_process_group()


def measure(config: dict, port: int) -> dict:
    manager = mp.Manager()
    results = manager.dict()
    mp.spawn(worker, args=(config, port, results), nprocs=2)
    per_rank = [results[0], results[1]]
    seconds = max(r["seconds"] for r in per_rank)  # a step ends when both ranks are done
    tokens = config["tokens"] * (1 if config["sp"] > 1 else 2)  # both ranks together
    return {
        **config,
        "step_s": seconds,
        "tokens_per_s": tokens / seconds,
        "saved_mib_per_rank": max(r["saved_mib"] for r in per_rank),
        "mask_mib_per_rank": max(r["mask_mib"] for r in per_rank),
        "rss_growth_mib_per_rank": max(r["rss_growth_mib"] for r in per_rank),
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
    parser.add_argument("--what", choices=["sp", "ep", "both"], default="both")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = models(Path(tmp))
        runs = []
        if args.what in ("sp", "both"):
            runs += [("sp", paths["dense"], 1, sp) for sp in (1, 2)]
        if args.what in ("ep", "both"):
            runs += [("ep", paths["moe"], ep, 1) for ep in (1, 2)]
        for index, (kind, path, ep, sp) in enumerate(runs):
            config = {"kind": kind, "model": path, "ep": ep, "sp": sp}
            config |= {"tokens": args.tokens, "repeats": args.repeats}
            rows.append(measure(config, 29600 + index))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "model"}), flush=True)
    print_table(rows)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=1))


def print_table(rows: list[dict]) -> None:
    print(
        f"\n{'what':<5}{'ep':>4}{'sp':>4}{'tokens':>8}{'step s':>9}{'tok/s':>9}"
        f"{'saved MiB/rank':>16}{'of which N x N':>16}{'RSS growth MiB/rank':>21}"
    )
    for row in rows:
        print(
            f"{row['kind']:<5}{row['ep']:>4}{row['sp']:>4}{row['tokens']:>8}{row['step_s']:>9.3f}"
            f"{row['tokens_per_s']:>9.0f}{row['saved_mib_per_rank']:>16.1f}"
            f"{row['mask_mib_per_rank']:>16.1f}{row['rss_growth_mib_per_rank']:>21.1f}"
        )
    for kind, knob in (("sp", "sp"), ("ep", "ep")):
        pair = [r for r in rows if r["kind"] == kind]
        if len(pair) == 2:
            one, two = sorted(pair, key=lambda r: r[knob])
            rest = [r["saved_mib_per_rank"] - r["mask_mib_per_rank"] for r in (one, two)]
            print(
                f"{kind}=2 / {kind}=1: saved memory per rank x"
                f"{two['saved_mib_per_rank'] / one['saved_mib_per_rank']:.2f} (without N x N "
                f"masks x{rest[1] / rest[0]:.2f}), tokens/s x"
                f"{two['tokens_per_s'] / one['tokens_per_s']:.2f}"
            )


if __name__ == "__main__":
    main()
