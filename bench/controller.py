"""Driver overhead of the controller against plain Ray calls of the same shape, in one run.

Measures, on a 2-rank group (two Ray actor processes, one CPU each):
- the round trip of an empty call to both ranks (ascent: ``group.noop()``, dispatch ALL;
  plain Ray: ``ray.get([a.noop.remote() for a in actors])``);
- the throughput of sending a batch of SIZE MB split over the two ranks and getting a small
  answer back (ascent: ``group.consume(batch)``, dispatch DP, a ``Batch`` split on the driver;
  plain Ray: the same tensors split in two dicts, sent as torch tensors and as numpy arrays).

Repeats are interleaved (ascent, plain torch, plain numpy, ascent, ...) so machine noise hits
all alike; figures are medians. Usage:

    .venv/bin/python bench/controller.py [--repeats 15] [--calls 300] [--json PATH]
"""

import argparse
import functools
import json
import statistics
import time

import ray
import torch

from ascent.batch import Batch
from ascent.controller import Dispatch, ResourcePool, Worker, register, spawn_group

BYTES_PER_TOKEN = 8 + 1 + 4 + 4  # input_ids int64, mask bool, two float32 fields


class BenchWorker(Worker):
    @register(Dispatch.ALL)
    def noop(self) -> None:
        return None

    @register(Dispatch.DP)
    def consume(self, batch: Batch) -> int:
        return len(batch)


@ray.remote(num_cpus=1)
class PlainActor:
    def noop(self) -> None:
        return None

    def consume(self, fields: dict) -> int:
        return len(next(iter(fields.values())))


def make_batch(megabytes: int, rows: int = 256) -> Batch:
    length = max(1, megabytes * 1_000_000 // (BYTES_PER_TOKEN * rows))
    return Batch.from_dict(
        {
            "input_ids": torch.randint(0, 150_000, (rows, length)),
            "attention_mask": torch.ones(rows, length, dtype=torch.bool),
            "old_log_probs": torch.randn(rows, length),
            "advantages": torch.randn(rows, length),
        }
    )


def send_halves(actors: list, halves: list[dict]) -> list[int]:
    return ray.get([a.consume.remote(h) for a, h in zip(actors, halves, strict=True)])


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=15, help="timed repeats per payload")
    parser.add_argument("--calls", type=int, default=300, help="empty calls timed")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100], help="payloads, MB")
    parser.add_argument("--json", type=str, default=None, help="also write the figures here")
    args = parser.parse_args()

    # 4 logical CPUs: the group reserves 2, the plain actors take the other 2 (the machine
    # has 2 cores; both sides are idle while the other is timed).
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    group = spawn_group(BenchWorker, ResourcePool(devices_per_node=2), backend="ray")
    actors = [PlainActor.remote() for _ in range(2)]
    ray.get([a.noop.remote() for a in actors])

    rows = []
    samples: dict[str, list[float]] = {"ascent": [], "plain": []}
    for _ in range(20):  # warm-up
        group.noop()
        ray.get([a.noop.remote() for a in actors])
    for _ in range(args.calls):
        samples["ascent"].append(timed(group.noop))
        samples["plain"].append(timed(lambda: ray.get([a.noop.remote() for a in actors])))
    ascent_us = statistics.median(samples["ascent"]) * 1e6
    plain_us = statistics.median(samples["plain"]) * 1e6
    rows.append(
        {
            "measure": "empty call, 2 ranks (us)",
            "ascent": ascent_us,
            "plain_torch": plain_us,
            "plain_numpy": None,
            "ascent_over_plain_torch": ascent_us / plain_us,
        }
    )

    for megabytes in args.sizes:
        batch = make_batch(megabytes)
        halves = [dict(part.tensors.items()) for part in batch.split(2)]
        numpy_halves = [{k: v.numpy() for k, v in half.items()} for half in halves]
        real_mb = sum(t.numel() * t.element_size() for t in batch.tensors.values()) / 1e6
        runs = {
            "ascent": functools.partial(group.consume, batch),
            "plain_torch": functools.partial(send_halves, actors, halves),
            "plain_numpy": functools.partial(send_halves, actors, numpy_halves),
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        for repeat in range(args.repeats + 1):
            for name, run in runs.items():
                elapsed = timed(run)
                if repeat:  # the first round warms caches and the object store
                    times[name].append(elapsed)
        throughput = {name: real_mb / statistics.median(t) for name, t in times.items()}
        rows.append(
            {
                "measure": f"Batch {real_mb:.0f} MB to 2 ranks (MB/s)",
                **throughput,
                "ascent_over_plain_torch": throughput["ascent"] / throughput["plain_torch"],
            }
        )

    group.shutdown()
    ray.shutdown()
    print(
        f"repeats={args.repeats} calls={args.calls} (medians; ratio > 1 favours ascent for MB/s,"
        " < 1 for us)\n"
    )
    print("| measure | ascent | plain Ray, torch | plain Ray, numpy | ascent / plain torch |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        numpy_figure = "-" if row["plain_numpy"] is None else f"{row['plain_numpy']:,.0f}"
        print(
            f"| {row['measure']} | {row['ascent']:,.0f} | {row['plain_torch']:,.0f} | "
            f"{numpy_figure} | {row['ascent_over_plain_torch']:.2f}x |"
        )
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"config": vars(args), "results": rows}, out, indent=1)


if __name__ == "__main__":
    main()
