"""`tide distill | compile | tune | evaluate`: template libraries, optimized programs and scores, each an MLflow run.

Outputs go to programs/<setting>/<backbone>/ (templates.json, tide.json, tune.json, provenance.json); evaluation
results to runs/<setting>/<backbone>/<method>-<split>/ unless --out says otherwise.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from tide_dspy.cli.common import add_lm_options, check_output_folder, count, lm_from_args, positive_int
from tide_dspy.schemas import SETTING_NAMES


def make_judge(args: argparse.Namespace):
    from tide_dspy.metrics import make_judge as build

    return build(args.judge)


# ---- options ----

def _data_options(p: argparse.ArgumentParser, split: str) -> None:
    p.add_argument("--setting", choices=SETTING_NAMES, required=split != "test")
    p.add_argument("--split", default=split, help=f"data split (default: {split})")
    p.add_argument("--data", default=None, help="the setting's JSONL file or folder (default: $TIDE_DATA/<setting>, "
                                                "else ../shared/data/<setting> beside the repository)")
    p.add_argument("--ids", default=None, help="only these instance ids (comma-separated)")
    p.add_argument("--max-context-tokens", type=positive_int, default=None,
                   help="only instances whose rendered context fits this many (estimated) tokens, smallest first")
    p.add_argument("--limit", type=positive_int, default=None, help="at most N instances (after the filters above)")


def _output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--programs", default="programs", help="root of the programs/<setting>/<backbone>/ tree")
    p.add_argument("--no-track", action="store_true", help="do not log an MLflow run")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, "
                                                        "else sqlite:///mlflow.db)")
    add_lm_options(p)


def _program_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--templates", default=None, help="template library (default: programs/<setting>/<backbone>/"
                                                     "templates.json)")
    p.add_argument("--rounds", type=positive_int, default=None, help="rounds T (default: the setting's)")
    p.add_argument("--per-round", type=positive_int, default=None, help="new findings per round k (default: the setting's)")
    p.add_argument("--max-evidence", type=positive_int, default=None,
                   help="the most artifacts one finding may cite (default: the setting's, 4 workspace / 2 repository)")
    p.add_argument("--shuffle-context", type=int, default=None, metavar="SEED",
                   help="show the artifacts in a seeded shuffled order (to measure position effects)")


def _workers_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--workers", type=positive_int, default=1,
                   help=f"{what} at once (threads; default 1). Worth it against a served backbone (vLLM, llama.cpp "
                        "server, a hosted API); the embedded engine runs one call at a time")


def _split_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metric", default="retrieval-f1",
                   help="component[-kind]: retrieval|identification|resolution|mean, kind f1 (default)|coverage")
    p.add_argument("--val-fraction", type=float, default=0.25, help="held-out share of train used for validation")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/validation split")


def register(subparsers: argparse._SubParsersAction) -> None:
    d = subparsers.add_parser("distill", help="distill a template library from solved training problems")
    _data_options(d, "train")
    d.add_argument("--max-cases", type=positive_int, default=None, help="at most N solved problems")
    d.add_argument("--attempts", type=positive_int, default=3,
                   help="dspy.Refine attempts per case until the abstraction check passes; a template that still "
                        "fails is dropped and counted (default: 3)")
    d.add_argument("--merge-threshold", type=float, default=80.0,
                   help="rapidfuzz token-set similarity (0-100) of name and of pattern at which templates merge")
    d.add_argument("--max-templates", type=positive_int, default=32,
                   help="cap on the library size, so it fits the context (default: 32; the paper's hold a few dozen)")
    _output_options(d)
    d.set_defaults(func=run_distill)

    c = subparsers.add_parser("compile", help="optimize a program's instructions on the train split")
    _data_options(c, "train")
    _program_options(c)
    _split_options(c)
    c.add_argument("--method", default="tide", help="program to compile (default: tide)")
    _workers_option(c, "validation instances and optimizer evaluations")
    c.add_argument("--optimizer", default="copro",
                   help="miprov2 | copro | gepa | simba | bootstrap, or a path to an optimizer YAML")
    c.add_argument("--demos", type=count, default=None, help="demos per predictor (default: the optimizer's; 0 for "
                                                           "instruction-only optimizers)")
    c.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                   help="override an optimizer argument, e.g. init.breadth=2 or compile.num_trials=3; repeatable")
    c.add_argument("--no-register", action="store_true", help="do not register the program in the model registry")
    c.add_argument("--autolog", action="store_true",
                   help="also run mlflow.dspy autologging (optimizer params, best-program state, and data tables "
                        "that hold every rendered instance: large for repositories)")
    _output_options(c)
    c.set_defaults(func=run_compile)

    t = subparsers.add_parser("tune", help="Optuna search over rounds, per-round k, template pool size, temperature")
    _data_options(t, "train")
    _split_options(t)
    t.add_argument("--templates", default=None, help="template library (default: programs/<setting>/<backbone>/"
                                                     "templates.json)")
    t.add_argument("--program", default=None, help="start each trial from this program's instructions (default: "
                                                   "programs/<setting>/<backbone>/tide.json when it exists)")
    _workers_option(t, "validation instances of a trial")
    t.add_argument("--trials", type=positive_int, required=True, help="trials to run now (the study resumes across runs)")
    t.add_argument("--storage", default="sqlite:///optuna.db",
                   help="Optuna storage URL (open it with optuna-dashboard). Several `tide tune` processes, on one "
                        "machine or many, share a study through an RDB URL such as postgresql://user@host/db "
                        "(a password is better kept in ~/.pgpass or PGPASSWORD than in the URL)")
    t.add_argument("--study", default=None, help="study name (default: tide-<setting>-<backbone>)")
    _output_options(t)
    t.set_defaults(func=run_tune)

    e = subparsers.add_parser("evaluate", help="score a program on a split and print the coverage / F1 table")
    _data_options(e, "test")
    _program_options(e)
    src = e.add_mutually_exclusive_group(required=True)
    src.add_argument("--program", default=None, help="a saved program: JSON path or models:/<name>/<version>")
    src.add_argument("--method", default=None,
                     choices=("tide", "single", "multi", "iter", "iter-demos", "random", "first-listed"),
                     help="random / first-listed: the chance floors (no LM call)")
    e.add_argument("--demos", type=positive_int, default=3, help="solved train examples for iter-demos")
    _workers_option(e, "instances")
    e.add_argument("--out", default=None, help="results folder (default: runs/<setting>/<backbone>/<method>-<split>)")
    again = e.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="skip instances already scored in --out")
    again.add_argument("--fresh", action="store_true", help="discard earlier results in --out")
    e.add_argument("--verify-repo", default=None, metavar="DIR",
                   help="repository setting: a local clone of the instances' repository, in an environment where "
                        "its tests run; each gold problem's fail_to_pass/pass_to_pass tests run at anchor_commit "
                        "with the matched finding's patch, in a temporary copy (this EXECUTES the repository's code)")
    e.add_argument("--verify-command", default=None, metavar="CMD",
                   help="pytest command the node ids are appended to (default: python -m pytest -q -p no:cacheprovider)")
    e.add_argument("--verify-timeout", type=float, default=None, metavar="S", help="seconds per test run (default 120)")
    _output_options(e)
    e.set_defaults(func=run_evaluate)


# ---- shared steps ----

def program_dir(args: argparse.Namespace, setting: str, root: str | None = None) -> Path:
    from tide_dspy.programs import program_dir

    return program_dir(setting, args.backbone, root=root or args.programs)


def load_split(args: argparse.Namespace, setting: str):
    from tide_dspy.data import load_instances
    from tide_dspy.evaluation import data_path, select_instances

    path = data_path(setting, args.data)
    instances = load_instances(path, setting=setting, split=args.split)
    if args.ids:
        wanted = [i.strip() for i in args.ids.split(",") if i.strip()]
        known = {i.instance_id for i in instances}
        missing = [i for i in wanted if i not in known]
        if missing:
            raise ValueError(f"--ids: {missing} not in the {args.split} split of {path}")
        instances = [i for i in instances if i.instance_id in wanted]
    instances = select_instances(instances, max_context_tokens=args.max_context_tokens, limit=args.limit)
    if not instances:
        raise ValueError(f"{path}: no {setting} instances in split {args.split!r} after the filters")
    return instances, path


def templates_path(args: argparse.Namespace, setting: str) -> Path:
    return Path(args.templates) if args.templates else program_dir(args, setting) / "templates.json"


def command_line(args: argparse.Namespace) -> str:
    """An equivalent command line, every option spelled out (defaults included), for provenance records; credentials
    in URLs are scrubbed."""
    from tide_dspy.backbones.registry import scrub_text

    parts = ["tide", args.command]
    for dest, value in vars(args).items():
        if dest in ("command", "func", "verbose") or value is None or value is False or value == []:
            continue
        flag = "--" + dest.replace("_", "-")
        for v in value if isinstance(value, list) else [value]:
            parts += [flag] if v is True else [flag, scrub_text(str(v))]
    return " ".join(shlex.quote(p) for p in parts)


def record_provenance(args: argparse.Namespace, folder: Path, artifact: str, **info) -> None:
    """provenance.json beside the artifacts: for each file, the command that made it and when."""
    from tide_dspy.backbones.registry import scrub_secrets
    from tide_dspy.data.records import read_json_file

    path = folder / "provenance.json"
    data = read_json_file(path, "") if path.exists() else {}
    data[artifact] = scrub_secrets({"command": command_line(args),
                                    "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), **info})
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")


def _base_params(args: argparse.Namespace, instances, lm) -> dict:
    from tide_dspy.backbones import describe_lm
    from tide_dspy.tracking import dataset_hash

    return {"split": args.split, "n_instances": len(instances), "dataset_hash": dataset_hash(instances),
            "judge": args.judge, "lm": describe_lm(lm)}


def _artifact(path: Path, folder: str | None = None) -> None:
    import mlflow

    if mlflow.active_run() is not None and Path(path).exists():
        mlflow.log_artifact(str(path), artifact_path=folder)


# ---- commands ----

def run_distill(args: argparse.Namespace) -> int:
    from tide_dspy.templates import distill_library, solved_cases
    from tide_dspy.tracking import dataset_hash, log_usage, tracked_run

    setting = args.setting
    instances, _ = load_split(args, setting)
    if args.max_cases is not None:
        instances = _cap_cases(instances, args.max_cases)
    lm = lm_from_args(args)
    out = program_dir(args, setting) / "templates.json"
    params = {**_base_params(args, instances, lm), "merge_threshold": args.merge_threshold,
              "attempts": args.attempts, "max_templates": args.max_templates, "cases": len(solved_cases(instances))}
    with tracked_run("distill", setting=setting, backbone=args.backbone, params=params, uri=args.tracking_uri,
                     enabled=not args.no_track):
        t0 = time.perf_counter()
        library = distill_library(instances, setting, lm=lm, attempts=args.attempts,
                                  merge_threshold=args.merge_threshold, max_templates=args.max_templates)
        seconds = round(time.perf_counter() - t0, 1)
        library.meta.update(backbone=args.backbone, dataset_hash=dataset_hash(instances), seconds=seconds)
        meta, scores = library.meta, library.meta["abstraction"]
        counts = {"cases": meta["cases"], "passed": meta["passed"], "failed": meta["failed"],
                  "merges": meta["merges"], "capped": len(meta["capped"]), "templates": len(library)}
        if len(library):
            library.save(out)
            record_provenance(args, out.parent, out.name, seconds=seconds, **counts,
                              mean_abstraction_score=scores["mean_score"],
                              draft_mean_abstraction_score=scores["draft_mean_score"])
        if not args.no_track:
            import mlflow

            mlflow.log_metrics({**counts, "seconds": seconds, "draft_mean_abstraction_score": scores["draft_mean_score"],
                                **({"mean_abstraction_score": scores["mean_score"]}
                                   if scores["mean_score"] is not None else {})})
            log_usage({"backbone": meta["lm_usage"]})
            mlflow.log_dict({"failures": meta["failures"]}, "distill_failures.json")
            _artifact(out)
    print(f"{len(library)} templates from {meta['cases']} solved cases: {meta['passed']} passed the abstraction "
          f"check, {meta['failed']} failed and were dropped, {meta['merges']} merged, {len(meta['capped'])} capped; "
          f"mean abstraction score {scores['mean_score']} (best drafts of all cases: {scores['draft_mean_score']}) "
          f"in {seconds}s -> {out if len(library) else 'nothing written'}")
    if not len(library):
        print(f"no template passed the abstraction check, so {out} is left as it was; the failures and their "
              f"leaked tokens are logged above (try more --attempts or a larger backbone)", file=sys.stderr)
        return 1
    return 0


def _cap_cases(instances, max_cases: int):
    """Keep whole instances, and trim the last one's problems, so that at most max_cases solved cases remain."""
    from tide_dspy.templates import solved_cases

    kept, left = [], max_cases
    for inst in instances:
        if left <= 0:
            break
        solved = [p for _, p in solved_cases([inst])][:left]
        kept.append(inst.model_copy(update={"problems": solved}))
        left -= len(solved)
    return kept


