"""The offline steps behind `tide distill | compile | tune | evaluate`, each one library call returning a typed result.

Every step loads its instances from a `Selection`, runs inside one `tracking.tracked_run` (timing, LM usage,
MLflow, provenance.json) and writes under programs/<setting>/<backbone>/ (or runs/... for evaluations). The CLI
(tide_dspy/cli/optimize_cmd.py) maps options to these calls and prints what they return.

`lm` may be an LM or a function that makes one: it is called only once the inputs check out, so a bad option or a
missing file fails before a model loads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
from pydantic import BaseModel, ConfigDict

from tide_dspy import metrics, tracing
from tide_dspy.cost.estimate import Estimate, Estimator, estimate_runs
from tide_dspy.cost.guard import Budget, Guard
from tide_dspy.cost.prices import Overrides, Target
from tide_dspy.data.selection import Selection, data_path
from tide_dspy.discovery import TIDE, ChanceFloor, MultiAgent
from tide_dspy.domains import Setting
from tide_dspy.evaluation import EvaluationSummary, evaluate, read_rows
from tide_dspy.methods import get_method, method_of
from tide_dspy.programs import build_program, load_program, program_dir, save_program
from tide_dspy.sandbox import SandboxOptions
from tide_dspy.schemas import STOP_RULES, Instance
from tide_dspy.tracking import dataset_hash, model_name, register_program, tracked_run
from tide_dspy.util.jsonio import write_json
from tide_dspy.util.secrets import scrub_secrets

LMSource = dspy.BaseLM | Callable[[], dspy.BaseLM]


class Tracking(BaseModel):
    """Where a step is tracked: MLflow (unless disabled) and the command line that provenance.json records."""

    enabled: bool = True
    uri: str | None = None
    command_line: str | None = None


class ProgramShape(BaseModel):
    """Overrides of a program's shape (None keeps the setting's or the saved program's value)."""

    rounds: int | None = None
    per_round: int | None = None
    max_evidence: int | None = None
    shuffle_context: int | None = None  # seed of a shuffled artifact order
    scan: int | None = None  # focus size of a scan (tide_dspy.scan); None: no scan, or the saved program's
    # The paper's rules, or our departures from them (docs/paper.md): when TIDE's loop stops (discovery.STOP_RULES),
    # whether templates show their names, whether Multi-Agent's pool merges repeats before scoring.
    stop_on: str | None = None
    template_names: bool | None = None
    multi_dedup: bool | None = None

    def apply_scan(self, program):
        """Turn `program`'s scan on with this focus size (when one is given); a chance floor reads no artifact."""
        if self.scan is None:
            return
        if isinstance(program, ChanceFloor):
            raise ValueError(f"--scan applies to the LM methods; {method_of(program)} is a chance floor and reads "
                             "no artifact")
        program.use_scan(self.scan)

    def apply_rules(self, program) -> None:
        """Set the rules that are given (stop_on, template_names, multi_dedup) on the programs they apply to: the
        stop rule on TIDE's loop, the pool rule on Multi-Agent."""
        if self.stop_on is not None and self.stop_on not in STOP_RULES:
            raise ValueError(f"stop_on must be one of {STOP_RULES}, got {self.stop_on!r}")
        if self.stop_on is not None and isinstance(program, TIDE):
            program.stop_on = self.stop_on
        if self.template_names is not None:
            program.template_names = self.template_names
        if self.multi_dedup is not None and isinstance(program, MultiAgent):
            program.dedup_pool = self.multi_dedup

    def apply(self, program) -> None:
        """Reshape a built or loaded `program` by the overrides that are set (its compiled state is kept)."""
        for name, value in (("max_rounds", self.rounds), ("per_round", self.per_round),
                            ("max_evidence", self.max_evidence)):
            if value:
                setattr(program, name, value)
        if self.shuffle_context is not None:
            program.context_order_seed = self.shuffle_context
        self.apply_rules(program)
        self.apply_scan(program)


def _lm(lm: LMSource) -> dspy.BaseLM:
    return lm if isinstance(lm, dspy.BaseLM) or not callable(lm) else lm()


def _track(command: str, selection: Selection, backbone: str, tracking: Tracking, params: dict, lms: dict):
    return tracked_run(command, setting=selection.setting.name, backbone=backbone, params=params, uri=tracking.uri,
                       enabled=tracking.enabled, command_line=tracking.command_line, lms=lms)


def _describe(lm) -> dict:
    from tide_dspy.backbones import describe_lm

    return describe_lm(lm)


def _base_params(selection: Selection, instances: list[Instance], lm, judge: str) -> dict:
    return {"split": selection.split, "n_instances": len(instances), "dataset_hash": dataset_hash(instances),
            **selection.source().params(), "judge": judge, "lm": _describe(lm)}


