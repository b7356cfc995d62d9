"""`tide distill | compile | tune | evaluate`: options in, one tide_dspy.workflows call, its typed result printed.

Outputs go to programs/<setting>/<backbone>/ (templates.json, tide.json, tune.json, provenance.json); evaluation
results to runs/<setting>/<backbone>/<method>-<split>/ unless --out says otherwise. Each run is tracked in MLflow
(tide_dspy.tracking.tracked_run) unless --no-track.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from tide_dspy.backbones.options import LMOptions, add_proposer_options, lm_from_options, proposer_from_options
from tide_dspy.budget import Limits, add_cost_options, add_max_cost_option
from tide_dspy.cli.common import (
    add_data_options,
    add_output_options,
    add_program_options,
    add_sandbox_options,
    add_split_options,
    add_workers_option,
    check_output_folder,
    command_line,
    sandbox_options,
)
from tide_dspy.methods import METHODS, floor_methods, lm_methods
from tide_dspy.tracking import add_traces_option
from tide_dspy.util.argtypes import count, percentage, positive_float, positive_int

if TYPE_CHECKING:
    from tide_dspy import workflows
    from tide_dspy.data.selection import Selection


def register(subparsers: argparse._SubParsersAction) -> None:
    d = subparsers.add_parser("distill", help="distill a template library from solved training problems")
    add_data_options(d, "train")
    d.add_argument("--max-cases", type=positive_int, default=None, help="at most N solved problems")
    d.add_argument("--max-attempts", type=positive_int, default=3,
                   help="dspy.Refine attempts per case (its N, the first included) until the abstraction check "
                        "passes; a template that still fails is dropped and counted (default: 3)")
    # The spelling of --max-attempts in the commands that shipped programs' provenance records.
    d.add_argument("--attempts", type=positive_int, dest="max_attempts", help=argparse.SUPPRESS)
    d.add_argument("--merge-threshold", type=percentage, default=80.0,
                   help="rapidfuzz token-set similarity (0-100) of name and of pattern at which templates merge")
    d.add_argument("--max-templates", type=positive_int, default=None,
                   help="cap on the library size, keeping the templates that absorbed the most cases (default: no "
                        "cap; the paper's libraries hold 40 workspace and 108 repository templates)")
    add_cost_options(d, judge=False)
    add_output_options(d)
    d.set_defaults(func=run_distill)

    c = subparsers.add_parser("compile", help="optimize a program's instructions on the train split")
    add_data_options(c, "train")
    add_program_options(c)
    add_split_options(c)
    c.add_argument("--method", default="tide", choices=lm_methods(),
                   help="the method whose program is compiled (default: tide; tide_dspy.methods)")
    add_workers_option(c, "validation instances and optimizer evaluations")
    c.add_argument("--optimizer", default="copro",
                   help="miprov2 | copro | gepa | simba | bootstrap, or a path to an optimizer YAML")
    c.add_argument("--demos", type=count, default=None, help="demos per predictor (default: the optimizer's; 0 for "
                                                           "instruction-only optimizers)")
    c.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                   help="override an optimizer argument, e.g. init.breadth=2 or compile.num_trials=3; repeatable")
    c.add_argument("--max-calls", type=positive_int, default=None, metavar="N",
                   help="stop the search once it has made N LM calls, the proposer's included (checked before "
                        "each evaluation; the validation before and after are outside the bound); the best "
                        "candidate so far is validated and kept if it beats the original, and a rerun with a "
                        "larger bound continues from the trial log")
    add_max_cost_option(c, "checked with --max-calls, before each evaluation of the search; the best candidate "
                           "so far is validated and kept if it beats the original, and a rerun with a larger cap "
                           "continues from the trial log")
    c.add_argument("--fresh", action="store_true",
                   help="discard the trial log (programs/<setting>/<backbone>/compile/trials.jsonl) and start over; "
                        "by default a rerun replays the evaluations already scored")
    c.add_argument("--keep-worse", action="store_true",
                   help="save the compiled program even when its validation score is not higher than the "
                        "original's (by default the original, uncompiled program is kept then)")
    c.add_argument("--no-register", action="store_true", help="do not register the program in the model registry")
    c.add_argument("--autolog", action="store_true",
                   help="also run mlflow.dspy autologging (optimizer params, best-program state, and data tables "
                        "that hold every rendered instance: large for repositories)")
    add_traces_option(c)
    add_cost_options(c)
    add_output_options(c)
    add_proposer_options(c)
    c.set_defaults(func=run_compile)

    t = subparsers.add_parser("tune", help="Optuna search over rounds, per-round k, template pool size, temperature")
    add_data_options(t, "train")
    add_split_options(t)
    t.add_argument("--templates", default=None, help="template library (default: programs/<setting>/<backbone>/"
                                                     "templates.json)")
    t.add_argument("--program", default=None, help="start each trial from this program's instructions (default: "
                                                   "programs/<setting>/<backbone>/tide.json when it exists)")
    add_workers_option(t, "validation instances of a trial")
    t.add_argument(
        "--trials", type=positive_int, required=True, help="trials to run now (the study resumes across runs)"
    )
    t.add_argument("--storage", default="sqlite:///optuna.db",
                   help="Optuna storage URL (open it with optuna-dashboard). Several `tide tune` processes, on one "
                        "machine or many, share a study through an RDB URL such as postgresql://user@host/db "
                        "(a password is better kept in ~/.pgpass or PGPASSWORD than in the URL)")
    t.add_argument("--study", default=None, help="study name (default: tide-<setting>-<backbone>)")
    add_cost_options(t)
    add_output_options(t)
    t.set_defaults(func=run_tune)

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
    add_cost_options(e, budget=True)
    add_output_options(e)
    e.set_defaults(func=run_evaluate)


# ---- options -> library calls ----

def _selection(args: argparse.Namespace) -> Selection:
    from tide_dspy.data.selection import Selection
    from tide_dspy.domains import get_setting

    ids = [i.strip() for i in args.ids.split(",") if i.strip()] if args.ids else None
    setting = get_setting(args.setting) if args.setting else None  # the one lookup of --setting
    return Selection(setting=setting, split=args.split, data=args.data, data_version=args.data_version, ids=ids,
                     max_context_tokens=args.max_context_tokens, limit=args.limit, skip_invalid=args.skip_invalid)


def _common(args: argparse.Namespace) -> dict:
    """The options every step takes: its instances, its LM (made once the inputs check out), where it writes and
    how it is tracked."""
    from tide_dspy import workflows

    options = LMOptions.from_namespace(args)
    return dict(
        lm=lambda: lm_from_options(options),
        backbone=args.backbone,
        judge=options.judge_spec(args.judge),
        programs=args.programs,
        tracking=workflows.Tracking(enabled=not args.no_track, uri=args.tracking_uri, command_line=command_line(args)),
    )


def _proposer(args: argparse.Namespace):
    """A maker of the --prompt-model LM (None without it), called once the inputs check out."""
    options = LMOptions.from_namespace(args)
    if options.prompt_model is None:
        proposer_from_options(options)  # refuses --prompt-api-base alone
        return None
    return lambda: proposer_from_options(options)


def _estimating(args: argparse.Namespace) -> dict:
    """The options an estimate takes: the LM (built, never called), backbone, judge, programs and prices."""
    return dict(lm=lambda: lm_from_options(LMOptions.from_namespace(args)), backbone=args.backbone, judge=args.judge,
                programs=args.programs, limits=Limits.from_namespace(args))


def print_estimate(estimate) -> int:
    print(estimate.table())
    print("dry run: no model was called")
    return 0


def print_distill_plan(plan: workflows.DistillPlan) -> int:
    from tide_dspy.util.text import print_line

    print(f"{len(plan.cases)} solved cases to distil (instance, problem, category):")
    for instance_id, problem_id, category in plan.cases:
        print_line(f"  {instance_id}  {problem_id}" + (f"  {category}" if category else ""))
    return print_estimate(plan.estimate)


def _shape(args: argparse.Namespace) -> workflows.ProgramShape:
    from tide_dspy import workflows

    return workflows.ProgramShape(rounds=args.rounds, per_round=args.per_round, max_evidence=args.max_evidence,
                                  shuffle_context=args.shuffle_context, scan=args.scan, stop_on=args.stop_on,
                                  template_names=args.show_template_names, multi_dedup=args.multi_dedup)


# ---- commands ----

def run_distill(args: argparse.Namespace) -> int:
    from tide_dspy import workflows

    if args.dry_run:
        return print_distill_plan(workflows.estimate_distill(
            _selection(args), lm=lambda: lm_from_options(LMOptions.from_namespace(args)), backbone=args.backbone,
            max_cases=args.max_cases, max_attempts=args.max_attempts, limits=Limits.from_namespace(args)))
    r = workflows.distill(_selection(args), max_cases=args.max_cases, max_attempts=args.max_attempts,
                          merge_threshold=args.merge_threshold, max_templates=args.max_templates, **_common(args))
    print(f"{r.templates} templates from {r.cases} solved cases: {r.passed} passed the abstraction "
          f"check, {r.failed} failed and were dropped, {r.merges} merged, {r.capped} capped; "
          f"mean abstraction score {r.mean_score} (best drafts of all cases: {r.draft_mean_score}) "
          f"in {r.seconds}s -> {r.path if r.written else 'nothing written'}")
    if not r.written:
        print(f"no template passed the abstraction check, so {r.path} is left as it was; the failures and their "
              f"leaked tokens are logged above (try more --max-attempts or a larger backbone)", file=sys.stderr)
        return 1
    return 0


def run_compile(args: argparse.Namespace) -> int:
    from tide_dspy import workflows
    from tide_dspy.evaluation import format_table
    from tide_dspy.optimize import SCAN_RECALL
    from tide_dspy.trials import Budget

    if args.dry_run:
        return print_estimate(workflows.estimate_compile(
            _selection(args), method=args.method, shape=_shape(args), templates=args.templates,
            optimizer=args.optimizer, demos=args.demos, options=args.opt, val_fraction=args.val_fraction,
            seed=args.seed, prompt_model=args.prompt_model, **_estimating(args)))
    r = workflows.compile_and_save(
        _selection(args), method=args.method, shape=_shape(args), templates=args.templates, optimizer=args.optimizer,
        metric=args.metric, demos=args.demos, options=args.opt, val_fraction=args.val_fraction, seed=args.seed,
        workers=args.workers, register=not args.no_register, autolog=args.autolog, traces=args.traces,
        budget=Budget(max_calls=args.max_calls, max_cost=args.max_cost),
        limits=Limits(prices=args.price, judge_prices=args.judge_price), fresh=args.fresh,
        keep_worse=args.keep_worse, prompt_lm=_proposer(args), **_common(args))
    s = r.search
    scan_only = args.metric == SCAN_RECALL  # the validation ran the scan alone: its tables would show no findings
    held_out = f"{r.n_val} held-out train instance{'s' if r.n_val != 1 else ''}"
    if not scan_only:
        print(f"validation ({held_out}), before:\n{format_table(r.before)}\n")
    print(f"search: {s['trials']} trials, {s['evaluations']} evaluations ({s['replayed']} replayed from the trial "
          f"log), {s['lm_calls']} LM calls; best train score {s['best_score']}")
    if r.stopped:
        print(f"stopped early: {r.stopped}. The best candidate so far is validated and kept only if it beats the "
              "original. Rerun the same command with a larger --max-calls / --max-cost to continue.", file=sys.stderr)
    if r.path is None:
        print("no candidate was scored, so nothing was saved", file=sys.stderr)
        return 1
    if r.after is not None and not scan_only:
        print(f"after {r.optimizer}:\n{format_table(r.after)}\n")
    print(f"validation ({held_out}) {r.metric}: {r.metric_before:.4f} -> {r.metric_after:.4f}; times {r.seconds}")
    print(compile_verdict(r))
    if r.n_val < FEW_VALIDATION:
        print(f"note: on {held_out} this choice is selection, not evidence that either program is better")
    print(f"program -> {r.path}" + (f"; registered {r.registered}" if r.registered else ""))
    return 0


FEW_VALIDATION = 10  # held-out instances below which a compile's before/after is read as selection only


def compile_verdict(r: workflows.CompileResult) -> str:
    """Which program was saved, and why."""
    scores = f"({r.metric_before:.4f} → {r.metric_after:.4f})"
    if r.improved:
        return f"compile improved validation {scores}; saved the compiled program"
    if r.kept == "compiled":
        return f"compile did not improve validation {scores}; saved the compiled program anyway (--keep-worse)"
    return f"compile did not improve validation {scores}; kept the original"


def run_tune(args: argparse.Namespace) -> int:
    from tide_dspy import workflows

    if args.dry_run:
        return print_estimate(workflows.estimate_tune(
            _selection(args), trials=args.trials, templates=args.templates, program=args.program,
            val_fraction=args.val_fraction, seed=args.seed, **_estimating(args)))

    def on_trial(trial, value):
        print(f"trial {trial.number}: {args.metric}={value:.4f} {trial.params}", flush=True)

    r = workflows.tune_and_save(
        _selection(args), trials=args.trials, templates=args.templates, program=args.program, metric=args.metric,
        val_fraction=args.val_fraction, seed=args.seed, workers=args.workers, storage=args.storage,
        study=args.study, on_trial=on_trial, **_common(args))
    print(f"best trial {r.best_trial}: {r.metric}={r.best_value:.4f} with {r.best_params} "
          f"({r.trials} trials in the study)")
    print(f"open the study: optuna-dashboard {r.storage}")
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    from tide_dspy import workflows
    from tide_dspy.evaluation import format_table

    if args.dry_run:
        return print_estimate(workflows.estimate_split(
            _selection(args), program=args.program, method=args.method, shape=_shape(args), templates=args.templates,
            **_estimating(args)))
    verification = workflows.RepoVerification(repo=args.verify_repo, command=args.verify_command,
                                          timeout=args.verify_timeout,
                                          sandbox=sandbox_options(args, args.verify_repo is not None,
                                                                  "--verify-repo DIR"))
    r = workflows.evaluate_split(
        _selection(args), program=args.program, method=args.method, shape=_shape(args), templates=args.templates,
        workers=args.workers, out=args.out, resume=args.resume, fresh=args.fresh,
        verification=verification, check_out=check_output_folder, limits=Limits.from_namespace(args),
        traces=args.traces, **_common(args))
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