def _build(args: argparse.Namespace, setting: str, method: str, train_instances=None):
    """A fresh program of `method`; iter-demos takes its solved examples from `train_instances` (default: the
    train split)."""
    from tide_dspy.data import load_instances
    from tide_dspy.evaluation import data_path
    from tide_dspy.programs import build_program
    from tide_dspy.templates import solved_demos

    templates = demos = None
    if method == "tide":
        templates = templates_path(args, setting)
    if method == "iter-demos":
        if train_instances is None:
            train_instances = load_instances(data_path(setting, args.data), setting=setting, split="train")
        demos = solved_demos(train_instances, setting, args.demos)
    return build_program(method, setting, templates=templates, demos=demos, max_rounds=args.rounds,
                         per_round=args.per_round, max_evidence=getattr(args, "max_evidence", None),
                         context_order_seed=getattr(args, "shuffle_context", None))


def run_compile(args: argparse.Namespace) -> int:
    import mlflow

    from tide_dspy.evaluation import evaluate, format_table
    from tide_dspy.optimize import aggregate_value, compile_program, parse_options, split_train
    from tide_dspy.programs import save_program
    from tide_dspy.backbones.usage import lm_usage, usage_mark
    from tide_dspy.tracking import log_scores, log_usage, register_program, tracked_run

    setting = args.setting
    instances, _ = load_split(args, setting)
    train, val = split_train(instances, args.val_fraction, args.seed)
    lm, judge = lm_from_args(args), make_judge(args)
    program = _build(args, setting, args.method, train)
    folder = program_dir(args, setting)
    out = folder / ("tide.json" if args.method == "tide" else f"{args.method}.json")
    options = parse_options(args.opt)
    params = {**_base_params(args, instances, lm), "method": args.method, "optimizer": args.optimizer,
              "metric": args.metric, "T": program.max_rounds, "k": program.per_round,
              "pool_size": len(program.templates), "demos": args.demos, "options": options,
              "train_ids": [i.instance_id for i in train], "val_ids": [i.instance_id for i in val]}
    track = not args.no_track
    with tracked_run("compile", setting=setting, backbone=args.backbone, params=params, uri=args.tracking_uri,
                     enabled=track) as run:
        marks = (usage_mark(lm), usage_mark(getattr(judge, "lm", None)))
        t0 = time.perf_counter()
        before = evaluate(program, val, judge=judge, lm=lm, out_path=folder / "compile" / "val_before.jsonl",
                          resume=False, workers=args.workers)
        t1 = time.perf_counter()
        compiled = compile_program(program, train, val, args.optimizer, args.metric, judge=judge, demos=args.demos,
                                   options=options, lm=lm, threads=args.workers, autolog=track and args.autolog)
        t2 = time.perf_counter()
        after = evaluate(compiled, val, judge=judge, lm=lm, out_path=folder / "compile" / "val_after.jsonl",
                         resume=False, workers=args.workers)
        seconds = {"before": round(t1 - t0, 1), "compile": round(t2 - t1, 1),
                   "after": round(time.perf_counter() - t2, 1)}
        metric_before, metric_after = aggregate_value(before, args.metric), aggregate_value(after, args.metric)
        extra = {"backbone": args.backbone, "templates_path": str(templates_path(args, setting)),
                 "optimizer": args.optimizer, "metric": args.metric, "judge": args.judge,
                 "validation": {"ids": params["val_ids"], "before": metric_before, "after": metric_after},
                 "train_ids": params["train_ids"]}
        save_program(compiled, out, extra=extra)
        record_provenance(args, folder, out.name, seconds=seconds, metric=args.metric, val_before=metric_before,
                          val_after=metric_after, val_ids=params["val_ids"], train_ids=params["train_ids"])
        version = None
        if track:
            log_scores(before, "before_")
            log_scores(after, "after_")
            mlflow.log_metrics({"metric_before": metric_before, "metric_after": metric_after,
                                **{f"seconds_{k}": v for k, v in seconds.items()}})
            log_usage({"backbone": lm_usage(lm, marks[0]), "judge": lm_usage(getattr(judge, "lm", None), marks[1])})
            for path in (out, templates_path(args, setting), folder / "compile" / "val_before.jsonl",
                         folder / "compile" / "val_after.jsonl"):
                _artifact(path, "program" if path == out else None)
            if not args.no_register:
                version = register_program(out, setting, args.backbone,
                                           {"metric": args.metric, "optimizer": args.optimizer, "run": run.info.run_id})
    print(f"validation ({len(val)} held-out train instances), before:\n{format_table(before)}\n")
    print(f"after {args.optimizer}:\n{format_table(after)}\n")
    print(f"{args.metric}: {metric_before:.4f} -> {metric_after:.4f}; times {seconds}")
    print(f"program -> {out}" + (f"; registered models:/{version.name}/{version.version}" if version else ""))
    return 0


