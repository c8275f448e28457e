"""Agent-loop throughput against single-turn generation on the same engine, and the
sandbox's calls/s: one model, one run, interleaved repeats (medians).

Model: the quickstart's shape (Qwen2, hidden 128, 4 layers, byte vocabulary; about 1M
parameters), random weights. Single-turn: --episodes prompts, each answered with
--turns x --turn-tokens new tokens in one ``generate_batch`` call (EOS ignored). Agent loop:
--episodes episodes of --turns turns of exactly --turn-tokens tokens (``FixedTurns``), a tool
answering every turn with a short message (rendered and appended through the chat template),
all episodes at once against the native backend (its step thread batches their turns). Both
count generated tokens over the wall time; the agent loop also reports turns/s, and per later
turn the tokens prefilled against the tokens new to its context (what the prefix cache cannot
hold). Work-matched single-turn: the single-turn call with every prompt longer by the
tokens the agent loop computes for its later turns (their count per later turn, measured,
times turns - 1), so the same tokens are computed and sampled: the agent loop's rate against
it is what the loop costs beyond the work itself. The engine's KV cache is reserved with
room for every episode's conversation, so that episodes waiting for their tools keep their
context cached. Sandbox: --sandbox-calls Python programs (``print(sum(range(1000)))``)
through a pool of --sandbox-workers, and the same one at a time.

Rendering: what appending a turn costs the event loop's thread (``Conversation.add_messages``:
the chat template's renderings and the tokenizing of their tail) at turn 2..T of
conversations of --render-turns turns, each turn --turn-tokens printable sampled tokens and
the tool's short answer: rendering the opening and the turn only (``ascent.agents.locality``)
against rendering the whole history every turn (as before; forced here by reporting the
template not local). Timed per turn, averaged over 32 conversations, median of --repeats; and
the characters the template rendered for the last turn.

Gateway: the same episodes played by an outside agent (``ascent.gateway``): each an
``openai.AsyncOpenAI`` client (on one shared connection pool) against its own session's
``base_url``, --turns chat calls of
``max_tokens`` --turn-tokens, the reply and the same tool message sent back as history each
time (so every call continues the last one in tokens). Against the agent loop, its rate is
what HTTP, JSON and the chat route cost on top of the loop's work.

    .venv/bin/python bench/agent.py [--render-turns 4 16] [--json PATH]
"""

import argparse
import asyncio
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch

import ascent.agents.conversation as conversation_module
from ascent.agents.conversation import Conversation
from ascent.agents.environment import Environment, Step
from ascent.agents.locality import local_roles
from ascent.agents.loop import AgentLimits, run_episodes
from ascent.models import build_tiny_model, load_causal_lm, load_tokenizer
from ascent.rollout.engine import NativeEngine
from ascent.rollout.engine_settings import EngineLimits
from ascent.rollout.native_backend import NativeBackend
from ascent.rollout.protocol import TokenOut, render_chat
from ascent.rollout.types import SamplingParams
from ascent.sandbox.isolation import isolation
from ascent.sandbox.pool import SandboxPool
from ascent.sandbox.run import run_python

SLOTS = 64
MAX_LEN = 4096  # the engine's memory follows the live tokens, not this


class Calculator(Environment):
    """Answers every turn with a tool message, for a fixed number of turns."""

    def __init__(self, turns: int) -> None:
        self.turns, self.seen = turns, 0

    def reset(self, row: dict) -> list[dict]:
        return [{"role": "user", "content": row["question"]}]

    def step(self, message: dict) -> Step:
        self.seen += 1
        return Step([{"role": "tool", "content": "12345"}], 0.0, self.seen >= self.turns)


def single_turn(backend, tokenizer, episodes, tokens, extra_prompt_tokens=0):
    """tokens/s of one ``generate_batch`` call: ``episodes`` prompts (each the episode's
    question, padded by ``extra_prompt_tokens`` characters, one token each in the byte-level
    vocabulary), ``tokens`` new tokens each."""
    prompts = [
        render_chat(tokenizer, [{"role": "user", "content": f"question {i}"}], None)
        for i in range(episodes)
    ]
    if extra_prompt_tokens:
        padded = [
            render_chat(
                tokenizer,
                [{"role": "user", "content": f"question {i}" + "?" * extra_prompt_tokens}],
                None,
            )
            for i in range(episodes)
        ]
        lengths = zip(map(len, padded), map(len, prompts), strict=True)
        assert all(long == short + extra_prompt_tokens for long, short in lengths)
        prompts = padded
    params = SamplingParams(temperature=1.0, max_new_tokens=tokens, seed=0, stop_token_ids=[])
    start = time.perf_counter()
    samples = backend.generate_batch(prompts, params)
    return sum(len(s.token_ids) for s in samples) / (time.perf_counter() - start)