def templates_path(setting: Setting, backbone: str, templates: str | Path | None, programs: str | Path) -> Path:
    """--templates, else programs/<setting>/<backbone>/templates.json."""
    return Path(templates) if templates else program_dir(setting.name, backbone, root=programs) / "templates.json"


def build_method(setting: Setting, method: str, shape: ProgramShape, *, templates=None, data: str | None = None,
                 data_version: str | None = None, train_instances: list[Instance] | None = None,
                 scan_templates=None):
    """A fresh program of `method` (tide_dspy.methods), the one way every command and experiment builds one.

    A method that reads templates reads `templates` (a library JSON path, a TemplateLibrary or a list of Templates);
    one that shows solved examples takes its number of them from `train_instances` (default: the train split of
    `data` at `data_version`). With a scan, `scan_templates` are what a method without templates of its own rates
    against."""
    from tide_dspy.data import load_instances
    from tide_dspy.templates import solved_demos

    spec = get_method(method)
    demo_texts = None
    if spec.demos:
        if train_instances is None:
            train_instances = load_instances(data_path(setting.name, data, data_version), setting=setting.name,
                                             split="train")
        demo_texts = solved_demos(train_instances, setting, spec.demos)
    built = build_program(method, setting, templates=templates if spec.templates else None, demos=demo_texts,
                          max_rounds=shape.rounds, per_round=shape.per_round, max_evidence=shape.max_evidence,
                          context_order_seed=shape.shuffle_context, scan_templates=scan_templates)
    shape.apply_rules(built)
    shape.apply_scan(built)
    return built


# ---- distill ----

class DistillResult(BaseModel):
    cases: int
    passed: int
    failed: int
    merges: int
    capped: int
    templates: int
    mean_score: float | None
    draft_mean_score: float | None
    seconds: float
    path: Path  # where the library is (or would have been) written
    written: bool  # False when no template passed the abstraction check


def cap_cases(instances: list[Instance], max_cases: int) -> list[Instance]:
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


def distill_instances(selection: Selection, max_cases: int | None = None) -> list[Instance]:
    """The instances `distill` reads: the selection's, capped at `max_cases` solved cases."""
    instances = selection.load()
    return cap_cases(instances, max_cases) if max_cases is not None else instances


