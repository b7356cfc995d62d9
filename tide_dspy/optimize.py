"""Compile (optimize instructions) and tune (Optuna over T, k, pool size, temperature) TIDE programs.

Optimizers are declared in optimizers/<name>.yaml: the DSPy class, its constructor and compile() arguments with
placeholders ($metric, $lm, $prompt_lm, $threads, $train, $val), and which arguments set the demo count. One
generic path builds any of them. Validation is always a held-out part of the TRAIN split, never test.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import math
import os
import random
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import dspy
import yaml

from tide_dspy import metrics
from tide_dspy.backbones import lm_context
from tide_dspy.domains import Setting
from tide_dspy.schemas import Instance
from tide_dspy.shipped import NOT_SHIPPED, OPTIMIZERS_DIR
from tide_dspy.util.jsonio import read_yaml_file

if TYPE_CHECKING:
    from tide_dspy.trials import TrialLog

log = logging.getLogger(__name__)

OPTIMIZERS_ENV = "TIDE_OPTIMIZERS"
# Classes a config may name besides the optimizers that dspy.teleprompt exports.
ALLOWED_OPTIMIZERS: frozenset[str] = frozenset()
SPLIT_SEED = 0


# ---- data ----

MIN_VALIDATION = 3  # held-out instances, where the split has them: one instance decides nothing


def split_train(instances: list[Instance], val_fraction: float = 0.25, seed: int = SPLIT_SEED
                ) -> tuple[list[Instance], list[Instance]]:
    """(train part, validation part) of the train split, shuffled with a fixed seed: `val_fraction` of it held
    out, at least MIN_VALIDATION instances where the split has them and one is left to train on. Refuses test
    instances."""
    test = [i.instance_id for i in instances if i.split == "test"]
    if test:
        raise ValueError(f"compile/tune must not see the test split; got test instances {test[:3]}"
                         f"{'...' if len(test) > 3 else ''}: load with split='train'")
    if len(instances) < 2:
        raise ValueError(f"need at least 2 train instances to hold one out for validation, got {len(instances)}")
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    order = list(instances)
    random.Random(seed).shuffle(order)
    n_val = min(len(order) - 1, max(MIN_VALIDATION, math.ceil(len(order) * val_fraction)))
    return order[n_val:], order[:n_val]


def as_examples(items) -> list[dspy.Example]:
    from tide_dspy.data import to_examples

    items = list(items)
    if items and isinstance(items[0], Instance):
        return to_examples(items)
    return items


# ---- metric ----

SCAN_RECALL = "scan-recall"  # the scan's recall of gold evidence in its focus: denser than F1 (tide_dspy.scan)


def parse_metric(spec: str) -> tuple[str, str]:
    """"retrieval" -> (retrieval, f1); "mean-coverage" -> (mean, coverage)."""
    component, _, kind = spec.partition("-")
    return component, kind or "f1"


def make_metric(spec, judge=None, feedback: bool = False):
    """A DSPy metric from a spec like "retrieval-f1" or "scan-recall" (or a callable, returned as is)."""
    if callable(spec):
        return spec
    if spec == SCAN_RECALL:
        return metrics.scan_feedback_metric if feedback else metrics.scan_recall_metric
    component, kind = parse_metric(spec)
    factory = metrics.tide_feedback_metric if feedback else metrics.tide_metric
    return factory(component=component, kind=kind, judge=judge)


def aggregate_value(result, spec: str) -> float:
    """The metric `spec` read off an EvaluationSummary (macro-averaged over instances)."""
    if spec == SCAN_RECALL:
        if result.scan_recall is None:
            raise ValueError("metric 'scan-recall' needs a scanning program (scan=True) and gold evidence")
        return result.scan_recall
    component, kind = parse_metric(spec)
    value = metrics.component_value(result, component, kind)
    if value is None:
        raise ValueError(f"metric {spec!r} is not available without a judge: pass --judge proxy or a judge model")
    return value


# ---- optimizer configs ----

def optimizer_dirs() -> list[Path]:
    """The shipped optimizers/ first, then $TIDE_OPTIMIZERS; never the working directory (see tide_dspy.shipped)."""
    shipped = [OPTIMIZERS_DIR] if OPTIMIZERS_DIR else []
    from tide_dspy.util.settings import settings

    extra = [settings().optimizers] if settings().optimizers else []
    return list(dict.fromkeys([*shipped, *extra]))


def available_optimizers() -> list[str]:
    return sorted({p.stem for d in optimizer_dirs() if d.is_dir() for p in d.glob("*.yaml")})


def load_optimizer_config(name_or_path: str) -> dict:
    """An optimizer config by name (the shipped optimizers/<name>.yaml, else $TIDE_OPTIMIZERS/<name>.yaml) or by an
    explicit .yaml path. The class it names is checked by `optimizer_class` before anything is built."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = next((d / f"{name_or_path}.yaml" for d in optimizer_dirs() if (d / f"{name_or_path}.yaml").exists()),
                    None)
        if path is None:
            raise ValueError(f"unknown optimizer {name_or_path!r}; available: {available_optimizers()} "
                             f"(configs live in {[str(d) for d in optimizer_dirs()]}"
                             f"{'' if OPTIMIZERS_DIR else '; ' + NOT_SHIPPED}); pass --optimizer PATH.yaml or "
                             f"set {OPTIMIZERS_ENV}")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no optimizer config here")
    config = read_yaml_file(path) or {}
    if not isinstance(config, dict):
        raise ValueError(
            f"{path}: expected a mapping with 'optimizer', 'init' and 'compile' (see optimizers/copro.yaml)"
        )
    for key in ("optimizer", "init", "compile"):
        if key not in config:
            raise ValueError(f"{path}: missing '{key}' (see optimizers/copro.yaml for the format)")
    config["path"] = str(path)
    config.setdefault("name", path.stem)
    optimizer_class(config["optimizer"], config["path"])
    return config


