"""On-policy distillation in a run (``teacher``; ``ascent.trainer.rl.teacher``): a local
teacher lines up with the student token for token, a student learns the toy task from a
teacher that knows it with the task reward switched off, and a teacher that cannot score the
student's tokens is refused before any worker starts. The terms' math:
``tests/algos/test_distill.py``; the endpoint teacher: ``tests/teacher``."""

import json
import shutil

import pytest

from ascent.config import ConfigError
from ascent.trainer.rl.loop import train_rl
from ascent.trainer.rl.plan import make_plan
from tests.trainer.rl_setup import config, metric


@pytest.fixture(scope="module")
def digits_teacher(tiny_model, prompts, tmp_path_factory):
    """The tiny model after 40 GRPO steps on the toy task: it answers in digits."""
    out = tmp_path_factory.mktemp("teacher")
    run = config(tiny_model, prompts, out, "trainer.total_steps=40", "trainer.export=true")
    result = train_rl(run)
    assert metric(out, "critic/score/mean")[-1] > 0.8, "the teacher knows the task"
    return result["export_dir"]


def test_a_teacher_that_is_the_student_agrees_with_it_token_for_token(
    tiny_model, prompts, tmp_path
):
    """The teacher's log-prob of each sampled token, at the rollout's temperature, equals
    the student's own: the positions, prefixes and temperature line up."""
    run = config(
        tiny_model,
        prompts,
        tmp_path,
        "trainer.total_steps=1",
        "rollout.temperature=0.7",
        f"teacher.model.path={tiny_model}",
        "teacher.top_k=4",
        "teacher.forward_kl_top_k=1",
    )
    assert train_rl(run)["steps"] == 1
    assert abs(metric(tmp_path, "distill/reverse_kl")[0]) < 1e-4
    # Against its own top-k renormalised, the KL is -log of the mass it holds there: > 0
    # (a random tiny model spreads its mass over the whole vocabulary).
    assert 0 < metric(tmp_path, "actor/distill_forward_kl_top_k")[0] < 10
    assert 0 <= metric(tmp_path, "distill/agreement")[0] <= 1


@pytest.mark.parametrize(
    "terms",
    [
        ("teacher.reverse_kl_advantage=1",),
        ("teacher.reverse_kl_advantage=0", "teacher.forward_kl_top_k=1", "teacher.top_k=8"),
    ],
    ids=["reverse_kl_advantage", "forward_kl_top_k"],
)
def test_a_student_learns_the_task_from_a_teacher_alone(
    tiny_model, prompts, tmp_path, digits_teacher, terms
):
    """task_advantage 0: the reward is computed and logged but trains nothing; the score
    rises because the student moves toward the teacher (its KL to it falls)."""
    run = config(
        tiny_model,
        prompts,
        tmp_path,
        "trainer.total_steps=20",
        f"teacher.model.path={digits_teacher}",
        "teacher.task_advantage=0",
        *terms,
    )
    train_rl(run)
    score, kl = metric(tmp_path, "critic/score/mean"), metric(tmp_path, "distill/reverse_kl")
    assert sum(score[-3:]) / 3 > sum(score[:3]) / 3 + 0.3, score
    assert sum(kl[-3:]) / 3 < sum(kl[:3]) / 3 - 1.0, kl


def test_the_teacher_section_is_checked_before_any_worker_starts(tiny_model, prompts, tmp_path):
    def plan(*overrides):
        return make_plan(config(tiny_model, prompts, tmp_path, *overrides))

    with pytest.raises(ValueError, match=r"exactly one of teacher\.model or teacher\.endpoint"):
        plan("teacher.reverse_kl_advantage=1")
    with pytest.raises(ValueError, match="every distillation coefficient is 0"):
        plan(f"teacher.model.path={tiny_model}", "teacher.reverse_kl_advantage=0")
    with pytest.raises(ConfigError, match=r"teacher\.endpoint scores tokens at temperature 1"):
        plan(
            "teacher.endpoint.base_url=http://127.0.0.1:9/v1",
            "teacher.endpoint.model=m",
            "rollout.temperature=0.7",
        )
    for split in ("sequence", "context", "tensor"):  # a ring splits the positions too
        with pytest.raises(
            ConfigError, match=r"not split over actor\.parallel\.sequence or \.tensor"
        ):
            plan(
                f"teacher.model.path={tiny_model}",
                "teacher.forward_kl_top_k=1",
                f"actor.parallel.{split}=2",
                "model.packing=packed",
                "resources.devices_per_node=2",
            )


def test_a_teacher_with_another_vocabulary_is_refused_naming_the_token(
    tiny_model, prompts, tmp_path
):
    teacher = tmp_path / "teacher"
    shutil.copytree(tiny_model, teacher)
    tokenizer = json.loads((teacher / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab["a"], vocab["b"] = vocab["b"], vocab["a"]
    (teacher / "tokenizer.json").write_text(json.dumps(tokenizer))
    run = config(tiny_model, prompts, tmp_path / "run", f"teacher.model.path={teacher}")
    with pytest.raises(ConfigError, match=r"differs from the policy's at 2 token ids.*'a'"):
        make_plan(run)


@pytest.mark.integration
def test_a_teacher_on_its_own_ray_worker_scores_two_ranks_rows(
    tiny_model, prompts, tmp_path, local_ray
):
    """The teacher on its own process, the actor on two ranks over Ray: each row comes back
    from the teacher to the row it scored (its log-probs equal the student's own)."""
    run = config(
        tiny_model,
        prompts,
        tmp_path,
        "trainer.total_steps=1",
        "resources.backend=ray",
        "resources.devices_per_node=2",
        f"teacher.model.path={tiny_model}",
        "teacher.resources.backend=ray",
    )
    assert train_rl(run)["steps"] == 1
    assert abs(metric(tmp_path, "distill/reverse_kl")[0]) < 1e-4
    assert "teacher" in (tmp_path / "processes.json").read_text()


def test_a_teacher_of_another_family_teaches_a_dense_student(
    tiny_model, tiny_moe, prompts, tmp_path
):
    """A mixture-of-experts teacher (the byte tokenizer too) scores a dense student's tokens:
    the student's log-probs are not the teacher's, and the term trains."""
    run = config(
        tiny_model,
        prompts,
        tmp_path,
        "trainer.total_steps=2",
        f"teacher.model.path={tiny_moe}",
        "teacher.top_k=4",
        "teacher.forward_kl_top_k=1",
    )
    assert train_rl(run)["steps"] == 2
    assert abs(metric(tmp_path, "distill/reverse_kl")[0]) > 1e-3
    assert all(value > 0 for value in metric(tmp_path, "actor/distill_forward_kl_top_k"))
