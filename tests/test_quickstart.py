"""The quickstart demo learns: the toy policy's score rises by a wide margin."""

import json

import pytest

from ascent.cli import main
from ascent.quickstart import run_quickstart


@pytest.mark.learning
@pytest.mark.parametrize("seed", [0, 1])
def test_quickstart_learns(tmp_path, seed):
    assert run_quickstart(seed=seed, out_dir=str(tmp_path)) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["score_first_5_steps"] < 0.15
    assert summary["score_last_5_steps"] > 0.7
    assert (tmp_path / "last_batch" / "tensors.safetensors").is_file()


def test_cli_rejects_unknown_commands(capsys):
    with pytest.raises(SystemExit):
        main(["fly"])
    assert "invalid choice" in capsys.readouterr().err
