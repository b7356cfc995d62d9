"""Build, save and load TIDE programs and baselines.

A saved program is DSPy's JSON state (instructions, demos) plus "tide_config" (everything needed to rebuild the
module: kind, setting, rounds, templates, ...) plus "tide_extra" (backbone name, templates path, dspy version).
`load_program` rebuilds the module from our classes and loads the state: no pickle, nothing executed.
"""

from __future__ import annotations

import json
from pathlib import Path

import dspy
from dspy.utils.saving import get_dependency_versions

from tide_dspy.data.records import describe_record_error
from tide_dspy.discovery import DiscoveryProgram
from tide_dspy.domains import Setting
from tide_dspy.methods import get_method, method_of
from tide_dspy.schemas import STOP_RULES, Template
from tide_dspy.util.jsonio import read_json_file
from tide_dspy.util.safe_write import write_text
from tide_dspy.util.secrets import scrub_secrets

MODEL_URI_SCHEMES = ("models:/", "runs:/")

# Saved config values are bounded: a program file may come from anywhere, and it sets how many LM calls a run makes.
CONFIG_BOUNDS: dict[str, tuple[float, float]] = {
    "max_rounds": (1, 100), "per_round": (1, 100), "max_attempts": (1, 11),
    "dedup_threshold": (0, 100),
    "temperature": (0, 2), "max_evidence": (1, 50), "n_findings": (1, 1000), "evidence_size": (1, 50),
    "focus_size": (1, 200),
}
# Seeds: any integer, or null for none.
SEED_KEYS = ("context_order_seed", "seed")
# Switches: true or false.
FLAG_KEYS = ("template_names", "dedup_pool")
# Words: one of a fixed set.
CHOICE_KEYS: dict[str, tuple[str, ...]] = {"stop_on": STOP_RULES}
CONFIG_KEYS = frozenset({"kind", "setting", "guidance", "templates", "demos", "scan", "scan_templates", *CONFIG_BOUNDS,
                         *SEED_KEYS, *FLAG_KEYS, *CHOICE_KEYS})
STATE_KEYS = frozenset({"metadata", "tide_config", "tide_extra"})
FLOOR_KEYS = frozenset({"max_rounds", "per_round", "context_order_seed", "n_findings", "evidence_size", "seed"})


def _as_templates(templates) -> list[Template]:
    from tide_dspy.templates import TemplateLibrary

    if templates is None:
        return []
    if isinstance(templates, (str, Path)):
        templates = TemplateLibrary.load(templates)
    if isinstance(templates, TemplateLibrary):
        return list(templates.templates)
    return [t if isinstance(t, Template) else Template.model_validate(t) for t in templates]


def build_program(method: str, setting: str | Setting, templates=None, demos: list[str] | None = None,
                  **config) -> DiscoveryProgram:
    """A fresh program of `method` (tide_dspy.methods). `templates`: a TemplateLibrary, a list of Templates, or a
    library JSON path, for a method that reads templates; `demos`: the rendered solved examples of a method that
    shows them (templates.solved_demos).

    `config` overrides the setting's defaults (max_rounds, per_round, max_attempts, dedup_threshold, max_evidence,
    and temperature for multi, max_findings for single). Keys set to None are ignored.
    """
    spec = get_method(method)
    templates = _as_templates(templates) if spec.templates else []
    if spec.templates and not templates:
        raise ValueError(f"method {method!r} needs a template library: pass templates=... (make one with "
                         "`tide distill`)")
    if spec.demos and not demos:
        raise ValueError(f"method {method!r} needs demos=[...] (see tide_dspy.templates.solved_demos)")
    kwargs = {k: v for k, v in config.items() if v is not None}
    if spec.floor:  # no model call: nothing that shapes one (templates, evidence bound, retries) applies
        return spec.program(setting, **{k: v for k, v in kwargs.items() if k in FLOOR_KEYS})
    return spec.program(setting, templates=templates, demos=demos if spec.demos else None, guidance=spec.guidance,
                        **kwargs)


def safe_name(name: str) -> str:
    """A backbone name as a folder name: `openai/gpt-4o` -> `openai_gpt-4o`."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def program_dir(setting: str, backbone: str, root: str | Path = "programs") -> Path:
    """Where a backbone's distilled templates and compiled program live: <root>/<setting>/<backbone>/."""
    return Path(root) / setting / safe_name(backbone)


def save_program(program: DiscoveryProgram, path: str | Path, extra: dict | None = None) -> Path:
    """Write DSPy JSON state (with tide_config) plus `extra` (backbone, templates path, ...) as tide_extra."""
    path = Path(path)
    if path.suffix != ".json":
        raise ValueError(f"{path}: programs are saved as JSON state; use a .json path")
    # The state DSPy's `save` writes for a .json path, built here so that it reaches the disk only through
    # util.safe_write (never through a link, never half-written).
    state = json.loads(json.dumps(program.dump_state(), default=str))
    state["metadata"] = {"dependency_versions": get_dependency_versions()}
    for name, _ in program.named_predictors():
        state[name]["lm"] = None  # the LM is the user's choice at run time (and its state may hold headers)
    state["tide_extra"] = scrub_secrets(
        {"method": method_of(program), "dspy_version": dspy.__version__, **(extra or {})}
    )
    return write_text(path, json.dumps(state, indent=2, ensure_ascii=False) + "\n")


