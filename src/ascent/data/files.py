"""Rows (dicts) from parquet, JSONL/JSON-lines, or a ``datasets`` directory.

A path may be a file (``.parquet``, ``.jsonl``, ``.json`` with one object per line), a
directory written by ``datasets.Dataset.save_to_disk``, or a directory of parquet files.
Errors name the file and, for JSONL, the line.
"""

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascent.errors import InputError, InputNotFound


class MalformedRow(InputError):
    """A row that cannot be used, with where it is and what is wrong."""


@dataclass(frozen=True)
class Row:
    data: dict[str, Any]
    source: str  # file path
    index: int  # row number within the file (0-based)

    @property
    def where(self) -> str:
        return f"row {self.index} of {self.source}"

    def malformed(self, error: MalformedRow) -> MalformedRow:
        """``error`` placed at this row, with what to do about it."""
        return MalformedRow(
            f"{self.where}: {error}. Fix or remove the row, or set data.malformed=skip to skip "
            "and count rows like it"
        )


def read_rows(paths: str | Path | list[str | Path]) -> list[Row]:
    """Every row of every path, in order."""
    if isinstance(paths, str | Path):
        paths = [paths]
    rows: list[Row] = []
    for path in paths:
        rows.extend(_read(Path(path)))
    return rows


def _read(path: Path) -> Iterator[Row]:
    if not path.exists():
        raise InputNotFound(f"data file {str(path)!r} does not exist")
    if path.is_dir():
        if (path / "dataset_info.json").exists() or (path / "state.json").exists():
            yield from _rows(_datasets_dir(path), path)
            return
        files = sorted(path.glob("*.parquet"))
        if not files:
            raise InputNotFound(f"{str(path)!r} holds neither a saved dataset nor parquet files")
        for file in files:
            yield from _read(file)
        return
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        yield from _rows(_parquet(path), path)
    elif suffix in (".jsonl", ".json"):
        yield from _jsonl(path)
    else:
        raise InputError(f"cannot read {str(path)!r}: use .parquet, .jsonl or a datasets directory")


def _parquet(path: Path) -> list[dict]:
    """The file's rows; a file pyarrow cannot read (cut short by an interrupted copy or
    download, or not parquet at all) is named with pyarrow's reason instead of its traceback."""
    import pyarrow
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except (pyarrow.ArrowException, OSError) as error:
        raise InputError(
            f"cannot read parquet file {str(path)!r} ({error}); it may be cut short or not "
            "parquet: write or download it again"
        ) from error


def _datasets_dir(path: Path) -> list[dict]:
    from datasets import load_from_disk

    try:
        return load_from_disk(str(path)).to_list()
    except (OSError, ValueError, KeyError) as error:  # missing, cut or garbled parts
        raise InputError(
            f"cannot read the saved dataset {str(path)!r} ({type(error).__name__}: {error}); "
            "save it again with Dataset.save_to_disk"
        ) from error


def _rows(records: list[dict], path: Path) -> Iterator[Row]:
    for index, record in enumerate(records):
        yield Row(record, str(path), index)


def _jsonl(path: Path) -> Iterator[Row]:
    with open(path, "rb") as file:
        index = 0
        for line_number, raw in enumerate(file, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise MalformedRow(
                    f"line {line_number} of {path} is not UTF-8 text: {error}"
                ) from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise MalformedRow(
                    f"line {line_number} of {path} is not valid JSON: {error}"
                ) from None
            if not isinstance(record, dict):
                raise MalformedRow(f"line {line_number} of {path} is not a JSON object")
            yield Row(record, str(path), index)
            index += 1