def parse_options(pairs: list[str] | None) -> dict[str, dict]:
    """["init.breadth=4", "compile.num_trials=3", "auto=null"] -> {"init": {...}, "compile": {...}}.

    A key without a section prefix goes to init. Values are read as YAML scalars."""
    out: dict[str, dict] = {"init": {}, "compile": {}}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"option {pair!r}: expected KEY=VALUE, e.g. init.breadth=4 or compile.num_trials=3")
        section, _, arg = key.rpartition(".")
        section = section or "init"
        if section not in out:
            raise ValueError(f"option {pair!r}: section must be init or compile")
        out[section][arg] = yaml.safe_load(value)
    return out


def _resolve(value, bindings: dict, source: str):
    if isinstance(value, str) and value.startswith("$"):
        if value[1:] not in bindings:
            raise ValueError(f"{source}: unknown placeholder {value}; known: {sorted('$' + k for k in bindings)}")
        return bindings[value[1:]]
    if isinstance(value, dict):
        return {k: _resolve(v, bindings, source) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, bindings, source) for v in value]
    return value


def teleprompt_optimizers() -> dict[str, type]:
    """dotted name -> class of every optimizer dspy.teleprompt exports (subclasses of its Teleprompter)."""
    import dspy.teleprompt as teleprompt

    found = {}
    for name in dir(teleprompt):
        value = getattr(teleprompt, name)
        if (
            isinstance(value, type)
            and issubclass(value, teleprompt.Teleprompter)
            and value is not teleprompt.Teleprompter
        ):
            found[f"dspy.teleprompt.{name}"] = value
    return found


def optimizer_class(dotted, source: str) -> type:
    """The class a config names: one of dspy.teleprompt's optimizers or a name in ALLOWED_OPTIMIZERS, nothing else.

    A config may come from a folder the user did not write, so it never gets to name an arbitrary callable."""
    known = teleprompt_optimizers()
    short = {n.rpartition(".")[2]: cls for n, cls in known.items()}
    if isinstance(dotted, str) and dotted in known:
        return known[dotted]
    if isinstance(dotted, str) and dotted.startswith("dspy.") and dotted.count(".") == 1 and dotted[5:] in short:
        return short[dotted[5:]]  # dspy.COPRO: the same class, exported at the top level
    if isinstance(dotted, str) and dotted in ALLOWED_OPTIMIZERS:
        module, _, name = dotted.rpartition(".")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"{source}: optimizer class {dotted!r} not found ({exc})") from None
    raise ValueError(f"{source}: optimizer {dotted!r} is not a DSPy optimizer; name one of dspy.teleprompt's "
                     f"({', '.join(sorted(n.rpartition('.')[2] for n in known))}), e.g. dspy.teleprompt.COPRO, "
                     "or add the class to tide_dspy.optimize.ALLOWED_OPTIMIZERS")


def optimizer_arguments(config: dict, *, demos: int | None, options: dict | None, n_train: int) -> tuple[dict, dict]:
    """(init kwargs, compile kwargs) with placeholders unresolved: demos and overrides applied."""
    init, comp = dict(config["init"]), dict(config["compile"])
    sections = {"init": init, "compile": comp}
    demo_spec = config.get("demos")
    count = demos if demos is not None else (demo_spec or {}).get("default", 0)
    if demo_spec is None:
        if demos:
            raise ValueError(f"{config['path']}: optimizer {config['name']!r} tunes instructions only; it cannot add "
                             "demos (use miprov2, simba or bootstrap for --demos)")
    else:
        for section in ("init", "compile"):
            for arg in demo_spec.get(section, []):
                sections[section][arg] = count
    for section, values in (options or {}).items():
        sections[section].update(values)
    for dotted in config.get("fit_to_trainset", []):
        section, _, arg = dotted.partition(".")
        if isinstance(sections[section].get(arg), int):
            sections[section][arg] = min(sections[section][arg], n_train)
    return init, comp


