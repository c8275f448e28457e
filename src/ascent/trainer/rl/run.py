"""An RL run's parts and their wiring: data, roles, rewards, the rollout source, the algorithm
stage, tracking, records, checkpoints and resume. What each part does lives in its own
module; the loop (``loop.py``) calls the stages below."""

import math
from pathlib import Path

from ascent.batch import Batch
from ascent.config import dump_config
from ascent.controller import WorkerGroup
from ascent.data.rl import prompt_stream
from ascent.models.loading import load_tokenizer
from ascent.rewards.judge import Judge
from ascent.rewards.manager import RewardManager
from ascent.rollout import sync_weights
from ascent.teacher.endpoint import EndpointTeacher
from ascent.trainer.capacity import check_local_capacity
from ascent.trainer.checkpoint_parts import restore_rng, save_run_parts
from ascent.trainer.checkpoints import Checkpoints
from ascent.trainer.faults import NonFiniteGuard
from ascent.trainer.rl.advantage import AdvantageStage
from ascent.trainer.rl.collapse import CollapseWatch
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.plan import make_plan
from ascent.trainer.rl.prompts import (
    check_images_reach_the_engine,
    check_sources_are_scored,
    load_run_prompts,
)
from ascent.trainer.rl.records import StepRecords, run_tracker, write_processes
from ascent.trainer.rl.rewards import RunRewards
from ascent.trainer.rl.roles import spawn_roles
from ascent.trainer.rl.rows import row_kind
from ascent.trainer.rl.sources import Scoring, rollout_source
from ascent.trainer.rl.timing import StageTimes
from ascent.trainer.rl.validation import Validation
from ascent.trainer.run_dir import make_run_dir, start_run


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
        self.rows = row_kind(config.rollout.agent)
        train, self.val_prompts = load_run_prompts(
            config.data, self.tokenizer, self.rows.prompt_check(), config.model
        )
        check_images_reach_the_engine([*train, *self.val_prompts], config.rollout.engine)
        if self.rows.needs_scorer(config.reward.function):
            check_sources_are_scored([*train, *self.val_prompts], config.reward.function)
        self.run_dir = make_run_dir(cfg.run_dir)
        self.checkpoints = Checkpoints(
            self.run_dir, keep_last=cfg.keep_last, checksums=cfg.checksum_checkpoints
        )
        # Before anything is written: a checkpoint is verified, a used directory refused.
        self.begin = start_run(self.run_dir, self.checkpoints, cfg.resume)
        dump_config(config, self.run_dir / "config.yaml")
        self.stream = prompt_stream(train, config.data, config.rollout.samples_per_prompt)
        per_epoch = max(1, len(train) // config.data.prompts_per_step)
        self.total_steps = cfg.total_steps or per_epoch * cfg.epochs
        function_rewards = RewardManager(config.reward, self.tokenizer)  # checked before spawning
        judge = Judge(config.judge) if config.judge is not None else None  # its API key too
        self.groups: dict = {}
        try:  # tracking that cannot start stops the run here, before a worker loads a model
            self.tracker = run_tracker(config, self.run_dir, self.begin)
            self._start(train, function_rewards, judge)
        except BaseException:  # nothing opened is left running (an MLflow run, a pool, workers)
            if hasattr(self, "tracker"):
                self.tracker.close()
            function_rewards.close()
            if judge is not None:
                judge.close()
            self._shutdown_groups()
            raise

    def _start(self, train: list, function_rewards: RewardManager, judge: Judge | None) -> None:
        """The workers and what the loop reads: after every check that needs none of them."""
        config, cfg = self.config, self.config.trainer
        self.algorithm = AdvantageStage(
            self.plan,
            config.algorithm.kl,
            config.rollout.max_response_length,
            cfg.seed,
            self.rows,
            config.teacher,
        )
        self.weight_version = self.begin.state.get("weight_version", 0)  # updates given
        self.nonfinite = NonFiniteGuard(cfg.max_consecutive_nonfinite, self.run_dir / "nonfinite")
        self.collapse = CollapseWatch(
            cfg.collapse_steps,
            cfg.collapse_tool_error_rate,
            cfg.stop_on_collapse,
            per_token_signal=config.teacher is not None,
        )
        longest = max(len(p.prompt_ids) for p in [*train, *self.val_prompts])
        self.groups = spawn_roles(config, self.plan, longest, len(self.tokenizer))
        self.actor, self.rollout = self.groups["actor"], self.groups["rollout"]
        self.critic, self.reference = self.groups.get("critic"), self.groups.get("reference")
        self.teacher = self.groups.get("teacher")  # a local teacher; else its endpoint
        if config.teacher is not None and config.teacher.endpoint is not None:
            self.teacher = EndpointTeacher(
                config.teacher.endpoint, config.teacher.top_k, self.tokenizer
            )
        self.implicit_prm = self.groups.get("implicit_prm")
        rm = self.groups.get("reward_model")
        self.rewards = RunRewards(function_rewards, config.reward_model, self.tokenizer, rm, judge)
        self.validation = Validation(
            self.plan.validation,
            self.rollout,
            self.rewards,
            self.rows,
            self.val_prompts,
            self.pad_id,
        )
        write_processes(self.run_dir / "processes.json", self.groups)
        resumed = self.begin.records_up_to
        self.records = StepRecords(self.run_dir, self.tokenizer, cfg.log_generations, resumed)
        self.timer = StageTimes()
        self.start_step = self.saved_step = self._resume()
        self.source = rollout_source(
            config,
            self.plan,
            self.rollout,
            self.stream,
            Scoring(self.rewards, self.rows, self.timer, self.stream.observe),
            pad_id=self.pad_id,
            weight_version=lambda: self.weight_version,
            total_steps=self.total_steps,
            start_step=self.start_step,
            checkpoint=self.begin.checkpoint,
        )

    # -- stages the loop calls --------------------------------------------------------------

    def sync_rollout(self, updated: bool = True) -> None:
        """Before new weights go to the generator, the source finishes what must finish
        under the old ones."""
        self.source.before_sync()
        self._push_weights(updated)

    def _push_weights(self, updated: bool) -> None:
        """The actor's weights into the rollout engine, numbered ``weight_version``: the
        updates it has been given (stamped on the tokens they sample, logged as
        rollout/weight_version, kept in checkpoints)."""
        self.weight_version += int(updated)
        if self.config.rollout.resources is None:
            self.rollout.sync_from_colocated("actor", version=self.weight_version)
        else:
            bucket_bytes = self.config.rollout.weight_bucket_bytes
            sync_weights(self.actor, self.rollout, self.weight_version, bucket_bytes)

    def validate(self) -> dict[str, float]:
        """Answers to the validation prompts, scored (``validation.py``)."""
        return self.validation()

    def log(self, step: int, batch: Batch, metrics: dict[str, float], printer: object) -> None:
        if "actor/rollout_mismatch_k3" in metrics:  # rollout vs trainer log-probs, verl's name
            metrics["rollout/mismatch_kl"] = metrics["actor/rollout_mismatch_k3"]
        timings = self.timer.take()
        tokens = float(batch["attention_mask"].sum())
        metrics |= timings | {
            "rollout/weight_version": float(self.weight_version),
            "perf/throughput": tokens / max(timings.get("timing_s/step", math.inf), 1e-9),
        }
        self.tracker.log(metrics, step, printer=printer)
        self.tracker.log_samples(self.records.write(step, batch), step)

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
            self.source.save(directory)

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
        self._push_weights(updated=False)
        restore_rng(checkpoint, self.process_pools)  # after the sync, which may draw
        print(f"resumed from {checkpoint} at step {state['step']}")
        return state["step"]

    def close(self) -> None:
        self.tracker.close()
        self.rewards.close()
        if isinstance(self.teacher, EndpointTeacher):  # its client and event loop
            self.teacher.close()
        self._shutdown_groups()

    def _shutdown_groups(self) -> None:
        for group in {id(g.hosts): g for g in self.groups.values()}.values():  # colocated share
            group.shutdown()
