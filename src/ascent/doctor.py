"""``ascent doctor``: check, in seconds, what would otherwise fail minutes into a run.

A run starts Ray workers, loads the model on every rank and writes checkpoints; a bad config
key, a missing GPU, a full disk or a checkpoint whose weights do not match its config each
surface only after that start-up. The doctor checks them up front, one line each:

- versions of Python, torch, transformers, ray and ascent;
- devices: CPU cores, CUDA GPUs and their memory, torch.distributed backends;
- the config (RL, else SFT) validates and, for RL, its step plan resolves;
- the Ray cluster has the CPUs/GPUs the config's ``resources`` ask for;
- the run directory has free space and is writable;
- the model's config, tokenizer and safetensors headers agree (weights are not loaded).
"""

import importlib.metadata
import os
import platform
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ascent.config import ConfigError, load_config
from ascent.trainer.capacity import demand

Check = tuple[str, str, str]  # (status: ok / warn / FAIL / skip, name, detail)
GIB = 2**30
LOW_DISK_GIB = 10
SHOWN_NAMES = 5
VERSIONED = ("torch", "transformers", "ray", "ascent")


def _version(package: str) -> str:
    try:  # installed metadata: no import, so a missing or broken ray costs nothing here
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def check_versions() -> list[Check]:
    """One line of versions: the first thing to paste into a bug report."""
    packages = ", ".join(f"{name} {_version(name)}" for name in VERSIONED)
    return [("ok", "versions", f"Python {platform.python_version()}, {packages}")]


def check_devices(resources: Any | None) -> list[Check]:
    """CPU cores, GPUs and collective backends; the config's ``resources.device`` needs one."""
    # The affinity mask (containers, taskset) can be narrower than the machine.
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    checks: list[Check] = [("ok", "cpu", f"{os.cpu_count()} cores ({usable} usable here)")]
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    checks.append(("ok", "cuda", f"{gpus} GPU(s)" if gpus else "not available (CPU only)"))
    for index in range(gpus):
        props = torch.cuda.get_device_properties(index)
        checks.append(("ok", f"gpu {index}", f"{props.name}, {props.total_memory / GIB:.1f} GiB"))
    dist = torch.distributed
    backends = []
    if dist.is_available():
        backends += ["gloo"] if dist.is_gloo_available() else []
        backends += ["nccl"] if dist.is_nccl_available() else []
    have = ", ".join(backends) or "none"
    needed = "nccl" if resources is not None and resources.device == "cuda" else "gloo"
    if needed in backends:
        return [*checks, ("ok", "torch.distributed", have)]
    fix = "install a torch build with it or change resources.device"
    return [*checks, ("FAIL", "torch.distributed", f"no {needed} backend (have: {have}); {fix}")]


def check_config(path: str, overrides: list[str]) -> tuple[list[Check], Any | None]:
    """The config validates as RL (with a resolvable plan) or, failing that, as SFT."""
    from ascent.trainer.rl.config import RLConfig
    from ascent.trainer.rl.plan import make_plan
    from ascent.trainer.sft import SFTConfig

    try:
        config = load_config(RLConfig, path, overrides)
    except ConfigError as rl_error:
        try:
            config = load_config(SFTConfig, path, overrides)
        except ConfigError:
            # The RL message is shown: it names the bad key for the common case.
            if path is not None and not Path(path).is_file():
                return [("FAIL", "config", str(rl_error))], None
            return [("FAIL", "config", f"{rl_error}\n  fix the key(s) above in {path}")], None
        return [("ok", "config", f"{path} is a valid SFT config")], config
    try:
        make_plan(config)
    except ValueError as error:
        return [("FAIL", "config", f"{path}: the step plan does not resolve: {error}")], config
    return [("ok", "config", f"{path} is a valid RL config; its step plan resolves")], config


def check_ray(config: Any | None, start_ray: bool) -> list[Check]:
    """What Ray sees, and whether it covers the config's worker pools."""
    try:
        import ray
    except ImportError:
        return [("warn", "ray", "not installed; only resources.backend=in-process will run")]
    address = config.resources.ray_address if config is not None else None
    already_running = ray.is_initialized()
    if not already_running:
        if address is None and not start_ray:
            return [("skip", "ray", "no resources.ray_address and no local Ray started")]
        try:
            # A doctor run must not leave a dashboard or worker logs behind.
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except Exception as error:
            where = f"the Ray cluster at {address}" if address else "a local Ray"
            return [("FAIL", "ray", f"cannot start {where}: {error}; check `ray status`")]
    try:
        total = ray.cluster_resources()
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
    finally:
        if not already_running:  # shut down only the Ray this check started or joined
            ray.shutdown()
    cpus, gpus = total.get("CPU", 0.0), int(total.get("GPU", 0))
    memory = total.get("memory", 0) / GIB
    checks = [("ok", "ray", f"{cpus:g} CPU, {gpus} GPU, {memory:.1f} GiB memory, {nodes} node(s)")]
    if config is not None:
        need_cpus, need_gpus, fields = demand(config)
        if need_cpus > cpus or need_gpus > gpus:
            short = (
                f"need {need_cpus:g} CPU and {need_gpus} GPU, the cluster has {cpus:g} and {gpus}"
            )
            checks.append(("FAIL", "ray resources", f"{fields} {short}; lower them or add nodes"))
    return checks


