"""The report's plots: one PNG per panel, a line per metric over the steps.

Drawn with matplotlib's object API (``Figure`` and its Agg canvas) rather than ``pyplot``:
no global figure state and no backend to select, so making a report inside a process that
plots for its own purposes (a notebook, the quickstart) changes nothing there.
"""

from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ascent.report.panels import Panel
from ascent.report.reading import Run, finite

SIZE = (6.4, 3.4)  # inches; at DPI 640 x 340 pixels: two plots side by side on a laptop
DPI = 100
MARKERS_UP_TO = 40  # points per line: fewer get markers (validation every N steps shows dots)
# Equal metrics (score and reward without shaping; acc and score) overlap exactly: a line
# style per metric keeps the one drawn first visible under the next.
LINE_STYLES = ("-", "--", ":", "-.")


def draw(run: Run, panel: Panel, names: list[str], path: Path) -> Path:
    """Plot ``names`` of ``run`` as ``panel`` into the PNG ``path``."""
    figure = Figure(figsize=SIZE, dpi=DPI, layout="constrained")
    axes = figure.subplots()
    drew = False
    for index, name in enumerate(names):
        points = finite(run.series[name])
        if not points:  # logged as NaN or infinity throughout: nothing to draw
            continue
        steps, values = zip(*points, strict=True)
        (line,) = axes.plot(steps, values, label=_label(name), **_style(name, index, len(points)))
        if index == 0 and panel.band is not None:
            _shade(axes, run, panel.band, line.get_color())
        drew = True
    if not drew:
        axes.text(0.5, 0.5, "no finite values", ha="center", va="center", transform=axes.transAxes)
    axes.set_title(panel.title, fontsize=11)
    axes.set_xlabel("step")
    axes.set_ylabel(panel.ylabel)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(alpha=0.3)
    if drew:
        axes.legend(fontsize=8, ncols=2 if len(names) > 4 else 1)
    figure.savefig(path, dpi=DPI)
    return path


def _shade(axes: Axes, run: Run, band: tuple[str, str], colour: str) -> None:
    """Shade from the ``band`` low to its high metric, at the steps that have both."""
    low, high = (dict(finite(run.series.get(name, []))) for name in band)
    steps = sorted(low.keys() & high.keys())
    if steps:
        lows, highs = [low[s] for s in steps], [high[s] for s in steps]
        axes.fill_between(steps, lows, highs, color=colour, alpha=0.15, linewidth=0)


def _label(name: str) -> str:
    # The stage names alone: the panel's title and caption say they are seconds per stage.
    return name.removeprefix("timing_s/")


def _style(name: str, index: int, points: int) -> dict:
    style: dict = {"linewidth": 1.5, "linestyle": LINE_STYLES[index % len(LINE_STYLES)]}
    if points <= MARKERS_UP_TO:
        style |= {"marker": "o", "markersize": 3.5}
    if name == "timing_s/step":  # the whole step, drawn apart from its stages
        style |= {"color": "black", "linestyle": "--"}
    return style
