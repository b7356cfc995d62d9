"""Thought templates: distilled from solved training cases, kept in a JSON library, shown to TIDE at inference.

One distillation per solved training problem, retried under dspy.Refine until the abstraction check passes
(tide_dspy.refinement); a template that never passes is dropped and counted. Near-duplicate templates are merged.
The library is not capped by default, as the paper's are not (40 workspace and 108 repository templates); a cap
(`max_templates`) keeps the templates that absorbed the most cases, for a backbone whose window is small.
"""

from __future__ import annotations

import json
import logging
import random
import statistics
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

import dspy
from pydantic import ValidationError
from rapidfuzz import fuzz, utils
from tqdm.auto import tqdm

from tide_dspy.abstraction import case_text, source_keys
from tide_dspy.cost.usage import entries_usage
from tide_dspy.domains import SETTINGS, Setting, get_setting
from tide_dspy.refinement import Refined, refine_template
from tide_dspy.schemas import GoldProblem, Instance, Template
from tide_dspy.util.jsonio import read_json_file

log = logging.getLogger(__name__)

DEFAULT_MERGE_THRESHOLD = 80.0
DEFAULT_MAX_TEMPLATES: int | None = None  # no cap, as in the paper
DEFAULT_MAX_ATTEMPTS = 3


def is_solved(problem: GoldProblem) -> bool:
    """A training problem can be distilled only when its reference resolution is known."""
    return bool(problem.patch) or problem.action is not None


def solved_cases(instances: list[Instance]) -> list[tuple[Instance, GoldProblem]]:
    return [(inst, p) for inst in instances for p in inst.problems if is_solved(p)]


def distillable_cases(instances: list[Instance], setting: Setting) -> list[tuple[Instance, GoldProblem]]:
    """The solved cases of `setting` among `instances`, one distillation each; an error when there are none."""
    cases = solved_cases([i for i in instances if i.setting == setting.name])
    if not cases:
        raise ValueError(f"no solved {setting.name} problems to distill among {len(instances)} instances "
                         "(is this the train split of the right setting?)")
    return cases


class Distiller(dspy.Module):
    """One predictor: a solved case (context, problem, resolution) -> an abstract template draft."""

    def __init__(self, setting: str | Setting):
        super().__init__()
        self.setting = get_setting(setting)
        self.distill = dspy.Predict(self.setting.distill_signature)

    def forward(self, case_instance: Instance, problem: GoldProblem) -> dspy.Prediction:
        # Not `instance`: DSPy's callback wrapper of Module.__call__ takes that name, so Refine's keyword call
        # would collide with it.
        return self.distill(**self.setting.solved_case(case_instance, problem))


