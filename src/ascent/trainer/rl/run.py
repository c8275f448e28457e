"""Everything a run holds besides the loop: data, roles, rewards, the algorithm stage,
tracking, checkpoints and resume, validation, and the stages the loop calls."""

import json
import math
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from ascent.agents.episodes import (
    agent_metrics,
    agent_prompt_check,
    episode_outcomes,
    last_rows,
)
from ascent.algos.group_filter import groups_with_signal
from ascent.batch import Batch
from ascent.config import dump_config
from ascent.controller import WorkerGroup
from ascent.data.rl import PromptStream, load_rl_prompts, prompts_batch
from ascent.models.loading import load_tokenizer
from ascent.rewards.judge import Judge
from ascent.rewards.manager import RewardManager
from ascent.rollout import sync_weights
from ascent.rollout.types import response_lengths, rollout_padding
from ascent.trainer.capacity import check_local_capacity
from ascent.trainer.checkpoint_parts import restore_rng, save_run_parts
from ascent.trainer.checkpoints import Checkpoints
from ascent.trainer.faults import NonFiniteGuard
from ascent.trainer.rl.advantage import AdvantageStage
from ascent.trainer.rl.ahead import RolloutsAhead, staleness_metrics, step_seed
from ascent.trainer.rl.collapse import CollapseWatch
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.plan import make_plan
from ascent.trainer.rl.rewards import RunRewards
from ascent.trainer.rl.roles import spawn_roles
from ascent.trainer.run_dir import CannotStart, start_run
from ascent.trainer.tracking import Tracker, keep_records_up_to