def fetch_program_file(uri: str) -> Path:
    """The program JSON behind an MLflow URI (models:/name/version, models:/name@alias, runs:/id/path)."""
    import mlflow

    from tide_dspy.tracking import configure_tracking

    tracking = configure_tracking()
    try:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri))
    except Exception as exc:  # noqa: BLE001 - MlflowException and the store's own errors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{uri}: not found in the MLflow store {tracking} ({first[:300]}); check the name and "
                         "version (models:/<name>/<version>), set MLFLOW_TRACKING_URI to the store that holds it, "
                         "or pass the program's JSON path") from None
    if local.is_file():
        return local
    files = sorted(local.rglob("*.json"))
    programs = [f for f in files if "tide_config" in f.read_text()[:2_000_000]]
    if len(programs) != 1:
        raise ValueError(f"{uri}: expected one program JSON among the model's artifacts, found "
                         f"{[f.name for f in programs] or 'none'}")
    return programs[0]


def check_config(config, path: Path) -> dict:
    """A saved tide_config that names only known keys, has kind and setting, and keeps its numbers in bounds."""
    fix = "save the program again (tide compile, or tide_dspy.save_program)"
    if not isinstance(config, dict):
        raise ValueError(f"{path}: 'tide_config' must be an object, not {type(config).__name__}; {fix}")
    unknown = sorted(set(config) - CONFIG_KEYS)
    missing = [k for k in ("kind", "setting") if k not in config]
    if unknown or missing:
        parts = ([f"unknown key(s) {unknown}"] if unknown else []) + ([f"missing key(s) {missing}"] if missing else [])
        raise ValueError(f"{path}: tide_config has {' and '.join(parts)}; {fix}")
    for key, (low, high) in CONFIG_BOUNDS.items():
        if key not in config:
            continue
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise ValueError(f"{path}: tide_config.{key} = {value!r} is out of bounds; it must be a number from "
                             f"{low} to {high} (edit the file, or override it with --rounds / --per-round)")
    for key in SEED_KEYS:
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{path}: tide_config.{key} = {value!r} must be an integer or null; {fix}")
    for key in FLAG_KEYS:
        if key in config and not isinstance(config[key], bool):
            raise ValueError(f"{path}: tide_config.{key} = {config[key]!r} must be true or false; {fix}")
    for key, choices in CHOICE_KEYS.items():
        if key in config and config[key] not in choices:
            raise ValueError(f"{path}: tide_config.{key} = {config[key]!r} must be one of {list(choices)}; {fix}")
    for key in ("templates", "demos"):
        if not isinstance(config.get(key, []), list):
            raise ValueError(f"{path}: tide_config.{key} must be a list; {fix}")
    return config


def read_program_state(path_or_uri: str | Path) -> tuple[dict, Path]:
    text = str(path_or_uri)
    path = fetch_program_file(text) if text.startswith(MODEL_URI_SCHEMES) else Path(path_or_uri)
    state = read_json_file(path, "no saved program here (make one with `tide compile` or save_program)")
    if not isinstance(state, dict) or "tide_config" not in state:
        raise ValueError(f"{path}: no 'tide_config' in this state file; it was not saved by tide_dspy.save_program")
    state["tide_config"] = check_config(state["tide_config"], path)
    return state, path


def load_program(path_or_uri: str | Path) -> DiscoveryProgram:
    """A ready module from a saved JSON file or an MLflow model URI (`models:/tide-repository-local/1`).

    The module is rebuilt from our classes with the saved config, then DSPy's state (optimized instructions,
    demos) is loaded on top. An LM saved with the state is dropped: the program runs on the LM the caller
    chooses. `program.tide_extra` carries the saved extra config (backbone, ...)."""
    state, path = read_program_state(path_or_uri)
    fix = "save the program again (tide compile, or tide_dspy.save_program)"
    try:
        program = DiscoveryProgram.from_config(state["tide_config"])
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{path}: tide_config does not build a program ({describe_record_error(exc)}); {fix}"
        ) from None
    names = [name for name, _ in program.named_predictors()]
    missing = [n for n in names if not isinstance(state.get(n), dict)]
    extra = sorted(set(state) - set(names) - STATE_KEYS)
    if missing or extra:
        parts = ([f"no predictor state for {missing}"] if missing else []) + (
            [f"unknown key(s) {extra}"] if extra else []
        )
        raise ValueError(f"{path}: {' and '.join(parts)}; {fix}")
    try:
        program.load_state({k: v for k, v in state.items() if k in names})
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path}: predictor state does not load ({type(exc).__name__}: {exc}); {fix}") from None
    for _, predictor in program.named_predictors():
        predictor.lm = None
    program.tide_extra = state.get("tide_extra", {})
    return program
