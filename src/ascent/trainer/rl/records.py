"""The run's records beside its metrics: which prompts each step trained on
(``trained_prompts.jsonl``), sample generations (``generations.jsonl``), and the worker
processes (``processes.json``)."""

import json
from pathlib import Path
from typing import Any

from ascent.batch import Batch
from ascent.controller import WorkerGroup
from ascent.rollout.types import response_lengths
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.run_dir import RunStart
from ascent.trainer.tracking import Tracker, keep_records_up_to

TRAINED_PROMPTS = "trained_prompts.jsonl"  # per step: the prompt_id of every group trained on
GENERATIONS = "generations.jsonl"
CONSOLE = [  # the metrics the console sink prints
    "critic/score/mean",
    "critic/acc/mean",
    "reward/model/mean",
    "reward/judge/mean",
    "actor/pg_loss",
    "actor/entropy",
    "actor/grad_norm",
    "actor/ppo_kl",
    "critic/vf_loss",
    "response_length/mean",
    "timing_s/step",
    "val/",
]


class StepRecords:
    """Appends each step's records; a run resumed at step ``resumed`` first drops the lost
    attempt's records after it, so every step is recorded once."""

    def __init__(
        self, run_dir: Path, tokenizer: Any, log_generations: int, resumed: int | None
    ) -> None:
        self.run_dir, self.tokenizer, self.log_generations = run_dir, tokenizer, log_generations
        if resumed is not None:
            for name in (GENERATIONS, TRAINED_PROMPTS):
                keep_records_up_to(self.run_dir / name, resumed)

    def write(self, step: int, batch: Batch) -> list[dict]:
        """Append the step's records; returns its sample generations (for the trackers)."""
        if "prompt_id" in batch:  # which data rows this step trained on, for audits
            trained = list(dict.fromkeys(batch["prompt_id"]))
            with open(self.run_dir / TRAINED_PROMPTS, "a") as out:
                out.write(json.dumps({"step": step, "prompt_ids": trained}) + "\n")
        if not self.log_generations:
            return []
        generations = self.generations(step, batch)
        with open(self.run_dir / GENERATIONS, "a") as out:
            for record in generations:
                out.write(json.dumps(record, default=str) + "\n")
        return generations

    def generations(self, step: int, batch: Batch) -> list[dict]:
        """The first ``log_generations`` rows, decoded: prompt, response, score, truth."""
        lengths = response_lengths(batch).tolist()
        records = []
        for row in range(min(self.log_generations, len(batch))):
            prompt = batch["prompts"][row][batch["prompt_mask"][row].bool()].tolist()
            response = batch["responses"][row][: lengths[row]].tolist()
            records.append(
                {
                    "step": step,
                    "data_source": batch["data_source"][row],
                    "prompt": self.tokenizer.decode(prompt),
                    "response": self.tokenizer.decode(response),
                    "score": float(batch["scores"][row]),
                    "ground_truth": batch["ground_truth"][row],
                }
            )
        return records


def run_tracker(config: RLConfig, run_dir: Path, begin: RunStart) -> Tracker:
    """Metrics to the tracking sinks; a resumed run continues the tracked runs its checkpoint
    names from the checkpoint's step. A ``TrackingCannotStart`` when a sink cannot start."""
    return Tracker(
        run_dir,
        config.tracking,
        config.model_dump(mode="json"),
        console_keys=CONSOLE,
        resume_step=begin.records_up_to,
        run_ids=begin.state.get("tracking"),
    )


def write_processes(path: Path, groups: dict[str, WorkerGroup]) -> None:
    """Role, rank, host and pid of every worker process (for py-spy, top, or a kill)."""
    rows = [
        {"role": role, "rank": info.rank, "host": info.host, "pid": info.pid, "device": info.device}
        for role, group in groups.items()
        for info in group.infos
    ]
    path.write_text(json.dumps(rows, indent=1))
