"""What checksummed, verified checkpoints cost: saving a trained engine's full state (weights,
Adam moments, schedule) with and without sha256 manifests, verifying a checkpoint as resume
does, and loading it back, measured side by side in one run.

The engine is the FSDP2 training engine of an SFT worker (one rank, in-process, float32) on a
Qwen2-shaped model with random weights, after one optimiser step so the Adam state exists.
Every figure is the median over ``--repeats``; the checkpoint directory is on the run
directory's disk (``--dir``, default a temporary directory), and the page cache is not dropped,
so hashing reads files that were just written (as a save does).

    .venv/bin/python bench/checkpoint.py [--hidden 512 --layers 8] [--json PATH]
"""

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ascent.batch import Batch
from ascent.controller import ResourcePool, spawn_group
from ascent.engine import ModelConfig, OptimConfig
from ascent.models import build_tiny_model
from ascent.trainer.checkpoints import Checkpoints, verify
from ascent.workers.sft import SFTWorker, SFTWorkerConfig


def timed(fn) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write checkpoints")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="ascent-bench-ckpt-"))
    model = build_tiny_model(
        root / "model",
        hidden_size=args.hidden,
        layers=args.layers,
        intermediate_size=args.hidden * 4,
    )
    worker = SFTWorkerConfig(model=ModelConfig(path=str(model)), optim=OptimConfig(lr=1e-4))
    group = spawn_group(SFTWorker, ResourcePool(), role="sft", args=(worker,))
    ids = torch.randint(3, 200, (4, 64))
    ones = torch.ones_like(ids)
    group.train_step(Batch.from_dict({"input_ids": ids, "attention_mask": ones, "loss_mask": ones}))

    figures: dict[str, list[float]] = {
        k: [] for k in ("save_sha256", "save_sizes", "verify", "load")
    }
    size = 0
    for repeat in range(args.repeats):
        for checksums, key in ((True, "save_sha256"), (False, "save_sizes")):
            run = root / f"run-{key}-{repeat}"
            checkpoints = Checkpoints(run, checksums=checksums)
            saved: list[Path] = []
            figures[key].append(
                timed(
                    lambda c=checkpoints, s=saved: s.append(
                        c.save(1, lambda d: group.save_checkpoint(str(d / "sft")), {})
                    )
                )
            )
            if checksums:
                size = sum(p.stat().st_size for p in saved[0].rglob("*") if p.is_file())
                figures["verify"].append(timed(lambda s=saved: verify(s[0])))
                figures["load"].append(
                    timed(lambda s=saved: group.load_checkpoint(str(s[0] / "sft")))
                )
            shutil.rmtree(run)
    group.shutdown()

    median = {k: statistics.median(v) for k, v in figures.items()}
    result = {
        "checkpoint_bytes": size,
        "params_millions": size / 12 / 1e6,  # fp32 weights + two fp32 Adam moments
        **{f"{k}_s": v for k, v in median.items()},
        "sha256_overhead": median["save_sha256"] / median["save_sizes"],
        "verify_gb_per_s": size / 1e9 / median["verify"],
    }
    print(f"checkpoint: {size / 1e6:.0f} MB ({result['params_millions']:.1f}M parameters)")
    print("| step | seconds (median) |")
    print("|---|---:|")
    print(f"| save, sizes only | {median['save_sizes']:.2f} |")
    print(f"| save, sizes + sha256 | {median['save_sha256']:.2f} |")
    print(f"| verify (resume's check) | {median['verify']:.2f} |")
    print(f"| load | {median['load']:.2f} |")
    print(
        f"sha256 makes a save {result['sha256_overhead']:.2f}x as long; verify reads "
        f"{result['verify_gb_per_s']:.2f} GB/s"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.dir is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