class DistillPlan(BaseModel):
    """What `distill` would do (`tide distill --dry-run`): the solved cases, and the calls it would send."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    cases: list[tuple[str, str, str | None]]  # instance id, problem id, category
    estimate: Estimate


def estimate_distill(selection: Selection, *, lm: LMSource, backbone: str, max_cases: int | None = None,
                     max_attempts: int = 3, overrides: Overrides = Overrides()) -> DistillPlan:
    """The solved cases `distill` with these arguments would distil, and what it would send and cost: each case's
    first attempt, and its retries as an upper bound (Estimator.distill_calls)."""
    from tide_dspy.templates import distillable_cases

    setting = selection.setting
    instances = distill_instances(selection, max_cases)
    cases = distillable_cases(instances, setting)
    lm = _lm(lm)
    targets = estimate_targets(lm, backbone, None, "proxy", overrides)
    estimator, estimate = estimator_for(lm, targets), Estimate.for_targets(targets)
    for instance, problem in cases:
        first, *retries = estimator.distill_calls(setting, instance, problem, max_attempts)
        estimate.add("distill: first attempts", [first])
        if retries:
            estimate.add("distill: retries (at most)", retries)
    estimate.instances = len(instances)
    estimate.notes.append(f"{len(cases)} cases, each with up to {max_attempts} attempts (--max-attempts): a case "
                          "stops at its first draft that passes the abstraction check, so the retries are an upper "
                          "bound and the first attempts the least a run sends")
    return DistillPlan(cases=[(i.instance_id, p.problem_id, p.category) for i, p in cases], estimate=estimate)


def distill(selection: Selection, *, lm: LMSource, backbone: str, judge: str = "proxy", programs: str = "programs",
            max_cases: int | None = None, max_attempts: int = 3, merge_threshold: float = 80.0,
            max_templates: int | None = None,
            tracking: Tracking = Tracking()) -> DistillResult:
    """Distill a template library from the solved problems of `selection` into programs/<setting>/<backbone>/."""
    from tide_dspy.templates import distill_library, solved_cases

    setting = selection.setting
    instances = distill_instances(selection, max_cases)
    lm = _lm(lm)
    out = program_dir(setting.name, backbone, root=programs) / "templates.json"
    params = {**_base_params(selection, instances, lm, judge), "merge_threshold": merge_threshold,
              "max_attempts": max_attempts, "max_templates": max_templates or "no cap",
              "cases": len(solved_cases(instances))}
    with _track("distill", selection, backbone, tracking, params, {}) as run:
        library = distill_library(instances, setting, lm=lm, max_attempts=max_attempts,
                                  merge_threshold=merge_threshold, max_templates=max_templates)
        seconds = run.seconds()
        library.meta.update(backbone=backbone, dataset_hash=dataset_hash(instances), seconds=seconds)
        meta, scores = library.meta, library.meta["abstraction"]
        counts = {"cases": meta["cases"], "passed": meta["passed"], "failed": meta["failed"],
                  "merges": meta["merges"], "capped": len(meta["capped"]), "templates": len(library)}
        if len(library):
            library.save(out)
            run.provenance(out.parent, out.name, seconds=seconds, **counts, data=selection.source().record(),
                           mean_abstraction_score=scores["mean_score"],
                           draft_mean_abstraction_score=scores["draft_mean_score"])
        run.record(metrics={**counts, "seconds": seconds, "draft_mean_abstraction_score": scores["draft_mean_score"],
                            "mean_abstraction_score": scores["mean_score"]},
                   usage={"backbone": meta["lm_usage"]}, files={out: None},
                   dicts={"distill_failures.json": {"failures": meta["failures"]}})
    return DistillResult(**counts, mean_score=scores["mean_score"], draft_mean_score=scores["draft_mean_score"],
                         seconds=seconds, path=out, written=bool(len(library)))


# ---- compile ----

class CompileResult(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    optimizer: str
    metric: str
    n_val: int
    before: EvaluationSummary
    after: EvaluationSummary | None  # None when the budget stopped the search (nothing more is spent)
    metric_before: float
    metric_after: float | None
    seconds: dict[str, float]  # before, compile, after
    search: dict  # the trial log's summary: trials, evaluations, resumed, replayed, LM calls, best, stopped
    path: Path | None  # None when the budget stopped the search before any candidate was scored
    kept: str = "original"  # which program `path` holds: "compiled" or "original" (the uncompiled one)
    registered: str | None = None  # models:/<name>/<version>

    @property
    def stopped(self) -> str | None:
        return self.search.get("stopped")

    @property
    def improved(self) -> bool:
        """The compiled program scored strictly higher on validation than the original."""
        return self.metric_after is not None and self.metric_after > self.metric_before


def compile_header(program, method: str, metric: str, judge: str, lm) -> dict:
    """What a trial's score depends on besides the candidate's instructions and its instance; a trial log with
    another header is not continued."""
    from tide_dspy.backbones import describe_lm

    config = program.config()
    config["templates"] = [t["id"] for t in config.get("templates", [])]
    config["scan_templates"] = [t["id"] for t in config.get("scan_templates", [])]
    described = describe_lm(lm)
    return {"method": method, "metric": metric, "judge": judge, "program": config,
            "lm": {k: described.get(k) for k in ("model", "temperature", "max_tokens")}}


def compile_and_save(selection: Selection, *, lm: LMSource, backbone: str, method: str = "tide",
                     shape: ProgramShape = ProgramShape(), templates: str | None = None, programs: str = "programs",
                     optimizer: str = "copro", metric: str = "retrieval-f1", judge: str = "proxy",
                     demos: int | None = None, options: list[str] | None = None, val_fraction: float = 0.25,
                     seed: int = 0, workers: int = 1, register: bool = True, autolog: bool = False,
                     traces: bool = False,
                     budget: Budget = Budget(), overrides: Overrides = Overrides(), fresh: bool = False,
                     keep_worse: bool = False, prompt_lm: LMSource | None = None, progress: bool = True,
                     tracking: Tracking = Tracking()) -> CompileResult:
    """Optimize `method`'s program on the train part of `selection`, scored on its held-out validation part before
    and after; save it as programs/<setting>/<backbone>/<method>.json (tide.json for tide) and register it.

    Compile never ships a regression: the compiled program is saved only when its validation score is strictly
    higher than the original's; otherwise the original (uncompiled) program is saved, and `kept` says which.
    `keep_worse` saves the compiled one regardless. `prompt_lm` proposes and reflects on instructions (default: the
    backbone `lm`); its calls count toward `budget` and are in compile/lm_usage.json under "proposer".

    With metric scan-recall the validation runs the scan alone (its rounds add nothing the metric sees), so its
    tables hold the scan recall and no findings. Every evaluation of the search goes to
    programs/<setting>/<backbone>/compile/trials.jsonl, so a rerun of an
    interrupted compile replays what was scored (`fresh` starts over). `budget` bounds the search's LM calls and
    cost, the proposer's included (a call the provider reports no cost for is priced from its tokens at
    `overrides`' prices, else the cost map's); when it stops the search, the best candidate scored so far is
    validated (the validation lies outside the bound) and kept by the same rule, and a rerun with a larger budget
    goes on from the log."""
    from tide_dspy.optimize import SCAN_RECALL, aggregate_value, compile_program, parse_options, split_train
    from tide_dspy.scan import ScanOnly
    from tide_dspy.trials import TrialLog

    setting = selection.setting
    if get_method(method).floor:
        raise ValueError(f"{method} is a chance floor: it calls no model, so it has nothing to compile")
    instances = selection.load()
    train, val = split_train(instances, val_fraction, seed)
    library = templates_path(setting, backbone, templates, programs)
    program = build_method(setting, method, shape, templates=library, data=selection.data,
                           data_version=selection.data_version, train_instances=train)
    lm, judge_model = _lm(lm), metrics.make_judge(judge)
    proposer = _lm(prompt_lm) if prompt_lm is not None else None
    folder = program_dir(setting.name, backbone, root=programs)
    out = folder / ("tide.json" if method == "tide" else f"{method}.json")
    optimizer_options = parse_options(options)
    params = {**_base_params(selection, instances, lm, judge), "method": method, "optimizer": optimizer,
              "metric": metric, "T": program.max_rounds, "k": program.per_round,
              "pool_size": len(program.templates), "demos": demos, "options": optimizer_options,
              "train_ids": [i.instance_id for i in train], "val_ids": [i.instance_id for i in val],
              "max_calls": budget.max_calls, "max_cost": budget.max_cost,
              "proposer": _describe(proposer) if proposer is not None else None}
    # An LLM judge is named by its label, which says its rubric and runs: trials scored on another are not replayed.
    header = compile_header(program, method, metric,
                            judge_model.label if isinstance(judge_model, metrics.LLMJudge) else judge, lm)
    lms = {"backbone": lm, "judge": getattr(judge_model, "lm", None),
           **({"proposer": proposer} if proposer is not None else {})}
    opened: list[TrialLog] = []

    def open_trials(score, planned):
        # Its spend starts with the search, after the validation.
        guard = Guard(budget, overrides.targets(lms), estimates=False)
        opened.append(TrialLog(folder / "compile", header, score, guard=guard, fresh=fresh, expected=planned,
                               progress=progress))
        return opened[-1]

    # A scan-recall compile tunes and validates the scan alone: the rounds add nothing its metric can see.
    validated = ScanOnly if metric == SCAN_RECALL else (lambda p: p)
    with _track("compile", selection, backbone, tracking, params, lms) as run, \
            _compile_traces(traces, run, program, train, val, folder / "compile" / "traces"):
        scored = {"judge": judge_model, "lm": lm, "resume": False, "workers": workers, "progress": progress,
                  "method": method, "overrides": overrides}
        before = evaluate(validated(program), val, out_path=folder / "compile" / "val_before.jsonl", **scored)
        t1 = run.seconds()
        compiled = compile_program(program, train, val, optimizer, metric, judge=judge_model, demos=demos,
                                   options=optimizer_options, lm=lm, prompt_lm=proposer, threads=workers,
                                   autolog=run.enabled and autolog, trials=open_trials)
        t2 = run.seconds()
        search = opened[0].summary()
        scored_any = search["best"] is not None
        after = None
        if scored_any:
            after = evaluate(validated(compiled), val, out_path=folder / "compile" / "val_after.jsonl", **scored)
        seconds = {"before": t1, "compile": round(t2 - t1, 1), "after": round(run.seconds() - t2, 1)}
        metric_before = aggregate_value(before, metric)
        metric_after = aggregate_value(after, metric) if after is not None else None
        usage = run.usage()
        write_json(folder / "compile" / "lm_usage.json", usage, ensure_ascii=True)
        run.record(scores={"before_": before, **({"after_": after} if after is not None else {})},
                   metrics={"metric_before": metric_before, "metric_after": metric_after,
                            "trials": search["trials"], "search_lm_calls": search["lm_calls"],
                            **{f"seconds_{k}": v for k, v in seconds.items()}},
                   usage=usage, dicts={"trials_summary.json": search})
        if not scored_any:
            return CompileResult(optimizer=optimizer, metric=metric, n_val=len(val), before=before, after=None,
                                 metric_before=metric_before, metric_after=None, seconds=seconds, search=search,
                                 path=None)
        kept = "compiled" if metric_after > metric_before or keep_worse else "original"
        summary = {k: v for k, v in search.items() if k != "candidates"}
        extra = {"backbone": backbone, "templates_path": str(library), "optimizer": optimizer, "metric": metric,
                 "judge": judge, "validation": {"ids": params["val_ids"], "before": metric_before,
                                                "after": metric_after, "kept": kept},
                 "train_ids": params["train_ids"], "search": summary}
        save_program(compiled if kept == "compiled" else program, out, extra=extra)
        run.provenance(folder, out.name, seconds=seconds, metric=metric, val_before=metric_before,
                       val_after=metric_after, kept=kept, keep_worse=keep_worse, val_ids=params["val_ids"],
                       train_ids=params["train_ids"], optimizer=optimizer, options=optimizer_options, search=search,
                       lm_usage=usage, data=selection.source().record())
        run.record(files={out: "program", **{path: None for path in (
            library, folder / "compile" / "val_before.jsonl", folder / "compile" / "val_after.jsonl",
            folder / "compile" / "trials.jsonl")}})
        registered = None
        if run.enabled and register:
            version = register_program(out, setting.name, backbone,
                                       {"metric": metric, "optimizer": optimizer, "run": run.info.run_id})
            registered = f"models:/{version.name}/{version.version}"
    return CompileResult(optimizer=optimizer, metric=metric, n_val=len(val), before=before, after=after,
                         metric_before=metric_before, metric_after=metric_after, seconds=seconds, search=search,
                         path=out, kept=kept, registered=registered)


def _compile_traces(traces: bool, run, program, train: list[Instance], val: list[Instance], folder: Path):
    """The traces of a compile's LM calls (tracing.traces), announced with the size of one pass over train and
    validation: the optimizer makes many such passes (its --dry-run counts them)."""
    if traces:
        size, calls = tracing.estimate_bytes([program], [*train, *val])
        where = f"the MLflow run {run.info.run_id}" if run.enabled else f"{folder}/"
        tracing.announce(size, calls, f"{where}, per pass over train and validation (the optimizer makes several; "
                                      "`tide compile --dry-run` counts its calls)")
    return tracing.traces(traces, tracking=run.enabled, folder=folder)


# ---- tune ----

class TuneResult(BaseModel):
    study: str
    storage: str  # credentials scrubbed
    metric: str
    best_trial: int | None  # None when no trial finished (the budget stopped the first)
    best_value: float | None
    best_params: dict[str, Any]
    trials: int
    path: Path | None  # tune.json; None when no trial finished
    stopped: str | None = None  # why the budget ended the study


def tune_and_save(selection: Selection, *, lm: LMSource, backbone: str, trials: int, templates: str | None = None,
                  program: str | None = None, programs: str = "programs", metric: str = "retrieval-f1",
                  judge: str = "proxy", val_fraction: float = 0.25, seed: int = 0, workers: int = 1,
                  storage: str = "sqlite:///optuna.db", study: str | None = None,
                  on_trial: Callable[[Any, float], None] | None = None, budget: Budget = Budget(),
                  overrides: Overrides = Overrides(), tracking: Tracking = Tracking()) -> TuneResult:
    """Optuna trials over T, k, pool size and temperature on the validation part of `selection`; the summary goes
    to programs/<setting>/<backbone>/tune.json. `on_trial(trial, value)` is called after each trial. `budget` caps
    the LM calls and USD of this run's trials together (optimize.tune)."""
    from tide_dspy.optimize import BUDGET_STOP, split_train, tune
    from tide_dspy.templates import TemplateLibrary

    setting = selection.setting
    instances = selection.load()
    _, val = split_train(instances, val_fraction, seed)
    library = TemplateLibrary.load(templates_path(setting, backbone, templates, programs))
    folder = program_dir(setting.name, backbone, root=programs)
    compiled = Path(program) if program else folder / "tide.json"
    base = load_program(compiled) if program or compiled.exists() else None
    lm, judge_model = _lm(lm), metrics.make_judge(judge)
    study_name = study or model_name(setting.name, backbone)
    clean_storage = scrub_secrets(storage)  # a postgresql://user:password@host URL must not reach a log or file
    params = {**_base_params(selection, instances, lm, judge), "metric": metric, "storage": clean_storage,
              "study": study_name, "pool_max": len(library), "base_program": str(compiled) if base else None,
              "val_ids": [i.instance_id for i in val]}
    with _track("tune", selection, backbone, tracking, params, {}) as run:
        def after_trial(trial, value, result):
            if on_trial:
                on_trial(trial, value)
            run.log_step("trial_value", value, trial.number)

        found = tune(setting, library, val, lm=lm, n_trials=trials, storage=storage, study_name=study_name,
                     metric=metric, judge=judge_model, on_trial=after_trial, base=base, workers=workers,
                     budget=budget, overrides=overrides)
        stopped = found.user_attrs.get(BUDGET_STOP)
        if not any(t.state.name == "COMPLETE" for t in found.trials):
            return TuneResult(study=study_name, storage=clean_storage, metric=metric, best_trial=None,
                              best_value=None, best_params={}, trials=len(found.trials), path=None, stopped=stopped)
        best = found.best_trial
        seconds = run.seconds()
        summary = {"study": study_name, "storage": clean_storage, "base_program": params["base_program"],
                   "metric": metric, "best_value": best.value, "best_params": best.params,
                   "best_trial": best.number, "trials": len(found.trials)}
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / "tune.json", summary, ensure_ascii=True)
        run.provenance(folder, "tune.json", seconds=seconds, data=selection.source().record())
        run.record(metrics={"best_value": best.value, "seconds": seconds},
                   params={f"best_{k}": v for k, v in best.params.items()}, files={folder / "tune.json": None})
    return TuneResult(study=study_name, storage=clean_storage, metric=metric, best_trial=best.number,
                      best_value=best.value, best_params=best.params, trials=len(found.trials),
                      path=folder / "tune.json", stopped=stopped)


