"""The parts of ``gpu_check.py``, each run in a process of its own: its function returns the
part's figures as a dict (``gpu_check.py`` judges them against the targets).

Shapes: ``FULL`` is Qwen2.5-0.5B's (random weights, built here; bf16 on CUDA), ``TINY`` the
dry run's (CPU, fp32, seconds). Both have tied embeddings and a vocabulary larger than the
byte tokenizer's, so the GRPO step samples ids the tokenizer cannot decode, as a real model
with random weights would.
"""

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from machine import copy_bandwidth, matmul_peak, synchronize  # bench/ is on the path
from step import TIMED_RUN, write_prompts

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
TARGET_DECODE_MS = 2.0  # per decode step at 256 sequences, FULL shape on CUDA
TARGET_GRPO_S = 13.0  # per GRPO step, FULL shape on CUDA
LOGPROB_TOLERANCE = 1e-3  # graphed against eager, fp32
# ascent's dependencies that a lent GPU machine has neither in its image (torch, transformers
# and theirs, triton, safetensors, pyarrow, pytest) nor from .whl/ (pydantic, tensordict,
# cloudpickle, pebble and theirs): a part must not import them.
NOT_ON_GPU_MACHINE = (
    "ray", "datasets", "peft", "math_verify", "tensorboard", "matplotlib", "fastapi", "uvicorn",
)  # fmt: skip


@dataclass(frozen=True)
class Shape:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    # decode: sequences at once, prompt tokens each, untimed then timed decode steps
    decode_seqs: int
    decode_prompt: int
    decode_warmup: int
    decode_steps: int
    # GRPO: prompts x samples, response tokens, untimed then timed steps
    grpo_prompts: int
    grpo_samples: int
    grpo_response: int
    grpo_warmup: int
    grpo_steps: int
    # graphs vs eager: seats (fewer than the prompts, so batches shrink and pad), new tokens
    graph_seqs: int
    graph_tokens: int
    # measured peaks: matmul size and copy bytes
    matmul_size: int
    copy_bytes: int


FULL = Shape(
    name="Qwen2.5-0.5B", hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864,
    vocab=151936,
    decode_seqs=256, decode_prompt=128, decode_warmup=8, decode_steps=64,
    # The step the first H100 run measured at 45.1 s: 128 prompts x 8 samples x 512 tokens.
    grpo_prompts=128, grpo_samples=8, grpo_response=512, grpo_warmup=1, grpo_steps=1,
    graph_seqs=4, graph_tokens=24,
    matmul_size=8192, copy_bytes=2**30,
)  # fmt: skip
TINY = Shape(
    name="tiny", hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=512,
    decode_seqs=8, decode_prompt=16, decode_warmup=2, decode_steps=8,
    grpo_prompts=4, grpo_samples=4, grpo_response=16, grpo_warmup=1, grpo_steps=2,
    graph_seqs=3, graph_tokens=8,
    matmul_size=256, copy_bytes=2**24,
)  # fmt: skip


def qwen_config(shape: Shape, tokenizer=None):
    from transformers import Qwen2Config

    special = {}
    if tokenizer is not None:
        special = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    return Qwen2Config(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        tie_word_embeddings=True,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        **special,
    )


def model_on(shape: Shape, device: str, dtype: torch.dtype):
    from ascent.models.loading import causal_lm_from_config

    return causal_lm_from_config(qwen_config(shape)).to(device=device, dtype=dtype)


def generation_dtype(device: str) -> torch.dtype:
    return torch.bfloat16 if device == "cuda" else torch.float32


def random_prompts(count: int, lengths: list[int], vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randint(0, vocab, (lengths[i % len(lengths)],), generator=g).tolist()
        for i in range(count)
    ]


# -- the parts ----------------------------------------------------------------------------


def tests(shape: Shape, device: str) -> dict:
    """Every test marked ``gpu``, in a pytest process of its own (as anyone would run them);
    in the dry run (on the CPU) they are only collected."""
    files = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("*.py")
        if "pytest.mark.gpu" in p.read_text()
    )
    dry = device == "cpu"
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider"]
    command += ["--collect-only"] if dry else ["--durations=8"]
    lines = []
    with subprocess.Popen(
        [*command, *files], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as run:
        for line in run.stdout:  # into the part's log as it comes: a timeout keeps it
            print(line, end="", flush=True)
            lines.append(line.strip())
    summary = next((line for line in reversed(lines) if line), "")
    counts = {
        word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|error|skipped)", summary)
    }
    collected = re.search(r"(\d+)(?:/\d+)? tests? collected", summary)
    if collected:
        counts["collected"] = int(collected.group(1))
    mode = "collect-only" if dry else "run"
    return {
        "mode": mode,
        "files": files,
        "exit_code": run.returncode,
        "summary": summary,
        **counts,
    }


