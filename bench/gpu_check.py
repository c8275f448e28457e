"""Every GPU check in one command, one table and one JSON file (``make gpu-check``).

Parts, each in a process of its own under its own time limit (a CUDA crash or hang in one
cannot take the others; a part that fails or runs out of time is reported as such):

- tests: every test marked ``gpu`` (the dry run only collects them);
- decode: the native engine at 256 sequences on Qwen2.5-0.5B's shape, ms per decode step
  and the share of the memory-bandwidth bound (bandwidth measured in the same run);
- grpo: whole GRPO steps of ``ascent train`` on that shape, in process (no Ray): s per step,
  the update's MFU against the matmul peak measured in the same run, and the weight refresh
  (actor to rollout engine) in seconds;
- graphs: decode steps replayed from CUDA graphs against eager ones, tokens and log-probs.

Targets, judged on CUDA only: decode <= 2 ms per step at 256 sequences, GRPO step <= 13 s.
``--dry-run`` runs every part on the CPU with a tiny model in seconds (``make test`` does, in
tests/test_gpu_check.py), so the script cannot rot. Nothing here imports Ray, nor another
package a lent GPU machine lacks (a row checks it). Exits 1 when a part failed, timed out or
missed a target.

    python bench/gpu_check.py [--dry-run] [--json PATH] [--out DIR] [--parts tests decode ...]
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from gpu_check_parts import (  # bench/ is on the path
    LOGPROB_TOLERANCE,
    TARGET_DECODE_MS,
    TARGET_GRPO_S,
    run_part_here,
)

HERE = Path(__file__).resolve()
# Seconds per part: on a lent GPU the four together stay within 8 minutes.
LIMITS_S = {"tests": 120, "decode": 75, "grpo": 200, "graphs": 60}
DRY_LIMIT_S = 60
PART_NAMES = list(LIMITS_S)
COLUMNS = ("part", "metric", "value", "target", "result")


def run_part(name: str, args: argparse.Namespace, out: Path) -> dict:
    """One part in a child process: its figures, or how it failed."""
    result = out / f"{name}.json"
    result.unlink(missing_ok=True)
    limit = DRY_LIMIT_S if args.dry_run else LIMITS_S[name]
    command = [sys.executable, str(HERE), "--part", name, "--device", args.device]
    command += ["--result", str(result), *(["--dry-run"] if args.dry_run else [])]
    print(f"== {name} (limit {limit} s)", flush=True)
    began = time.perf_counter()
    with open(out / f"{name}.log", "w") as log:
        # A session of its own, so that a timeout ends the part's own children too.
        child = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = child.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            code = None
    seconds = time.perf_counter() - began
    part = {
        "seconds": seconds,
        "limit_s": limit,
        "exit_code": code,
        "log": str(out / f"{name}.log"),
    }
    if code is None:
        part["status"] = f"timed out after {limit} s"
    elif code != 0 or not result.exists():
        part["status"] = f"failed (exit {code})"
        print(tail(out / f"{name}.log"), flush=True)
    else:
        part["status"] = "ok"
        part["metrics"] = json.loads(result.read_text())
    print(f"== {name}: {part['status']} in {seconds:.1f} s", flush=True)
    return part


def tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# -- the table: (part, metric, value, target, result) rows --------------------------------


def verdict(ok: bool, judged: bool) -> str:
    if not judged:
        return "n/a"
    return "pass" if ok else "fail"


def tests_rows(m: dict, cuda: bool) -> list[tuple]:
    if m["mode"] == "collect-only":
        value = f"{m.get('collected', 0)} collected (collect-only: dry run)"
        return [("tests", "gpu tests", value, "collected", verdict(m["exit_code"] == 0, True))]
    value = f"{m.get('passed', 0)} passed, {m.get('failed', 0)} failed, {m.get('error', 0)} errors"
    value += f", {m.get('skipped', 0)} skipped"
    return [("tests", "gpu tests", value, "all pass", verdict(m["exit_code"] == 0, True))]


def decode_rows(m: dict, cuda: bool) -> list[tuple]:
    seqs = m["sequences"]
    return [
        (
            "decode",
            f"ms per step, {seqs} seqs",
            f"{m['ms_per_step']:.2f}",
            f"<= {TARGET_DECODE_MS:g} ms",
            verdict(m["ms_per_step"] <= TARGET_DECODE_MS, cuda),
        ),
        ("decode", "% of bandwidth bound", f"{m['fraction_of_bound']:.1%}", "-", "n/a"),
        ("decode", "bound ms per step", f"{m['bound_ms_per_step']:.3f}", "-", "n/a"),
        ("decode", "copy bandwidth GB/s", f"{m['bandwidth_bytes_per_s'] / 1e9:,.0f}", "-", "n/a"),
    ]


def grpo_rows(m: dict, cuda: bool) -> list[tuple]:
    return [
        (
            "grpo",
            f"s per step ({m['samples']} samples)",
            f"{m['s_per_step']:.2f}",
            f"<= {TARGET_GRPO_S:g} s",
            verdict(m["s_per_step"] <= TARGET_GRPO_S, cuda),
        ),
        ("grpo", "generate s", f"{m['gen_s']:.2f}", "-", "n/a"),
        ("grpo", "update s", f"{m['update_s']:.2f}", "-", "n/a"),
        ("grpo", "update MFU", f"{m['update_mfu']:.1%}", "-", "n/a"),
        ("grpo", "matmul peak TFLOP/s", f"{m['matmul_peak_flops'] / 1e12:.2f}", "-", "n/a"),
        ("refresh", "weight refresh s", f"{m['refresh_s']:.3f}", "-", "n/a"),
    ]


def graphs_rows(m: dict, cuda: bool) -> list[tuple]:
    diff = max(m["greedy_max_logprob_diff"], m["sampled_max_logprob_diff"])
    tokens = m["greedy_tokens_equal"] and m["sampled_tokens_equal"]
    graphed = m["cuda_graphs"] and m["graphs_captured"] > 0  # else eager against eager
    metric = "graphed = eager tokens" + ("" if cuda else " (no graphs on cpu: eager both)")
    value = ("yes" if tokens else "no") + ("" if graphed or not cuda else ", but no graph ran")
    return [
        ("graphs", metric, value, "equal", verdict(tokens and graphed, cuda)),
        (
            "graphs",
            "max log-prob difference",
            f"{diff:.1e}",
            f"<= {LOGPROB_TOLERANCE:g}",
            verdict(diff <= LOGPROB_TOLERANCE, cuda),
        ),
    ]


ROWS = {"tests": tests_rows, "decode": decode_rows, "grpo": grpo_rows, "graphs": graphs_rows}


def table_rows(parts: dict, cuda: bool) -> list[dict]:
    """(part, metric, value, target, result) rows; a part that did not finish fails."""
    found = []
    for name, part in parts.items():
        if part["status"] == "ok":
            found += ROWS[name](part["metrics"], cuda)
        else:
            found.append((name, "run", part["status"], "completes", "fail"))
    # What a lent GPU machine lacks (Ray, ...): a part that imports it would fail there.
    lacking = [
        f"{name}: {module}"
        for name, part in parts.items()
        for module in part.get("metrics", {}).get("imported_but_not_on_gpu_machine", [])
    ]
    value, result = ", ".join(lacking) or "none", "fail" if lacking else "pass"
    found.append(("all", "imports the GPU machine lacks", value, "none", result))
    return [dict(zip(COLUMNS, row, strict=True)) for row in found]


def print_table(rows: list[dict]) -> None:
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in COLUMNS}
    print("| " + " | ".join(k.ljust(widths[k]) for k in COLUMNS) + " |")
    print("|" + "|".join("-" * (widths[k] + 2) for k in COLUMNS) + "|")
    for row in rows:
        print("| " + " | ".join(str(row[k]).ljust(widths[k]) for k in COLUMNS) + " |")


def device_info(device: str, parts: dict) -> dict:
    """What ran it; the GPU's name as a part saw it (this process never touches CUDA)."""
    names = [p["metrics"].get("device_name") for p in parts.values() if "metrics" in p]
    info = {"device": device, "torch": torch.__version__, "python": sys.version.split()[0]}
    return {**info, "device_name": next(filter(None, names), None)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny shapes on the CPU, seconds (implies cpu)"
    )
    parser.add_argument("--json", metavar="PATH", help="default: OUT/gpu_check.json")
    parser.add_argument(
        "--out", metavar="DIR", help="logs and results (default: bench/results/gpu, or gpu-dry)"
    )
    parser.add_argument("--parts", nargs="+", choices=PART_NAMES, default=PART_NAMES)
    parser.add_argument("--part", choices=PART_NAMES, help=argparse.SUPPRESS)  # a child's
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dry_run:
        args.device = "cpu"
    if args.part:  # a child: one part, its figures to --result
        figures = run_part_here(args.part, args.dry_run, args.device)
        Path(args.result).write_text(json.dumps(figures, indent=1))
        return 0

    default_out = HERE.parent / "results" / ("gpu-dry" if args.dry_run else "gpu")
    out = Path(args.out or default_out)
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    parts = {name: run_part(name, args, out) for name in args.parts}
    rows = table_rows(parts, args.device == "cuda")
    ok = all(p["status"] == "ok" for p in parts.values())
    ok = ok and not any(r["result"] == "fail" for r in rows)
    report = {
        **device_info(args.device, parts),
        "dry_run": args.dry_run,
        "seconds": time.perf_counter() - began,
        "ok": ok,
        "parts": parts,
        "rows": rows,
    }
    title = (
        "dry run: tiny shapes on the cpu" if args.dry_run else report["device_name"] or args.device
    )
    print(f"\nGPU checks ({title}), {report['seconds']:.0f} s\n")
    print_table(rows)
    path = Path(args.json or out / "gpu_check.json")
    path.write_text(json.dumps(report, indent=1))
    print(f"\n{'all passed' if ok else 'FAILED'}; JSON in {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