# ---- evaluate ----

class RepoVerification(BaseModel):
    """--verify-repo: run each gold problem's tests with the matched finding's patch in a clone (repository only)."""

    repo: str | None = None
    command: str | None = None
    timeout: float | None = None
    sandbox: SandboxOptions = SandboxOptions()

    def judge(self, setting: Setting):
        """The ExecutionJudge, or None without a repo."""
        if self.repo is None:
            if self.command or self.timeout:
                raise ValueError("--verify-command and --verify-timeout need --verify-repo DIR")
            return None
        if not setting.checks_patches:
            raise ValueError(f"--verify-repo runs repository tests; it does not apply to the {setting.name} setting")
        from tide_dspy.metrics.execution import DEFAULT_TEST_COMMAND, ExecutionJudge

        options = {"timeout": self.timeout} if self.timeout else {}
        return ExecutionJudge(self.repo, self.command or DEFAULT_TEST_COMMAND, sandbox=self.sandbox, **options)


class EvaluationRun(BaseModel):
    """An evaluation of a program on a split: its result, where the rows are, and how long it took."""

    result: EvaluationSummary
    results_path: Path
    seconds: float
    executed: bool  # tests ran (--verify-repo)


def evaluation_program(selection: Selection, *, backbone: str, program: str | None, method: str | None,
                       shape: ProgramShape, templates: str | Path | None, programs: str | Path):
    """(the program to evaluate, the selection with its setting, the method's name): a saved `program` (path or
    models:/ URI) with `shape`'s overrides (and `templates` in place of its library, its compiled instruction kept),
    or a fresh `method`."""
    if program:
        built = load_program(program)
        shape.apply(built)
        if templates:
            from tide_dspy.templates import TemplateLibrary

            library = TemplateLibrary.load(templates)
            if library.setting and library.setting != built.setting.name:
                raise ValueError(f"{templates}: a {library.setting} library, but {program} is a "
                                 f"{built.setting.name} program")
            built.templates = list(library.templates)
        setting, method = built.setting, method_of(built)
        if selection.setting and selection.setting is not setting:
            raise ValueError(f"--setting {selection.setting.name} but the program {program} is for {setting.name}")
        return built, selection.model_copy(update={"setting": setting}), method
    if not selection.setting:
        raise ValueError("--method needs --setting")
    setting = selection.setting
    built = build_method(setting, method, shape, templates=templates_path(setting, backbone, templates, programs),
                         data=selection.data, data_version=selection.data_version)
    return built, selection, method


