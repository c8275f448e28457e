"""One supervised step of a Tinker-API loop through ``ascent service`` (the official SDK,
HTTP, protobuf, long-polled futures, a real server process) against the same step on
ascent's engine directly (the service's own model worker, called in this process), side by
side: what the service path costs on top of the work.

A step is what the cookbook's ``sl_loop`` does per batch: ``forward_backward`` on
``--batch`` datums of ``--tokens`` tokens with ``cross_entropy``, then ``optim_step``
(AdamW), LoRA of rank 8. Both paths run ``--repeats`` steps after one warm-up step; the
table has the median step time, tokens/s and the service's time over the direct one. The
server and this process each use ``--threads`` torch threads (the server's compute is its
own process; the client mostly waits). With ``--ranks N`` both paths train the model on N
ranks over Ray (``resources.devices_per_node=N``), each rank with ``--threads / N`` threads.

    python bench/tinker_service.py                      # a 4-layer model of width 256
    python bench/tinker_service.py --ranks 2
    python bench/tinker_service.py --model DIR --json results/tinker_service.json
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from ascent.controller import spawn_group
from ascent.models.tiny import build_tiny_model
from ascent.rollout.server_process import ServerProcess, free_port
from ascent.service.config import load_service_config
from ascent.service.model_worker import TinkerModelWorker
from ascent.service.wire import Datum

LORA = {"rank": 8, "seed": 0, "train_attn": True, "train_mlp": True, "train_unembed": True}
ADAM = {"learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0}


def batch(vocab: int, size: int, tokens: int, seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (size, tokens + 1), generator=generator).tolist()


def ranks_settings(ranks: int, threads: int) -> list[str]:
    """The service config's overrides for ``ranks`` ranks sharing ``threads`` cores."""
    cpus = max(threads // ranks, 1)
    return [f"resources.devices_per_node={ranks}", f"resources.cpus_per_worker={cpus}"]


def direct(model_dir: str, rows: list[list[int]], repeats: int, settings: list[str]) -> list[float]:
    """The service's model worker, spawned as the service spawns it (in this process for
    one rank, over Ray for more), called without HTTP."""
    config = load_service_config(model_dir, settings)
    group = spawn_group(
        TinkerModelWorker,
        config.resources.pool(),
        args=(config.model, config.training, LORA),
        backend=config.resources.backend,
    )
    data = [
        Datum(
            torch.tensor(row[:-1]),
            {"target_tokens": torch.tensor(row[1:]), "weights": torch.ones(len(row) - 1)},
        )
        for row in rows
    ]
    times = []
    for _ in range(repeats + 1):
        began = time.perf_counter()
        group.forward_backward(data, "cross_entropy", {}, False)
        group.optim_step(ADAM | {"grad_clip_norm": 0.0})
        times.append(time.perf_counter() - began)
    group.shutdown()
    if config.resources.world_size > 1:
        import ray

        ray.shutdown()  # before the service's turn: its ranks need the cores
    return times[1:]


def through_service(
    model_dir: str, rows: list[list[int]], repeats: int, threads: int, settings: list[str]
) -> list[float]:
    import tinker
    from tinker import types

    port = free_port()
    log = Path(tempfile.mkdtemp()) / "service.log"
    command = [sys.executable, "-m", "ascent", "service", model_dir, *settings, "--name", "bench"]
    command += ["--port", str(port), "--root", str(log.parent / "checkpoints")]
    env = {"TINKER_TELEMETRY": "0", "OMP_NUM_THREADS": str(threads)}
    server = ServerProcess(command, port, log, env)
    server.start(180)
    try:
        client = tinker.ServiceClient(base_url=server.url, api_key="tml-bench")
        training = client.create_lora_training_client(base_model="bench", rank=8).result()
        data = [
            types.Datum(
                model_input=types.ModelInput.from_ints(row[:-1]),
                loss_fn_inputs={"target_tokens": row[1:], "weights": [1.0] * (len(row) - 1)},
            )
            for row in rows
        ]
        times = []
        for _ in range(repeats + 1):
            began = time.perf_counter()
            step = training.forward_backward(data, "cross_entropy")
            optim = training.optim_step(types.AdamParams(**ADAM))
            step.result(), optim.result()
            times.append(time.perf_counter() - began)
        return times[1:]
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a checkpoint directory (default: a 4-layer tiny model)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ranks", type=int, default=1, help="ranks of the trained model")
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    os.environ["TINKER_TELEMETRY"] = "0"
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model or str(
            build_tiny_model(Path(tmp) / "model", hidden_size=256, layers=4, heads=8, kv_heads=2)
        )
        vocab = json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"]
        rows = batch(vocab, args.batch, args.tokens)
        settings = ranks_settings(args.ranks, args.threads) if args.ranks > 1 else []
        times = {
            "ascent engine, direct": direct(model_dir, rows, args.repeats, settings),
            "ascent service + tinker SDK": through_service(
                model_dir, rows, args.repeats, args.threads, settings
            ),
        }
    tokens = args.batch * args.tokens
    base = statistics.median(times["ascent engine, direct"])
    results = []
    print(f"\n{'path':<30}{'step s (median)':>17}{'tokens/s':>10}{'x direct':>10}")
    for path, steps in times.items():
        median = statistics.median(steps)
        results.append(
            {
                "path": path,
                "step_s": median,
                "steps_s": steps,
                "tokens": tokens,
                "ranks": args.ranks,
            }
        )
        print(f"{path:<30}{median:>17.3f}{tokens / median:>10.0f}{median / base:>10.2f}")
    print(
        f"{args.batch} datums x {args.tokens} tokens, LoRA rank 8, {args.ranks} rank(s), "
        f"{args.threads} threads"
    )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
