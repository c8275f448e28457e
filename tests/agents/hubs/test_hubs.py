"""Environments from the hubs (``ascent.agents.hubs``) against the real libraries: a
verifiers 0.4 environment and OpenEnv 0.3 environments written with each library's own API
(``hub_guess.py``, ``hub_single.py``, ``hub_count.py``) play multi-turn episodes through
ascent's agent loop on a tiny model, their rewards arriving as the episodes' rewards, and bad
specs are refused naming the config field. The libraries conflict with the main venv's pins,
so each body runs in the hubs venv (``make hubs-venv``; ``run_hubs.py``); skipped without
it."""

import json
import os
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[2] / "src"
PYTHON = Path(
    os.environ.get("ASCENT_HUBS_PYTHON", Path.home() / ".cache/ascent/hubs-venv/bin/python")
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PYTHON.exists(), reason=f"no hubs venv at {PYTHON} (make hubs-venv)"),
]


def run_case(case: str) -> dict:
    """Run ``run_hubs.py case`` with this checkout's ascent; its JSON summary."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    command = [str(PYTHON), str(HERE / "run_hubs.py"), case]
    done = subprocess.run(command, cwd=HERE, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-6000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_verifiers_env_plays_multi_turn_episodes_scored_by_its_rubric():
    summary = run_case("verifiers")
    # Two rows x two samples, three turns each (the seat's max_turns), both spec forms.
    assert [turns for turns, _ in summary["verifiers:hub_guess"]] == [3, 3, 3, 3]
    assert summary["verifiers:hub_guess"] == summary["verifiers:hub_guess:make_env"]
    assert [turns for turns, _ in summary["verifiers:hub_single"]] == [1, 1]


def test_an_openenv_env_plays_multi_turn_episodes_rewarded_each_step():
    summary = run_case("openenv")
    assert [turns for turns, _ in summary["openenv:hub_count:Countdown"]] == [3, 3, 2, 2]
    assert any(errors for _, errors, _ in summary["openenv:hub_count:Numbers"])


def test_bad_hub_specs_are_refused_naming_the_field():
    assert len(run_case("bad-specs")["refused"]) == 7
