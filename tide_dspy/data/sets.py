"""The benchmark sets: where each lives, its versions and checksum, and loading one through `datasets`.

A data root holds one folder per setting, named for it. The root is $TIDE_DATA, else the sets shipped with tide-dspy
(the checkout's data/, or tide_dspy/_shipped/data inside a wheel; tide_dspy.shipped finds them). A setting's folder
is either a versioned set (v1/, v2/, ..., one JSONL file each, compressed as .jsonl.xz, and a SHA256SUMS file that
lists them; the highest version is the default) or plain JSONL files of your own, which have no version. `--data`
names a set folder, one version's folder or one file instead.

`load_benchmark` reads a set through `datasets`: each record is checked against its setting's explicit Features
(`Setting.record_features`; the free-form fields as JSON), and the Arrow table is cached in a folder named by the
set's SHA-256, so an edited file is never read from a stale cache. It returns the `datasets.Dataset`, the validated
Instances and the set's identity (`SetInfo`: name, version, checksum), which every result records.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import datasets

from tide_dspy.data.loaders import (
    InvalidRecordError,
    check_split,
    jsonl_files,
    quiet_progress,
    read_data,
)
from tide_dspy.data.records import describe_record_error, instance_from_record
from tide_dspy.domains import get_setting
from tide_dspy.schemas import Instance
from tide_dspy.shipped import DATA_DIR
from tide_dspy.util.paths import DATA_ENV

VERSION = re.compile(r"v(\d+)")
SUMS = "SHA256SUMS"  # "<sha256>  <version>/<file>" per line, as `sha256sum` writes and `sha256sum -c` checks


@dataclass(frozen=True)
class SetInfo:
    """Which data a run read: the set's name (its folder), its version (None for files of your own) and the SHA-256
    of its file (of the files' checksums, for several)."""

    name: str
    version: str | None
    sha256: str
    path: Path  # what was located: the version's folder, or the file or folder given
    files: tuple[Path, ...] = field(default=(), repr=False)
    card: Path | None = field(default=None, repr=False)  # the data card: the README.md of the set's folder

    def record(self) -> dict[str, str | None]:
        """What a result records about its data."""
        return {"name": self.name, "version": self.version, "sha256": self.sha256}

    def params(self) -> dict[str, str | None]:
        """The same, as flat tracking params."""
        return {"data_set": self.name, "data_version": self.version, "data_sha256": self.sha256}


def data_root() -> Path:
    """The folder holding one set folder per setting: $TIDE_DATA, else the sets shipped with tide-dspy."""
    from tide_dspy.util.settings import settings

    if settings().data:
        return settings().data
    if DATA_DIR is None:
        raise FileNotFoundError(f"this install carries no benchmark sets (neither a tide-dspy checkout's data/ nor "
                                f"tide_dspy/_shipped/data); reinstall tide-dspy, set {DATA_ENV}, or pass --data")
    return DATA_DIR


def versions(folder: Path) -> list[str]:
    """The versions of a set folder (v1, v2, ...), oldest first; [] for a folder that is not versioned."""
    if not folder.is_dir():
        return []
    return sorted((p.name for p in folder.iterdir() if p.is_dir() and VERSION.fullmatch(p.name)),
                  key=lambda v: int(v[1:]))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sums_text(set_folder: Path) -> str:
    """The SHA256SUMS of a versioned set folder: one line per file of each version, in version order."""
    lines = []
    for version in versions(set_folder):
        for file in jsonl_files(set_folder / version):
            lines.append(f"{file_sha256(file)}  {version}/{file.name}\n")
    return "".join(lines)


def listed_sums(set_folder: Path) -> dict[str, str]:
    """SHA256SUMS of a set folder as {"v1/file": sha256}; {} when it has none."""
    path = set_folder / SUMS
    if not path.is_file():
        return {}
    out = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            digest, sep, name = line.partition("  ")
            if not sep or not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise ValueError(f"{path} line {number}: expected '<sha256>  <version>/<file>'")
            out[name.strip()] = digest
    return out


def locate(setting: str | None = None, data: str | Path | None = None, version: str | None = None) -> SetInfo:
    """The set a run reads: `data` (a set folder, one version's folder, or a JSONL file or folder of your own),
    else the setting's folder under data_root(); of a versioned set, `version` (default: the highest).

    A versioned set's files are checked against its SHA256SUMS: a file changed since the checksums were written
    is refused rather than read as the version it no longer is."""
    if data is None and setting is None:
        raise ValueError("locate: name a setting or a data path")
    path = Path(data) if data is not None else data_root() / str(setting)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no {setting or 'benchmark'} data here; pass --data PATH or set "
                                f"{DATA_ENV}=<folder with one set folder per setting>")
    set_folder, chosen = _versioned(path, version)
    if set_folder is None:
        if version is not None:
            raise ValueError(f"{path} has no versions (no v1/, v2/ folders beside a {SUMS}); leave out "
                             "--data-version, or pass a set's folder")
        files = tuple(jsonl_files(path))
        name = path.name.split(".jsonl")[0]
    else:
        files = tuple(jsonl_files(set_folder / chosen)) if path.is_dir() else (path,)
        name = set_folder.name
        _check_sums(set_folder, chosen, files)
    sums = [file_sha256(f) for f in files]
    digest = sums[0] if len(sums) == 1 else hashlib.sha256(
        "".join(f"{s}  {f.name}\n" for s, f in zip(sums, files)).encode()).hexdigest()
    card = (set_folder if set_folder is not None else path if path.is_dir() else path.parent) / "README.md"
    return SetInfo(name=name, version=chosen, sha256=digest,
                   path=set_folder / chosen if set_folder is not None and path.is_dir() else path, files=files,
                   card=card if card.is_file() else None)