def run_tune(args: argparse.Namespace) -> int:
    import mlflow

    from tide_dspy.backbones.registry import scrub_secrets
    from tide_dspy.optimize import split_train, tune
    from tide_dspy.programs import load_program
    from tide_dspy.templates import TemplateLibrary
    from tide_dspy.tracking import model_name, tracked_run

    setting = args.setting
    instances, _ = load_split(args, setting)
    _, val = split_train(instances, args.val_fraction, args.seed)
    library = TemplateLibrary.load(templates_path(args, setting))
    compiled = Path(args.program) if args.program else program_dir(args, setting) / "tide.json"
    base = load_program(compiled) if args.program or compiled.exists() else None
    lm, judge = lm_from_args(args), make_judge(args)
    study_name = args.study or model_name(setting, args.backbone)
    storage = scrub_secrets(args.storage)  # a postgresql://user:password@host URL must not reach a log or file
    params = {**_base_params(args, instances, lm), "metric": args.metric, "storage": storage,
              "study": study_name, "pool_max": len(library), "base_program": str(compiled) if base else None, "val_ids": [i.instance_id for i in val]}
    track = not args.no_track

    def on_trial(trial, value, result):
        print(f"trial {trial.number}: {args.metric}={value:.4f} {trial.params}", flush=True)
        if track:
            mlflow.log_metric("trial_value", value, step=trial.number)

    with tracked_run("tune", setting=setting, backbone=args.backbone, params=params, uri=args.tracking_uri,
                     enabled=track):
        t0 = time.perf_counter()
        study = tune(setting, library, val, lm=lm, n_trials=args.trials, storage=args.storage, study_name=study_name,
                     metric=args.metric, judge=judge, on_trial=on_trial, base=base, workers=args.workers)
        best = study.best_trial
        seconds = round(time.perf_counter() - t0, 1)
        folder = program_dir(args, setting)
        summary = {"study": study_name, "storage": storage, "base_program": params["base_program"], "metric": args.metric, "best_value": best.value,
                   "best_params": best.params, "best_trial": best.number, "trials": len(study.trials)}
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "tune.json").write_text(json.dumps(summary, indent=1) + "\n")
        record_provenance(args, folder, "tune.json", seconds=seconds)
        if track:
            mlflow.log_metrics({"best_value": best.value, "seconds": seconds})
            mlflow.log_params({f"best_{k}": v for k, v in best.params.items()})
            _artifact(folder / "tune.json")
    print(f"best trial {best.number}: {args.metric}={best.value:.4f} with {best.params} "
          f"({len(study.trials)} trials in the study)")
    print(f"open the study: optuna-dashboard {storage}")
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    from tide_dspy.evaluation import evaluate, format_table, read_rows
    from tide_dspy.programs import load_program, method_of
    from tide_dspy.tracking import log_scores, log_usage, tracked_run

    if args.program:
        program = load_program(args.program)
        if args.rounds:
            program.max_rounds = args.rounds
        if args.per_round:
            program.per_round = args.per_round
        if args.max_evidence:
            program.max_evidence = args.max_evidence
        if args.shuffle_context is not None:
            program.context_order_seed = args.shuffle_context
        setting, method = program.setting_name, method_of(program)
        if args.setting and args.setting != setting:
            raise ValueError(f"--setting {args.setting} but the program {args.program} is for {setting}")
    else:
        if not args.setting:
            raise ValueError("--method needs --setting")
        setting, method = args.setting, args.method
        program = _build(args, setting, method)
    execute = execution_judge(args, setting)
    instances, _ = load_split(args, setting)
    out_dir = Path(args.out) if args.out else program_dir(args, setting, root="runs") / f"{method}-{args.split}"
    check_output_folder(out_dir)
    results = out_dir / "results.jsonl"
    if results.exists() and read_rows(results) and not (args.resume or args.fresh):
        raise ValueError(f"{results} already has results: pass --resume to continue it or --fresh to start over")
    lm, judge = lm_from_args(args), make_judge(args)
    params = {**_base_params(args, instances, lm), "method": method, "program": args.program,
              "T": program.max_rounds, "k": program.per_round, "pool_size": len(program.templates),
              "verify_repo": args.verify_repo}
    track = not args.no_track
    with tracked_run("evaluate", setting=setting, backbone=args.backbone, params=params, uri=args.tracking_uri,
                     enabled=track):
        t0 = time.perf_counter()
        result = evaluate(program, instances, judge=judge, out_path=results, resume=args.resume, lm=lm,
                          method=method, execute=execute, workers=args.workers,
                          config={"command": command_line(args), "program_path": args.program,
                                  "backbone": args.backbone, "split": args.split})
        seconds = round(time.perf_counter() - t0, 1)
        if track:
            import mlflow

            log_scores(result)
            mlflow.log_metric("seconds", seconds)
            if result.get("execution"):
                mlflow.log_metric("execution_resolution", result["execution"]["rate"])
            log_usage(result["lm_usage"])
            for name in ("results.jsonl", "config.json", "summary.json"):
                _artifact(out_dir / name, "evaluation")
            if args.program and Path(args.program).exists():
                _artifact(Path(args.program), "program")
    print(format_table(result))
    if execute is not None:
        print(execution_line(result))
    print(f"{seconds}s; results -> {results}")
    return 0


def execution_judge(args: argparse.Namespace, setting: str):
    """The ExecutionJudge of --verify-repo, or None."""
    if args.verify_repo is None:
        if args.verify_command or args.verify_timeout:
            raise ValueError("--verify-command and --verify-timeout need --verify-repo DIR")
        return None
    if setting != "repository":
        raise ValueError(f"--verify-repo runs repository tests; it does not apply to the {setting} setting")
    from tide_dspy.metrics.execution import DEFAULT_TEST_COMMAND, ExecutionJudge

    options = {"timeout": args.verify_timeout} if args.verify_timeout else {}
    return ExecutionJudge(args.verify_repo, args.verify_command or DEFAULT_TEST_COMMAND, **options)


def execution_line(result: dict) -> str:
    judged = (result.get("coverage") or {}).get("resolution")
    judge = "-" if judged is None else f"{100 * judged:.2f}%"
    ex = result.get("execution")
    if not ex:
        return "execution-based resolution: no instance had an anchor_commit to run tests at"
    return (f"execution-based resolution: {ex['resolved']}/{ex['problems']} gold problems resolved by tests "
            f"({100 * ex['rate']:.2f}%) over {ex['instances']} instance(s); judge ({result['judge']}) resolution "
            f"coverage: {judge}")