def printable_only(model, tokenizer):
    """The random model made to write printable ASCII only (its other output rows zeroed,
    the printable ones scaled up, so their logits dwarf the zeroed rows' 0): its turns
    decode and re-render to the same tokens, as a trained policy's do, so no episode drifts."""
    printable = set(tokenizer.encode(bytes(range(33, 127)).decode(), add_special_tokens=False))
    with torch.no_grad():
        head = model.lm_head.weight
        for token in range(head.shape[0]):
            head[token] = head[token] * 40 if token in printable else 0
    return model


class FixedTurns:
    """The backend, with a turn that reaches its token limit counted as ended by itself
    (the loop ends an episode on a turn cut by length): every turn is exactly --turn-tokens
    tokens, so the agent loop does the same generation work as single-turn."""

    def __init__(self, backend) -> None:
        self.backend = backend

    async def generate(self, token_ids, params, images=None):
        out = await self.backend.generate(token_ids, params, images=images)
        if out.finish_reason == "length":
            out = dataclasses.replace(out, finish_reason="stop")
        return out


def agent_loop(backend, tokenizer, episodes, turns, tokens):
    """tokens/s, turns/s, and per later turn: tokens prefilled, and tokens new to the
    context (the tool message and headers the loop rendered, plus the previous turn's last
    sampled token, which no decode step fed back)."""
    rows = [{"question": f"question {i}"} for i in range(episodes)]
    admission = backend.engine.scheduler.admission
    admission.log = log = []
    sampling = SamplingParams(temperature=1.0, max_new_tokens=tokens, seed=0, stop_token_ids=[])
    limits = AgentLimits(
        max_turns=turns, max_response_tokens=turns * (tokens + 64), max_model_len=MAX_LEN
    )

    async def play():
        return await run_episodes(
            FixedTurns(backend), tokenizer, lambda row: Calculator(turns), rows, sampling, limits
        )

    start = time.perf_counter()
    played = asyncio.run(play())
    seconds = time.perf_counter() - start
    admission.log = None
    generated = sum(s.sampled_count for e in played for s in e.samples)
    all_turns = sum(e.turns for e in played)
    first_prompt = max(len(s.prompt_ids) for e in played for s in e.samples)
    later = [computed for context, computed in log if context > first_prompt]
    rendered = sum(s.response_mask.count(0) for e in played for s in e.samples)
    prefill = {
        "later_turns": len(later),
        "prefilled_per_later_turn": sum(later) / max(1, len(later)),
        "new_per_later_turn": (rendered + len(later)) / max(1, len(later)),
        "mean_turn_tokens": generated / all_turns,
        "turns_per_episode": all_turns / len(played),
    }
    return generated / seconds, all_turns / seconds, prefill


def gateway_agent(backend, episodes, turns, tokens):
    """tokens/s and turns/s of outside agents through the gateway (module docstring), and
    their samples per episode (1.0: every call continued the last one)."""
    import httpx
    import openai

    from ascent.gateway.episodes import EpisodeLimits, play_outside_episode
    from ascent.gateway.server import Gateway

    shared: list[httpx.AsyncClient] = []  # one connection pool for every agent

    async def agent(base_url, row):
        messages = [{"role": "user", "content": row["question"]}]
        # A client per episode, on the shared pool: a client with its own pool would build
        # an SSL context (about 8 ms of CPU here), more than the call it makes costs.
        client = openai.AsyncOpenAI(
            base_url=base_url, api_key="-", max_retries=0, http_client=shared[0]
        )
        for _ in range(turns):
            out = await client.chat.completions.create(
                model="agent", messages=messages, max_tokens=tokens
            )
            reply = out.choices[0].message.model_dump(exclude_none=True)
            messages += [reply, {"role": "tool", "content": "12345"}]
        return 0.0

    gateway = Gateway(backend)
    sampling = SamplingParams(
        temperature=1.0, max_new_tokens=turns * (tokens + 64), seed=0, stop_token_ids=[]
    )
    limits = EpisodeLimits(max_calls=turns, timeout_s=600.0)

    async def play():
        rows = [{"question": f"question {i}"} for i in range(episodes)]
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=episodes)) as pool:
            shared[:] = [pool]
            return await asyncio.gather(
                *(play_outside_episode(gateway, agent, row, sampling, limits) for row in rows)
            )

    try:
        start = time.perf_counter()
        played = asyncio.run(play())
        seconds = time.perf_counter() - start
    finally:
        gateway.close()
    failed = [e.error for e in played if e.error is not None]
    assert not failed, failed[0]
    generated = sum(len(c.response_ids) for e in played for c in e.calls)
    calls = sum(len(e.calls) for e in played)
    samples = sum(len(e.samples) for e in played) / len(played)
    return generated / seconds, calls / seconds, samples