def evaluate_split(selection: Selection, *, lm: LMSource, backbone: str, program: str | None = None,
                   method: str | None = None, shape: ProgramShape = ProgramShape(), templates: str | None = None,
                   programs: str = "programs", judge: str = "proxy", workers: int = 1,
                   out: str | Path | None = None, resume: bool = False, fresh: bool = False,
                   verification: RepoVerification = RepoVerification(), check_out: Callable[[Path], Any] | None = None,
                   budget: Budget = Budget(), overrides: Overrides = Overrides(), traces: bool = False,
                   tracking: Tracking = Tracking()) -> EvaluationRun:
    """Score a saved `program` (path or models:/ URI) or a fresh `method` on `selection`, one row per instance in
    `out` (default runs/<setting>/<backbone>/<method>-<split>/results.jsonl). `check_out(folder)` vets the output
    folder before any LM work. `budget` caps its LM calls and USD; `overrides` states prices and the window.
    `traces`: record every LM call (tracing.traces): as MLflow traces of the run, or with tracking off as
    `<out>/traces/<instance id>.jsonl`."""
    built, selection, method = evaluation_program(selection, backbone=backbone, program=program, method=method,
                                                  shape=shape, templates=templates, programs=programs)
    setting = selection.setting
    execute = verification.judge(setting)
    instances = selection.load()
    out_dir = Path(out) if out else program_dir(setting.name, backbone, root="runs") / f"{method}-{selection.split}"
    if check_out is not None:
        check_out(out_dir)
    results = out_dir / "results.jsonl"
    if results.exists() and read_rows(results) and not (resume or fresh):
        raise ValueError(f"{results} already has results: pass --resume to continue it or --fresh to start over")
    lm, judge_model = _lm(lm), metrics.make_judge(judge)
    params = {**_base_params(selection, instances, lm, judge), "method": method, "program": program,
              "T": built.max_rounds, "k": built.per_round, "pool_size": len(built.templates),
              "verify_repo": verification.repo}
    with _track("evaluate", selection, backbone, tracking, params, {}) as run:
        trace_folder = out_dir / "traces"
        if traces:
            tracing.announce(*tracing.estimate_bytes([built], instances),
                             f"the MLflow run {run.info.run_id}" if run.enabled else f"{trace_folder}/")
        with tracing.traces(traces, tracking=run.enabled, folder=trace_folder):
            result = evaluate(built, instances, judge=judge_model, out_path=results, resume=resume, lm=lm,
                              method=method, execute=execute, workers=workers, budget=budget, overrides=overrides,
                              config={"command": tracking.command_line, "program_path": program,
                                      "backbone": backbone, "split": selection.split,
                                      "data": selection.source().record()})
        seconds = run.seconds()
        run.record(scores={"": result}, usage=result.lm_usage,
                   metrics={"seconds": seconds, "n_incomplete": result.n_incomplete, "n_skipped": result.n_skipped,
                            **({"execution_resolution": result.execution["rate"]} if result.execution else {}),
                            **({"budget_spent_usd": result.budget["spent"]} if result.budget else {})},
                   files={**{out_dir / name: "evaluation" for name in ("results.jsonl", "config.json", "summary.json")},
                          **({Path(program): "program"} if program else {})})
    return EvaluationRun(result=result, results_path=results, seconds=seconds, executed=execute is not None)


