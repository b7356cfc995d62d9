"""The `tide` command. Each subcommand lives in its own module and exposes `register(subparsers)`."""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import sys

# Each module registers its own subcommands; the CLI holds no logic of its own.
COMMAND_MODULES = (
    "tide_dspy.cli.check_cmd",
    "tide_dspy.cli.data_cmd",
    "tide_dspy.cli.discover_cmd",
    "tide_dspy.cli.optimize_cmd",
    "tide_dspy.cli.evaluate_cmd",
    "tide_dspy.cli.provider_sim_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tide", description="Template-guided iterative discovery of hidden problems.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(sub)
    return parser


class SafeFormatter(logging.Formatter):
    """Log records as the console may show them: secrets scrubbed and control characters escaped, in the message,
    its arguments and any traceback (they can hold model text, a gateway's echo of a key, a checkout's file names)."""

    def format(self, record: logging.LogRecord) -> str:
        from tide_dspy.util.secrets import scrub_text
        from tide_dspy.util.text import printable

        return printable(scrub_text(super().format(record)), keep_newlines=True)


def configure_logging(verbose: bool) -> None:
    """A root handler on stderr through SafeFormatter, unless the host (a test runner, an embedding program)
    already installed its own."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, handlers=[handler])


def leaf_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)parser of the command `args` ran: `tide discover repo` -> the parser of `repo`."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(args, sub.dest, None) if sub is not None else None
        if name not in (sub.choices if sub is not None else {}):
            return parser
        parser = sub.choices[name]


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`parser.parse_args(argv)`, but an unknown option is named with the closest option of its command
    (`--rouns` -> did you mean --rounds?), by the command's own parser (exit 2)."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        leaf = leaf_parser(parser, args)
        known = [s for action in leaf._actions for s in action.option_strings if s.startswith("--")]
        hints = [f"{extra.split('=')[0]} -> did you mean {close[0]}?" for extra in extras if extra.startswith("--")
                 for close in [difflib.get_close_matches(extra.split("=")[0], known, n=1, cutoff=0.6)] if close]
        leaf.error(f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else ""))
    return args


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    args = parse_args(build_parser(), argv)
    configure_logging(args.verbose)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        from tide_dspy.util.text import terminal_line

        print(f"tide: error: {terminal_line(exc)}", file=sys.stderr)
        return 2
    except Exception:  # noqa: BLE001 - the last handler: any failure becomes a scrubbed message and exit 1
        # An unexpected error keeps its traceback, shown as the log is: scrubbed, control characters escaped.
        import traceback

        from tide_dspy.util.secrets import scrub_text
        from tide_dspy.util.text import printable

        print(printable(scrub_text(traceback.format_exc()), keep_newlines=True), file=sys.stderr, end="")
        return 1


if __name__ == "__main__":
    sys.exit(main())