class DebugLog(io.TextIOBase):
    """A text stream whose lines go to `logger.debug`."""

    def __init__(self, logger: logging.Logger):
        self.logger, self.pending = logger, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            self.logger.debug("%s", line)
        return len(text)


def compile_program(
    program: dspy.Module,
    trainset,
    valset,
    optimizer: str = "copro",
    metric="retrieval-f1",
    *,
    judge="proxy",
    demos: int | None = None,
    options: dict | None = None,
    lm: dspy.BaseLM | None = None,
    prompt_lm: dspy.BaseLM | None = None,
    threads: int = 1,
    autolog: bool = False,
    trials: Callable[[Callable, int | None], TrialLog] | None = None,
) -> dspy.Module:
    """Optimize `program` (instruction-only unless `demos` > 0) and return the compiled copy.

    trainset/valset: Instances (or dspy.Examples) of the train split's two parts. `metric`: a spec such as
    "retrieval-f1" / "mean-f1" scored with `judge`, or a DSPy metric. `options`: parse_options() overrides.
    With metric "scan-recall" only the scan is optimized and run (`ScanOnly`); the rounds are kept as they are.
    `trials(metric, planned evaluations)` opens the compile's TrialLog: evaluations are logged and replayed, and
    when its budget stops the search, the best candidate scored so far is returned (the log says why it stopped)."""
    from tide_dspy.cost.guard import BudgetSpent
    from tide_dspy.cost.optimizers import optimizer_plan
    from tide_dspy.scan import ScanOnly
    from tide_dspy.tracking import dspy_autolog
    from tide_dspy.trials import Logged

    config = load_optimizer_config(optimizer)
    lm = lm or dspy.settings.lm
    if lm is None:
        raise RuntimeError("no LM: pass lm=... or configure one with dspy.context(lm=...)")
    judge = metrics.make_judge(judge) if isinstance(judge, str) else judge
    train, val = as_examples(trainset), as_examples(valset)
    score = make_metric(metric, judge, feedback=config.get("metric") == "feedback")
    bindings = {"metric": score, "lm": lm, "prompt_lm": prompt_lm or lm, "threads": threads, "train": train,
                "val": val}
    init, comp = optimizer_arguments(config, demos=demos, options=options, n_train=len(train))
    target = ScanOnly(program) if metric == SCAN_RECALL else program
    source = config["path"]
    optimizer_type = optimizer_class(config["optimizer"], source)
    trial_log = None
    if trials is not None:
        try:
            planned = optimizer_plan(optimizer_type, init, comp, n_train=len(train), n_val=len(val),
                                     predictors=len(target.predictors())).evaluations(len(train), len(val))
        except ValueError:  # no plan for this optimizer (or its arguments fix none): the bar counts without a total
            planned = None
        trial_log = trials(make_metric(metric, judge), planned)
    student = Logged(target, trial_log) if trial_log is not None else target
    log.info("compiling with %s (%s): init %s, compile %s", config["name"], config["optimizer"],
             {k: v for k, v in init.items() if not str(v).startswith("$")}, list(comp))
    # Inside the context: some optimizers read dspy.settings.lm when they are built. What an optimizer prints
    # (COPRO echoes each proposal prompt and answer) goes to the debug log: the command's output stays its own.
    with lm_context(lm), dspy_autolog(autolog), contextlib.redirect_stdout(DebugLog(log)):
        teleprompter = optimizer_type(**_resolve(init, bindings, source))
        try:
            compiled = teleprompter.compile(student, **_resolve(comp, bindings, source))
            chosen = compiled.target if trial_log is not None else compiled
        except BudgetSpent:
            best = trial_log.best()
            chosen = student.candidate(best[0]) if best else target.deepcopy()
        finally:
            if trial_log is not None:
                trial_log.close()
    return chosen.with_scanner_of(program) if isinstance(target, ScanOnly) else chosen


# ---- tune ----

BUDGET_STOP = "budget_stopped"  # the study's user attribute that says why the budget ended a tune run


def search_space(setting: Setting, pool_max: int) -> dict:
    """Ranges of the tuned knobs; rounds follow the paper's per-setting shapes."""
    return {
        **setting.tuning_ranges,
        "pool_size": (1, max(1, pool_max)),
        "temperature": (0.0, 1.0),
    }


