"""Multi-turn RL end to end (``rollout.agent``): episodes of three assistant turns with user
turns between them train through the ordinary loop, and the batch holds them as exact tokens:
mask 1 on sampled tokens only, the rendered turns attended to with mask 0, log-probs that the
trainer reproduces."""

import string

from transformers import AutoTokenizer

from ascent.batch import Batch
from ascent.trainer.rl.loop import train_rl
from tests.trainer.rl_setup import config, metric

# Stop strings make turns end by themselves after a few tokens of the untrained model.
STOPS = "[" + ", ".join(string.ascii_lowercase) + "]"


def test_multi_turn_episodes_train_as_exact_tokens(tiny_model, prompts, tmp_path):
    dump = tmp_path / "rollouts"
    train_rl(
        config(
            tiny_model,
            prompts,
            tmp_path / "run",
            "trainer.total_steps=2",
            "data.chat_template=true",
            "data.prompts_per_step=4",
            "rollout.samples_per_prompt=4",
            "rollout.max_response_length=96",
            f"rollout.stop={STOPS}",
            "rollout.agent.environment=tests.agents.envs:Again",
            "rollout.agent.max_turns=3",
            f"trainer.dump_rollouts={dump}",
            "trainer.val_every=2",
        )
    )
    # Validation plays the 16 validation prompts' episodes and scores each episode once.
    [val_turns] = metric(tmp_path / "run", "val/agent/turns/mean")
    assert 1 <= val_turns <= 3  # greedy turns of the untrained model may run to the limit
    assert metric(tmp_path / "run", "val/agent/samples_per_episode")[0] >= 1
    assert len(metric(tmp_path / "run", "val/digits/acc")) == 1
    turns = metric(tmp_path / "run", "agent/turns/mean")
    assert len(turns) == 2 and all(1 < t <= 3 for t in turns), turns
    assert max(metric(tmp_path / "run", "rollout/mismatch_kl")) < 1e-3
    batch = Batch.load(dump / "step_00000002")
    # 16 episodes; one whose turn ended with a token the template would not write there (an
    # untrained model may sample <|endoftext|> where the template has <|im_end|>) drifts and
    # goes on in a second sample of its own.
    assert sorted(set(batch["episode"])) == list(range(16)) and len(batch) >= 16
    single = [
        row for row in range(len(batch)) if batch["episode"].count(batch["episode"][row]) == 1
    ]
    width = batch["responses"].shape[1]
    attended = batch["attention_mask"][:, -width:]
    mask = batch["response_mask"]
    assert bool((mask <= attended).all())  # every trained token is attended to
    assert bool((batch["rollout_log_probs"][mask == 0] == 0).all())
    multi = [row for row in single if batch["turns"][row] > 1]
    assert multi
    for row in multi:
        length = int(attended[row].sum())
        assert bool(attended[row, :length].all()) and mask[row, length - 1] == 1
        rendered = batch["responses"][row][(mask[row] == 0) & (attended[row] == 1)]
        # The rendered spans are the template's: end of turn, the user's "again", a header.
        text = AutoTokenizer.from_pretrained(tiny_model).decode(rendered)
        assert text.count("<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n") == (
            batch["turns"][row] - 1
        )
