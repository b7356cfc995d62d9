"""`tide distill | compile | tune`: options in, one tide_dspy.workflows call, its typed result printed.

Outputs go to programs/<setting>/<backbone>/ (templates.json, tide.json, tune.json, provenance.json). Each run is
tracked in MLflow (tide_dspy.tracking.tracked_run) unless --no-track.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from tide_dspy.cli.argtypes import count, percentage, positive_int
from tide_dspy.cli.common import estimate_arguments, print_estimate, selection_of, shape_of, step_arguments
from tide_dspy.cli.options import (
    add_cost_options,
    add_data_options,
    add_output_options,
    add_program_options,
    add_split_options,
    add_traces_option,
    add_workers_option,
    budget_of,
    overrides_of,
    price,
)
from tide_dspy.methods import lm_methods

if TYPE_CHECKING:
    from tide_dspy import workflows


def register(subparsers: argparse._SubParsersAction) -> None:
    d = subparsers.add_parser("distill", help="distill a template library from solved training problems")
    add_data_options(d, "train")
    d.add_argument("--max-cases", type=positive_int, default=None, help="at most N solved problems")
    d.add_argument("--max-attempts", type=positive_int, default=3,
                   help="dspy.Refine attempts per case (its N, the first included) until the abstraction check "
                        "passes; a template that still fails is dropped and counted (default: 3)")
    d.add_argument("--merge-threshold", type=percentage, default=80.0,
                   help="rapidfuzz token-set similarity (0-100) of name and of pattern at which templates merge")
    d.add_argument("--max-templates", type=positive_int, default=None,
                   help="cap on the library size, keeping the templates that absorbed the most cases (default: no "
                        "cap; the paper's libraries hold 40 workspace and 108 repository templates)")
    add_cost_options(d, judge=False, budget=False)
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
    add_cost_options(c, stops="checked before each evaluation of the search, the proposer's calls included (the "
                              "validation before and after are outside the cap); the best candidate so far is "
                              "validated and kept if it beats the original, and a rerun with a larger cap continues "
                              "from the trial log")
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
    add_cost_options(t, stops="no validation instance of a trial starts once what was spent plus its estimate would "
                              "pass the cap; that trial is pruned and the study stops (rerun to continue it)")
    add_output_options(t)
    t.set_defaults(func=run_tune)


def add_proposer_options(parser: argparse.ArgumentParser) -> None:
    """The options of a command whose optimizer proposes instructions with a model of its own (`tide compile`)."""
    parser.add_argument("--prompt-model", default=None, metavar="BACKBONE",
                        help="the model that proposes or reflects on instructions (MIPROv2's and COPRO's "
                             "prompt_model, GEPA's reflection_lm, SIMBA's prompt_model): any backbone name "
                             "(default: the backbone being compiled); its calls count toward --max-calls and "
                             "--max-cost and appear in lm_usage.json")
    parser.add_argument("--prompt-api-base", default=None, metavar="URL",
                        help="where --prompt-model's calls go, when not to its provider (never --api-base)")
    parser.add_argument("--prompt-price", type=price, default=None, metavar="IN,OUT[,CACHED]",
                        help="--prompt-model's USD per million tokens, where LiteLLM's price map has none")


def proposer_of(args: argparse.Namespace):
    """A maker of the --prompt-model LM (None without it), called once the inputs check out."""
    from tide_dspy.backbones.options import LMOptions, proposer_from_options

    options = LMOptions.from_namespace(args)
    if options.prompt_model is None:
        proposer_from_options(options)  # refuses --prompt-api-base alone
        return None
    return lambda: proposer_from_options(options)


def print_distill_plan(plan: workflows.DistillPlan) -> int:
    from tide_dspy.util.text import print_line

    print(f"{len(plan.cases)} solved cases to distil (instance, problem, category):")
    for instance_id, problem_id, category in plan.cases:
        print_line(f"  {instance_id}  {problem_id}" + (f"  {category}" if category else ""))
    return print_estimate(plan.estimate)


# ---- commands ----

def run_distill(args: argparse.Namespace) -> int:
    from tide_dspy import workflows

    if args.dry_run:
        estimating = {k: v for k, v in estimate_arguments(args).items() if k in ("lm", "backbone", "overrides")}
        return print_distill_plan(workflows.estimate_distill(
            selection_of(args), max_cases=args.max_cases, max_attempts=args.max_attempts, **estimating))
    r = workflows.distill(selection_of(args), max_cases=args.max_cases, max_attempts=args.max_attempts,
                          merge_threshold=args.merge_threshold, max_templates=args.max_templates,
                          **step_arguments(args))
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

    if args.dry_run:
        return print_estimate(workflows.estimate_compile(
            selection_of(args), method=args.method, shape=shape_of(args), templates=args.templates,
            optimizer=args.optimizer, demos=args.demos, options=args.opt, val_fraction=args.val_fraction,
            seed=args.seed, prompt_lm=proposer_of(args), **estimate_arguments(args)))
    r = workflows.compile_and_save(
        selection_of(args), method=args.method, shape=shape_of(args), templates=args.templates,
        optimizer=args.optimizer, metric=args.metric, demos=args.demos, options=args.opt,
        val_fraction=args.val_fraction, seed=args.seed, workers=args.workers, register=not args.no_register,
        autolog=args.autolog, traces=args.traces, budget=budget_of(args), overrides=overrides_of(args),
        fresh=args.fresh, keep_worse=args.keep_worse, prompt_lm=proposer_of(args), **step_arguments(args))
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
            selection_of(args), trials=args.trials, templates=args.templates, program=args.program,
            val_fraction=args.val_fraction, seed=args.seed, **estimate_arguments(args)))

    def on_trial(trial, value):
        print(f"trial {trial.number}: {args.metric}={value:.4f} {trial.params}", flush=True)

    r = workflows.tune_and_save(
        selection_of(args), trials=args.trials, templates=args.templates, program=args.program, metric=args.metric,
        val_fraction=args.val_fraction, seed=args.seed, workers=args.workers, storage=args.storage,
        study=args.study, on_trial=on_trial, budget=budget_of(args), overrides=overrides_of(args),
        **step_arguments(args))
    if r.stopped:
        print(f"stopped early: {r.stopped}. Rerun the same command with a larger --max-calls / --max-cost to "
              "continue the study.", file=sys.stderr)
    if r.best_trial is None:
        print("no trial finished, so nothing was saved", file=sys.stderr)
        return 1
    print(f"best trial {r.best_trial}: {r.metric}={r.best_value:.4f} with {r.best_params} "
          f"({r.trials} trials in the study)")
    print(f"open the study: optuna-dashboard {r.storage}")
    return 0