def open_study(name: str, storage: str, seed: int = 0, attempts: int = 5):
    """Create the study, or load it when another process already has (Optuna's shared-RDB pattern).

    Workers started together on a fresh database race to create Optuna's tables; the loser's CREATE fails on a
    duplicate. It then finds the tables made, so a short retry settles it."""
    import optuna
    from sqlalchemy.exc import DBAPIError

    for attempt in range(attempts):
        try:
            return optuna.create_study(study_name=name, storage=storage, direction="maximize", load_if_exists=True,
                                       sampler=optuna.samplers.TPESampler(seed=seed))
        except DBAPIError as exc:
            if attempt == attempts - 1:
                raise
            log.info("opening study %s: %s; retrying (another worker is creating the storage)", name,
                     str(exc).splitlines()[0])
            time.sleep(0.5 + random.random())


def tune(
    setting: Setting,
    library,
    valset: list[Instance],
    *,
    lm: dspy.BaseLM,
    n_trials: int,
    storage: str = "sqlite:///optuna.db",
    study_name: str | None = None,
    metric: str = "retrieval-f1",
    judge="proxy",
    seed: int = 0,
    on_trial=None,
    progress: bool = False,
    base: dspy.Module | None = None,
    workers: int = 1,
    budget=None,
    overrides=None,
):
    """An Optuna study (resumable: load_if_exists) maximizing `metric` of TIDE on the validation part.

    Each trial builds TIDE with (T, k, a seeded subset of `library` of the trial's pool size), loads `base`'s
    predictor state (e.g. a compiled program's instructions) when given, and runs it on an LM copy at the
    trial's temperature, `workers` validation instances at a time. `on_trial(trial, value, result)` is called
    after each finished trial. `budget` (cost.guard.Budget) caps the LM calls and USD of all trials together: the
    trial it stops is pruned (its score covers only part of the validation) and the study ends there; `overrides`
    (cost.prices.Overrides) states prices where the map has none.

    Several processes (or machines) may run tune() on one study: give them the same `storage` (an RDB URL such
    as postgresql://...) and `study_name`; Optuna hands each its own trials."""

    import optuna

    from tide_dspy.cost.guard import Budget, Guard
    from tide_dspy.cost.prices import Overrides
    from tide_dspy.evaluation import evaluate
    from tide_dspy.programs import build_program

    if any(i.split == "test" for i in valset):
        raise ValueError("tune must not see the test split: pass the validation part of train")
    judge = metrics.make_judge(judge) if isinstance(judge, str) else judge
    space = search_space(setting, len(library))
    worker = f"{socket.gethostname()}:{os.getpid()}"  # which process ran a trial, when several share the study
    study = open_study(study_name or f"tide-{setting.name}", storage, seed)
    budget, overrides = budget or Budget(), overrides or Overrides()
    # One spend counter for the study: each trial's LM is a copy of `lm`, whose calls it records in `lm`'s history.
    spend = Guard(budget, overrides.targets({"backbone": lm, "judge": getattr(judge, "lm", None)})).spend
    study.set_user_attr(BUDGET_STOP, None)  # why this run's budget ended the study, once it does

    def objective(trial):
        params = {
            "max_rounds": trial.suggest_int("max_rounds", *space["max_rounds"]),
            "per_round": trial.suggest_int("per_round", *space["per_round"]),
            "pool_size": trial.suggest_int("pool_size", *space["pool_size"]),
            "temperature": trial.suggest_float("temperature", *space["temperature"]),
        }
        program = build_program("tide", setting, templates=library.subset(params["pool_size"], seed=seed),
                                max_rounds=params["max_rounds"], per_round=params["per_round"])
        if base is not None:
            if base.scanner is not None:  # the base's scan (and its compiled instruction) comes along
                program.use_scan(base.focus_size)
            program.load_state(base.dump_state())
        result = evaluate(program, valset, judge=judge, out_path=None, progress=progress,
                          lm=lm.copy(temperature=params["temperature"]), workers=workers, budget=budget,
                          overrides=overrides, spend=spend)
        if (result.budget or {}).get("stopped"):
            study.set_user_attr(BUDGET_STOP, result.budget["stopped"])
            study.stop()
            raise optuna.TrialPruned(result.budget["stopped"])
        value = aggregate_value(result, metric)
        trial.set_user_attr("n_failed", result.n_failed)
        trial.set_user_attr("worker", worker)
        if on_trial:
            on_trial(trial, value, result)
        return value

    study.optimize(objective, n_trials=n_trials)
    return study
