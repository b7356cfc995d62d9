"""Options shared by several subcommands."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from tide_dspy.backbones.options import add_lm_options
from tide_dspy.methods import add_rule_options
from tide_dspy.util.argtypes import fraction, positive_int


def setting_name(text: str) -> str:
    """An argparse type for --setting: a name of tide_dspy.domains.SETTING_NAMES. The settings are read only when a
    value is parsed, so building the parser and printing its help load no DSPy: `--help` stays fast."""
    from tide_dspy.domains import SETTING_NAMES

    if text not in SETTING_NAMES:
        raise argparse.ArgumentTypeError(f"unknown setting {text!r}: choose one of {', '.join(SETTING_NAMES)}")
    return text


SETTING_HELP = ("the benchmark setting: workspace (a person's mail, calendar and documents; actions) or repository "
                "(a Python project's functions; patches); it picks the data folder, the round signature and the "
                "defaults (docs/settings.md)")


def add_sandbox_options(p: argparse.ArgumentParser, needs: str) -> None:
    """How the tests of --verify / --verify-repo are boxed (tide_dspy.sandbox); `needs` names the option they
    go with."""
    p.add_argument("--verify-unsandboxed", action="store_true",
                   help=f"with {needs}: run the tests without the bubblewrap sandbox, as you, with your files, "
                        "keys and network in reach (for machines without bubblewrap; see docs/safety.md)")
    p.add_argument("--verify-limit", action="append", default=[], metavar="NAME=VALUE",
                   help=f"with {needs}: raise or lower a limit of the sandbox: processes=256, memory=4G (address "
                        "space per process), file-size=1G (also the size of its /tmp and $HOME), cpu=600 (CPU "
                        "seconds per process), or NAME=unlimited; repeatable")
    p.add_argument("--verify-env", action="append", default=[], metavar="NAME",
                   help=f"with {needs}: also pass this environment variable to the tests (they get PATH, LANG, "
                        "LC_*, TZ, PYTHON* and PYTEST_* that do not look secret, and nothing else); repeatable")
    p.add_argument("--verify-read", action="append", default=[], metavar="DIR",
                   help=f"with {needs}: also let the tests read this folder (read-only), e.g. data or a toolchain "
                        "outside your Python installation; repeatable")


def sandbox_options(args: argparse.Namespace, given: bool, needs: str):
    """The SandboxOptions of the options above; an error when one is set without `needs`. Unsandboxed runs print
    what they risk."""
    from tide_dspy.sandbox import UNSANDBOXED_RISK, Limits, SandboxOptions

    used = args.verify_unsandboxed or args.verify_limit or args.verify_env or args.verify_read
    if used and not given:
        raise ValueError(f"--verify-unsandboxed, --verify-limit, --verify-env and --verify-read need {needs}")
    if args.verify_unsandboxed and given:
        print(f"tide: warning: {UNSANDBOXED_RISK}", file=sys.stderr)
    return SandboxOptions(unsandboxed=args.verify_unsandboxed, limits=Limits.parse(args.verify_limit),
                          env=tuple(args.verify_env), read_only=tuple(args.verify_read))


def check_output_folder(path: str | Path, option: str = "--out") -> Path:
    """`path` as an output folder: it may not exist yet, but neither it nor a parent may be a file. Checked before
    any LM work, so a run is not lost at the end for want of a place to write."""
    path = Path(path)
    for part in (path, *path.parents):
        if part.exists():
            if not part.is_dir():
                where = "" if part == path else f" (its parent {part} is a file)"
                raise ValueError(f"{option} {path}: not a folder{where}; pass a folder path, e.g. {option} "
                                 f"{path.with_name(path.name + '-report') if part == path else 'tide-report'}")
            break
    return path


def command_line(args: argparse.Namespace) -> str:
    """An equivalent command line, every option spelled out (defaults included), for provenance records; credentials
    in URLs are scrubbed."""
    from tide_dspy.util.secrets import scrub_text

    parts = ["tide", args.command]
    for dest, value in vars(args).items():
        if dest in ("command", "func", "verbose") or value is None or value is False or value == []:
            continue
        flag = "--" + dest.replace("_", "-")
        for v in value if isinstance(value, list) else [value]:
            parts += [flag] if v is True else [flag, scrub_text(str(v))]
    return " ".join(shlex.quote(p) for p in parts)


# ---- option groups of distill / compile / tune / evaluate ----

def add_data_options(p: argparse.ArgumentParser, split: str) -> None:
    p.add_argument("--setting", type=setting_name, metavar="SETTING", required=split != "test", help=SETTING_HELP)
    p.add_argument("--split", default=split, help=f"data split (default: {split})")
    p.add_argument("--data", default=None,
                   help="the setting's data: a set's folder, one version's folder, or a JSONL file or folder of your "
                        "own (default: $TIDE_DATA/<setting>, else the set shipped with tide-dspy)")
    p.add_argument("--data-version", default=None, metavar="VERSION",
                   help="the version of a versioned set: v1, v2, ... (default: its highest)")
    p.add_argument("--ids", default=None, help="only these instance ids (comma-separated)")
    p.add_argument("--max-context-tokens", type=positive_int, default=None,
                   help="only instances whose rendered context fits this many (estimated) tokens, smallest first")
    p.add_argument("--limit", type=positive_int, default=None, help="at most N instances (after the filters above)")
    p.add_argument("--skip-invalid", action="store_true",
                   help="skip records of the data that are not valid instances (each is listed), instead of stopping")


def add_output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--programs", default="programs", help="root of the programs/<setting>/<backbone>/ tree")
    p.add_argument("--no-track", action="store_true", help="do not log an MLflow run")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, "
                                                        "else sqlite:///mlflow.db)")
    add_lm_options(p)


def add_program_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--templates", default=None, help="template library (default: programs/<setting>/<backbone>/"
                                                     "templates.json)")
    p.add_argument("--rounds", type=positive_int, default=None, help="rounds T (default: the setting's)")
    p.add_argument(
        "--per-round", type=positive_int, default=None, help="new findings per round k (default: the setting's)"
    )
    p.add_argument("--max-evidence", type=positive_int, default=None,
                   help="the most artifacts one finding may cite "
                        "(default: the setting's, as docs/program.md lists)")
    p.add_argument("--shuffle-context", type=int, default=None, metavar="SEED",
                   help="show the artifacts in a seeded shuffled order (to measure position effects)")
    add_rule_options(p)
    p.add_argument("--scan", type=positive_int, default=None, metavar="N",
                   help="rate every artifact on its own first; each round reads the N most suspect unfound ones in "
                        "full (the scan's instruction is then compiled too; --metric scan-recall scores its ranking)")


def add_workers_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--workers", type=positive_int, default=1,
                   help=f"{what} at once (threads; default 1). Worth it against a served backbone (vLLM, llama.cpp "
                        "server, a hosted API); the embedded engine runs one call at a time")


def add_split_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metric", default="retrieval-f1",
                   help="component[-kind]: retrieval|identification|resolution|mean, kind f1 (default)|coverage; "
                        "or scan-recall (with --scan: gold evidence among the scan's first N)")
    p.add_argument("--val-fraction", type=fraction, default=0.25, help="held-out share of train used for validation")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/validation split")
