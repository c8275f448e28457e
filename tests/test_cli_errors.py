"""Errors in what the user gave (a data row, a missing file or model, an import path) end the
command with their message alone and exit status 2: no traceback, which would read as a crash
of ascent. ``--debug`` (or ASCENT_DEBUG=1) shows the traceback."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ascent.cli import main
from ascent.data.files import MalformedRow
from ascent.errors import UserError
from tests.trainer.rl_setup import overrides_for

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bad_sft(tiny_model, tmp_path):
    """``ascent sft`` arguments over a data file whose row 2 has a message without content."""
    rows = [{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}]
    rows = rows * 4
    rows[2] = {"messages": [{"role": "user"}, {"role": "assistant", "content": "b"}]}
    data = tmp_path / "no_content.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = tmp_path / "empty.yaml"
    config.write_text("{}\n")
    return [
        "sft",
        str(config),
        f"model.path={tiny_model}",
        f"data.train_files=[{data}]",
        f"trainer.run_dir={tmp_path / 'run'}",
    ]


def test_a_malformed_row_is_one_message_and_exit_2(bad_sft, capsys):
    assert main(bad_sft) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ascent sft: row 2 of ") and "no_content.jsonl" in err
    assert "has no 'content'" in err and "data.malformed=skip" in err


def test_debug_shows_the_traceback(bad_sft, monkeypatch):
    with pytest.raises(MalformedRow):
        main(["--debug", *bad_sft])
    monkeypatch.setenv("ASCENT_DEBUG", "1")
    with pytest.raises(MalformedRow):
        main(bad_sft)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.train_files=[/no/such/train.jsonl]", "data file '/no/such/train.jsonl' does not"),
        ("model.path=/no/such/model", "no model at '/no/such/model'"),
        ("reward.function=no_such_module:score", "cannot import module 'no_such_module'"),
        ("reward.function=tests.rewards.scorers:nope", "has no attribute 'nope'"),
        ("data.train_files=[config.yaml]", "use .parquet, .jsonl or a datasets directory"),
        ("algorithm.name=grpoo", "algorithm.name: Input should be"),
    ],
)
def test_train_user_errors_exit_2_with_their_message(
    tiny_model, prompts, tmp_path, capsys, monkeypatch, override, message
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text("{}\n")
    overrides = overrides_for(tiny_model, prompts, tmp_path / "run", override)
    assert main(["train", "config.yaml", *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ascent train: ") and message in err, err


def test_user_errors_are_one_family():
    from ascent.config import ConfigError
    from ascent.trainer.run_dir import CannotStart

    for kind in (ConfigError, MalformedRow, CannotStart):
        assert issubclass(kind, UserError) and issubclass(kind, ValueError)


@pytest.mark.integration
def test_the_real_command_prints_no_traceback(bad_sft):
    environment = os.environ | {"PYTHONPATH": str(ROOT)}
    environment.pop("ASCENT_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-m", "ascent", *bad_sft],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "ascent sft: row 2 of" in done.stderr
