"""The hub tests' body, run with the hubs venv's python by ``test_hubs.py``:
``python run_hubs.py verifiers|openenv|bad-specs``. Episodes play through ascent's own agent
loop (``run_episodes``) on the native engine with a tiny model, the environment made from a
config spec by ``environment_factory``, as in training. Prints a JSON summary; a failed
check exits non-zero with its traceback."""

import asyncio
import json
import string
import sys
import tempfile

from ascent.agents.config import AgentConfig
from ascent.agents.episodes import environment_factory
from ascent.agents.loop import AgentLimits, run_episodes
from ascent.errors import InputError
from ascent.models import build_tiny_model, load_causal_lm, load_tokenizer
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.rollout.native_backend import NativeBackend

SAMPLES = 2  # episodes per row


def play(model, spec, rows, max_turns=5):
    tokenizer = load_tokenizer(model)
    engine = NativeEngine(
        load_causal_lm(model),
        EngineLimits(max_num_seqs=16, max_model_len=1024),
        tokenizer=tokenizer,
    )
    backend = NativeBackend(engine, tokenizer)
    # A turn ends at a letter or digit, so episodes go on for several turns (a random tiny
    # model seldom ends one by itself).
    stops = tokenizer(string.ascii_letters + string.digits, add_special_tokens=False)["input_ids"]
    sampling = SamplingParams(
        n=SAMPLES, temperature=1.0, max_new_tokens=48, stop_token_ids=stops, seed=0
    )
    limits = AgentLimits(max_turns=max_turns, max_response_tokens=400, max_model_len=1024)
    make = environment_factory(AgentConfig(environment=spec))

    async def main():
        try:
            return await run_episodes(backend, tokenizer, make, rows, sampling, limits)
        finally:
            await backend.close()

    return asyncio.run(main())


def said(episode, role):
    return [m["content"] for m in episode.messages if m["role"] == role]


def verifiers_case(model):
    rows = [
        {
            "prompt": [{"role": "user", "content": f"Guess my word ({i})."}],
            "reward_model": {"ground_truth": "ascent"},
            "extra_info": {"hint": f"it starts with a{i}"},
        }
        for i in range(2)
    ]
    summary = {}
    for spec in ("verifiers:hub_guess", "verifiers:hub_guess:make_env"):
        episodes = play(model, spec, rows)
        for k, episode in enumerate(episodes):
            replies = [text.strip() for text in said(episode, "assistant")]
            # The seat's max_turns (3) ends the exchange, below ascent's 5: env.run returns.
            assert episode.end == "done" and episode.turns == len(replies) == 3, episode
            hint = rows[k // SAMPLES]["extra_info"]["hint"]
            assert said(episode, "user") == [
                f"Guess my word ({k // SAMPLES}).",
                *(f"Not {reply!r}. Hint: {hint}." for reply in replies[:-1]),
            ]
            # Task rewards (weighted) on the last reply, and the env's finalize reward.
            last = replies[-1]
            expected = 0.5 * len(last) + 2.0 * (last == "ascent") + 0.1 * 3
            assert episode.rewards[:-1] == [0.0, 0.0] and abs(episode.reward - expected) < 1e-9
        summary[spec] = [[e.turns, round(e.reward, 3)] for e in episodes]
    episodes = play(model, "verifiers:hub_single", [{"prompt": "Say yes.", "reward_model": {}}])
    for episode in episodes:  # verifiers' SingleAgentEnv: one reply
        [reply] = [text.strip() for text in said(episode, "assistant")]
        assert episode.end == "done" and episode.turns == 1
        assert abs(episode.reward - (0.25 * len(reply) + (reply == "yes"))) < 1e-9
    summary["verifiers:hub_single"] = [[e.turns, round(e.reward, 3)] for e in episodes]
    return summary


def openenv_case(model):
    import hub_count

    rows = [
        {"prompt": [{"role": "system", "content": "Play along."}], "extra_info": {"reset": r}}
        for r in ({"turns": 3}, {"turns": 2, "not_a_reset_argument": 1})
    ]
    episodes = play(model, "openenv:hub_count:Countdown", rows)
    for k, episode in enumerate(episodes):
        turns = rows[k // SAMPLES]["extra_info"]["reset"]["turns"]
        replies = [text.strip() for text in said(episode, "assistant")]
        assert episode.end == "done" and episode.turns == len(replies) == turns, episode
        assert said(episode, "user") == [
            f"Say anything, {turns} times.",
            *(f"{turns - t} to go." for t in range(1, turns)),
        ]
        # The env's rubric rewards each step with the length of the action's text.
        assert episode.rewards == [float(len(reply)) for reply in replies]
        assert replies in hub_count.SAID.values()
    summary = {"openenv:hub_count:Countdown": [[e.turns, e.rewards] for e in episodes]}
    episodes = play(model, "openenv:hub_count:Numbers", [{"prompt": []}], max_turns=4)
    for episode in episodes:  # replies that are no JSON integer: told so, the episode goes on
        errors = [t for t in said(episode, "user") if t.startswith("Error: ")]
        assert episode.tool_calls == episode.turns
        assert episode.tool_errors == len(errors) == episode.turns - (episode.end == "done")
        assert all("not a valid NumberAction" in text and "['n']" in text for text in errors)
    assert sum(e.tool_errors for e in episodes) > 0
    summary["openenv:hub_count:Numbers"] = [[e.turns, e.tool_errors, e.end] for e in episodes]
    return summary


def bad_specs_case():
    expected = {
        "verifiers:no_such_taskset_xyz": "cannot load taskset",
        "verifiers:hub_guess:nothing": "has no attribute",
        "verifiers:hub_guess:not_an_env": "not a verifiers Env",
        "verifiers:hub_guess:two_seats": "has the seats ['assistant', 'user']",
        "openenv:no_such_module:Env": "cannot import module",
        "openenv:hub_count:SayAction": "not an OpenEnv environment",
        "openenv:hub_count:Untyped": "declares no Action type",
    }
    for spec, words in expected.items():
        for config, field in (
            (AgentConfig(environment=spec), "rollout.agent.environment"),
            (AgentConfig(environments={"game": spec}), "rollout.agent.environments.game"),
        ):
            try:
                environment_factory(config)
            except InputError as error:
                assert f"{field}={spec!r}" in str(error) and words in str(error), str(error)
            else:
                raise AssertionError(f"{spec} was taken")
    return {"refused": sorted(expected)}


if __name__ == "__main__":
    case = sys.argv[1]
    if case == "bad-specs":
        print(json.dumps(bad_specs_case()))
    else:
        with tempfile.TemporaryDirectory() as folder:
            model = str(build_tiny_model(f"{folder}/model", seed=0))
            run = {"verifiers": verifiers_case, "openenv": openenv_case}[case]
            print(json.dumps(run(model)))
