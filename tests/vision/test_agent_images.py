"""Multi-turn episodes with images on a tiny Qwen2.5-VL (the native engine in process): images
from the row and from the environment's steps reach the engine with the sample that shows
them, rendered spans hold each image's tokens expanded, the trainer's log-probs equal the
engine's on samples with several images at several places (M-RoPE after each), and the prefix
cache serves an episode's next turn from the last one's blocks but never a prompt whose image
differs."""

import asyncio

import pytest
import torch

from ascent.agents.conversation import Conversation
from ascent.agents.episodes import episodes_batch
from ascent.agents.images import image_tokens_of
from ascent.agents.loop import AgentLimits, run_episodes
from ascent.agents.rollouts import episode_rows
from ascent.batch import Batch
from ascent.models import load_causal_lm, load_tokenizer
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.rollout.native_backend import NativeBackend
from ascent.rollout.protocol import TokenOut
from ascent.vision.processing import VisionProcessor
from ascent.workers import ActorWorker
from tests.vision.agent_envs import LETTERS_OR_DIGITS, Pictures, data_url, image_part
from tests.vision.data import png_bytes
from tests.workers.conftest import in_process
from tests.workers.test_actor import config

GREEDY = SamplingParams(temperature=0, max_new_tokens=6)


def backend_for(model_dir):
    tokenizer = load_tokenizer(model_dir)
    limits = EngineLimits(max_num_seqs=16, max_model_len=512)
    engine = NativeEngine(
        load_causal_lm(model_dir), limits, tokenizer=tokenizer, model_dir=model_dir
    )
    return NativeBackend(engine, tokenizer)


def picture_rows(count):
    """Rows whose prompts show a picture of their own (the data path's ``images`` field)."""
    return Batch.from_dict(
        {
            "uid": [f"p{i}" for i in range(count)],
            "raw_prompt": [
                [{"role": "user", "content": f"look <image> row {i}"}] for i in range(count)
            ],
            "images": [[data_url(png_bytes(56, 56, seed=i))] for i in range(count)],
            "data_source": ["pictures"] * count,
            "ground_truth": [""] * count,
            "extra_info": [{"index": i} for i in range(count)],
        }
    )


def play(backend, batch, sampling):
    limits = AgentLimits(max_turns=3, max_response_tokens=200, max_model_len=512)
    images = image_tokens_of(backend, None)

    async def main():
        try:
            rows = episode_rows(batch)
            return await run_episodes(
                backend, backend.tokenizer, lambda row: Pictures(), rows, sampling, limits, images
            )
        finally:
            await backend.close()

    return asyncio.run(main())


def transformers_log_probs(model_dir, batch):
    """Each row alone through transformers' own model with its images and
    ``mm_token_type_ids`` (the model derives its M-RoPE positions itself): the log-prob of
    every response token."""
    model = load_causal_lm(model_dir).eval()
    processor = VisionProcessor(model_dir)
    width = batch["responses"].shape[1]
    out = torch.zeros(len(batch), width, dtype=torch.float64)
    for row in range(len(batch)):
        valid = batch["attention_mask"][row].bool()
        ids = batch["input_ids"][row][valid][None]
        inputs = processor(batch["images"][row])
        is_image = ids == model.config.image_token_id
        model.model.rope_deltas = None  # cached by the model between calls
        with torch.no_grad():
            logits = model(
                input_ids=ids,
                pixel_values=inputs.pixel_values,
                image_grid_thw=inputs.grid_thw,
                mm_token_type_ids=is_image.int(),
                use_cache=False,
            ).logits[0]
        length = int(batch["attention_mask"][row, -width:].sum())
        logp = torch.log_softmax(logits[-length - 1 : -1].double(), dim=-1)
        targets = batch["responses"][row, :length]
        out[row, :length] = logp.gather(-1, targets[:, None]).squeeze(-1)
    return out


@pytest.fixture(scope="module")
def episodes(tiny_vlm):
    batch = picture_rows(3)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=200, stop=LETTERS_OR_DIGITS, n=2)
    sampling = sampling.model_copy(update={"seed": 5})
    played = play(backend_for(tiny_vlm), batch, sampling)
    return batch, played, episodes_batch(batch, played, 2, 200, 0)


