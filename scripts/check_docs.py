"""Check README.md and docs/*.md against the code, so the documentation cannot drift from it.

    python scripts/check_docs.py [FILE.md ...]     # default: README.md and docs/*.md; exit 1 on any problem

- every `tide ...` command shown (in a code block or an inline code span) exists, and so does each of its flags;
- a flag shown on its own (`--verify-unsandboxed`) belongs to some `tide` command;
- every relative link resolves to a file or folder of the checkout;
- every environment variable the code reads is in README.md's configuration table (a row whose first cell
  names it);
- no absolute path of a machine (`/home/...`, `/root/...`, `/work/...`, `/tmp/...`) appears;
- docs/program.md's table of methods has one row per method of `tide_dspy.methods.METHODS`, with its class and
  guidance.
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:home|root|work|tmp|Users|opt)/[\w.-]+")
# Options of other tools that the docs name on their own (pytest's, git's, bubblewrap's).
FOREIGN_FLAGS = {"--junitxml", "--end-of-options", "--disable-userns"}
ENV_TABLE_ROW = re.compile(r"^\|\s*`([A-Z][A-Z0-9_]+)`", re.M)
METHOD_ROW = re.compile(r"^\| `([a-z][a-z-]*)` \| `(\w+)` \| (\w+) \|", re.M)
METHODS_PAGE = ROOT / "docs" / "program.md"


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


# ---- the CLI as it is ----

def subparsers_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def all_flags(parser: argparse.ArgumentParser) -> set[str]:
    flags = option_strings(parser)
    for sub in subparsers_of(parser).values():
        flags |= all_flags(sub)
    return flags


def check_command(words: list[str], parser: argparse.ArgumentParser) -> str | None:
    """Why the `tide` command line `words` (without "tide") does not exist, or None."""
    path, current = ["tide"], parser
    flags = set(option_strings(parser))
    for word in words:
        subs = subparsers_of(current)
        if not subs or word.startswith("-"):
            break
        if word not in subs:
            return f"`{' '.join(path)} {word}`: no such command (commands: {', '.join(sorted(subs))})"
        path.append(word)
        current = subs[word]
        flags |= option_strings(current)
    if len(path) == 1 and words and words[0] not in flags:
        return f"`tide {' '.join(words)}`: no command given"
    for word in words:
        flag = word.split("=", 1)[0]
        if FLAG.fullmatch(flag) and flag not in flags:
            return f"`{' '.join(path)}` has no option {flag}"
    return None


def tide_commands(snippet: str) -> list[tuple[int, list[str]]]:
    """(line within the snippet, argument list) of each `tide ...` command in a shell snippet. A line ending in a
    backslash continues on the next; `a|b` without spaces is an alternative, not a pipe."""
    logical, start, pending = [], 0, ""
    for number, line in enumerate(snippet.splitlines()):
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append((start, pending + line))
        pending = ""
    commands = []
    for number, line in logical:
        line = line.split(" #", 1)[0].strip().removeprefix("$ ")
        for part in re.split(r"\s(?:&&|\|\||\|)\s|;\s", line):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                words = part.split()
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # VAR=value tide ...
                words = words[1:]
            if words and words[0] == "tide":
                commands.append((number, [w.strip("[]") for w in words[1:] if w not in ("...", "…")]))
    return commands


# ---- the environment the code reads ----

def env_reads(package: Path) -> set[str]:
    """Environment variables read by the package: the TIDE_* variables of its settings (tide_dspy.util.settings),
    names passed to os.environ.get / os.getenv / os.environ[...], and the key variables of the registered
    backbones."""
    sys.path.insert(0, str(package.parent))
    from tide_dspy.util.settings import variables

    names = set(variables())
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                func = ast.unparse(node.func)
                if func in ("os.environ.get", "os.getenv", "environ.get") and isinstance(node.args[0].value, str):
                    names.add(node.args[0].value)
            elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ" and isinstance(
                    node.slice, ast.Constant) and isinstance(node.ctx, ast.Load):
                names.add(node.slice.value)
    from tide_dspy.backbones import BACKBONES

    names |= {b.key_env for b in BACKBONES.values() if b.key_env}
    return names


# ---- the checks ----

def check_file(path: Path, parser: argparse.ArgumentParser, known_flags: set[str]) -> list[Problem]:
    text = path.read_text(encoding="utf-8")
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    problems = []
    blocks = [(line_of(text, m.start(1)), m.group(1)) for m in FENCE.finditer(text)]
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # same lines, no code blocks
    spans = [(line_of(prose, m.start(1)), m.group(1)) for m in INLINE.finditer(prose)]
    for line, snippet in blocks + spans:
        for number, words in tide_commands(snippet):
            why = check_command(words, parser)
            if why:
                problems.append(Problem(rel, line + number, why))
    for line, span in spans:
        flag = FLAG.match(span.strip())
        if flag and flag.group(0) not in known_flags | FOREIGN_FLAGS:
            problems.append(Problem(rel, line, f"no `tide` command has the option {flag.group(0)}"))
    for m in LINK.finditer(prose):
        target = m.group(1).split("#", 1)[0]
        if not target or re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue
        if not (path.parent / target).exists():
            problems.append(Problem(rel, line_of(prose, m.start()), f"the link {m.group(1)} leads nowhere"))
    for m in MACHINE_PATH.finditer(text):
        problems.append(Problem(rel, line_of(text, m.start()), f"a machine's absolute path: {m.group(0)}"))
    return problems


def check_configuration(readme: Path, names: set[str]) -> list[Problem]:
    text = readme.read_text(encoding="utf-8")
    documented = set(ENV_TABLE_ROW.findall(text))
    return [Problem(readme.name, 1, f"{name} is read by the code but missing from the configuration table "
                                    f"(add a row: | `{name}` | default | meaning |)")
            for name in sorted(names - documented)]


def check_methods(page: Path) -> list[Problem]:
    """The rows `| `name` | `Class` | guidance | ... |` of the page against the method registry."""
    from tide_dspy.methods import METHODS

    text = page.read_text(encoding="utf-8")
    rows = {m.group(1): (m.group(2), m.group(3), line_of(text, m.start())) for m in METHOD_ROW.finditer(text)}
    problems = [Problem(page.name, 1, f"method {name!r} of tide_dspy.methods has no row in the table of methods "
                                      f"(add | `{name}` | `{m.program.__name__}` | {m.guidance} | ... |)")
                for name, m in METHODS.items() if name not in rows]
    for name, (cls, guidance, line) in rows.items():
        method = METHODS.get(name)
        if method is None:
            problems.append(Problem(page.name, line, f"the table lists {name!r}, which tide_dspy.methods does not "
                                                     "define"))
        elif (cls, guidance) != (method.program.__name__, method.guidance):
            problems.append(Problem(page.name, line, f"{name!r} is {method.program.__name__} with guidance "
                                                     f"{method.guidance} in tide_dspy.methods, not {cls} / {guidance}"))
    return problems


def main(argv: list[str] | None = None) -> int:
    files = [Path(f).resolve() for f in (argv or [])] or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    sys.path.insert(0, str(ROOT))
    from tide_dspy.cli.main import build_parser

    parser = build_parser()
    known = all_flags(parser)
    problems = [p for f in files for p in check_file(f, parser, known)]
    if ROOT / "README.md" in files:
        problems += check_configuration(ROOT / "README.md", env_reads(ROOT / "tide_dspy"))
    if METHODS_PAGE in files:
        problems += check_methods(METHODS_PAGE)
    for problem in problems:
        print(problem)
    print(f"docs check: {len(files)} file(s), {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
