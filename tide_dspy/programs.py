"""Build, save and load TIDE programs and baselines.

A saved program is DSPy's JSON state (instructions, demos) plus "tide_config" (everything needed to rebuild the
module: kind, setting, rounds, templates, ...) plus "tide_extra" (backbone name, templates path, dspy version).
`load_program` rebuilds the module from our classes and loads the state: no pickle, nothing executed.
"""

from __future__ import annotations

import json
from pathlib import Path

import dspy

from tide_dspy.backbones.registry import scrub_secrets
from tide_dspy.data.records import read_json_file
from tide_dspy.discovery import DiscoveryProgram, MultiAgent, SingleAgent, TIDE
from tide_dspy.schemas import Template

# method -> (class, fixed config). The paper's ablations are TIDE with other guidance.
METHODS: dict[str, tuple[type[DiscoveryProgram], dict]] = {
    "tide": (TIDE, {"guidance": "templates"}),
    "single": (SingleAgent, {"guidance": "none"}),
    "multi": (MultiAgent, {"guidance": "none"}),
    "iter": (TIDE, {"guidance": "none"}),
    "iter-demos": (TIDE, {"guidance": "demos"}),
}

# The paper's loop shapes: workspace T=10 rounds of one finding, repository T=3 rounds of several.
SETTING_DEFAULTS = {
    "workspace": {"max_rounds": 10, "per_round": 1},
    "repository": {"max_rounds": 3, "per_round": 3},
}

MODEL_URI_SCHEMES = ("models:/", "runs:/")


def _as_templates(templates) -> list[Template]:
    from tide_dspy.templates import TemplateLibrary

    if templates is None:
        return []
    if isinstance(templates, (str, Path)):
        templates = TemplateLibrary.load(templates)
    if isinstance(templates, TemplateLibrary):
        return list(templates.templates)
    return [t if isinstance(t, Template) else Template.model_validate(t) for t in templates]


def build_program(method: str, setting: str, templates=None, demos: list[str] | None = None,
                  **config) -> DiscoveryProgram:
    """A fresh program. `templates`: a TemplateLibrary, a list of Templates, or a library JSON path.

    `config` overrides the setting's defaults (max_rounds, per_round, max_retries, dedup_threshold, and
    temperature for multi, max_findings for single). Keys set to None are ignored.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {sorted(METHODS)}")
    cls, fixed = METHODS[method]
    templates = _as_templates(templates)
    if method == "tide" and not templates:
        raise ValueError("method 'tide' needs a template library: pass templates=... (make one with `tide distill`)")
    if method == "iter-demos" and not demos:
        raise ValueError("method 'iter-demos' needs demos=[...] (see tide_dspy.templates.solved_demos)")
    kwargs = {**SETTING_DEFAULTS.get(setting, {}), **{k: v for k, v in config.items() if v is not None}, **fixed}
    if cls is SingleAgent:
        kwargs.pop("max_rounds", None)
        kwargs["per_round"] = kwargs.pop("max_findings", 10)
    return cls(setting, templates=templates if kwargs["guidance"] == "templates" else None,
               demos=demos if kwargs["guidance"] == "demos" else None, **kwargs)


def method_of(program: DiscoveryProgram) -> str:
    """The method name a program was built as (inverse of build_program)."""
    for name, (cls, fixed) in METHODS.items():
        if type(program) is cls and program.guidance == fixed["guidance"]:
            return name
    return type(program).__name__


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
    path.parent.mkdir(parents=True, exist_ok=True)
    program.save(str(path))
    state = json.loads(path.read_text())
    state["tide_extra"] = scrub_secrets({"method": method_of(program), "dspy_version": dspy.__version__, **(extra or {})})
    path.write_text(json.dumps(state, indent=2, ensure_ascii=False) + "\n")
    return path


def fetch_program_file(uri: str) -> Path:
    """The program JSON behind an MLflow URI (models:/name/version, models:/name@alias, runs:/id/path)."""
    import mlflow

    from tide_dspy.tracking import configure_tracking

    configure_tracking()
    local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri))
    if local.is_file():
        return local
    files = sorted(local.rglob("*.json"))
    programs = [f for f in files if "tide_config" in f.read_text()[:2_000_000]]
    if len(programs) != 1:
        raise ValueError(f"{uri}: expected one program JSON among the model's artifacts, found "
                         f"{[f.name for f in programs] or 'none'}")
    return programs[0]


def read_program_state(path_or_uri: str | Path) -> tuple[dict, Path]:
    text = str(path_or_uri)
    path = fetch_program_file(text) if text.startswith(MODEL_URI_SCHEMES) else Path(path_or_uri)
    state = read_json_file(path, "no saved program here (make one with `tide compile` or save_program)")
    if "tide_config" not in state:
        raise ValueError(f"{path}: no 'tide_config' in this state file; it was not saved by tide_dspy.save_program")
    return state, path


def load_program(path_or_uri: str | Path) -> DiscoveryProgram:
    """A ready module from a saved JSON file or an MLflow model URI (`models:/tide-repository-local/1`).

    The module is rebuilt from our classes with the saved config, then DSPy's state (optimized instructions,
    demos) is loaded on top. `program.tide_extra` carries the saved extra config (backbone, ...)."""
    state, path = read_program_state(path_or_uri)
    program = DiscoveryProgram.from_config(state["tide_config"])
    program.load_state(state)
    program.tide_extra = state.get("tide_extra", {})
    program.source_path = str(path)
    return program


def replace_templates(program_path: str | Path, library_path: str | Path | None) -> Path:
    """Give a saved TIDE program another template library (None: no templates), keeping its compiled
    instructions and config.

    tide_extra records the library it now holds and that its validation scores were measured with the earlier
    one. Used when a library is re-distilled after the program was compiled."""
    from tide_dspy.templates import TemplateLibrary

    program = load_program(program_path)
    if getattr(program, "guidance", None) != "templates":
        raise ValueError(f"{program_path}: not a TIDE program with templates (guidance={program.guidance!r})")
    library = TemplateLibrary.load(library_path) if library_path is not None else TemplateLibrary()
    if library.setting and library.setting != program.setting_name:
        raise ValueError(f"{library_path}: a {library.setting} library, but {program_path} is a "
                         f"{program.setting_name} program")
    previous = [t.id for t in program.templates]
    program.templates = list(library.templates)
    extra = {**program.tide_extra, "templates_path": str(library_path) if library_path is not None else None,
             "templates_replaced": {"previous_ids": previous, "note": "validation scores were measured with the "
                                                                     "previous library"}}
    extra.pop("method", None)
    extra.pop("dspy_version", None)
    return save_program(program, program_path, extra=extra)