# ---- estimates: what a step would send and what it would cost, without calling a model ----

def stand_in_templates(setting: Setting, backbone: str, templates: str | Path | None,
                       programs: str | Path) -> tuple[Path, str | None]:
    """The template library a step reads, or, where the backbone has none yet, the embedded backbone's shipped
    one in its place (with a note saying so): an estimate needs templates of a realistic size."""
    from tide_dspy.shipped import PROGRAMS_DIR
    from tide_dspy.util.paths import CHECKOUT_ROOT

    def shown(p: Path) -> Path:  # within the checkout, relative to it
        return p.relative_to(CHECKOUT_ROOT) if CHECKOUT_ROOT and p.is_relative_to(CHECKOUT_ROOT) else p

    path = templates_path(setting, backbone, templates, programs)
    if path.exists() or templates:
        return path, None
    for root in (Path(programs), PROGRAMS_DIR):
        stand_in = program_dir(setting.name, "local", root=root) / "templates.json" if root else None
        if stand_in is not None and stand_in.exists():
            return stand_in, (f"no template library for {backbone} at {shown(path)} yet (`tide distill --setting "
                              f"{setting.name} --backbone {backbone}` makes one; its cost is not included): the "
                              f"estimate reads {shown(stand_in)} in its place")
    return path, None


