"""Exact resume: N steps straight and N/2 + resume + N/2 log identical metrics (GRPO, PPO
with its critic, PRIME with its implicit PRM) in deterministic mode; a checkpoint resumes on
another number of ranks; a corrupt newest checkpoint is skipped by ``auto`` and refused by
path; non-finite updates are skipped, counted and stop the run with their batches saved;
checkpoints without optimiser state are smaller and resume."""

import json
import re

import pytest

from ascent.trainer.checkpoints import CheckpointError
from ascent.trainer.faults import NonFiniteUpdates
from ascent.trainer.rl.loop import train_rl
from tests.trainer import faulty
from tests.trainer.rl_setup import config, metric

# Two mini-batches per step: the second is off-policy, so the optimiser state, the old
# log-probs and (PPO) the critic all shape the metrics that must match.
EXACT = ["trainer.deterministic=true", "actor.prompts_per_update=4", "trainer.resume=auto"]


def records(run_dir):
    """Every logged metric but wall-clock ones, per step."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [
        {k: v for k, v in json.loads(line).items() if not k.startswith(("timing_s/", "perf/"))}
        for line in lines
    ]


@pytest.mark.parametrize("algorithm", ["grpo", "ppo", "prime"])
def test_half_then_resumed_half_equals_the_whole_run(tiny_model, prompts, tmp_path, algorithm):
    run = [f"algorithm.name={algorithm}", *EXACT]
    whole, halves = tmp_path / "whole", tmp_path / "halves"
    train_rl(config(tiny_model, prompts, whole, "trainer.total_steps=4", *run))
    train_rl(config(tiny_model, prompts, halves, "trainer.total_steps=2", *run))
    state = json.loads((halves / "checkpoints/step_00000002/trainer_state.json").read_text())
    assert state["weight_version"] == 2 and state["data"] and "nonfinite" in state
    trained = {"ppo": "critic", "prime": "implicit_prm"}.get(algorithm)
    if trained is not None:  # its weights and optimiser: prm/* metrics must match too
        assert (halves / "checkpoints/step_00000002" / trained).is_dir()
    result = train_rl(config(tiny_model, prompts, halves, "trainer.total_steps=4", *run))
    assert result["steps"] == 4
    assert records(halves) == records(whole)  # bitwise: every value of every step
    assert metric(halves, "rollout/weight_version") == [1.0, 2.0, 3.0, 4.0]
    generations = [(p / "generations.jsonl").read_text() for p in (whole, halves)]
    assert generations[0] == generations[1]


def test_a_pass_rate_curriculum_resumes_exactly(tiny_model, prompts, tmp_path):
    """data.sampler=pass_rate draws by what earlier steps scored: its counts and takes are in
    the checkpoint, so the resumed half draws the prompts the whole run drew and logs the
    same metrics (sampler/* among them)."""
    run = ["data.sampler=pass_rate", *EXACT]
    whole, halves = tmp_path / "whole", tmp_path / "halves"
    train_rl(config(tiny_model, prompts, whole, "trainer.total_steps=4", *run))
    train_rl(config(tiny_model, prompts, halves, "trainer.total_steps=2", *run))
    state = json.loads((halves / "checkpoints/step_00000002/trainer_state.json").read_text())
    assert state["data"]["takes"] == 2 and len(state["data"]["pass_rate"]) == 16
    train_rl(config(tiny_model, prompts, halves, "trainer.total_steps=4", *run))
    assert records(halves) == records(whole)
    assert metric(whole, "sampler/prompts_seen")[:2] == [8.0, 16.0]
    trained = [(p / "trained_prompts.jsonl").read_text() for p in (whole, halves)]
    assert trained[0] == trained[1]


@pytest.mark.integration
def test_a_one_rank_checkpoint_resumes_on_two_ranks(
    tiny_model, prompts, tmp_path, local_ray, capsys
):
    """The sharded state is resharded (torch.distributed.checkpoint); the data position and
    counters carry over; RNG states cannot be matched rank to rank and stay seeded."""
    train_rl(config(tiny_model, prompts, tmp_path, "trainer.total_steps=2"))
    capsys.readouterr()
    train_rl(
        config(
            tiny_model,
            prompts,
            tmp_path,
            "trainer.total_steps=4",
            "trainer.resume=auto",
            "resources.devices_per_node=2",
        )
    )
    out, err = capsys.readouterr()
    assert "step_00000002 at step 2" in out
    assert "saved for 1 rank(s), the run has 2" in err
    assert metric(tmp_path, "step") == [1, 2, 3, 4]
    assert metric(tmp_path, "rollout/weight_version")[-1] == 4.0
    processes = json.loads((tmp_path / "processes.json").read_text())
    assert {(p["role"], p["rank"]) for p in processes} >= {("actor", 0), ("actor", 1)}


def corrupt(checkpoint):
    """Flip bytes in the middle of the largest shard, keeping its size: silent garbage a
    load would accept, that only the manifest's checksum can catch."""
    shard = max(checkpoint.rglob("*.distcp"), key=lambda p: p.stat().st_size)
    data = bytearray(shard.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)
    shard.write_bytes(bytes(data))
    return shard


def test_a_corrupt_newest_checkpoint_is_skipped_or_refused(tiny_model, prompts, tmp_path, capsys):
    run = ["trainer.save_every=1", "trainer.keep_last=null"]
    train_rl(config(tiny_model, prompts, tmp_path, "trainer.total_steps=3", *run))
    newest = tmp_path / "checkpoints" / "step_00000003"
    shard = corrupt(newest)
    with pytest.raises(CheckpointError, match=re.escape(shard.name) + ".*sha256 differs"):
        train_rl(
            config(
                tiny_model, prompts, tmp_path, "trainer.total_steps=4", f"trainer.resume={newest}"
            )
        )
    capsys.readouterr()
    train_rl(config(tiny_model, prompts, tmp_path, "trainer.total_steps=4", "trainer.resume=auto"))
    out, err = capsys.readouterr()
    assert "skipping checkpoint" in err and "step_00000003" in err
    assert "step_00000002 at step 2" in out
    assert metric(tmp_path, "step") == [1, 2, 3, 4]  # step 3's first record was dropped


def test_non_finite_updates_are_skipped_counted_and_stop_the_run(
    tiny_model, prompts, tmp_path, capsys
):
    """NaN losses at steps 2, 4 and 5: step 2 is skipped and the run goes on; 4 and 5 are two
    in a row, which stops it with the offending batches saved and the checkpoints intact."""
    faulty.reset()
    run = config(
        tiny_model,
        prompts,
        tmp_path,
        "trainer.total_steps=8",
        "trainer.save_every=1",
        "trainer.keep_last=null",
        "trainer.max_consecutive_nonfinite=2",
        "algorithm.loss=tests.trainer.faulty:poisoned_ppo",
        "algorithm.loss_params={poisoned_calls: [2, 4, 5]}",
    )
    with pytest.raises(NonFiniteUpdates, match="2 steps in a row \\(up to step 5\\)"):
        train_rl(run)
    assert metric(tmp_path, "actor/skipped_steps") == [0.0, 1.0, 0.0, 1.0]
    assert sorted(p.name for p in (tmp_path / "nonfinite").iterdir()) == [
        "step_00000002",
        "step_00000004",
        "step_00000005",
    ]
    optimiser_steps = [
        json.loads((tmp_path / f"checkpoints/step_{s:08d}/actor/engine.json").read_text())["steps"]
        for s in (1, 2, 3, 4)
    ]
    assert optimiser_steps == [1, 1, 2, 2]  # skipped updates changed nothing
    assert not (tmp_path / "checkpoints" / "step_00000005").exists()
    assert "update skipped" in capsys.readouterr().err


def test_checkpoints_without_optimizer_state_are_smaller_and_resume(
    tiny_model, prompts, tmp_path, capsys
):
    def size(run_dir):
        actor = run_dir / "checkpoints" / "step_00000002" / "actor"
        return sum(p.stat().st_size for p in actor.rglob("*") if p.is_file())

    with_adam, without = tmp_path / "with", tmp_path / "without"
    train_rl(config(tiny_model, prompts, with_adam, "trainer.total_steps=2"))
    lean = ["trainer.save_optimizer=false", "trainer.resume=auto"]
    train_rl(config(tiny_model, prompts, without, "trainer.total_steps=2", *lean))
    assert size(without) < 0.5 * size(with_adam)  # weights only: Adam's two moments are gone
    train_rl(config(tiny_model, prompts, without, "trainer.total_steps=3", *lean))
    assert "at step 2" in capsys.readouterr().out
    assert metric(without, "step") == [1, 2, 3]
