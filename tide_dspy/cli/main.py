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


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"tide: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
