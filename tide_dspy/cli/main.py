"""The `tide` command. Each subcommand lives in its own module and exposes `register(subparsers)`."""

from __future__ import annotations

import argparse
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


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    args = build_parser().parse_args(argv)
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