def _versioned(path: Path, version: str | None) -> tuple[Path | None, str | None]:
    """(the set folder, the version) when `path` is a versioned set, one of its versions or a file of one."""
    if available := versions(path):
        chosen = version or available[-1]
        if chosen not in available:
            raise ValueError(f"{path}: no version {chosen!r}; it has {', '.join(available)} (--data-version)")
        return path, chosen
    inside = path if path.is_dir() else path.parent
    if VERSION.fullmatch(inside.name) and (inside.parent / SUMS).is_file():
        if version is not None and version != inside.name:
            raise ValueError(f"{path} is version {inside.name} of {inside.parent}, not {version}; pass the set's "
                             f"folder {inside.parent} with --data-version {version}")
        return inside.parent, inside.name
    return None, None


def _check_sums(set_folder: Path, version: str, files: tuple[Path, ...]) -> None:
    listed = listed_sums(set_folder)
    for file in files:
        key = f"{version}/{file.name}"
        if key not in listed:
            raise ValueError(f"{file}: not listed in {set_folder / SUMS}; add its line (`sha256sum {key} >> {SUMS}` "
                             "in that folder), or rebuild the set")
        if file_sha256(file) != listed[key]:
            raise ValueError(f"{file}: its SHA-256 is not the one {set_folder / SUMS} lists: the file changed since; "
                             "restore it, or rebuild the set and its checksums")


# ---- loading through datasets ----

@dataclass
class Benchmark:
    """A loaded set: its identity, its records as a `datasets.Dataset` (explicit Features) and as Instances."""

    info: SetInfo
    dataset: datasets.Dataset
    instances: list[Instance]


def load_benchmark(setting: str, split: str | None = None, version: str | None = None,
                   data: str | Path | None = None, cache_dir: str | Path | None = None) -> Benchmark:
    """A benchmark set (default: the shipped one of `setting`, at its highest version) through `datasets`.

    `split` keeps that split (one the set does not have is an error); `data` names another set (see `locate`);
    `cache_dir` is where the Arrow cache goes (default: datasets' cache folder)."""
    domain = get_setting(setting)
    return load_located(locate(domain.name, data, version), domain.name, split, cache_dir)