def render_costs(tokenizer, turns, tokens, repeats):
    """Per mode (short: the opening and the turn rendered; whole: the whole history), the
    median over ``repeats`` of the mean seconds per ``add_messages`` at turns 2..``turns``
    of 32 conversations, and the characters rendered for the last turn."""
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    sampled = [*tokenizer("x" * tokens, add_special_tokens=False)["input_ids"], end]
    out = TokenOut(sampled, [0.0] * len(sampled), "stop", [0] * len(sampled))
    tool = [{"role": "tool", "content": "12345"}]
    render, rendered = conversation_module.render_chat, []

    def counted(*args, **kwargs):
        text = render(*args, **kwargs)
        rendered.append(len(text))
        return text

    def play(index):
        conversation = Conversation(tokenizer, [{"role": "user", "content": f"question {index}"}])
        seconds = 0.0
        for turn in range(turns):
            if turn:
                rendered.clear()
                start = time.perf_counter()
                conversation.add_messages(tool)
                seconds += time.perf_counter() - start
            conversation.add_assistant(out)
        return seconds / (turns - 1)

    figures = {}
    for mode, roles in (("whole", lambda *_: frozenset()), ("short", local_roles)):
        with mock.patch.object(conversation_module, "local_roles", roles):
            with mock.patch.object(conversation_module, "render_chat", counted):
                play(0)
            characters = sum(rendered)
            runs = [statistics.mean(play(i) for i in range(32)) for _ in range(repeats)]
        figures[mode] = {"seconds_per_turn": statistics.median(runs), "characters": characters}
    return figures


