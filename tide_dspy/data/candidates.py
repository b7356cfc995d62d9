"""Candidate functions of a Python source tree, parsed with `ast` the way the repository data set was built.

A candidate is a top-level function or a method at any class-nesting depth. Functions defined under module-
or class-level compound statements (`if`, `try`, `with`, ...) count too; functions (and classes) nested inside a
function belong to that function. The id is `path::Qual.name`; a qualname repeated within a file gets `#2`, `#3`,
and so on. The line span includes decorators, and `code` is exactly those source lines.
"""

from __future__ import annotations

import ast
import io
import logging
import tokenize
from collections.abc import Iterable, Iterator
from pathlib import Path

from tide_dspy.data.safe_files import FileListing, UnsafeFileError, list_files, read_capped
from tide_dspy.schemas import Artifact

logger = logging.getLogger(__name__)

SKIPPED_DIR_NAMES = frozenset({
    "__pycache__", "build", "dist", "node_modules", "site-packages", "venv", "env", "htmlcov",
})

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def python_files(root: str | Path) -> list[str]:
    """Relative paths (posix) of every .py file under root, skipping hidden, virtualenv and build folders."""
    return list_python_files(root).files


def list_python_files(root: str | Path) -> FileListing:
    """The .py files under root that are safe to read, and those left out with the reason (see safe_files)."""
    return list_files(root, lambda name: name.endswith(".py"), _skipped_dir)


def _skipped_dir(path: Path) -> bool:
    name = path.name
    return (name.startswith(".") or name in SKIPPED_DIR_NAMES or name.endswith(".egg-info")
            or (path / "pyvenv.cfg").exists())


def function_spans(tree: ast.Module) -> Iterator[tuple[str, int, int]]:
    """(qualname, first line incl. decorators, last line) of every candidate function, in source order."""
    yield from _walk(tree.body, prefix="")


def _walk(body: Iterable[ast.stmt], prefix: str) -> Iterator[tuple[str, int, int]]:
    for node in body:
        if isinstance(node, FunctionNode):
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            yield prefix + node.name, start, node.end_lineno
        elif isinstance(node, ast.ClassDef):
            yield from _walk(node.body, prefix=f"{prefix}{node.name}.")
        else:
            for block in _child_blocks(node):
                yield from _walk(block, prefix)


def _child_blocks(node: ast.stmt) -> Iterator[list[ast.stmt]]:
    """Statement lists under a compound statement (if/for/while/with/try/match)."""
    for field in ("body", "orelse", "finalbody"):
        block = getattr(node, field, None)
        if isinstance(block, list):
            yield block
    for handler in getattr(node, "handlers", []):
        yield handler.body
    for case in getattr(node, "cases", []):
        yield case.body


def file_candidates(rel_path: str, source: str) -> list[Artifact]:
    """Candidates of one file's source text. Raises SyntaxError if it does not parse."""
    source = source.replace("\r\n", "\n").replace("\r", "\n")
    tree = ast.parse(source, filename=rel_path)
    lines = source.split("\n")  # not splitlines(): it also splits on \f and \x1c, which ast does not count
    seen: dict[str, int] = {}
    artifacts = []
    for qualname, start, end in function_spans(tree):
        seen[qualname] = seen.get(qualname, 0) + 1
        suffix = f"#{seen[qualname]}" if seen[qualname] > 1 else ""
        artifacts.append(Artifact(
            id=f"{rel_path}::{qualname}{suffix}",
            kind="function",
            payload={"path": rel_path, "qualname": qualname, "start_line": start, "end_line": end,
                     "code": "\n".join(lines[start - 1:end])},
        ))
    return artifacts


def read_source(root: Path, rel: str) -> str:
    """Source text of `rel` under `root` decoded per PEP 263, with universal newlines (so ast line numbers index
    `split('\\n')`).

    Only a regular file within safe_files.MAX_FILE_BYTES is read, never through a link out of root."""
    data = read_capped(root, rel)
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return io.TextIOWrapper(io.BytesIO(data), encoding).read()


def parse_candidates(root: str | Path, files: Iterable[str] | None = None) -> list[Artifact]:
    """Candidate functions of `files` (paths relative to root; default: every .py file under root).

    A file that does not parse is reported with a warning naming the file and line, and skipped.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a directory; pass the root of a Python source tree")
    rel_paths = python_files(root) if files is None else [Path(f).as_posix() for f in files]
    artifacts: list[Artifact] = []
    for rel in rel_paths:
        path = root / rel
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file under {root}; pass paths relative to the root")
        try:
            artifacts.extend(file_candidates(rel, read_source(root, rel)))
        except UnsafeFileError as exc:
            logger.warning("%s: skipped, %s", rel, exc)
        except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
            line = getattr(exc, "lineno", None)
            logger.warning("%s%s: skipped, it does not parse (%s)", rel, f" line {line}" if line else "",
                           getattr(exc, "msg", None) or exc)
    return artifacts