def decode(shape: Shape, device: str) -> dict:
    """ms per decode step of the native engine with ``decode_seqs`` sequences running, and
    the share of the memory-bandwidth bound: each step must read the weights once and every
    running sequence's cached keys and values, at the copy bandwidth measured here."""
    from ascent.rollout.engine import NativeEngine
    from ascent.rollout.engine_settings import EngineLimits
    from ascent.rollout.requests import EngineRequest
    from ascent.rollout.types import SamplingParams

    bandwidth = copy_bandwidth(device, shape.copy_bytes)
    model = model_on(shape, device, generation_dtype(device))
    # Slack beyond the steps taken, so that no sequence finishes while timed.
    new_tokens = shape.decode_warmup + shape.decode_steps + 32
    limits = EngineLimits(
        max_num_seqs=shape.decode_seqs, max_model_len=shape.decode_prompt + new_tokens + 1
    )
    engine = NativeEngine(model, limits)
    params = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=0)
    prompts = random_prompts(shape.decode_seqs, [shape.decode_prompt], shape.vocab)
    done: list = []
    for index, prompt in enumerate(prompts):
        engine.add_request(EngineRequest(prompt, params, done.append, index=index))
    scheduler = engine.scheduler
    while scheduler.waiting:  # prefill everything (each of these steps also decodes)
        engine.step()
    for _ in range(shape.decode_warmup):  # and capture the step's CUDA graph
        engine.step()
    captured = len(engine.graphs.graphs) if engine.graphs else 0
    before = sum(row.cached for row in scheduler.rows)
    synchronize(device)
    start = time.perf_counter()
    for _ in range(shape.decode_steps):
        engine.step()
    synchronize(device)
    seconds = (time.perf_counter() - start) / shape.decode_steps
    after = sum(row.cached for row in scheduler.rows)
    if engine.running != shape.decode_seqs or done:
        raise RuntimeError(f"{engine.running} sequences ran while timed, not {shape.decode_seqs}")
    # Step k reads before + (k + 1) x seqs cached positions: on average the middle one.
    kv_tokens = (before + after + shape.decode_seqs) / 2
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    step_bytes = weight_bytes + kv_tokens * engine.cache.token_bytes
    return {
        "sequences": shape.decode_seqs,
        "ms_per_step": 1000 * seconds,
        "bandwidth_bytes_per_s": bandwidth,
        "weight_bytes": weight_bytes,
        "kv_bytes_per_step": kv_tokens * engine.cache.token_bytes,
        "bound_ms_per_step": 1000 * step_bytes / bandwidth,
        "fraction_of_bound": step_bytes / bandwidth / seconds,
        "mean_context": kv_tokens / shape.decode_seqs,
        "cuda_graphs": engine.use_cuda_graphs,
        "graphs_captured_while_timed": (len(engine.graphs.graphs) if engine.graphs else 0)
        - captured,
    }


def grpo_overrides(shape: Shape, device: str, work: Path) -> list[str]:
    return [
        f"model.path={work / 'model'}",
        f"data.train_files=[{work / 'prompts.jsonl'}]",
        "data.chat_template=false",
        f"data.prompts_per_step={shape.grpo_prompts}",
        f"reward.function={BENCH / 'step.py'}:digit_share",
        "reward.workers=0",
        f"rollout.samples_per_prompt={shape.grpo_samples}",
        f"rollout.max_response_length={shape.grpo_response}",
        "algorithm.name=grpo",
        "algorithm.kl.mode=none",
        f"resources.device={device}",
        "resources.backend=in-process",
        f"trainer.run_dir={work / 'run'}",
        f"trainer.total_steps={shape.grpo_warmup + shape.grpo_steps}",
        "trainer.save_every=0",
        *TIMED_RUN,
    ]


