"""An outside agent's calls may carry images (a vision-language policy): each recorded call
keeps its prompt's images, its samples carry them in the order of their image tokens, and
the trainer's log-probs of those samples equal the engine's."""

import json

from ascent.batch import Batch
from ascent.gateway.samples import RecordedCall, calls_to_samples
from ascent.trainer.rl.loop import train_rl
from tests.gateway.test_training import AGENT
from tests.trainer.rl_setup import config, metric
from tests.vision.agent_envs import colour_url


def call(prompt, response, images):
    return RecordedCall(
        tuple(prompt),
        tuple(response),
        (0.0,) * len(response),
        (0,) * len(response),
        images=tuple(images),
    )


def test_a_call_joins_a_sample_only_if_its_images_extend_the_samples():
    a, b = "data:image/png;base64,AA", "data:image/png;base64,BB"
    joined = calls_to_samples([call([1, 9, 9], [5], [a]), call([1, 9, 9, 5, 2, 9], [6], [a, b])])
    assert len(joined) == 1 and joined[0].images == [a, b]
    # The same tokens with another first picture: another context, so another sample.
    other = calls_to_samples([call([1, 9, 9], [5], [a]), call([1, 9, 9, 5, 2, 9], [6], [b, b])])
    assert [s.images for s in other] == [[a], [b, b]]


def pictures_rows(folder, count):
    rows = [
        {
            "data_source": "pictures",
            "prompt": [{"role": "user", "content": f"<image> what colour, {i}? <image>"}],
            "images": [colour_url((40 * i % 256, 90, 200)), colour_url((200, 40 * i % 256, 90))],
            "reward_model": {"ground_truth": ""},
        }
        for i in range(count)
    ]
    folder.mkdir()
    for name in ("train.jsonl", "val.jsonl"):
        (folder / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def test_an_outside_agent_with_pictures_trains(tiny_vlm, tmp_path):
    dump = tmp_path / "rollouts"
    run = tmp_path / "run"
    train_rl(
        config(
            tiny_vlm,
            pictures_rows(tmp_path / "data", 4),
            run,
            *AGENT,
            "rollout.agent.run=tests.gateway.agents:picture_agent",
            "rollout.max_response_length=256",
            "data.max_prompt_length=1024",
            "trainer.total_steps=2",
            f"trainer.dump_rollouts={dump}",
        )
    )
    assert metric(run, "agent/end/done") == [1.0, 1.0]
    assert max(metric(run, "rollout/mismatch_kl")) < 1e-3  # the actor saw the same pictures
    batch = Batch.load(dump / "step_00000002")
    assert all(1 <= len(images) <= 2 for images in batch["images"])
    assert any(len(images) == 2 for images in batch["images"])  # the second call's sample
