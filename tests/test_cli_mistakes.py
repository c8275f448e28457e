"""User mistakes that a new user and a fault drill found (issue 49), each through ``ascent
train``: refused before any worker starts, exit status 2, one line that names what is wrong
and what to do, no traceback. (The earlier ones are in ``tests/test_cli_errors.py``.)"""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ascent.cli import main
from tests.trainer.rl_setup import overrides_for
from tests.vision.test_rl_with_images import colour_png


def train(tmp_path, model, prompts, *overrides) -> int:
    (tmp_path / "config.yaml").write_text("{}\n")
    run = tmp_path / "run"
    return main(
        ["train", str(tmp_path / "config.yaml"), *overrides_for(model, prompts, run, *overrides)]
    )


def one_message(capsys, *needles: str) -> str:
    """The command's stderr, checked to be one ``ascent train:`` line holding ``needles``."""
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("ascent train: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def rows_of(source: str, count: int = 16) -> list[dict]:
    return [
        {"data_source": source, "prompt": f"say {i}", "reward_model": {"ground_truth": str(i)}}
        for i in range(count)
    ]


def write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_a_data_source_without_a_scorer_is_refused_at_load(tiny_model, prompts, tmp_path, capsys):
    rows = rows_of("arithmetic", 12) + rows_of("my_company/internal_math", 4)
    write_jsonl(tmp_path / "train.jsonl", rows)
    code = train(
        tmp_path,
        tiny_model,
        prompts,
        f"data.train_files=[{tmp_path / 'train.jsonl'}]",
        "reward.function=null",
    )
    assert code == 2
    one_message(
        capsys,
        "no built-in scorer for data_source 'my_company/internal_math' (4 rows, first "
        "train.jsonl#12)",
        "gsm8k",  # the built-in list
        "reward.function=",  # how to give one
    )
    assert not (tmp_path / "run" / "metrics.jsonl").exists(), "no step ran"


def test_a_built_in_source_needs_no_function(tiny_model, prompts, tmp_path, capsys):
    """The check passes sources with a scorer (by name, or aime* by prefix): the run gets past
    loading (here to a later mistake, so that nothing trains)."""
    write_jsonl(tmp_path / "train.jsonl", rows_of("arithmetic", 8) + rows_of("aime2025", 8))
    code = train(
        tmp_path,
        tiny_model,
        prompts,
        f"data.train_files=[{tmp_path / 'train.jsonl'}]",
        "reward.function=null",
        "data.prompts_per_step=64",
    )
    assert code == 2
    one_message(capsys, "data.prompts_per_step=64 is more than the 16 usable prompts")


def test_a_cut_parquet_file_is_named(tiny_model, prompts, tmp_path, capsys):
    whole = tmp_path / "whole.parquet"
    pq.write_table(pa.Table.from_pylist(rows_of("arithmetic", 64)), whole)
    cut = tmp_path / "train.parquet"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert train(tmp_path, tiny_model, prompts, f"data.train_files=[{cut}]") == 2
    one_message(capsys, f"cannot read parquet file '{cut}'", "write or download it again")


def test_a_tool_without_a_docstring_names_the_entry(tiny_model, prompts, tmp_path, capsys):
    (tmp_path / "my_tools.py").write_text("def add(a: int, b: int) -> int:\n    return a + b\n")
    spec = f"{tmp_path / 'my_tools.py'}:add"
    code = train(
        tmp_path,
        tiny_model,
        prompts,
        "data.chat_template=true",
        f"rollout.agent.tools=[{spec}]",
    )
    assert code == 2
    one_message(capsys, f"rollout.agent.tools entry '{spec}'", "tool add has no docstring")


@pytest.mark.parametrize("url", ["http://example.com/a.png", "s3://bucket/a.png"])
def test_an_image_url_says_images_are_not_fetched(tiny_vlm, tmp_path, capsys, url):
    image_rows = [
        {
            "data_source": "colour",
            "prompt": [{"role": "user", "content": "<image> Which colour?"}],
            "reward_model": {"ground_truth": "red"},
            "images": [{"bytes": colour_png("red", 56), "path": None}],
        }
    ] * 8
    image_rows[3] = image_rows[3] | {"images": [{"bytes": None, "path": url}]}
    data = tmp_path / "vlm.parquet"
    pq.write_table(pa.Table.from_pylist(image_rows), data)
    code = train(
        tmp_path,
        tiny_vlm,
        tmp_path,
        f"data.train_files=[{data}]",
        "data.val_files=[]",
        "data.chat_template=true",
        "data.prompts_per_step=4",
    )
    assert code == 2
    err = one_message(capsys, "row 3 of", "images[0]", "is a URL, and images are not fetched")
    assert "data:image/" in err and "does not exist" not in err


def test_a_missing_environment_is_refused_on_the_driver(tiny_model, prompts, tmp_path, capsys):
    """Not in each rollout worker after the models load (a worker's traceback per rank)."""
    code = train(
        tmp_path,
        tiny_model,
        prompts,
        "data.chat_template=true",
        "rollout.agent.environment=no_such_module:Env",
    )
    assert code == 2
    one_message(capsys, "rollout.agent.environment='no_such_module:Env': cannot import module")
    assert not (tmp_path / "run" / "processes.json").exists(), "no worker started"


def test_a_run_dir_that_is_a_file_is_refused(tiny_model, prompts, tmp_path, capsys):
    (tmp_path / "taken").write_text("a file\n")
    code = train(tmp_path, tiny_model, prompts, f"trainer.run_dir={tmp_path / 'taken'}")
    assert code == 2
    one_message(capsys, f"trainer.run_dir={tmp_path / 'taken'} is a file")


def test_a_resume_path_that_is_not_there_is_a_user_error(tiny_model, prompts, tmp_path, capsys):
    """Exit 2 (what the user gave), not 1 (a fault of the run)."""
    code = train(tmp_path, tiny_model, prompts, f"trainer.resume={tmp_path / 'no_checkpoint'}")
    assert code == 2
    one_message(capsys, "no_checkpoint: no such checkpoint directory")


def test_a_tool_file_that_does_not_import_is_named(tiny_model, prompts, tmp_path, capsys):
    (tmp_path / "broken.py").write_text("def add(a: int, b: int) -> int\n    return a + b\n")
    spec = f"{tmp_path / 'broken.py'}:add"
    code = train(
        tmp_path, tiny_model, prompts, "data.chat_template=true", f"rollout.agent.tools=[{spec}]"
    )
    assert code == 2
    one_message(capsys, f"entry '{spec}'", "importing it raised SyntaxError (line 1)")


def test_a_user_error_inside_a_worker_is_one_message(tiny_model, prompts, tmp_path, capsys):
    """The reward model's path is read where the reward model loads, in its worker: the
    worker's user error reaches the command as its message, with the role, not as a worker
    traceback and exit 1."""
    code = train(tmp_path, tiny_model, prompts, f"reward_model.model.path={tmp_path / 'no_rm'}")
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "worker traceback" not in err
    last = err.strip().splitlines()[-1]  # above it: the other roles' loading progress
    assert last.startswith("ascent train: reward_model (rank 0): no model at"), err
