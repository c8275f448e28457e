"""The documentation site (docs/, mkdocs.yml): every code block of the pages a reader copies
from runs as written, or says why it cannot run here; the configuration reference is
generated from the config classes.

A page's blocks run in order in one fresh directory (a copy of ``examples/`` beside them), so
a later block can use what an earlier one wrote. A block whose first line is a comment naming
a file (``# my_reward.py``, ``# my_grpo.yaml: ...``) is also written to that file first.

- ```python: run in a fresh interpreter (registrations made by an example stay in it);
- ```yaml: a config, loaded with ``ascent.config.load_config`` as an RL, SFT, reward-model
  or service config (a fragment is loaded over placeholders for the required keys it leaves
  out);
- ```bash: run with ``bash -e``, ``.venv/bin`` first on the PATH;
- ```text: output or a listing, not code.

A block that cannot run here (a GPU, a cluster, minutes of training, the network) is preceded
by ``<!-- not run: REASON -->``. The pages in ``SLOW_PAGES`` run in ``make test-slow``."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(
    [ROOT / "docs/getting-started.md", *DOCS.glob("concepts/*.md"), *DOCS.glob("guides/*.md")]
)
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", flags=re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"<!-- not run: (.*?) -->\s*\Z", flags=re.DOTALL)
FILE_HEADER = re.compile(r"\A#\s*([\w./-]+\.(?:py|ya?ml))\b")
RUNNABLE = {"python", "yaml", "bash"}
PLACEHOLDERS = {"model": {"path": "model"}, "data": {"train_files": ["train.jsonl"]}}
TIMEOUT_S = 180
# The pages whose blocks take 8 s or more (CLI training runs, a local Ray): make test has a
# test of each feature they show, so they run with the slow tests.
SLOW_PAGES = {
    "docs/concepts/controller.md",
    "docs/guides/agents-from-outside.md",
    "docs/guides/distillation.md",
    "docs/guides/lora.md",
    "docs/guides/ppo-critic.md",
    "docs/guides/your-data-and-reward.md",
}


def blocks(page: Path) -> list[tuple[int, str, str, str | None]]:
    """(line, language, code, reason it is not run or None) of every fenced block."""
    text = page.read_text()
    found, previous_end = [], 0
    for match in FENCE.finditer(text):
        before = text[previous_end : match.start()]
        marker = NOT_RUN.search(before)
        line = text.count("\n", 0, match.start()) + 1
        found.append((line, match.group(1), match.group(2), marker.group(1) if marker else None))
        previous_end = match.end()
    return found


def _name(page: Path) -> str:
    return str(page.relative_to(DOCS))


def test_every_block_has_a_known_language_and_runs_or_says_why():
    problems = []
    for page in PAGES:
        for line, language, _, reason in blocks(page):
            where = f"{_name(page)}:{line}"
            if language not in RUNNABLE | {"text"}:
                problems.append(
                    f"{where}: fence language {language!r}; use python, yaml, bash or text"
                )
            elif reason is not None and (language == "text" or not reason.strip()):
                problems.append(f"{where}: a not-run marker needs a reason and runnable code")
    assert not problems, "\n".join(problems)
    runnable = [b for page in PAGES for b in blocks(page) if b[1] in RUNNABLE]
    assert sum(reason is None for *_, reason in runnable) >= 20
    assert not SLOW_PAGES - {f"docs/{_name(page)}" for page in PAGES}, "a SLOW_PAGES page is gone"


def _merge(base: dict, update: dict) -> dict:
    merged = dict(base)
    for key, value in update.items():
        both = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merge(merged[key], value) if both else value
    return merged


def validate_config(code: str, folder: Path) -> None:
    """The block loads as an RL, SFT, reward-model or service config, with ascent's own
    loader."""
    from ascent.config import ConfigError, load_config
    from ascent.service.config import ServiceConfig
    from ascent.trainer.rl.config import RLConfig
    from ascent.trainer.rm import RMConfig
    from ascent.trainer.sft import SFTConfig

    data = yaml.safe_load(code)
    assert isinstance(data, dict), "a yaml block is a config: a mapping at the top level"
    file = folder / "_block_config.yaml"
    errors = []
    service = {"model": PLACEHOLDERS["model"]}  # a service reads no data
    for model, placeholders in (
        (RLConfig, PLACEHOLDERS),
        (SFTConfig, PLACEHOLDERS),
        (RMConfig, PLACEHOLDERS),
        (ServiceConfig, service),
    ):
        file.write_text(yaml.safe_dump(_merge(placeholders, data)))
        try:
            load_config(model, file)
            return
        except ConfigError as error:
            errors.append(f"{model.__name__}: {error}")
    raise AssertionError("\n".join(errors))


def run_block(language: str, code: str, folder: Path) -> None:
    header = FILE_HEADER.match(code)
    if header:
        target = folder / header.group(1)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code)
    if language == "yaml":
        validate_config(code, folder)
        return
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": f"{folder}{os.pathsep}{ROOT}",
    }
    command = [sys.executable, "-c", code] if language == "python" else ["bash", "-ec", code]
    result = subprocess.run(
        command, cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


def _page(page: Path) -> object:
    slow = [pytest.mark.slow] if f"docs/{_name(page)}" in SLOW_PAGES else []
    return pytest.param(page, id=_name(page), marks=slow)


@pytest.mark.parametrize("page", [_page(page) for page in PAGES])
def test_page_code_blocks_run(page, tmp_path):
    runnable = [b for b in blocks(page) if b[1] in RUNNABLE and b[3] is None]
    if not runnable:
        pytest.skip("no runnable block on this page")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    for line, language, code, _ in runnable:
        try:
            run_block(language, code, tmp_path)
        except AssertionError as error:
            raise AssertionError(f"{_name(page)}:{line} ({language}) failed:\n{error}") from None


def test_config_reference_is_generated_from_the_classes():
    from ascent.configdoc import DOCUMENTED, render

    page = (ROOT / "docs/reference/config.md").read_text()
    assert render(page) == page, "run: python -m ascent.configdoc --update docs/reference/config.md"
    for model in DOCUMENTED:
        assert f"<!-- config:{model.__name__} -->" in page


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    missing = [page for page in pages if f": {page}\n" not in nav]
    assert not missing, f"add to mkdocs.yml's nav: {missing}"


def landing(readme: str) -> str:
    """The site's home page: the README, its links made relative to docs/."""
    return readme.replace("](docs/", "](")


def test_the_home_page_is_the_readme():
    home = (ROOT / "docs/index.md").read_text()
    expected = landing((ROOT / "README.md").read_text())
    assert home == expected, "run: python -m tests.test_docs (rewrites docs/index.md)"


if __name__ == "__main__":
    (ROOT / "docs/index.md").write_text(landing((ROOT / "README.md").read_text()))
