"""Benchmark data: the shipped sets and loading them, candidate parsing, the set checker, the repository-instance
builder and the workspace generator."""

from __future__ import annotations

from tide_dspy.data.loaders import InvalidRecordError, LoadResult, load_instances, load_with_report, to_examples
from tide_dspy.data.sets import Benchmark, SetInfo, load_benchmark
from tide_dspy.util.tokens import CHARS_PER_TOKEN, estimate_tokens

__all__ = ["CHARS_PER_TOKEN", "Benchmark", "InvalidRecordError", "LoadResult", "SetInfo", "estimate_tokens",
           "load_benchmark", "load_instances", "load_with_report", "to_examples"]
