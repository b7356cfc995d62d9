"""`tide discover repo PATH` and `tide discover workspace DIR`: find hidden problems and write a report."""

from __future__ import annotations

import argparse
import sys

from tide_dspy.backbones.options import LMOptions, lm_from_options
from tide_dspy.cli.argtypes import positive_float, positive_int
from tide_dspy.cli.common import check_output_folder
from tide_dspy.cli.options import (
    add_cost_options,
    add_lm_options,
    add_sandbox_options,
    budget_of,
    overrides_of,
    sandbox_options,
)
from tide_dspy.util.safe_write import OutLock


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--program", default=None,
                        help="a saved program (JSON or models:/ URI); default: programs/<setting>/<backbone>/tide.json "
                             "if shipped, else the plain TIDE module")
    parser.add_argument(
        "--templates",
        default=None,
        help="a template library JSON; default: programs/<setting>/<backbone>/templates.json if shipped",
    )
    parser.add_argument("--rounds", type=positive_int, default=None, help="discovery rounds T (default: the program's)")
    parser.add_argument(
        "--per-round", type=positive_int, default=None, help="new findings per round k (default: the program's)"
    )
    scan = parser.add_mutually_exclusive_group()
    scan.add_argument("--scan", type=positive_int, default=None, metavar="N",
                      help="rate every artifact on its own first, then let each round read the N most suspect "
                           "unfound ones in full and the rest as one line each (instead of splitting a large "
                           "context into windows); default: the backbone's, where measured to help")
    scan.add_argument("--no-scan", dest="scan", action="store_const", const=0,
                      help="read the whole context in every round (split into windows when it does not fit)")
    parser.add_argument("--out", default="tide-report", help="report folder (default: ./tide-report); a folder "
                                                              "inside the tree being read is refused")
    parser.add_argument("--out-inside", action="store_true",
                        help="allow --out inside the tree being read (which could ship files or links there)")
    add_cost_options(parser, judge=False, stops="no window of the context starts once what was spent plus its "
                                                    "estimate would pass the cap; the report holds what finished")
    add_lm_options(parser)


def register(subparsers: argparse._SubParsersAction) -> None:
    discover = subparsers.add_parser("discover", help="run TIDE on your own repository or workspace folder")
    sub = discover.add_subparsers(dest="target", required=True)

    repo = sub.add_parser("repo", help="find bugs in a Python source tree and propose patches")
    repo.add_argument("path", help="root of the source tree (a git checkout or a plain folder)")
    repo.add_argument("--include", action="append", default=[], metavar="GLOB",
                      help="only these files (glob on paths relative to PATH, or a folder); repeatable")
    repo.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="skip these files; repeatable")
    repo.add_argument("--since", default=None, metavar="REF", help="only files changed since this git ref")
    repo.add_argument("--verify", default=None, metavar="CMD",
                      help="run this test command (e.g. \"python -m pytest -q\") on a temporary copy of PATH, "
                           "unpatched and then with each patch that applies, and report which patches fix tests; "
                           "this EXECUTES the project's code and the model's patches, inside a bubblewrap sandbox "
                           "(no network, none of your files; see docs/safety.md)")
    # Defaults live in tide_dspy.product.verify (120 s and 900 s), which is imported only when a command runs.
    repo.add_argument("--verify-timeout", type=positive_float, default=None, metavar="S",
                      help="seconds one test run may take before its sandbox is killed (default 120)")
    repo.add_argument("--verify-total", type=positive_float, default=None, metavar="S",
                      help="seconds all test runs together may take (default 900)")
    add_sandbox_options(repo, "--verify")
    _add_run_options(repo)
    repo.set_defaults(func=run_repo)

    ws = sub.add_parser("workspace", help="find hidden problems in a folder of .eml/.mbox/.ics/.md/.txt/.csv files")
    ws.add_argument("dir", help="the workspace folder")
    ws.add_argument(
        "--profile", default=None, help="profile.yaml: who the person is (full_name, occupation, about, today, ...)"
    )
    ws.add_argument(
        "--actions", default=None, help="actions.yaml: the action library (default: one action per PROBE type)"
    )
    ws.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                    help="skip these files (glob on paths relative to DIR, or a folder); repeatable")
    _add_run_options(ws)
    ws.set_defaults(func=run_workspace)