def grpo(shape: Shape, device: str) -> dict:
    """Whole GRPO steps of ``ascent train`` in this process (in-process backend, no Ray):
    generate, score, update, weight refresh. The update's MFU: model FLOPs (6 N T for the
    update's forward and backward, 2 N T for each separate log-prob forward; N parameters,
    T tokens of the step) over the seconds of those stages, against the matmul peak
    measured here in the generation dtype."""
    from transformers import AutoModelForCausalLM

    from ascent.config import load_config
    from ascent.models.tiny import build_byte_tokenizer, save_initialised
    from ascent.trainer.rl.config import RLConfig
    from ascent.trainer.rl.loop import train_rl

    peak = matmul_peak(device, shape.matmul_size, generation_dtype(device), repeats=25)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tokenizer = build_byte_tokenizer()
        config = qwen_config(shape, tokenizer)
        save_initialised(config, tokenizer, work / "model", seed=0)
        with torch.device("meta"):
            parameters = sum(
                p.numel() for p in AutoModelForCausalLM.from_config(config).parameters()
            )
        total = shape.grpo_warmup + shape.grpo_steps
        write_prompts(work / "prompts.jsonl", shape.grpo_prompts * total)
        result = train_rl(load_config(RLConfig, None, grpo_overrides(shape, device, work)))
        lines = (Path(result["run_dir"]) / "metrics.jsonl").read_text().splitlines()
    steps = [m for m in map(json.loads, lines) if "timing_s/step" in m][shape.grpo_warmup :]

    def median(key: str) -> float:
        return statistics.median(m.get(key, 0.0) for m in steps)

    samples = shape.grpo_prompts * shape.grpo_samples
    tokens = samples * (median("prompt_length/mean") + median("response_length/mean"))
    forwards = sum(f"timing_s/{s}" in steps[0] for s in ("old_log_prob", "ref"))
    update_s = sum(median(f"timing_s/{s}") for s in ("update_actor", "old_log_prob", "ref"))
    flops = (6 + 2 * forwards) * parameters * tokens
    return {
        "parameters": parameters,
        "samples": samples,
        "tokens_per_step": tokens,
        "timed_steps": len(steps),
        "s_per_step": median("timing_s/step"),
        "gen_s": median("timing_s/gen"),
        "update_s": update_s,
        "refresh_s": median("timing_s/sync"),
        "update_flops": flops,
        "matmul_peak_flops": peak,
        "update_mfu": flops / update_s / peak,
    }


def graphs(shape: Shape, device: str) -> dict:
    """The same prompts through two engines on one fp32 model, decode steps replayed from
    CUDA graphs and eager: greedy tokens equal, sampled (seeded) tokens equal, log-probs
    within LOGPROB_TOLERANCE. fp32, so a difference means a bug, not bf16 rounding of a
    padded batch's other GEMM tiling. More prompts than seats, so the running batch
    shrinks and runs padded in a larger bucket. On the CPU both engines are eager."""
    from ascent.rollout.engine import NativeEngine
    from ascent.rollout.engine_settings import EngineLimits
    from ascent.rollout.types import SamplingParams

    model = model_on(shape, device, torch.float32)
    prompts = random_prompts(2 * shape.graph_seqs - 1, [3, 11, 5, 17, 4, 9, 2], shape.vocab)

    def engine(cuda_graphs: bool) -> NativeEngine:
        limits = EngineLimits(
            max_num_seqs=shape.graph_seqs, max_model_len=64, cuda_graphs=cuda_graphs
        )
        return NativeEngine(model, limits)

    eager, graphed = engine(False), engine(True)
    greedy = SamplingParams(temperature=0, max_new_tokens=shape.graph_tokens)
    sampled = SamplingParams(temperature=1.0, max_new_tokens=shape.graph_tokens, n=2, seed=3)
    out = {}
    for name, params in (("greedy", greedy), ("sampled", sampled)):
        a, b = eager.generate(prompts, params), graphed.generate(prompts, params)
        out[f"{name}_tokens_equal"] = [s.token_ids for s in a] == [s.token_ids for s in b]
        out[f"{name}_max_logprob_diff"] = max(
            abs(p - q)
            for x, y in zip(a, b, strict=True)
            for p, q in zip(x.log_probs, y.log_probs, strict=False)
        )
    return {
        **out,
        "cuda_graphs": graphed.use_cuda_graphs,
        "graphs_captured": len(graphed.graphs.graphs) if graphed.graphs else 0,
        "tolerance": LOGPROB_TOLERANCE,
    }


PARTS = {"tests": tests, "decode": decode, "grpo": grpo, "graphs": graphs}


def run_part_here(name: str, dry_run: bool, device: str) -> dict:
    """A child's work: the part's figures, the device's name, and what it imported that
    the GPU machine lacks."""
    torch.manual_seed(0)
    figures = PARTS[name](TINY if dry_run else FULL, device)
    figures["device_name"] = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    lacking = [name for name in NOT_ON_GPU_MACHINE if name in sys.modules]
    return {**figures, "imported_but_not_on_gpu_machine": lacking}