def estimate_targets(lm, backbone: str, judge_model, judge: str, overrides: Overrides,
                     proposer=None) -> dict[str, Target | None]:
    """The backbone, (for an LLM judge) the judge and (where one proposes) the proposer, with what `overrides`
    states; an LM that stands in for the named backbone or judge is sized as it (backbones.sized_as)."""
    from tide_dspy.backbones import sized_as

    judge_lm = getattr(judge_model, "lm", None)
    return overrides.targets({"backbone": lm, "judge": judge_lm, "proposer": proposer},
                             like={"backbone": sized_as(lm, backbone), "judge": sized_as(judge_lm, judge)})


def estimator_for(lm, targets: dict[str, Target | None], counter=None) -> Estimator:
    """An estimator that formats prompts as the run will: the adapter the run scopes around its calls. `counter`
    (a cost.estimate.PromptCounter) may be shared between estimates of the same prompts."""
    from tide_dspy.backbones import adapter_for

    estimator = Estimator.for_targets(targets, adapter=dspy.settings.adapter or adapter_for(lm) or dspy.ChatAdapter())
    if counter is not None:
        estimator.counter = counter
    return estimator


def estimate_split(selection: Selection, *, lm: LMSource, backbone: str, program: str | None = None,
                   method: str | None = None, shape: ProgramShape = ProgramShape(), templates: str | None = None,
                   programs: str = "programs", judge: str = "proxy", overrides: Overrides = Overrides()) -> Estimate:
    """What `evaluate_split` with these arguments would send and cost (`tide evaluate --dry-run`)."""
    note = None
    if not program and method and get_method(method).templates and selection.setting:
        path, note = stand_in_templates(selection.setting, backbone, templates, programs)
        templates = str(path)
    built, selection, method = evaluation_program(selection, backbone=backbone, program=program, method=method,
                                                  shape=shape, templates=templates, programs=programs)
    instances = selection.load()
    lm, judge_model = _lm(lm), metrics.make_judge(judge)
    targets = estimate_targets(lm, backbone, judge_model, judge, overrides)
    estimate = estimate_runs({method: built}, instances, estimator_for(lm, targets), targets)
    estimate.notes += [note] if note else []
    return estimate


