"""The run's records beside its metrics: which prompts each step trained on
(``trained_prompts.jsonl``), sample generations (``generations.jsonl``), and the worker
processes (``processes.json``)."""

import json
from pathlib import Path
from typing import Any

from ascent.batch import Batch
from ascent.controller import WorkerGroup
from ascent.rollout.types import response_lengths
from ascent.trainer.tracking import keep_records_up_to

TRAINED_PROMPTS = "trained_prompts.jsonl"  # per step: the prompt_id of every group trained on
GENERATIONS = "generations.jsonl"


class StepRecords:
    """Appends each step's records; a resumed run first drops the lost attempt's records
    after its checkpoint's step, so every step is recorded once."""

    def __init__(self, run_dir: Path, tokenizer: Any, log_generations: int) -> None:
        self.run_dir, self.tokenizer, self.log_generations = run_dir, tokenizer, log_generations

    def keep_up_to(self, step: int) -> None:
        for name in (GENERATIONS, TRAINED_PROMPTS):
            keep_records_up_to(self.run_dir / name, step)

    def write(self, step: int, batch: Batch) -> None:
        if "prompt_id" in batch:  # which data rows this step trained on, for audits
            trained = list(dict.fromkeys(batch["prompt_id"]))
            with open(self.run_dir / TRAINED_PROMPTS, "a") as out:
                out.write(json.dumps({"step": step, "prompt_ids": trained}) + "\n")
        if self.log_generations:
            with open(self.run_dir / GENERATIONS, "a") as out:
                for record in self.generations(step, batch):
                    out.write(json.dumps(record, default=str) + "\n")

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


def write_processes(path: Path, groups: dict[str, WorkerGroup]) -> None:
    """Role, rank, host and pid of every worker process (for py-spy, top, or a kill)."""
    rows = [
        {"role": role, "rank": info.rank, "host": info.host, "pid": info.pid, "device": info.device}
        for role, group in groups.items()
        for info in group.infos
    ]
    path.write_text(json.dumps(rows, indent=1))