def check_disk(run_dir: str) -> list[Check]:
    """Free space and write access where checkpoints go (the run dir may not exist yet)."""
    existing = Path(run_dir).absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return [("FAIL", "run dir", f"{existing} is a file; choose another trainer.run_dir")]
    free = shutil.disk_usage(existing).free / GIB
    low = f" (under {LOW_DISK_GIB} GiB: checkpoints may not fit)" if free < LOW_DISK_GIB else ""
    checks = [("warn" if low else "ok", "disk", f"{free:.1f} GiB free in {existing}{low}")]
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".ascent-doctor-"):
            pass
    except OSError as error:
        fix = "fix its permissions or choose another trainer.run_dir"
        return [*checks, ("FAIL", "run dir", f"{existing} is not writable ({error}); {fix}")]
    return [*checks, ("ok", "run dir", f"{run_dir} is writable")]


def _file_shapes(files: list[Path]) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes from the safetensors headers only: no weights are read."""
    from safetensors import safe_open

    shapes = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                shapes[key] = tuple(handle.get_slice(key).get_shape())
    return shapes


def _mismatches(expected: dict, found: dict, may_be_absent: set[str]) -> list[str]:
    """Missing, unexpected and mis-shaped names, up to ``SHOWN_NAMES`` of each."""
    groups = {
        "missing": sorted(expected.keys() - found.keys() - may_be_absent),
        "unexpected": sorted(found.keys() - expected.keys()),
        "wrong shape": sorted(
            f"{key} {found[key]} != {expected[key]}"
            for key in expected.keys() & found.keys()
            if found[key] != expected[key]
        ),
    }
    return [
        f"{label} {', '.join(names[:SHOWN_NAMES])}"
        + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else "")
        for label, names in groups.items()
        if names
    ]


def check_model(model_config: Any) -> list[Check]:
    """Tokenizer and config load; the weight files' names and shapes match the architecture."""
    import transformers
    from transformers.conversion_mapping import get_model_conversion_mapping

    from ascent.models.loading import load_tokenizer

    path, remote = model_config.path, model_config.trust_remote_code
    try:
        load_tokenizer(path, trust_remote_code=remote)
        hf_config = transformers.AutoConfig.from_pretrained(
            path, local_files_only=True, trust_remote_code=remote
        )
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            model = transformers.AutoModelForCausalLM.from_config(
                hf_config, trust_remote_code=remote
            )
    except Exception as error:
        return [("FAIL", "model", f"cannot load {path}: {error}")]
    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        return [("FAIL", "model", f"no *.safetensors weights in {path}")]
    expected = {key: tuple(tensor.shape) for key, tensor in model.state_dict().items()}
    found = _file_shapes(files)
    count = sum(p.numel() for p in model.parameters())  # parameters() counts tied ones once
    size = sum(file.stat().st_size for file in files)
    size_text = f"{size / GIB:.2f} GiB" if size >= GIB else f"{size / 2**20:.1f} MiB"
    summary = (
        f"{hf_config.model_type}, {count / 1e6:.2f}M parameters ({count:,}), "
        f"{size_text} in {len(files)} safetensors file(s)"
    )
    if get_model_conversion_mapping(model, add_legacy=False):
        # transformers renames or fuses this format's tensors at load (e.g. MoE experts), so
        # names cannot match one to one; the element total still has to.
        stored = sum(torch.Size(shape).numel() for shape in found.values())
        if stored in (count, sum(torch.Size(shape).numel() for shape in expected.values())):
            return [("ok", "model", f"{summary}; tensors converted at load, totals match")]
        return [("warn", "model", f"{summary}; but the files hold {stored:,} elements")]
    tied = hf_config.get_text_config().tie_word_embeddings
    tied_names = set(getattr(model, "all_tied_weights_keys", None) or {"lm_head.weight"})
    problems = _mismatches(expected, found, tied_names if tied else set())
    if problems:
        detail = f"the weights in {path} do not match its config: {'; '.join(problems)}"
        return [("FAIL", "model", f"{detail}; re-export the checkpoint")]
    return [("ok", "model", summary)]


def _guarded(name: str, check: Callable[[], list[Check]]) -> list[Check]:
    """A crashing check is a finding, not a reason to skip the checks after it."""
    try:
        return check()
    except Exception as error:
        return [("FAIL", name, f"check crashed: {type(error).__name__}: {error}")]


def run_doctor(
    config_path: str | None,
    overrides: list[str],
    *,
    start_ray: bool = True,
    out: Callable[[str], object] = print,
) -> int:
    """Print one line per check and a summary; 0 if none failed, 1 otherwise."""
    results: list[Check] = []

    def report(name: str, check: Callable[[], list[Check]]) -> None:
        for status, check_name, detail in _guarded(name, check):
            out(f"{status:<4} {check_name}: {detail}")
            results.append((status, check_name, detail))

    # The config is read first (the device and Ray checks need it) but reported third.
    loaded: list[Any] = []

    def load() -> list[Check]:
        checks, config = check_config(config_path, overrides)
        loaded.append(config)
        return checks

    config_checks = _guarded("config", load) if config_path is not None else []
    config = loaded[0] if loaded else None
    report("versions", check_versions)
    report("devices", lambda: check_devices(config.resources if config else None))
    report("config", lambda: config_checks)
    report("ray", lambda: check_ray(config, start_ray))
    report("disk", lambda: check_disk(config.trainer.run_dir if config else os.getcwd()))
    if config is not None:
        report("model", lambda: check_model(config.model))
    failed = sum(status == "FAIL" for status, _, _ in results)
    warned = sum(status == "warn" for status, _, _ in results)
    out(f"doctor: {failed} failed, {warned} warning(s)" if failed or warned else "doctor: all ok")
    return 1 if failed else 0