def sandbox(calls, workers):
    code = "print(sum(range(1000)))"
    pool = SandboxPool(workers)
    try:
        start = time.perf_counter()
        results = pool.map([(code, "")] * calls)
        pooled = calls / (time.perf_counter() - start)
    finally:
        pool.close()
    assert all(r.stdout == "499500\n" for r in results), results[0]
    start = time.perf_counter()
    for _ in range(max(1, calls // 4)):
        run_python(code)
    one_by_one = max(1, calls // 4) / (time.perf_counter() - start)
    return pooled, one_by_one


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--turn-tokens", type=int, default=32)
    parser.add_argument("--sandbox-calls", type=int, default=64)
    parser.add_argument("--sandbox-workers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--render-turns", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ascent-bench-agent-"))
    model_dir = str(
        build_tiny_model(work / "model", hidden_size=128, layers=4, intermediate_size=512)
    )
    tokenizer = load_tokenizer(model_dir)
    model = printable_only(load_causal_lm(model_dir), tokenizer)
    # A reserved cache keeps the contexts of episodes that wait for their tools (see
    # PagedKVCache): room for every episode's whole conversation.
    config = model.config
    token_bytes = (
        2
        * config.num_hidden_layers
        * config.num_key_value_heads
        * 4
        * (config.hidden_size // config.num_attention_heads)
    )
    context = 64 + args.turns * (args.turn_tokens + 64)
    engine = NativeEngine(
        model,
        EngineLimits(
            max_num_seqs=SLOTS,
            max_model_len=MAX_LEN,
            kv_cache_bytes=max(SLOTS, args.episodes) * context * token_bytes,
        ),
        tokenizer=tokenizer,
    )
    backend = NativeBackend(engine, tokenizer)
    renders = {
        t: render_costs(tokenizer, t, args.turn_tokens, args.repeats) for t in args.render_turns
    }
    total = args.turns * args.turn_tokens
    runs = {
        "single": [],
        "matched": [],
        "agent": [],
        "turns": [],
        "gateway": [],
        "gateway_turns": [],
        "pooled": [],
        "one_by_one": [],
    }
    try:
        _, _, warm = agent_loop(backend, tokenizer, 8, 2, 4)  # warm-up (and the step thread)
        single_turn(backend, tokenizer, 8, 4)
        gateway_agent(backend, 8, 2, 4)
        # The tokens the loop renders into each later turn's context (headers, the tool's
        # answer): what the work-matched single-turn prompts are longer by, per later turn.
        extra = round(warm["new_per_later_turn"] - 1) * (args.turns - 1)
        for _ in range(args.repeats):
            # Repeats replay the same seeded conversations: each run starts with nothing
            # cached, or the second would find the first's whole context.
            engine.reset_prefix_cache()
            runs["single"].append(single_turn(backend, tokenizer, args.episodes, total))
            engine.reset_prefix_cache()
            runs["matched"].append(
                single_turn(backend, tokenizer, args.episodes, total, extra_prompt_tokens=extra)
            )
            engine.reset_prefix_cache()
            tokens, turns, prefill = agent_loop(
                backend, tokenizer, args.episodes, args.turns, args.turn_tokens
            )
            runs["agent"].append(tokens)
            runs["turns"].append(turns)
            engine.reset_prefix_cache()
            tokens, turns, samples = gateway_agent(
                backend, args.episodes, args.turns, args.turn_tokens
            )
            runs["gateway"].append(tokens)
            runs["gateway_turns"].append(turns)
            pooled, one = sandbox(args.sandbox_calls, args.sandbox_workers)
            runs["pooled"].append(pooled)
            runs["one_by_one"].append(one)
    finally:
        asyncio.run(backend.close())

    median = {k: statistics.median(v) for k, v in runs.items()}
    print(
        f"{args.episodes} episodes x {args.turns} turns x {args.turn_tokens} tokens, {SLOTS} "
        f"slots; single-turn: {total} tokens per prompt (median of {args.repeats})"
    )
    print(f"{'generation':<28} {'tokens/s':>10} {'turns/s':>9} {'vs single-turn':>15}")
    print(f"{'single-turn generate_batch':<28} {median['single']:>10.0f} {'':>9} {1:>14.2f}x")
    matched = median["matched"] / median["single"]
    label = f"work-matched (+{extra} tokens)"
    print(f"{label:<28} {median['matched']:>10.0f} {'':>9} {matched:>14.2f}x")
    ratio = median["agent"] / median["single"]
    print(f"{'agent loop':<28} {median['agent']:>10.0f} {median['turns']:>9.1f} {ratio:>14.2f}x")
    gateway = median["gateway"] / median["single"]
    label = "outside agent (gateway)"
    print(
        f"{label:<28} {median['gateway']:>10.0f} {median['gateway_turns']:>9.1f} {gateway:>14.2f}x"
    )
    beyond = median["agent"] / median["matched"]
    print(f"agent loop vs work-matched single-turn: {beyond:.2f}x")
    outside = median["gateway"] / median["agent"]
    print(
        f"outside agent vs agent loop: {outside:.2f}x "
        f"({samples:.2f} samples per outside episode, last repeat)"
    )
    print(
        f"\n{prefill['turns_per_episode']:.2f} turns per episode of "
        f"{prefill['mean_turn_tokens']:.1f} sampled tokens (last repeat); "
        f"later turns: {prefill['later_turns']}; per later turn "
        f"{prefill['prefilled_per_later_turn']:.2f} tokens prefilled, "
        f"{prefill['new_per_later_turn']:.2f} new to the context"
    )
    print(
        f"\n{'appending a turn':<18} {'whole: us/turn':>15} {'short: us/turn':>15} {'ratio':>6} "
        f"{'whole: chars':>13} {'short: chars':>13}"
    )
    for count, cost in renders.items():
        whole, short = cost["whole"], cost["short"]
        ratio = whole["seconds_per_turn"] / short["seconds_per_turn"]
        print(
            f"{f'{count} turns':<18} {whole['seconds_per_turn'] * 1e6:>15.0f} "
            f"{short['seconds_per_turn'] * 1e6:>15.0f} {ratio:>5.2f}x "
            f"{whole['characters']:>13} {short['characters']:>13}"
        )
    print(f"\n{isolation().describe()}")
    print(f"{'sandbox':<28} {'calls/s':>10}")
    print(f"{f'pool of {args.sandbox_workers}':<28} {median['pooled']:>10.1f}")
    print(f"{'one at a time':<28} {median['one_by_one']:>10.1f}")
    if args.json:
        figures = {
            "episodes": args.episodes,
            "turns": args.turns,
            "turn_tokens": args.turn_tokens,
            "slots": SLOTS,
            "threads": torch.get_num_threads(),
            "isolation": isolation().describe(),
            "medians": median,
            "agent_vs_single": ratio,
            "matched_extra_prompt_tokens": extra,
            "agent_vs_matched": beyond,
            "gateway_vs_agent": outside,
            "gateway_samples_per_episode": samples,
            "prefill": prefill,
            "render": {str(count): cost for count, cost in renders.items()},
            "runs": runs,
        }
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
