"""``ascent report RUN_DIR``: one self-contained HTML page (and its plots as PNG files) for a
run: reward, accuracy, KL, entropy, response length, clip fractions and stage timings over the
steps, validation curves, staleness (async runs), turns and tool use (agent runs), a sample of
generations with their scores, and the resolved config.

It reads the run directory's files only (``reading.py``); which metrics share a plot is
``panels.py``, the drawing ``plots.py``, the page ``page.py``.
"""

from pathlib import Path

from ascent.report.page import render
from ascent.report.panels import PANELS, drawn, not_recorded
from ascent.report.plots import draw
from ascent.report.reading import read_run

__all__ = ["write_report"]


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write ``index.html`` and one PNG per plot into ``out`` (default ``RUN_DIR/report``);
    returns the HTML file's path. A directory that is not a run directory, or a record that
    cannot be read, is an ``ascent.errors.InputError`` that names the file and what to do."""
    run = read_run(run_dir)
    folder = Path(out) if out is not None else run.path / "report"
    folder.mkdir(parents=True, exist_ok=True)
    figures = []
    panels = drawn(run)
    for panel, names in panels:
        figures.append((panel, draw(run, panel, names, folder / f"{panel.slug}.png")))
    for panel in set(PANELS) - {panel for panel, _ in panels}:
        # A plot an earlier report of this run drew and this one does not must not linger.
        (folder / f"{panel.slug}.png").unlink(missing_ok=True)
    page = folder / "index.html"
    page.write_text(render(run, figures, not_recorded(run)), encoding="utf-8")
    return page
