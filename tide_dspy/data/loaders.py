"""Load JSONL records (a file or a folder of files, plain or compressed as .jsonl.xz / .jsonl.gz) into validated
Instances, through Hugging Face `datasets`: any file of the record formats, with errors that name the file and line.
The versioned benchmark sets load through their explicit Features instead (tide_dspy.data.sets.load_benchmark)."""

from __future__ import annotations

import gzip
import json
import logging
import lzma
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import dspy

from tide_dspy.data.records import describe_record_error, instance_from_record
from tide_dspy.domains import SETTING_NAMES
from tide_dspy.schemas import Instance
from tide_dspy.util.hashing import short_sha256

logger = logging.getLogger(__name__)


class InvalidRecordError(ValueError):
    """A JSONL line that is not a valid instance. The message names the file, the 1-based line and the field."""

    def __init__(self, path: Path, line: int, reason: str):
        self.path, self.line, self.reason = path, line, reason
        super().__init__(f"{path} line {line}: {reason}; fix the record, or pass skip_invalid "
                         f"(--skip-invalid) to skip it")


@dataclass
class LoadResult:
    instances: list[Instance] = field(default_factory=list)
    skipped: list[InvalidRecordError] = field(default_factory=list)


RECORD_SUFFIXES = (".jsonl", ".jsonl.xz", ".jsonl.gz")  # plain, or compressed (the shipped sets are .jsonl.xz)


class UnknownSplitError(ValueError):
    """A split that the data does not have. The message names the data and the splits it has."""


def check_split(split: str | None, splits: set[str], where: str | Path) -> None:
    """Refuse a split the data does not have (a typo such as "tset" would otherwise select nothing)."""
    if split is not None and split not in splits:
        raise UnknownSplitError(f"{where}: no split {split!r}; its splits are {', '.join(sorted(splits)) or 'none'} "
                                "(pass one of them with --split)")


def jsonl_files(path: str | Path) -> list[Path]:
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(RECORD_SUFFIXES))
        if files:
            return files
        raise FileNotFoundError(f"{path}: the folder has no {', '.join(RECORD_SUFFIXES)} files; pass a JSONL file "
                                "or a folder of them")
    raise FileNotFoundError(f"{path}: no such file or folder")


def read_data(file: Path) -> bytes:
    """The bytes of a JSONL file, decompressed when its name ends in .xz or .gz."""
    try:
        if file.name.endswith(".xz"):
            return lzma.decompress(file.read_bytes())
        if file.name.endswith(".gz"):
            return gzip.decompress(file.read_bytes())
    except (lzma.LZMAError, gzip.BadGzipFile, EOFError) as exc:
        raise ValueError(f"{file}: not a readable {file.suffix} file ({exc}); restore it, or pass the plain "
                         ".jsonl") from exc
    return file.read_bytes()


def load_instances(path: str | Path, setting: str | None = None, split: str | None = None,
                   skip_invalid: bool = False, cache_dir: str | Path | None = None) -> list[Instance]:
    """Validated instances of a JSONL file or folder; see `load_with_report` for the skipped records."""
    return load_with_report(path, setting, split, skip_invalid, cache_dir).instances


def load_with_report(path: str | Path, setting: str | None = None, split: str | None = None,
                     skip_invalid: bool = False, cache_dir: str | Path | None = None) -> LoadResult:
    """Load and validate every record. The first invalid one raises InvalidRecordError, unless `skip_invalid`,
    in which case each is logged as a warning and listed in `skipped`.

    `setting` (workspace|repository) forces the format; by default each record's setting is detected and a
    file may not mix settings. `split` keeps only instances of that split; a split no record has is an error that
    names the splits there are.
    """
    if setting is not None and setting not in SETTING_NAMES:
        raise ValueError(f"setting={setting!r}: use one of {', '.join(SETTING_NAMES)}")
    result = LoadResult()
    seen: dict[str, tuple[Path, int]] = {}
    splits: set[str] = set()
    for file in jsonl_files(path):
        for line_no, text in jsonl_lines(file, cache_dir):
            if isinstance(text, str) and not text.strip():
                continue
            try:
                if isinstance(text, UnicodeDecodeError):
                    raise ValueError(f"byte 0x{text.object[text.start]:02x} at column {text.start + 1} is not UTF-8 "
                                     "(re-encode the file as UTF-8)")
                instance = _instance(text, setting)
                if instance.instance_id in seen:
                    first = seen[instance.instance_id]
                    raise ValueError(f"instance_id: {instance.instance_id!r} repeats {first[0]} line {first[1]}")
                if setting is None:
                    setting = instance.setting  # the first record fixes the setting for the rest
            except ValueError as exc:
                error = InvalidRecordError(file, line_no, str(exc))
                if not skip_invalid:
                    raise error from exc
                logger.warning("skipped %s", error)
                result.skipped.append(error)
                continue
            seen[instance.instance_id] = (file, line_no)
            splits.add(instance.split)
            if split is None or instance.split == split:
                result.instances.append(instance)
    if result.skipped:
        logger.warning("skipped %d invalid record(s) of %s", len(result.skipped), path)
    if seen:
        check_split(split, splits, path)
    return result


def _instance(text: str, setting: str | None) -> Instance:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from exc
    except RecursionError:
        raise ValueError("JSON nested too deeply to read; a record is an object of lists and objects a few levels "
                         "deep") from None
    try:
        return instance_from_record(record, setting=setting)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise ValueError(describe_record_error(exc, record)) from exc


def jsonl_lines(file: Path, cache_dir: str | Path | None = None) -> Iterator[tuple[int, str | UnicodeDecodeError]]:
    """(1-based line number, line text) of a JSONL file, read through `datasets` so it is cached as Arrow.

    The "text" builder keeps each line as one string column instead of letting the "json" builder infer an
    Arrow schema, because on these files inference changes or breaks the data: ISO `created_at` strings become
    timestamps, fields whose shapes differ between records (payloads of emails vs. calendar entries, action
    parameters, problem metadata) are unified or turned into opaque Json columns, and a line that does not fit
    the schema fails the whole file without naming its line. Each row is then parsed with json.loads, and the
    row index is the line number (the builder splits on newlines only).

    `datasets` keys its cache on the file's path and modification time, so a file edited in place with its time
    kept would be read from a stale cache; the cache lives in a folder named by a hash of the content instead.
    A file that is not UTF-8 is read line by line, and each line that does not decode comes as its
    UnicodeDecodeError, so the caller can name the line (and skip it under skip_invalid). A compressed file is
    read by the same builder, which decompresses it.
    """
    data = read_data(file)
    if not data.strip():
        raise ValueError(f"{file}: the file is empty; a .jsonl file holds one JSON record per line (fill it or "
                         "remove it)")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        for index, raw in enumerate(data.split(b"\n")):
            try:
                yield index + 1, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield index + 1, exc
        return
    digest = short_sha256(data)
    base = Path(cache_dir) if cache_dir else Path(datasets.config.HF_DATASETS_CACHE)
    with quiet_progress():
        ds = datasets.load_dataset("text", data_files=str(file.resolve()), split="train",
                                   cache_dir=str(base / f"tide-jsonl-{digest}"))
    for index, text in enumerate(ds["text"]):
        yield index + 1, text


@contextmanager
def quiet_progress() -> Iterator[None]:
    was_disabled = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            datasets.enable_progress_bars()


def to_examples(instances: list[Instance]) -> list[dspy.Example]:
    """One dspy.Example per instance, with the Instance as its single input field `case`."""
    return [dspy.Example(case=instance).with_inputs("case") for instance in instances]
