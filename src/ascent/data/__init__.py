"""Datasets: rows from parquet, JSONL or datasets directories, and their tokenization."""

from ascent.data.files import MalformedRow, read_rows

__all__ = ["MalformedRow", "read_rows"]
