"""Options shared by several subcommands."""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path

from tide_dspy.domains import SETTING_NAMES, per_setting


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    return _int_at_least(text, 1)


def count(text: str) -> int:
    """An argparse type: an integer of at least 0."""
    return _int_at_least(text, 0)


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0 (seconds, ...); nan and inf are refused, since either would
    switch a limit off."""
    return _float_in(text, 0.0, math.inf, open_low=True)


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number of at least 0."""
    return _float_in(text, 0.0, math.inf)


def fraction(text: str) -> float:
    """An argparse type: a finite number strictly between 0 and 1."""
    return _float_in(text, 0.0, 1.0, open_low=True, open_high=True)


def percentage(text: str) -> float:
    """An argparse type: a finite number from 0 to 100."""
    return _float_in(text, 0.0, 100.0)


def _float_in(text: str, low: float, high: float, open_low: bool = False, open_high: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    if value < low or (open_low and value == low) or value > high or (open_high and value == high):
        lower = f"above {low:g}" if open_low else f"at least {low:g}"
        upper = "" if math.isinf(high) else f" and {'below' if open_high else 'at most'} {high:g}"
        raise argparse.ArgumentTypeError(f"must be {lower}{upper}, got {text}")
    return value


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


def price(text: str):
    """An argparse type: IN,OUT[,CACHED] in USD per million tokens (tide_dspy.budget.parse_price)."""
    from tide_dspy.budget import parse_price

    try:
        return parse_price(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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


def add_lm_options(parser: argparse.ArgumentParser, *, with_backbone: bool = True) -> None:
    """The options every command that calls an LM takes: the one place they are defined (LMOptions reads them)."""
    if with_backbone:
        parser.add_argument("--backbone", default="local",
                            help="backbone name (local, local-small, gpt-5-mini, ..., openai-compatible) or a raw DSPy "
                                 "model string")
    parser.add_argument(
        "--judge",
        default="proxy",
        help="judge backbone for identification/resolution, or 'proxy' for the lexical proxy judge, or 'none'",
    )
    parser.add_argument("--api-base", default=None,
                        help="where the backbone's calls go: an openai-compatible server (vLLM, llama.cpp server; "
                             "default $TIDE_API_BASE), or a gateway for a hosted backbone (its key goes there too)")
    parser.add_argument("--judge-api-base", default=None,
                        help="where a hosted judge's calls go, when not to its provider (never --api-base)")
    parser.add_argument("--num-retries", type=count, default=None,
                        help="retries of a call that hit a rate limit, a timeout, a 5xx or a dropped connection, "
                             "waiting the provider's Retry-After or an exponential backoff (default 8: at least 91 s "
                             "in all, longer than a per-minute limit; $TIDE_NUM_RETRIES)")
    parser.add_argument("--timeout", type=positive_float, default=None,
                        help="seconds one request may take before it is retried (default: the client's, 600; "
                             "$TIDE_TIMEOUT)")
    if with_backbone:
        parser.add_argument("--no-check", action="store_true",
                            help="skip the one preflight call to a hosted backbone and judge before the run "
                                 "(tide check)")
    parser.add_argument("--temperature", type=non_negative_float, default=None,
                        help="sampling temperature (not sent to models that take only their default: gpt-5-mini, "
                             "Gemini 3)")
    parser.add_argument("--max-tokens", type=positive_int, default=None,
                        help="output tokens per call (default: the backbone's, 16k for the hosted ones)")
    parser.add_argument("--threads", type=positive_int, default=None, help="CPU threads for the embedded backbone")
    parser.add_argument("--server-schema", default=None, choices=("json_schema", "llama.cpp", "off"),
                        help="how an openai-compatible server takes the output schema: json_schema (vLLM, OpenAI; "
                             "default), llama.cpp (python -m llama_cpp.server), off (default: $TIDE_SERVER_SCHEMA)")


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
    p.add_argument("--setting", choices=SETTING_NAMES, required=split != "test")
    p.add_argument("--split", default=split, help=f"data split (default: {split})")
    p.add_argument("--data", default=None, help="the setting's JSONL file or folder (default: $TIDE_DATA/<setting>, "
                                                "else ../shared/data/<setting> beside the repository)")
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
                        f"(default: the setting's, {per_setting('max_evidence')})")
    p.add_argument("--shuffle-context", type=int, default=None, metavar="SEED",
                   help="show the artifacts in a seeded shuffled order (to measure position effects)")
    p.add_argument("--scan", type=positive_int, default=None, metavar="N",
                   help="rate every artifact on its own first; each round reads the N most suspect unfound ones in "
                        "full (the scan's instruction is then compiled too; --metric scan-recall scores its ranking)")


def add_cost_options(p: argparse.ArgumentParser, budget: bool = False, judge: bool = True) -> None:
    """--dry-run and --price (every command that calls a model), --judge-price where a judge runs; with `budget`,
    --max-cost and --context-window."""
    p.add_argument("--dry-run", action="store_true",
                   help="render the prompts the run would send, count their tokens, print the calls, prompt and "
                        "output tokens and USD per method and backbone (judge included), and exit without calling "
                        "a model")
    p.add_argument("--price", type=price, default=None, metavar="IN,OUT[,CACHED]",
                   help="the backbone's USD per million prompt and output tokens (and cached prompt tokens), for "
                        "estimates and budgets where the price map has none or you pay another price")
    if judge:
        p.add_argument("--judge-price", type=price, default=None, metavar="IN,OUT[,CACHED]",
                       help="the same for the judge backbone")
    if budget:
        p.add_argument("--max-cost", type=positive_float, default=None, metavar="USD",
                       help="a budget: no instance starts once the USD spent so far (provider-reported, else tokens "
                            "at the prices) plus its estimated cost would pass USD; finished rows are kept and "
                            "--resume continues")
        p.add_argument("--context-window", type=positive_int, default=None, metavar="TOKENS",
                       help="the backbone's context window for the pre-check that skips instances which cannot fit "
                            "(default: the backbone's, e.g. 200000 for claude-sonnet-4.5)")


def cost_limits(args: argparse.Namespace):
    """The budget.Limits of the options add_cost_options added."""
    from tide_dspy.budget import Limits

    return Limits(max_cost=getattr(args, "max_cost", None), prices=getattr(args, "price", None),
                  judge_prices=getattr(args, "judge_price", None),
                  context_window=getattr(args, "context_window", None))


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