ALL_ROUNDS_FAILED = 3  # exit status of a run in which no round produced usable output


def _report(result, args: argparse.Namespace) -> int:
    from tide_dspy.product import write_report
    from tide_dspy.product.report import embedded_note
    from tide_dspy.util.text import print_line

    paths = write_report(result, args.out)
    print_line(f"report: {paths['report.md']} (also {paths['report.html'].name}, {paths['findings.json'].name}, "
               f"{paths['run.json'].name})")
    note = embedded_note(result)
    if note:
        print_line(f"note: {note}")
    if result.every_round_failed():
        print_line(f"tide: error: every round failed ({len(result.rounds)} of {len(result.rounds)}), so the report's "
                   f"'no findings' means nothing; first error: {result.first_error()}", file=sys.stderr)
        return ALL_ROUNDS_FAILED
    return 0


def _common(args: argparse.Namespace, tree: str) -> dict:
    from tide_dspy.util.safe_write import refuse_inside
    from tide_dspy.util.text import print_line

    check_output_folder(args.out)
    if not args.out_inside:
        refuse_inside(args.out, tree)
    return dict(
        lm=lm_from_options(LMOptions.from_namespace(args)),
        backbone=args.backbone,
        program=args.program,
        templates=args.templates,
        rounds=args.rounds,
        per_round=args.per_round,
        budget=budget_of(args),
        overrides=overrides_of(args),
        scan=scan_focus(args),
        progress=print_line,
    )


def out_lock(out: str) -> OutLock:
    """The lock on --out, which also refuses a link where a report file goes, before any LM work."""
    from tide_dspy.product.report import REPORT_FILES

    return OutLock(out, REPORT_FILES)


def scan_focus(args: argparse.Namespace) -> int | None:
    """--scan N, none with --no-scan, else the registered backbone's measured default."""
    from tide_dspy.backbones import BACKBONES

    if args.scan is not None:
        return args.scan or None
    registered = BACKBONES.get(args.backbone)
    return registered.discover_scan if registered is not None else None


def _dry_run(args: argparse.Namespace, instance, unit_of) -> int:
    from tide_dspy.product.run import estimate_discovery

    estimate = estimate_discovery(instance, lm=lm_from_options(LMOptions.from_namespace(args)), backbone=args.backbone,
                                  program=args.program, templates=args.templates, rounds=args.rounds,
                                  per_round=args.per_round, unit_of=unit_of, scan=scan_focus(args),
                                  overrides=overrides_of(args),
                                  progress=lambda line: print(line, flush=True))
    print(estimate.table())
    print("dry run: no model was called, no report written")
    return 0


def run_repo(args: argparse.Namespace) -> int:
    from tide_dspy.product import discover_repository

    if args.dry_run:
        from tide_dspy.product.run import repository_instance, repository_unit

        instance, _ = repository_instance(args.path, args.include, args.exclude, args.since, print)
        return _dry_run(args, instance, repository_unit)

    limits = {k: v for k, v in (("verify_timeout", args.verify_timeout), ("verify_total", args.verify_total))
              if v is not None}
    if limits and args.verify is None:
        raise ValueError("--verify-timeout and --verify-total need --verify CMD")
    sandbox = sandbox_options(args, args.verify is not None, "--verify CMD")
    common = _common(args, args.path)
    with out_lock(args.out):
        result = discover_repository(args.path, include=args.include, exclude=args.exclude, since=args.since,
                                     verify=args.verify, **limits, verify_sandbox=sandbox, **common)
        return _report(result, args)


def run_workspace(args: argparse.Namespace) -> int:
    from tide_dspy.product import discover_workspace

    if args.dry_run:
        from tide_dspy.product.run import workspace_instance, workspace_unit

        instance, ingested, _ = workspace_instance(args.dir, args.profile, args.actions, args.exclude, print)
        return _dry_run(args, instance, workspace_unit(ingested.sources))

    common = _common(args, args.dir)
    with out_lock(args.out):
        result = discover_workspace(args.dir, profile=args.profile, actions=args.actions, exclude=args.exclude,
                                    **common)
        return _report(result, args)
