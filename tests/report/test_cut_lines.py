"""``ascent report`` on a run killed while writing a record, and on a run still writing one: the
cut last line of a JSONL file is left out and named on the page, the records before it are
shown, and the run's files are left as they are; a line cut anywhere else is refused. The cut
is made by a real process stopped halfway through a line (``stalled_writer.py``) and killed
there with SIGKILL."""

import json
import re

import pytest

from ascent.cli import main
from tests.report.run_dirs import log_steps, write_generations
from tests.report.stalled_writer import StalledWriter

STEPS = 3
NEXT_RECORD = {  # the record being written when the run is killed, and its line number
    "metrics.jsonl": ({"step": 4, "critic/score/mean": 0.9, "timing_s/step": 1.0}, STEPS + 1),
    "generations.jsonl": (
        {"step": 4, "data_source": "digits", "prompt": "say " + "ab" * 2000, "score": 1.0},
        4 * STEPS + 1,
    ),
}


def rl_run(run_dir):
    """Three steps of an RL run: metrics through the Tracker's jsonl sink, 4 generations each."""
    log_steps(run_dir, lambda step: {"critic/score/mean": step / 10, "timing_s/step": 1.0}, STEPS)
    write_generations(run_dir, steps=STEPS, per_step=4)
    return run_dir


def report(run_dir, out):
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    return (out / "index.html").read_text()


def cut_note(name, line):
    return (
        f"The last line of {name} (line {line}) was cut (a run killed or still writing); "
        "its record is left out"
    )


@pytest.mark.parametrize("name", NEXT_RECORD)
def test_a_run_killed_while_writing_a_record(tmp_path, name):
    run_dir = rl_run(tmp_path / "run")
    record, line = NEXT_RECORD[name]
    with StalledWriter(run_dir / name, record) as writer:
        writer.kill()
    left = {path.name: path.read_bytes() for path in run_dir.iterdir()}
    assert not left[name].endswith(b"\n")  # half a line

    page = report(run_dir, tmp_path / "report")
    assert cut_note(name, line) in page
    assert page.count("was cut") == 1
    assert "steps recorded: <code>3</code>" in page
    assert re.search(r'<img alt="Reward" src="data:image/png', page)
    assert f"Sample generations (steps 1, 2, 3 of {STEPS} logged)" in page
    assert {path.name: path.read_bytes() for path in run_dir.iterdir()} == left


def test_a_run_still_writing_a_record(tmp_path):
    """The report made while the writer is halfway through step 4's line leaves it out; made
    again once the line is whole, it shows step 4."""
    run_dir = rl_run(tmp_path / "run")
    record, line = NEXT_RECORD["metrics.jsonl"]
    with StalledWriter(run_dir / "metrics.jsonl", record) as writer:
        page = report(run_dir, tmp_path / "report")
        assert cut_note("metrics.jsonl", line) in page
        assert "steps recorded: <code>3</code>" in page
        writer.finish()
        page = report(run_dir, tmp_path / "report")
        assert "was cut" not in page
        assert "steps recorded: <code>4</code>" in page


def test_a_cut_line_with_records_after_it_is_refused(tmp_path, capsys):
    """A record appended after a killed run's cut line joins it: that line is neither a
    record nor the last line, so the report names it rather than guess."""
    run_dir = rl_run(tmp_path / "run")
    record, line = NEXT_RECORD["metrics.jsonl"]
    with StalledWriter(run_dir / "metrics.jsonl", record) as writer:
        writer.kill()
    log_steps(run_dir, lambda step: {"critic/score/mean": 0.5}, steps=1)

    assert main(["report", str(run_dir)]) == 2
    error = capsys.readouterr().err
    assert f"line {line} of {run_dir / 'metrics.jsonl'} is not JSON" in error
    assert "fix or delete this one" in error


def test_a_last_line_with_its_newline_is_not_a_cut(tmp_path, capsys):
    """The writers end a record with its newline in the same write, so a whole last line
    that is not JSON was not cut by a kill: it is refused."""
    rl_run(tmp_path)
    with open(tmp_path / "metrics.jsonl", "a") as out:
        out.write(json.dumps({"step": 4})[:-1] + "\n")
    assert main(["report", str(tmp_path)]) == 2
    assert f"line 4 of {tmp_path / 'metrics.jsonl'} is not JSON" in capsys.readouterr().err
