"""`tide check BACKBONE [--judge J]`: one cheap call per backbone (and judge) before a run spends anything."""

from __future__ import annotations

import argparse
import sys

from tide_dspy.backbones.options import LMOptions
from tide_dspy.cli.options import add_lm_options


def register(subparsers: argparse._SubParsersAction) -> None:
    c = subparsers.add_parser("check", help="one cheap call to a backbone (and judge): the key, the model id, what "
                                            "is sent and what it costs")
    c.add_argument("backbone", help="backbone name (gpt-5-mini, claude-sonnet-4.5, ...) or a raw DSPy model string")
    add_lm_options(c, with_backbone=False)
    c.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    from tide_dspy.backbones import get_lm, resolve
    from tide_dspy.backbones.preflight import check_lm

    options = LMOptions.from_namespace(args)
    checks = [(args.backbone, dict(api_base=options.api_base, temperature=options.temperature,
                                   max_tokens=options.max_tokens, **options.retry_options(),
                                   **({"server_schema": options.server_schema} if options.server_schema else {})))]
    if args.judge not in ("proxy", "none"):
        checks.append((args.judge, options.judge_spec(args.judge).lm_options))
    failed = 0
    for name, lm_options in checks:
        resolve(name)  # an unknown name fails here, with the list of backbones
        report = check_lm(get_lm(name, **lm_options))
        print("\n".join(report.lines()))
        if not report.ok:
            failed += 1
            print(f"tide check: {name}: {report.problem}", file=sys.stderr)
    return 1 if failed else 0
