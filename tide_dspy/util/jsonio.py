"""Reading and writing our JSON and YAML files, with errors that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tide_dspy.util.safe_write import write_text


def read_json_file(path: str | Path, missing_hint: str) -> Any:
    """A JSON file's content. A missing file says `missing_hint` (how to make one); bad JSON names the line."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: {missing_hint}")
    if not path.is_file():
        raise ValueError(f"{path}: not a file; {missing_hint}")
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: byte {exc.start} is not UTF-8; save the file as UTF-8 JSON") from None
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to read; replace the file ({missing_hint})") from None


def read_yaml_file(path: str | Path) -> Any:
    """A YAML file's content (safe_load: plain data only). Missing, non-UTF-8 or invalid YAML names the file."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        return yaml.safe_load(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: byte {exc.start} is not UTF-8; save the file as UTF-8") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML ({exc})") from None
    except RecursionError:
        raise ValueError(f"{path}: YAML nested too deeply to read") from None


def read_json_or_none(path: str | Path) -> Any:
    """A JSON file's content, or None when it is missing or not valid JSON (e.g. cut off by a crash)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None


def write_json(path: str | Path, data: Any, *, indent: int = 1, ensure_ascii: bool = False) -> Path:
    """`data` as indented JSON plus a newline (values JSON cannot hold are written as str), through
    util.safe_write: a temporary file and os.replace, never through a link."""
    return write_text(path, json.dumps(data, indent=indent, ensure_ascii=ensure_ascii, default=str) + "\n")
