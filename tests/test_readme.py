"""The README (the landing page) stays short, its code runs as written, its two commands are the
Makefile's, and every document it, the docs or the source cite exists. The docs pages' own
checks are in tests/test_docs.py."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)


def test_readme_has_python_examples():
    assert len(PYTHON_BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_readme_python_block_runs(index, tmp_path):
    # A fresh interpreter per block, so registrations made by an example stay in it.
    result = subprocess.run(
        [sys.executable, "-c", PYTHON_BLOCKS[index]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def test_readme_commands_are_make_targets():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("quickstart", "test", "test-slow"):
        assert f"make {target}" in README
        assert re.search(rf"^{target}:", makefile, flags=re.MULTILINE)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test\n" in ci and "make test-slow" in ci


def test_readme_is_a_landing_page():
    assert len(README.splitlines()) < 250, "move details to a page under docs/"


def test_documents_cited_in_the_source_are_in_the_repository():
    """A ``*.md`` named in the source, the tests, the README or a docs page (in code, as a
    path from the repository root; the site's own links are checked by ``mkdocs --strict``)
    exists at that path."""
    sources = [p for folder in ("src", "tests", "bench") for p in (ROOT / folder).rglob("*.py")]
    pages = [re.sub(r"\]\([^)]*\)", "]", p.read_text()) for p in (ROOT / "docs").rglob("*.md")]
    texts = [README, *pages, *(path.read_text() for path in sources)]
    cited = {name for text in texts for name in re.findall(r"[\w./-]+\.md\b", text)}
    assert "docs/ALGORITHMS.md" in cited
    missing = sorted(name for name in cited if not (ROOT / name).is_file())
    assert not missing, f"cited but not in the repository: {missing}"
