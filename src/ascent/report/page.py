"""The report page: one HTML file that needs nothing beside it.

The plots are embedded as base64 ``data:`` URIs and the style sheet is inline, so the file can
be mailed, attached to an issue or opened from a copied run directory; the page has no
script. Every text from the run (prompts, responses, config values) is HTML-escaped.
"""

import base64
import html
import math
from pathlib import Path
from typing import Any

from ascent.report.panels import Panel
from ascent.report.reading import Run, finite

GENERATION_STEPS = 3  # the first, middle and last steps that logged generations
GENERATIONS_PER_STEP = 8
CELL_CHARACTERS = 2000  # longer prompts and responses are cut (generations.jsonl has all)
HEADLINE = (  # the "at a glance" rows, where recorded; val/<source>/acc rows are added
    "critic/score/mean",
    "critic/acc/mean",
    "actor/entropy",
    "response_length/mean",
    "async/staleness_mean",
    "agent/tool_calls/mean",
    "sft/loss",
    "rm/accuracy",
    "val/loss",
    "val/accuracy",
    "timing_s/step",
)
GENERATION_COLUMNS = ("step", "data_source", "prompt", "response", "score", "ground_truth")

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1360px;
       padding: 0 16px; color: #1d1d1f; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; }
.meta { color: #555; } code, pre { font: 12px/1.4 ui-monospace, monospace; }
table { border-collapse: collapse; margin: 8px 0; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr));
         gap: 16px; }
figure { margin: 0; } figure img { width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 12px; color: #555; }
.notes { background: #fff8e6; border-left: 4px solid #f0b400; padding: 6px 12px; }
.generations td { max-width: 460px; white-space: pre-wrap; word-break: break-word; }
.good { background: #e7f6ea; } .bad { background: #fdecec; }
pre.config { background: #f7f7f9; padding: 10px; overflow-x: auto; }
"""


def render(run: Run, figures: list[tuple[Panel, Path]], not_recorded: list[str]) -> str:
    """The page for ``run``: its plots (PNG files, embedded), the metrics not recorded, a
    sample of generations and the resolved config."""
    title = f"ascent report: {'/'.join(run.path.resolve().parts[-2:])}"
    parts = [
        f"<h1>{_e(title)}</h1>",
        _meta(run),
        _glance(run),
        _notes(run, not_recorded),
        "<h2>Curves</h2>",
        '<div class="plots">',
        *(_figure(panel, path) for panel, path in figures),
        "</div>",
        _generations(run),
        _config(run),
    ]
    body = "\n".join(part for part in parts if part)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{_e(title)}</title>\n<style>{STYLE}</style>\n</head>\n"
        f"<body>\n{body}\n</body>\n</html>\n"
    )


def _meta(run: Run) -> str:
    facts = {
        "run directory": str(run.path.resolve()),
        "kind": "RL (ascent train)" if run.kind == "rl" else "supervised (ascent sft / rm)",
        "algorithm": run.setting("algorithm.name"),
        "mode": run.setting("trainer.mode"),
        "model": run.setting("model.path"),
        "steps recorded": run.last_step,
    }
    shown = [f"{name}: <code>{_e(value)}</code>" for name, value in facts.items() if value]
    return f'<p class="meta">{" &middot; ".join(shown)}</p>'


def _glance(run: Run) -> str:
    """First and last value of the headline metrics."""
    names = [key for key in HEADLINE if key in run.series]
    names += sorted(key for key in run.series if key.startswith("val/") and key.endswith("/acc"))
    rows = []
    for name in names:
        points = finite(run.series[name])
        if points:
            (first_step, first), (last_step, last) = points[0], points[-1]
            rows.append(
                f"<tr><td><code>{_e(name)}</code></td><td class=num>{_number(first)}</td>"
                f"<td class=num>{first_step}</td><td class=num>{_number(last)}</td>"
                f"<td class=num>{last_step}</td></tr>"
            )
    if not rows:
        return ""
    head = "<tr><th>metric</th><th>first</th><th>at step</th><th>last</th><th>at step</th></tr>"
    return f"<h2>At a glance</h2>\n<table>\n{head}\n{''.join(rows)}\n</table>"


def _notes(run: Run, not_recorded: list[str]) -> str:
    """What the run did not record, metrics that were not finite at some steps, and records
    left out because their line was cut."""
    lines = [
        f"The last line of {name} (line {number}) was cut (a run killed or still writing); "
        "its record is left out"
        for name, number in run.cut.items()
    ]
    lines += [f"Not recorded: {line}" for line in not_recorded]
    for name, points in run.series.items():
        bad = [step for step, value in points if not math.isfinite(value)]
        if bad:
            shown = ", ".join(map(str, bad[:10])) + (" ..." if len(bad) > 10 else "")
            lines.append(f"{name} was NaN or infinite at step(s) {shown}")
    if not run.generations and run.kind == "rl":
        lines.append("No generations.jsonl: RL runs write it when trainer.log_generations > 0")
    if run.config_text is None:
        lines.append("No config.yaml: the resolved config is not shown")
    if not lines:
        return ""
    items = "".join(f"<li>{_e(line)}</li>" for line in lines)
    return f'<h2>Notes</h2>\n<div class="notes"><ul>{items}</ul></div>'


def _figure(panel: Panel, path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<figure id="{panel.slug}"><img alt="{_e(panel.title)}" '
        f'src="data:image/png;base64,{data}">'
        f"<figcaption>{_e(panel.caption)}</figcaption></figure>"
    )


def _generations(run: Run) -> str:
    """A table of generations from the first, middle and last logged steps, with scores."""
    if not run.generations:
        return ""
    steps = sorted({record.get("step", 0) for record in run.generations})
    picked = sorted({steps[0], steps[len(steps) // 2], steps[-1]})[:GENERATION_STEPS]
    rows = [
        record
        for step in picked
        for record in [r for r in run.generations if r.get("step", 0) == step][
            :GENERATIONS_PER_STEP
        ]
    ]
    extra = sorted({key for record in rows for key in record} - set(GENERATION_COLUMNS))
    columns = [*GENERATION_COLUMNS, *extra]
    head = "".join(f"<th>{_e(column)}</th>" for column in columns)
    body = "".join(
        "<tr>" + "".join(_cell(column, record.get(column)) for column in columns) + "</tr>"
        for record in rows
    )
    title = f"Sample generations (steps {', '.join(map(str, picked))} of {len(steps)} logged)"
    return f'<h2>{_e(title)}</h2>\n<table class="generations">\n<tr>{head}</tr>\n{body}\n</table>'


def _cell(column: str, value: Any) -> str:
    if column == "score" and isinstance(value, int | float):
        shade = "good" if value > 0 else "bad"
        return f'<td class="num {shade}">{_number(value)}</td>'
    text = "" if value is None else str(value)
    if len(text) > CELL_CHARACTERS:
        text = text[:CELL_CHARACTERS] + f" ... ({len(text) - CELL_CHARACTERS} more characters)"
    return f"<td>{_e(text)}</td>"


def _config(run: Run) -> str:
    if run.config_text is None:
        return ""
    return (
        "<h2>Resolved config</h2>\n<details><summary>config.yaml</summary>\n"
        f'<pre class="config">{_e(run.config_text)}</pre>\n</details>'
    )


def _number(value: float) -> str:
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
        return f"{value:.3e}"
    return f"{value:.4g}"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)
