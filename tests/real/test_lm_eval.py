"""A real evaluation client against ``ascent serve``: lm-evaluation-harness (``lm-eval``
0.4.13, ``make lmeval-venv``) runs a log-likelihood task and a generation task defined from
local files (``examples/lm_eval/``) on SmolLM2-135M-Instruct twice, through its
``local-completions`` model against ``ascent serve`` (echo, ``logprobs`` 1, greedy
generation) and through its in-process ``hf`` model. Both must give the same scores, the
same greedy flags and generations, and per-choice log-likelihoods within float32 noise.
Skipped without the lm-eval venv or the real model."""

import glob
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.servers import ascent_serve

pytestmark = [pytest.mark.slow, pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]
LM_EVAL = Path(
    os.environ.get("ASCENT_LM_EVAL", Path.home() / ".cache/ascent/lmeval-venv/bin/lm_eval")
)
TASKS = "sums_choice,sums_answer"
LOG_LIKELIHOOD_TOLERANCE = 1e-4  # float32: ascent's engine and transformers' forward


def lm_eval(model: str, model_args: str, out: Path) -> dict[str, list[dict]]:
    """Run lm-eval on the tasks; each task's logged samples, by document."""
    command = [str(LM_EVAL), "--model", model, "--model_args", model_args, "--tasks", TASKS]
    command += ["--include_path", "examples/lm_eval", "--output_path", str(out)]
    command += ["--log_samples", "--batch_size", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1"}
    env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    samples = {}
    for task in TASKS.split(","):
        [path] = glob.glob(f"{out}/*/samples_{task}_*.jsonl")
        rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
        samples[task] = sorted(rows, key=lambda row: row["doc_id"])
    return samples


def score(rows: list[dict], metric: str) -> float:
    return sum(row[metric] for row in rows) / len(rows)


@pytest.mark.skipif(not LM_EVAL.exists(), reason=f"no lm-eval at {LM_EVAL} (make lmeval-venv)")
def test_lm_eval_scores_ascent_serve_as_its_in_process_model(smollm2, tmp_path):
    flags = ["--served-model-name", "smollm2", "--max-model-len", "1024"]
    with ascent_serve(smollm2, tmp_path / "server.log", *flags) as server:
        served = lm_eval(
            "local-completions",
            f"model=smollm2,base_url={server.url}/v1/completions,tokenizer_backend=huggingface,"
            f"tokenizer={smollm2},num_concurrent=1,max_retries=1",
            tmp_path / "served",
        )
    local = lm_eval("hf", f"pretrained={smollm2},dtype=float32", tmp_path / "hf")
    for a, b in zip(served["sums_choice"], local["sums_choice"], strict=True):
        # resps: per choice [[log-likelihood, is_greedy]], as strings
        for [[ll_a, greedy_a]], [[ll_b, greedy_b]] in zip(a["resps"], b["resps"], strict=True):
            assert float(ll_a) == pytest.approx(float(ll_b), abs=LOG_LIKELIHOOD_TOLERANCE)
            assert greedy_a == greedy_b
    assert score(served["sums_choice"], "acc") == score(local["sums_choice"], "acc")
    generations = [[row["resps"] for row in run["sums_answer"]] for run in (served, local)]
    assert generations[0] == generations[1]
    exact = [score(run["sums_answer"], "exact_match") for run in (served, local)]
    assert exact[0] == exact[1]
    # the model is a real one: it does better than chance on four choices
    assert score(local["sums_choice"], "acc") > 0.4
