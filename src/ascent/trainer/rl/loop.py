"""The RL loop, on one screen: ``ascent train CONFIG key=value ...``."""

import time

from tqdm import tqdm

from ascent.batch import Batch
from ascent.trainer.dp_order import for_ranks
from ascent.trainer.faults import StopRequest
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.process_rewards import implicit_prm_step
from ascent.trainer.rl.run import RLRun


def learn(run: RLRun, batch: Batch, step: int) -> tuple[Batch, dict[str, float]]:
    """One step's learning from its scored rollouts: old and reference log-probs, values,
    process rewards, advantages, the critic and actor updates, and the new weights into the
    generator."""
    metrics: dict[str, float] = {}
    if run.plan.recompute_log_probs:  # else the update's first forward is lp_old
        with run.timer("old_log_prob"):
            batch = batch.union(run.actor.log_probs(batch))  # old lp, entropy
    if run.reference is not None:
        with run.timer("ref"):
            batch = batch.union(run.reference.log_probs(batch))
    elif run.plan.reference:  # LoRA: adapters off
        batch = batch.union(run.actor.ref_log_probs(batch))
    if run.teacher is not None:  # on-policy distillation: the teacher scores the samples
        with run.timer("teacher"):
            batch = batch.union(run.teacher.log_probs(batch))
    if run.critic is not None:
        with run.timer("values"):
            batch = batch.union(run.critic.values(batch))
    if run.implicit_prm is not None:  # PRIME: the PRM learns, then scores every token
        with run.timer("implicit_prm"):
            batch, metrics = implicit_prm_step(
                run.implicit_prm, batch, run.config.implicit_prm, run.plan.prm_mini_batches
            )
    with run.timer("adv"):
        batch, stage_metrics = run.algorithm(batch, step)  # shaping, KL, advantages
    metrics |= stage_metrics
    # Each update's mini-batches hold the same rows whatever the number of ranks.
    if run.critic is not None:
        with run.timer("update_critic"):
            ordered = for_ranks(batch, run.critic.dp_size, run.plan.critic_mini_batches)
            metrics |= run.critic.update(ordered)[0]
    if step >= run.config.critic.warmup_steps or run.critic is None:
        with run.timer("update_actor"):
            ordered = for_ranks(batch, run.actor.dp_size, run.plan.actor_mini_batches)
            metrics |= run.actor.update(ordered)[0]
        with run.timer("sync"):
            run.sync_rollout()  # new weights to the generator
    return batch, metrics


def train_rl(config: RLConfig) -> dict:
    """Run RL; returns the validation history and where the run wrote its outputs.

    SIGTERM / SIGINT end the run after the current step with a checkpoint (``stopped`` names
    the signal in the result), and so does a collapse with ``trainer.stop_on_collapse``
    (``collapsed`` says why); an exception (a dead worker, non-finite updates, a failed save)
    ends it without saving anything, so the last checkpoint is the one to resume from.
    """
    run = RLRun(config)
    cfg, history, done = config.trainer, [], run.start_step
    progress = tqdm(total=run.total_steps, initial=done, disable=not cfg.progress_bar, desc="rl")
    with StopRequest() as stop:
        try:
            if run.start_step == 0 and cfg.val_at_start:
                history.append((0, run.validate()))
                run.tracker.log(history[-1][1], 0, printer=tqdm.write)
            for step in range(run.start_step, run.total_steps):
                began = time.perf_counter()
                rollouts, metrics = run.source.collect(step)  # generate + score (sources.py)
                batch = rollouts
                if len(rollouts):  # empty when dynamic sampling found no group with signal
                    batch, learned = learn(run, rollouts, step)
                    metrics |= learned
                done = step + 1
                run.nonfinite.check(done, rollouts, metrics)  # skipped updates; K in a row stop
                metrics |= run.collapse.check(done, rollouts, metrics)  # no signal: warn or stop
                if cfg.val_every and (done % cfg.val_every == 0 or done == run.total_steps):
                    with run.timer("validation"):
                        history.append((done, run.validate()))
                    metrics |= history[-1][1]
                run.timer.add("step", time.perf_counter() - began)
                # Records before the checkpoint: a crash between the two loses no step's
                # records (a resume drops those after its checkpoint). The save's seconds
                # are logged with the next step.
                run.log(done, batch, metrics, printer=tqdm.write)
                if cfg.save_every and done % cfg.save_every == 0 and done < run.total_steps:
                    with run.timer("save"):
                        run.save(done)
                progress.update(1)
                progress.set_postfix(score=f"{metrics.get('critic/score/mean', float('nan')):.3f}")
                if stop.signal is not None or run.collapse.stopped:
                    break
            run.save(done)
            export_dir = None
            if cfg.export and stop.signal is None:
                export_dir = str(run.run_dir / "hf")
                run.actor.export(export_dir)
            return {
                "run_dir": str(run.run_dir),
                "validation": history,
                "export_dir": export_dir,
                "steps": done,
                "stopped": stop.signal.name if stop.signal is not None else None,
                "collapsed": run.collapse.stopped,
            }
        finally:
            progress.close()
            run.close()
