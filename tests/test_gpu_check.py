"""``bench/gpu_check.py --dry-run``: every part of the GPU checks runs on the CPU with tiny
shapes, in the driver's own child processes, with Ray unimportable (the lent GPU machine has
none), and reports real figures, so the script a GPU machine runs cannot rot unseen."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ["tests", "decode", "grpo", "graphs"]


def positive(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def blocked_ray(folder: Path) -> str:
    """A ``ray`` package that cannot be imported, to put first on PYTHONPATH."""
    (folder / "ray").mkdir()
    (folder / "ray" / "__init__.py").write_text(
        "raise ImportError('ray is blocked: the GPU machine has none')\n"
    )
    return os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))


def test_the_dry_run_runs_every_part_without_ray(tmp_path):
    env = {**os.environ, "PYTHONPATH": blocked_ray(tmp_path), "OMP_NUM_THREADS": "1"}
    assert subprocess.run([sys.executable, "-c", "import ray"], env=env).returncode != 0
    report_path = tmp_path / "report.json"
    command = [sys.executable, "bench/gpu_check.py", "--dry-run", "--out", str(tmp_path / "out")]
    done = subprocess.run(
        [*command, "--json", str(report_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "| part" in done.stdout and "all passed" in done.stdout

    report = json.loads(report_path.read_text())
    assert report["dry_run"] and report["device"] == "cpu" and report["ok"]
    assert list(report["parts"]) == PARTS
    figures = {}
    for name, part in report["parts"].items():
        assert part["status"] == "ok", (name, Path(part["log"]).read_text()[-3000:])
        assert part["metrics"]["imported_but_not_on_gpu_machine"] == []
        figures[name] = part["metrics"]

    tests = figures["tests"]
    assert tests["mode"] == "collect-only" and tests["exit_code"] == 0
    assert tests["collected"] > 0 and len(tests["files"]) > 0

    decode = figures["decode"]
    for key in ("ms_per_step", "bandwidth_bytes_per_s", "weight_bytes", "bound_ms_per_step"):
        assert positive(decode[key]), (key, decode[key])
    assert 0 < decode["fraction_of_bound"] <= 1
    assert decode["mean_context"] > 16  # the prompt, and tokens generated before timing

    grpo = figures["grpo"]
    for key in ("s_per_step", "gen_s", "update_s", "refresh_s", "matmul_peak_flops"):
        assert positive(grpo[key]), (key, grpo[key])
    assert grpo["timed_steps"] == 2 and grpo["tokens_per_step"] > grpo["samples"]
    assert 0 < grpo["update_mfu"] < 1

    graphs = figures["graphs"]
    assert graphs["greedy_tokens_equal"] and graphs["sampled_tokens_equal"]
    assert graphs["greedy_max_logprob_diff"] <= graphs["tolerance"]
    assert graphs["cuda_graphs"] is False  # no graphs on the CPU: eager both

    rows = report["rows"]
    assert {r["part"] for r in rows} == {*PARTS, "refresh", "all"}
    assert all(r["result"] in ("pass", "n/a") for r in rows)
    timed = [r for r in rows if r["target"].startswith("<=") and r["part"] in ("decode", "grpo")]
    assert len(timed) == 2 and all(r["result"] == "n/a" for r in timed)  # judged on CUDA only


def test_a_part_that_failed_or_timed_out_fails_the_table():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from gpu_check import table_rows
    finally:
        sys.path.remove(str(ROOT / "bench"))
    parts = {"decode": {"status": "timed out after 75 s"}, "graphs": {"status": "failed (exit 1)"}}
    rows = table_rows(parts, cuda=True)
    assert [(r["part"], r["result"]) for r in rows[:2]] == [("decode", "fail"), ("graphs", "fail")]
    assert rows[0]["value"] == "timed out after 75 s"
