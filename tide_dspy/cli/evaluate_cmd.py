"""`tide evaluate`: score a program or a method on a split and print the coverage / F1 table.

Results go to runs/<setting>/<backbone>/<method>-<split>/ unless --out says otherwise; the run is tracked in MLflow
(tide_dspy.tracking.tracked_run) unless --no-track.
"""

from __future__ import annotations

import argparse
import sys

from tide_dspy.cli.argtypes import positive_float
from tide_dspy.cli.common import (
    check_output_folder,
    estimate_arguments,
    print_estimate,
    selection_of,
    shape_of,
    step_arguments,
)
from tide_dspy.cli.options import (
    add_cost_options,
    add_data_options,
    add_output_options,
    add_program_options,
    add_sandbox_options,
    add_traces_option,
    add_workers_option,
    budget_of,
    overrides_of,
    sandbox_options,
)
from tide_dspy.methods import METHODS, floor_methods


def register(subparsers: argparse._SubParsersAction) -> None:
    e = subparsers.add_parser("evaluate", help="score a program on a split and print the coverage / F1 table")
    add_data_options(e, "test")
    add_program_options(e)
    src = e.add_mutually_exclusive_group(required=True)
    src.add_argument("--program", default=None, help="a saved program: JSON path or models:/<name>/<version>")
    src.add_argument("--method", default=None, choices=list(METHODS),
                     help=f"a method of tide_dspy.methods, built fresh; {', '.join(floor_methods())}: the chance "
                          "floors (no LM call)")
    add_workers_option(e, "instances")
    e.add_argument("--out", default=None, help="results folder (default: runs/<setting>/<backbone>/<method>-<split>)")
    add_traces_option(e)
    again = e.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="skip instances already scored in --out")
    again.add_argument("--fresh", action="store_true", help="discard earlier results in --out")
    e.add_argument("--verify-repo", default=None, metavar="DIR",
                   help="repository setting: a local clone of the instances' repository, in an environment where "
                        "its tests run; each gold problem's fail_to_pass/pass_to_pass tests run at anchor_commit "
                        "with the matched finding's patch, in a temporary copy inside a bubblewrap sandbox (this "
                        "EXECUTES the repository's code and the model's patches; see docs/safety.md)")
    e.add_argument(
        "--verify-command",
        default=None,
        metavar="CMD",
        help="pytest command the node ids are appended to (default: python -m pytest -q -p no:cacheprovider)",
    )
    e.add_argument("--verify-timeout", type=positive_float, default=None, metavar="S",
                   help="seconds per test run (default 120)")
    add_sandbox_options(e, "--verify-repo")
    add_cost_options(e)
    add_output_options(e)
    e.set_defaults(func=run_evaluate)


def run_evaluate(args: argparse.Namespace) -> int:
    from tide_dspy import workflows
    from tide_dspy.evaluation import format_table

    if args.dry_run:
        return print_estimate(workflows.estimate_split(
            selection_of(args), program=args.program, method=args.method, shape=shape_of(args),
            templates=args.templates, **estimate_arguments(args)))
    verification = workflows.RepoVerification(repo=args.verify_repo, command=args.verify_command,
                                          timeout=args.verify_timeout,
                                          sandbox=sandbox_options(args, args.verify_repo is not None,
                                                                  "--verify-repo DIR"))
    r = workflows.evaluate_split(
        selection_of(args), program=args.program, method=args.method, shape=shape_of(args), templates=args.templates,
        workers=args.workers, out=args.out, resume=args.resume, fresh=args.fresh,
        verification=verification, check_out=check_output_folder, budget=budget_of(args),
        overrides=overrides_of(args), traces=args.traces, **step_arguments(args))
    print(format_table(r.result))
    if r.executed:
        print(execution_line(r.result))
    print(f"{r.seconds}s; results -> {r.results_path}")
    if (r.result.budget or {}).get("stopped"):
        return STOPPED_AT_BUDGET
    return nothing_scored(r.result) or every_instance_failed(r.result)


STOPPED_AT_BUDGET = 4  # exit status of an evaluation that --max-cost stopped before every instance ran


def nothing_scored(result) -> int:
    """ALL_ROUNDS_FAILED with a line naming the flag that fixes it when every selected instance was left out as over
    the backbone's window, so the table scores none; else 0."""
    import re

    from tide_dspy.cli.discover_cmd import ALL_ROUNDS_FAILED
    from tide_dspy.util.text import print_line

    if result.n_instances or not result.n_skipped:
        return 0
    windows = [int(m.group(1).replace(",", "")) for why in result.skipped.values()
               for m in [re.search(r"over the ([\d,]+)-token window", why)] if m]
    example = f" (e.g. --max-context-tokens {min(windows) // 2})" if windows else ""
    print_line(f"tide: error: no instance was scored: the {result.n_skipped} selected were all over the backbone's "
               f"window (the table above lists why). Pass --max-context-tokens N to select the instances whose "
               f"context fits N tokens, smallest first{example}, instead of --limit or --ids alone (or a smaller "
               "--max-tokens, where the output asked for takes most of the window; or a backbone with a larger one)",
               file=sys.stderr)
    return ALL_ROUNDS_FAILED


def every_instance_failed(result) -> int:
    """ALL_ROUNDS_FAILED (as `tide discover` returns) with a line saying so when no instance produced usable
    output, so the table's zeros mean nothing; else 0."""
    from tide_dspy.cli.discover_cmd import ALL_ROUNDS_FAILED
    from tide_dspy.util.text import print_line

    if result.n_instances == 0 or result.n_failed < result.n_instances:
        return 0
    print_line(f"tide: error: every instance failed ({result.n_failed} of {result.n_instances}), so the table's "
               f"zeros mean nothing; the errors are in {result.out_path or 'the log above'} (fix the cause and "
               "run again with --resume)", file=sys.stderr)
    return ALL_ROUNDS_FAILED


def execution_line(result) -> str:
    judged = (result.coverage or {}).get("resolution")
    judge = "-" if judged is None else f"{100 * judged:.2f}%"
    ex = result.execution
    if not ex:
        return "execution-based resolution: no instance had an anchor_commit to run tests at"
    return (f"execution-based resolution: {ex['resolved']}/{ex['problems']} gold problems resolved by tests "
            f"({100 * ex['rate']:.2f}%) over {ex['instances']} instance(s); judge ({result.judge}) resolution "
            f"coverage: {judge}")