def test_each_sample_carries_its_images_in_the_order_of_their_tokens(tiny_vlm, episodes):
    batch, played, rows = episodes
    tokenizer = load_tokenizer(tiny_vlm)
    counts = VisionProcessor(tiny_vlm).token_counts
    image_token = load_causal_lm(tiny_vlm).config.image_token_id
    full = [e for e in played if e.end == "done" and len(e.samples) == 1]
    assert len(full) >= 4, [e.end for e in played]
    for index, episode in enumerate(played):
        sample = episode.samples[-1]
        shown = [
            part["image_url"]["url"]
            for message in episode.messages
            if isinstance(message["content"], list)
            for part in message["content"]
            if part["type"] == "image_url"
        ]
        assert shown[0] == batch["images"][index // 2][0]  # the row's own, in its place
        assert sample.images == shown and rows["images"][index] == shown
        ids = torch.tensor(sample.token_ids)
        assert int((ids == image_token).sum()) == sum(counts(shown))
        # Each image's run sits between the vision markers, where the template put it.
        runs = tokenizer.decode(sample.token_ids).count("<|vision_start|><|image_pad|>")
        assert runs == len(shown)
    assert {len(e.samples[0].images) for e in full} == {4}  # the row's, the tool's, two more


@pytest.mark.parametrize("packing", ["packed", "padded"])
def test_the_trainer_reproduces_the_engines_log_probs_of_multi_image_episodes(
    tiny_vlm, episodes, packing
):
    _, _, rows = episodes
    mask = rows["response_mask"].bool()
    settings = config(tiny_vlm, model={"path": tiny_vlm, "packing": packing})
    with in_process(ActorWorker, settings) as actor:
        trained = actor.log_probs(rows)["old_log_probs"]
    engine = rows["rollout_log_probs"]
    assert (trained - engine)[mask].abs().max() < 1e-4  # rollout/mismatch_kl ~ 0
    plain = transformers_log_probs(tiny_vlm, rows)
    assert (plain - engine.double())[mask].abs().max() < 1e-4


def continued(tokenizer, images, engine, picture, next_picture):
    """An episode's second prompt: a user's ``picture``, one greedy turn, a tool's
    ``next_picture`` (a ``Conversation``'s tokens and images)."""
    opening = [{"role": "user", "content": [image_part(picture), {"type": "text", "text": "a"}]}]
    conversation = Conversation(tokenizer, opening, images=images)
    prompt = list(conversation.current.token_ids)
    [sample] = engine.generate([prompt], GREEDY, [conversation.current.images])
    conversation.add_assistant(TokenOut.of(sample))
    conversation.add_messages([{"role": "tool", "content": [image_part(next_picture)]}])
    return len(prompt), conversation.current


def test_the_next_turn_reuses_the_last_ones_blocks_but_never_another_images(tiny_vlm):
    backend = backend_for(tiny_vlm)
    engine, tokenizer = backend.engine, backend.tokenizer
    images = image_tokens_of(backend, None)
    pictures = [data_url(png_bytes(56, 56, seed=s)) for s in (1, 2, 3)]
    admission = engine.scheduler.admission
    first, shown = continued(tokenizer, images, engine, pictures[0], pictures[1])
    before = admission.reused_tokens
    [one] = engine.generate([shown.token_ids], GREEDY, [shown.images])
    assert admission.reused_tokens - before >= first  # the first turn's blocks, kept
    _, other = continued(tokenizer, images, engine, pictures[0], pictures[2])
    assert other.token_ids == shown.token_ids and other.images != shown.images
    before = admission.reused_tokens
    [two] = engine.generate([other.token_ids], GREEDY, [other.images])
    reused = admission.reused_tokens - before
    starts = other.token_ids.index(images.token_id, first)  # the tool's picture's first token
    assert first <= reused <= starts  # cached up to the picture that differs, not past it
    fresh = backend_for(tiny_vlm).engine
    [alone] = fresh.generate([other.token_ids], GREEDY, [other.images])
    assert two.token_ids == alone.token_ids
    torch.testing.assert_close(two.log_probs, alone.log_probs, atol=1e-5, rtol=0)
    differences = [abs(a - b) for a, b in zip(one.log_probs, two.log_probs, strict=False)]
    assert max(differences) > 1e-4  # the pictures reached the model


def test_a_chunk_runs_the_vision_tower_on_its_own_images_only(tiny_vlm):
    """Any run of a prompt's image tokens (a chunk that continues cached context, perhaps
    from inside an image) gets the features the whole prompt's images give there, from the
    images it touches alone."""
    prompts = backend_for(tiny_vlm).engine.prompts
    urls = [data_url(png_bytes(width, 56, seed=width)) for width in (28, 56, 84, 56)]
    ids = [1, 2]
    for count in prompts.processor.token_counts(urls):
        ids += [prompts.image_token_id] * count + [3, 4]
    prepared = prompts.prepare(ids, urls, "the prompt")
    inputs = prepared.inputs
    tower = prompts.model.model.get_image_features
    whole = torch.cat(tower(inputs.pixel_values, inputs.grid_thw).pooler_output)
    seen = []

    def counted(pixels, grid):
        seen.append(len(grid))
        return tower(pixels, grid)

    prompts.model.model.get_image_features = counted
    for start, stop in [(0, 20), (3, 9), (6, 10), (10, 11), (12, 20)]:
        rows = torch.arange(start, stop)
        got = prompts.features(prepared, rows, torch.device("cpu"))
        torch.testing.assert_close(got, whole[rows], atol=1e-5, rtol=0)
    assert seen == [4, 2, 1, 1, 2]  # counts 6, 4, 6, 4: the images each run touches