def load_located(info: SetInfo, setting: str, split: str | None = None,
                 cache_dir: str | Path | None = None) -> Benchmark:
    """load_benchmark for a set already located."""
    table = arrow_table(info, setting, cache_dir)
    splits = table["split"]
    check_split(split, set(splits), info.path)
    if split is not None:
        table = table.select([n for n, s in enumerate(splits) if s == split], keep_in_memory=True)
    instances = []
    for row in table:
        try:
            instances.append(instance_from_record(row, setting))
        except ValueError as exc:
            raise ValueError(f"{info.path}: instance {row.get('instance_id')!r}: {describe_record_error(exc, row)}") \
                from exc
    return Benchmark(info=info, dataset=table, instances=instances)


def arrow_table(info: SetInfo, setting: str, cache_dir: str | Path | None = None) -> datasets.Dataset:
    """The set's records as a Dataset with the setting's Features, cached as Arrow in a folder named by the set's
    SHA-256 (datasets' own key for a generator is its arguments, which name the files, not their content)."""
    base = Path(cache_dir) if cache_dir else Path(datasets.config.HF_DATASETS_CACHE)
    try:
        with quiet_progress():
            return datasets.Dataset.from_generator(
                _records, features=get_setting(setting).record_features(),
                cache_dir=str(base / f"tide-{info.name}-{info.sha256[:16]}"),
                gen_kwargs={"files": [str(f.resolve()) for f in info.files], "setting": setting})
    except datasets.exceptions.DatasetGenerationError as exc:
        if isinstance(exc.__cause__, InvalidRecordError):
            raise exc.__cause__ from None
        raise


def _records(files: list[str], setting: str):
    """Each record of the files, checked against the setting's Features (datasets itself would drop a field the
    Features lack and fill a missing one with None, and name no line for a value of the wrong type)."""
    features = get_setting(setting).record_features()
    for name in files:
        file = Path(name)
        for number, raw in enumerate(read_data(file).split(b"\n"), 1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
                fit(record, features)
            except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
                raise InvalidRecordError(file, number, str(exc)) from exc
            yield record


def fit(value, feature, where: str = "") -> None:
    """Raise ValueError naming the field where `value` does not fit `feature`: a missing or extra field, a list or
    object that is not one, a value of another type. A value may be null (Arrow columns are nullable; the Instance
    then refuses a required one)."""
    here = where or "the record"
    if isinstance(feature, dict):  # Features, and the nested objects
        if not isinstance(value, dict):
            raise ValueError(f"{here}: expected an object, got {type(value).__name__}")
        for key in feature:
            if key not in value:
                raise ValueError(f"{_at(where, key)}: Field required (add it)")
        for key in value:
            if key not in feature:
                raise ValueError(f"{_at(where, key)}: not a field of this set's format (remove it; the format is "
                                 "Setting.record_features)")
        for key, sub in feature.items():
            fit(value[key], sub, _at(where, key))
    elif isinstance(feature, datasets.List):
        if not isinstance(value, list):
            raise ValueError(f"{here}: expected a list, got {type(value).__name__}")
        for index, item in enumerate(value):
            fit(item, feature.feature, f"{where}[{index}]")
    elif isinstance(feature, datasets.Value) and value is not None and not _is(value, feature.dtype):
        raise ValueError(f"{here}: expected {feature.dtype}, got {type(value).__name__} {value!r:.40}")


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _is(value, dtype: str) -> bool:
    if dtype == "string":
        return isinstance(value, str)
    if dtype == "bool":
        return isinstance(value, bool)
    if dtype.startswith("int"):
        return isinstance(value, int) and not isinstance(value, bool)
    if dtype.startswith("float"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True