@dataclass
class TemplateLibrary:
    """Templates plus metadata (setting, backbone, distillation counts, merges). Saved as one JSON file."""

    templates: list[Template] = field(default_factory=list)
    setting: str | None = None
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.templates)

    def __iter__(self):
        return iter(self.templates)

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self.templates]

    # ---- persistence ----
    def to_dict(self) -> dict:
        return {"setting": self.setting, "meta": self.meta, "templates": [t.model_dump() for t in self.templates]}

    def save(self, path: str | Path) -> Path:
        from tide_dspy.util.safe_write import write_text

        return write_text(path, json.dumps(self.to_dict(), indent=1, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> TemplateLibrary:
        """Read a library file: {"setting", "meta", "templates": [...]}, or a bare list of templates."""
        path = Path(path)
        data = read_json_file(path, "no template library here; make one with `tide distill`")
        if isinstance(data, list):
            data = {"templates": data}
        if not isinstance(data, dict) or not isinstance(data.get("templates"), list):
            raise ValueError(f"{path}: expected an object with a 'templates' list (or a bare list of templates)")
        templates = []
        for i, raw in enumerate(data["templates"]):
            try:
                templates.append(Template.model_validate(raw))
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(x) for x in err["loc"])
                raise ValueError(f"{path}: templates[{i}].{where}: {err['msg']}; each template needs id, name, "
                                 "pattern and evidence_flow (a list of strings)") from None
        for where, name in [("setting", data.get("setting")), *((f"templates[{i}].setting", t.setting)
                                                               for i, t in enumerate(templates))]:
            if name is not None and name not in SETTINGS:
                raise ValueError(f"{path}: {where} {name!r} is not a setting; use one of {', '.join(SETTINGS)}")
        duplicates = sorted({t.id for t in templates if sum(u.id == t.id for u in templates) > 1})
        if duplicates:
            raise ValueError(f"{path}: duplicate template ids {duplicates}; every template id must be unique")
        return cls(templates, data.get("setting"), data.get("meta") or {})

    # ---- editing ----
    def merge_near_duplicates(self, threshold: float = DEFAULT_MERGE_THRESHOLD) -> int:
        """Drop templates whose name and pattern say what an earlier one says; return how many were merged.

        Similarity is rapidfuzz's token-set ratio (0-100) after lower-casing and dropping punctuation: word order
        and extra words do not count, so "Approval given verbally, never recorded" and "verbal approval never
        recorded in the system of record" can meet. Name and pattern must each reach `threshold`. The kept
        template records the source cases it absorbed in meta["merged"].
        """
        kept: list[Template] = []
        merged = dict(self.meta.get("merged") or {})
        for t in self.templates:
            twin = next((k for k in kept if _near_duplicate(k, t, threshold)), None)
            if twin is None:
                kept.append(t)
            else:
                merged.setdefault(twin.id, []).append({"id": t.id, "source_case": t.source_case})
        n = len(self.templates) - len(kept)
        self.templates = kept
        if merged:
            self.meta["merged"] = merged
        return n

    def cap(self, max_templates: int) -> list[str]:
        """Keep at most max_templates, preferring those that absorbed the most cases when merging (the most
        general), then library order; return the ids dropped."""
        if max_templates < 1:
            raise ValueError(f"max_templates must be >= 1, got {max_templates}")
        if len(self.templates) <= max_templates:
            return []
        merged = self.meta.get("merged") or {}
        ranked = sorted(range(len(self.templates)), key=lambda i: (-len(merged.get(self.templates[i].id, [])), i))
        keep = set(ranked[:max_templates])
        dropped = [t.id for i, t in enumerate(self.templates) if i not in keep]
        self.templates = [t for i, t in enumerate(self.templates) if i in keep]
        return dropped

    def subset(self, n: int, seed: int = 0) -> TemplateLibrary:
        """n templates drawn with a fixed seed, in library order: the pool-size experiments' libraries."""
        if n < 0:
            raise ValueError(f"pool size must be >= 0, got {n}")
        if n >= len(self.templates):
            return TemplateLibrary(list(self.templates), self.setting, dict(self.meta))
        picked = set(random.Random(seed).sample(range(len(self.templates)), n))
        chosen = [t for i, t in enumerate(self.templates) if i in picked]
        return TemplateLibrary(
            chosen, self.setting, {**self.meta, "subset_of": len(self.templates), "subset_seed": seed}
        )


def _near_duplicate(a: Template, b: Template, threshold: float) -> bool:
    def similar(x: str, y: str) -> bool:
        return fuzz.token_set_ratio(x, y, processor=utils.default_process) >= threshold

    return similar(a.name, b.name) and similar(a.pattern, b.pattern)


def distill_one(distiller: Distiller, instance: Instance, problem: GoldProblem,
                max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                lm: dspy.LM | None = None) -> Refined:
    """One solved case -> its best draft under dspy.Refine, checked for abstraction (see tide_dspy.refinement)."""
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    outcome = refine_template(distiller, instance, problem, max_attempts=max_attempts, lm=lm)
    if not outcome.passed:
        why = outcome.error or "; ".join(str(lk) for lk in outcome.report.leaks)
        log.warning("distillation of %s dropped after %d attempt(s): %s", problem.problem_id, max_attempts,
                    why[:300])
    return outcome


def distill_library(
    instances: list[Instance],
    setting: Setting,
    *,
    distiller: Distiller | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    merge_threshold: float | None = DEFAULT_MERGE_THRESHOLD,
    max_templates: int | None = DEFAULT_MAX_TEMPLATES,
    progress: bool = True,
    lm: dspy.LM | None = None,
) -> TemplateLibrary:
    """Distill one template per solved training problem, keep those that pass the abstraction check, merge
    near-duplicates (unless merge_threshold is None) and cap the library at max_templates (None: no cap).

    meta records: cases (attempted), passed, failed, failures [{source_case, error | score and leaks}], merges,
    capped, abstraction (the kept templates' checks and their source cases' specific tokens, the mean score of
    the library and of every case's best draft), lm_usage (the backbone's calls, Refine's copies included).
    """
    distiller = distiller or Distiller(setting)
    cases = distillable_cases(instances, setting)
    templates, failures, checks, best_scores, entries = [], [], {}, [], []
    bar = tqdm(cases, desc=f"distill {setting.name}", unit="case", disable=not progress)
    for instance, problem in bar:
        outcome = distill_one(distiller, instance, problem, max_attempts, lm=lm)
        entries += outcome.history
        best_scores.append(outcome.report.score if outcome.report else 0.0)
        if outcome.passed:
            draft = outcome.draft
            template = Template(
                id=setting.template_id(len(templates) + 1, len(cases)),
                name=draft.name.strip(), pattern=draft.pattern.strip(),
                evidence_flow=list(dict.fromkeys(s.strip() for s in draft.evidence_flow if s.strip())),
                setting=setting.name, source_case=problem.problem_id,
            )
            templates.append(template)
            case = distiller.setting.solved_case(instance, problem)
            checks[template.id] = {**outcome.report.to_dict(), "attempts": len(outcome.scores),
                                   "source_keys": sorted(source_keys(case_text(case)))}
        elif outcome.report is None:
            failures.append({"source_case": problem.problem_id, "error": outcome.error})
        else:
            failures.append({"source_case": problem.problem_id, "score": outcome.report.score,
                             "leaks": outcome.report.to_dict()["leaks"]})
        bar.set_postfix(passed=len(templates), failed=len(failures))
    library = TemplateLibrary(templates, setting.name, {
        "cases": len(cases), "passed": len(templates), "failed": len(failures), "failures": failures,
        "max_attempts": max_attempts,
    })
    library.meta["merges"] = library.merge_near_duplicates(merge_threshold) if merge_threshold is not None else 0
    library.meta["capped"] = library.cap(max_templates) if max_templates is not None else []
    kept = {t.id for t in library}
    library.meta["abstraction"] = {
        "mean_score": round(statistics.fmean(checks[i]["score"] for i in kept), 4) if kept else None,
        "draft_mean_score": round(statistics.fmean(best_scores), 4),
        "templates": {i: c for i, c in checks.items() if i in kept},
    }
    model = getattr(lm or distiller.get_lm() or dspy.settings.lm, "model", "lm")
    library.meta["lm_usage"] = entries_usage(entries, model)
    return library


def solved_demos(instances: list[Instance], setting: Setting, n: int) -> list[str]:
    """n solved training problems rendered as raw examples (the Iter + Demos ablation's guidance).

    Taken round-robin over the instances (first problem of each, then the second, ...) so that a small n
    still spans several contexts.
    """
    per_instance = [solved_cases([i]) for i in instances if i.setting == setting.name]
    cases = [c for layer in zip_longest(*per_instance) for c in layer if c is not None]
    if not cases and n > 0:
        raise ValueError(f"no solved {setting.name} problems among {len(instances)} instances to use as demos")
    return [setting.render_demo(inst, p) for inst, p in cases[:n]]