def estimate_compile(selection: Selection, *, lm: LMSource, backbone: str, method: str = "tide",
                     shape: ProgramShape = ProgramShape(), templates: str | None = None, programs: str = "programs",
                     optimizer: str = "copro", judge: str = "proxy", demos: int | None = None,
                     options: list[str] | None = None, val_fraction: float = 0.25, seed: int = 0,
                     prompt_lm: LMSource | None = None, overrides: Overrides = Overrides()) -> Estimate:
    """What `compile_and_save` would send and cost (`tide compile --dry-run`): the validation before and after,
    the optimizer's program runs (cost.optimizers) and its proposals, priced as the proposer's calls (`prompt_lm`,
    the --prompt-model) or, without one, as the backbone's."""
    from tide_dspy.cost.estimate import PROPOSAL_PROMPT_TOKENS
    from tide_dspy.cost.optimizers import optimizer_plan
    from tide_dspy.optimize import (
        load_optimizer_config,
        optimizer_arguments,
        optimizer_class,
        parse_options,
        split_train,
    )

    setting = selection.setting
    instances = selection.load()
    train, val = split_train(instances, val_fraction, seed)
    library, note = (stand_in_templates(setting, backbone, templates, programs) if get_method(method).templates
                     else (None, None))
    program = build_method(setting, method, shape, templates=library, data=selection.data,
                           data_version=selection.data_version, train_instances=train)
    config = load_optimizer_config(optimizer)
    init, comp = optimizer_arguments(config, demos=demos, options=parse_options(options), n_train=len(train))
    lm, judge_model = _lm(lm), metrics.make_judge(judge)
    proposer = _lm(prompt_lm) if prompt_lm is not None else None
    targets = estimate_targets(lm, backbone, judge_model, judge, overrides, proposer)
    estimator = estimator_for(lm, targets)
    round_prompt = round(sum(estimator.largest_prompt(program, i) for i in train) / len(train))
    plan = optimizer_plan(optimizer_class(config["optimizer"], config["path"]), init, comp, n_train=len(train),
                          n_val=len(val), predictors=len(program.predictors()), round_prompt=round_prompt)
    estimate = Estimate.for_targets(targets)
    estimate_runs({"before (validation)": program}, val, estimator, targets, estimate=estimate)
    if plan.train_passes:
        estimate_runs({f"optimizer: {plan.train_passes:g} passes over train": program}, train, estimator, targets,
                      runs=plan.train_passes, estimate=estimate)
    if plan.val_passes:
        estimate_runs({f"optimizer: {plan.val_passes:g} passes over validation": program}, val, estimator, targets,
                      runs=plan.val_passes, estimate=estimate)
    if plan.proposals:
        estimate.add("optimizer: proposals", estimator.proposal_calls(
            plan.proposals, plan.proposal_prompt or PROPOSAL_PROMPT_TOKENS,
            role="proposer" if proposer is not None else "backbone"))
    estimate_runs({"after (validation)": program}, val, estimator, targets, estimate=estimate)
    estimate.instances = len(instances)
    estimate.notes += [plan.note, *([note] if note else [])]
    return estimate


def estimate_tune(selection: Selection, *, lm: LMSource, backbone: str, trials: int, templates: str | None = None,
                  program: str | None = None, programs: str = "programs", judge: str = "proxy",
                  val_fraction: float = 0.25, seed: int = 0, overrides: Overrides = Overrides()) -> Estimate:
    """What `tune_and_save` would send and cost (`tide tune --dry-run`): each trial on the validation part, at
    the largest shape of the search space (an upper bound)."""
    from tide_dspy.optimize import search_space, split_train
    from tide_dspy.templates import TemplateLibrary

    setting = selection.setting
    instances = selection.load()
    _, val = split_train(instances, val_fraction, seed)
    path, note = stand_in_templates(setting, backbone, templates, programs)
    library = TemplateLibrary.load(path)
    compiled = Path(program) if program else program_dir(setting.name, backbone, root=programs) / "tide.json"
    base = load_program(compiled) if program or compiled.exists() else None
    space = search_space(setting, len(library))
    rounds, per_round = space["max_rounds"][1], space["per_round"][1]
    trial = build_method(setting, "tide", ProgramShape(rounds=rounds, per_round=per_round), templates=path)
    if base is not None:
        if base.scanner is not None:
            trial.use_scan(base.focus_size)
        trial.load_state(base.dump_state())
        trial.max_rounds, trial.per_round = rounds, per_round
    lm, judge_model = _lm(lm), metrics.make_judge(judge)
    targets = estimate_targets(lm, backbone, judge_model, judge, overrides)
    estimate = estimate_runs({f"{trials} trial(s)": trial}, val, estimator_for(lm, targets), targets, runs=trials)
    estimate.notes.append(f"each trial at the search space's largest shape (T={rounds}, k={per_round}, all "
                          f"{len(library)} templates), on the {len(val)} validation instances")
    estimate.notes += [note] if note else []
    return estimate