TRAINED_PROMPTS = "trained_prompts.jsonl"  # per step: the prompt_id of every group trained on
CONSOLE = [
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


class RLRun:
    def __init__(self, config: RLConfig) -> None:
        self.config, self.plan = config, make_plan(config)
        check_local_capacity(config)  # before a local Ray would wait minutes for it
        print(self.plan.describe(config))
        cfg = config.trainer
        self.tokenizer = load_tokenizer(
            config.model.path, trust_remote_code=config.model.trust_remote_code
        )
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        agent = config.rollout.agent
        check = agent_prompt_check(agent) if agent is not None else None
        train, counts = load_rl_prompts(config.data.train_files, self.tokenizer, config.data, check)
        self.val_prompts, val_counts = load_rl_prompts(
            config.data.val_files, self.tokenizer, config.data, check
        )
        self.val_prompts = self.val_prompts[: config.data.val_max_prompts]
        print(f"prompts: train {dict(counts)}; validation {dict(val_counts)}")
        if len(train) < config.data.prompts_per_step:
            raise CannotStart(
                f"data.prompts_per_step={config.data.prompts_per_step} is more than the "
                f"{len(train)} usable prompts of data.train_files ({dict(counts)}): every step "
                "would repeat prompts; lower data.prompts_per_step or add data"
            )
        self.run_dir = Path(cfg.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoints = Checkpoints(
            self.run_dir, keep_last=cfg.keep_last, checksums=cfg.checksum_checkpoints
        )
        # Before anything is written: a checkpoint is verified, a used directory refused.
        self.begin = start_run(self.run_dir, self.checkpoints, cfg.resume)
        dump_config(config, self.run_dir / "config.yaml")
        self.stream = PromptStream(train, shuffle=config.data.shuffle, seed=config.data.seed)
        per_epoch = max(1, len(train) // config.data.prompts_per_step)
        self.total_steps = cfg.total_steps or per_epoch * cfg.epochs
        function_rewards = RewardManager(config.reward, self.tokenizer)  # checked before spawning
        judge = Judge(config.judge) if config.judge is not None else None  # its API key too
        self.algorithm = AdvantageStage(
            self.plan, config.algorithm.kl, config.rollout.max_response_length, cfg.seed
        )
        self.weight_version = self.begin.state.get("weight_version", 0)  # updates it has seen
        self.nonfinite = NonFiniteGuard(cfg.max_consecutive_nonfinite, self.run_dir / "nonfinite")
        self.collapse = CollapseWatch(
            cfg.collapse_steps, cfg.collapse_tool_error_rate, cfg.stop_on_collapse
        )
        self.groups = spawn_roles(config, self.plan)
        self.actor, self.rollout = self.groups["actor"], self.groups["rollout"]
        self.critic, self.reference = self.groups.get("critic"), self.groups.get("reference")
        self.implicit_prm = self.groups.get("implicit_prm")
        self.rewards = RunRewards(
            function_rewards,
            config.reward_model,
            self.tokenizer,
            self.groups.get("reward_model"),
            judge,
        )
        write_processes(self.run_dir / "processes.json", self.groups)
        if self.begin.records_up_to is not None:  # a lost attempt's later records go
            for records in ("generations.jsonl", TRAINED_PROMPTS):
                keep_records_up_to(self.run_dir / records, self.begin.records_up_to)
        self.tracker = Tracker(
            self.run_dir,
            config.tracking,
            config.model_dump(mode="json"),
            console_keys=CONSOLE,
            resume_step=self.begin.records_up_to,
            run_ids=self.begin.state.get("tracking"),
        )
        self.timings: dict[str, float] = {}
        self.ahead: RolloutsAhead | None = None
        self.version_offset = 0  # trainer's weight version - the rollout engine's
        self.start_step = self.saved_step = self._resume()
        if cfg.mode != "sync":
            fixed = cfg.async_schedule == "fixed"
            self.ahead = RolloutsAhead(
                self.rollout,
                self.stream,
                pad_id=self.pad_id,
                prompts_per_step=config.data.prompts_per_step,
                total_steps=self.total_steps,
                seed=cfg.seed,
                max_staleness=1 if cfg.mode == "one_step_off" else cfg.max_staleness,
                in_flight_updates=cfg.mode == "async" and not fixed,
                whole_batches=fixed,
            )
            self.ahead.start(self.start_step, self.begin.checkpoint)

    # -- stages the loop calls --------------------------------------------------------------

    @contextmanager
    def timer(self, stage: str) -> Iterator[None]:
        began = time.perf_counter()
        yield
        key = f"timing_s/{stage}"  # summed over the step: refill rounds, ReMax's baselines
        self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - began

    def collect(self, step: int) -> tuple[Batch, dict[str, float]]:
        """The step's scored responses: generated now (trainer.mode sync) or ahead of
        training (one_step_off, async), then scored; or replayed from disk."""
        cfg = self.config
        if cfg.trainer.replay_rollouts:
            path = Path(cfg.trainer.replay_rollouts) / f"step_{step + 1:08d}"
            if not path.exists():
                raise FileNotFoundError(f"replay: no saved batch for step {step + 1} at {path}")
            return Batch.load(path), {}
        if self.ahead is not None:
            batch, metrics = self._collect_ahead(step)
        else:
            batch, metrics = self._collect_in_turn(step)
        if cfg.trainer.dump_rollouts:
            batch.save(Path(cfg.trainer.dump_rollouts) / f"step_{step + 1:08d}", overwrite=True)
        return batch, dict(metrics)

    def _collect_in_turn(self, step: int) -> tuple[Batch, defaultdict]:
        """trainer.mode sync: generate the step's rollouts now, with dynamic sampling's
        refills and ReMax's greedy baselines, and score them."""
        cfg = self.config
        kept, metrics = [], defaultdict(float)
        groups_wanted = cfg.data.prompts_per_step
        for round_index in range(
            cfg.algorithm.max_generation_rounds if self.plan.dynamic_sampling else 1
        ):
            prompts = prompts_batch(
                self.stream.take(groups_wanted), self.pad_id, f"{step + 1}.{round_index}"
            )
            seed = step_seed(cfg.trainer.seed, step, round_index)
            with self.timer("gen"):
                batch = self.rollout.generate(prompts, sampling={"seed": seed})
            batch = self._scored(batch, metrics)
            if self.plan.greedy_baseline:
                batch = batch.assign(baseline_scores=self._greedy_scores(prompts, seed, metrics))
            if not self.plan.dynamic_sampling:
                kept = [batch]
                break
            metrics["dynamic_sampling/rounds"] = float(round_index + 1)
            kept.append(batch.index(groups_with_signal(batch["acc"], batch.group_ids("uid"))))
            if sum(len(b) for b in kept) >= groups_wanted * cfg.rollout.samples_per_prompt:
                break
        return self._trimmed(Batch.concat(kept, pad=rollout_padding(self.pad_id)), metrics), metrics

    def _scored(self, batch: Batch, metrics: defaultdict) -> Batch:
        """Rewards of a generated batch (an episode's outcome shared by its samples); the
        scorer's counts and the agent metrics are added to ``metrics``."""
        if "episode" in batch:  # rollout.agent
            metrics.update(agent_metrics(batch))
        with self.timer("reward"):
            batch, counts = self.rewards.score(batch)
            if "episode" in batch:  # an episode's outcome is all its samples'
                batch = episode_outcomes(batch)
        for key, value in counts.items():
            metrics[key] += value
        return batch

    def _collect_ahead(self, step: int) -> tuple[Batch, defaultdict]:
        """trainer.mode one_step_off / async: the step's rollouts, generated while earlier
        steps trained; their staleness and the generation side's busy time are measured."""
        self.ahead.fill(step)
        with self.timer("wait_rollouts"):  # the trainer's idle time
            batch = self.ahead.take(step)
        metrics: defaultdict = defaultdict(float)
        if "rollout_weight_versions" in batch:  # in the trainer's numbering
            versions = batch["rollout_weight_versions"] + self.version_offset
            batch = batch.assign(rollout_weight_versions=versions)
            metrics.update(staleness_metrics(versions, batch["response_mask"], self.weight_version))
        metrics.update(self.ahead.generator_metrics())
        return self._scored(batch, metrics), metrics

    def _greedy_scores(self, prompts: Batch, seed: int, metrics: defaultdict) -> torch.Tensor:
        """ReMax's baselines: the scores of one greedy answer per prompt, repeated over the
        prompt's samples (B,). The scorers' failures on them are counted apart, as
        ``baseline/reward/errors`` and the like: a failed baseline scores 0 and shifts every
        advantage of its group."""
        with self.timer("gen"):
            greedy = self.rollout.generate(
                prompts, sampling={"n": 1, "temperature": 0.0, "seed": seed}
            )
        with self.timer("reward"):
            scored, counts = self.rewards.score(greedy)
        for key, value in counts.items():
            metrics[f"baseline/{key}"] += value
        return scored["scores"].repeat_interleave(self.config.rollout.samples_per_prompt)

    def _trimmed(self, batch: Batch, metrics: dict) -> Batch:
        """Dynamic sampling: whole groups, as many as the step wants and the ranks can split."""
        if not self.plan.dynamic_sampling:
            return batch
        n = self.config.rollout.samples_per_prompt
        unit = self.config.resources.world_size * self.plan.actor_mini_batches
        groups = min(len(batch) // n, self.config.data.prompts_per_step)
        while groups and (groups * n) % unit:
            groups -= 1
        metrics["dynamic_sampling/groups"] = float(groups)
        if groups == 0:
            print(
                "dynamic sampling: no group with signal after the refill rounds; this step "
                "makes no update"
            )
        elif groups < self.config.data.prompts_per_step:
            print(f"dynamic sampling: only {groups} group(s) with signal after the refill rounds")
        return batch.index(slice(0, groups * n))

    def sync_rollout(self, updated: bool = True) -> None:
        """The actor's weights into the rollout engine; ``weight_version`` counts the
        updates it has been given (logged as rollout/weight_version, kept in checkpoints)."""
        if self.ahead is not None:
            self.ahead.before_sync()  # one_step_off: what is in flight finishes first
        if self.config.rollout.resources is None:
            engine_version = self.rollout.sync_from_colocated("actor")[0]["weight_version"]
        else:
            engine_version = sync_weights(
                self.actor, self.rollout, self.config.rollout.weight_bucket_bytes
            )
        self.weight_version += int(updated)
        self.version_offset = self.weight_version - engine_version

    def validate(self) -> dict[str, float]:
        """Greedy answers to the validation prompts: val/<data_source>/acc and /score (and
        /model_score, /judge_score), and the scorers' failures on them (val/reward/errors,
        timeouts, non_finite, val/judge/*; when any)."""
        if not self.val_prompts:
            return {}
        world = self.rollout.dp_size
        prompts = self.val_prompts + self.val_prompts[: -len(self.val_prompts) % world]
        batch = self.rollout.generate(
            prompts_batch(prompts, self.pad_id, "val"), sampling={"n": 1, "temperature": 0.0}
        )
        if "episode" in batch:  # rollout.agent: rows per prompt vary; each episode's last
            batch, failures = self.rewards.score(batch)
            batch = episode_outcomes(batch)
            real = {f"val-{i}" for i in range(len(self.val_prompts))}
            rows = last_rows(batch).items()
            scored = batch.index(sorted(row for (uid, _), row in rows if uid in real))
        else:
            scored, failures = self.rewards.score(batch.index(slice(0, len(self.val_prompts))))
        by_source: dict[str, list[int]] = defaultdict(list)
        for row, source in enumerate(scored["data_source"]):
            by_source[source].append(row)
        # Logged when some happened: a scorer failing on validation answers lowers val/*/acc
        # without being the model's fault.
        metrics = {f"val/{name}": count for name, count in failures.items() if count}
        for source, rows in by_source.items():
            metrics[f"val/{source}/acc"] = float(scored["acc"][rows].mean())
            metrics[f"val/{source}/score"] = float(scored["scores"][rows].mean())
            if "model_scores" in scored:
                metrics[f"val/{source}/model_score"] = float(scored["model_scores"][rows].mean())
            if "judge_scores" in scored:
                metrics[f"val/{source}/judge_score"] = float(scored["judge_scores"][rows].mean())
        if "episode" in scored:
            metrics |= {f"val/{k}": v for k, v in agent_metrics(scored).items()}
        return metrics

    def log(self, step: int, batch: Batch, metrics: dict[str, float], printer: object) -> None:
        if "actor/rollout_mismatch_k3" in metrics:  # rollout vs trainer log-probs, verl's name
            metrics["rollout/mismatch_kl"] = metrics["actor/rollout_mismatch_k3"]
        tokens = float(batch["attention_mask"].sum())
        metrics |= self.timings | {
            "rollout/weight_version": float(self.weight_version),
            "perf/throughput": tokens / max(self.timings.get("timing_s/step", math.inf), 1e-9),
        }
        self.tracker.log(metrics, step, printer=printer)
        self.timings = {}
        if "prompt_id" in batch:  # which data rows this step trained on, for audits
            trained = list(dict.fromkeys(batch["prompt_id"]))
            with open(self.run_dir / TRAINED_PROMPTS, "a") as out:
                out.write(json.dumps({"step": step, "prompt_ids": trained}) + "\n")
        if self.config.trainer.log_generations:
            rows = range(min(self.config.trainer.log_generations, len(batch)))
            lengths = response_lengths(batch).tolist()
            with open(self.run_dir / "generations.jsonl", "a") as out:
                for row in rows:
                    prompt = batch["prompts"][row][batch["prompt_mask"][row].bool()].tolist()
                    response = batch["responses"][row][: lengths[row]].tolist()
                    record = {
                        "step": step,
                        "data_source": batch["data_source"][row],
                        "prompt": self.tokenizer.decode(prompt),
                        "response": self.tokenizer.decode(response),
                        "score": float(batch["scores"][row]),
                        "ground_truth": batch["ground_truth"][row],
                    }
                    out.write(json.dumps(record, default=str) + "\n")

    # -- checkpoints ------------------------------------------------------------------------

    @property
    def process_pools(self) -> dict[str, WorkerGroup]:
        """One group per set of worker processes (colocated roles share the actor's)."""
        pools = {"actor": self.actor}
        if self.rollout.hosts is not self.actor.hosts:
            pools["rollout"] = self.rollout
        return pools

    @property
    def trained_roles(self) -> dict[str, WorkerGroup]:
        """The roles besides the actor whose weights train (saved and resumed with it)."""
        roles = {"critic": self.critic, "implicit_prm": self.implicit_prm}
        return {name: group for name, group in roles.items() if group is not None}

    def save(self, step: int) -> Path:
        """Every role's training state, every process's RNGs, the data position, the KL
        controller, counters and tracking ids, the config and the model's files."""
        if step == self.saved_step:  # e.g. the end of a run resumed at its last step
            return self.checkpoints.root / f"step_{step:08d}"
        with_optimizer = self.config.trainer.save_optimizer

        def write_parts(directory: Path) -> None:
            self.actor.save_checkpoint(str(directory / "actor"), with_optimizer)
            for name, group in self.trained_roles.items():
                group.save_checkpoint(str(directory / name), with_optimizer)
            save_run_parts(
                directory, self.process_pools, self.run_dir, self.config.model, self.tokenizer
            )
            if self.ahead is not None:  # prompts submitted, not trained: submitted again
                self.ahead.save(directory)

        state = {
            "data": self.stream.state(),
            "weight_version": self.weight_version,
            "nonfinite": self.nonfinite.state_dict(),
            "collapse": self.collapse.state_dict(),
            "tracking": self.tracker.run_ids(),
        }
        if self.algorithm.controller is not None:
            state["kl_controller"] = self.algorithm.controller.state_dict()
        saved = self.checkpoints.save(step, write_parts, state)
        self.saved_step = step
        return saved

    def _resume(self) -> int:
        checkpoint, state = self.begin.checkpoint, self.begin.state
        if checkpoint is None:
            return 0
        self.actor.load_checkpoint(str(checkpoint / "actor"))
        for name, group in self.trained_roles.items():
            group.load_checkpoint(str(checkpoint / name))
        self.stream.load_state(state["data"])
        if self.algorithm.controller is not None and "kl_controller" in state:
            self.algorithm.controller.load_state_dict(state["kl_controller"])
        if "nonfinite" in state:
            self.nonfinite.load_state_dict(state["nonfinite"])
        if "collapse" in state:
            self.collapse.load_state_dict(state["collapse"])
        self.sync_rollout(updated=False)
        restore_rng(checkpoint, self.process_pools)  # after the sync, which may draw
        print(f"resumed from {checkpoint} at step {state['step']}")
        return state["step"]

    def close(self) -> None:
        self.tracker.close()
        self.rewards.close()
        for group in {id(g.hosts): g for g in self.groups.values()}.values():  # colocated share
            group.shutdown()


def write_processes(path: Path, groups: dict[str, WorkerGroup]) -> None:
    """Role, rank, host and pid of every worker process (for py-spy, top, or a kill)."""
    rows = [
        {"role": role, "rank": info.rank, "host": info.host, "pid": info.pid, "device": info.device}
        for role, group in groups.items()
        for info in group.infos
    ]
    path.write_text(json.dumps(rows, indent=1))
