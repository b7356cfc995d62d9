"""Thought templates: distilled from solved training cases, kept in a JSON library, shown to TIDE at inference.

One distillation call per solved training problem. Near-duplicate templates (same name and pattern up to
wording) are merged so the library stays small enough to fit in the context window.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

import dspy
from pydantic import ValidationError
from rapidfuzz import fuzz, utils
from tqdm.auto import tqdm

from tide_dspy.data.records import read_json_file
from tide_dspy.schemas import GoldProblem, Instance, Template, TemplateDraft
from tide_dspy.settings import Setting, get_setting

log = logging.getLogger(__name__)

ID_PREFIX = {"workspace": ("ws-t", 2), "repository": ("repo-t", 3)}
DEFAULT_MERGE_THRESHOLD = 88.0


def template_id(setting: str, number: int, total: int = 0) -> str:
    """ws-t01 / repo-t001; the width grows when a library outgrows it."""
    prefix, width = ID_PREFIX[setting]
    return f"{prefix}{number:0{max(width, len(str(total)))}d}"


def is_solved(problem: GoldProblem) -> bool:
    """A training problem can be distilled only when its reference resolution is known."""
    return bool(problem.patch) or problem.action is not None


def solved_cases(instances: list[Instance]) -> list[tuple[Instance, GoldProblem]]:
    return [(inst, p) for inst in instances for p in inst.problems if is_solved(p)]


class Distiller(dspy.Module):
    """One predictor: a solved case (context, problem, resolution) -> an abstract template draft."""

    def __init__(self, setting: str):
        super().__init__()
        self.setting_name = setting
        self.distill = dspy.Predict(get_setting(setting).distill_signature)

    @property
    def setting(self) -> Setting:
        return get_setting(self.setting_name)

    def forward(self, instance: Instance, problem: GoldProblem, config: dict | None = None) -> dspy.Prediction:
        case = self.setting.solved_case(instance, problem)
        return self.distill(**case, config=config or {})


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
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1, ensure_ascii=False) + "\n")
        return path

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
        duplicates = sorted({t.id for t in templates if sum(u.id == t.id for u in templates) > 1})
        if duplicates:
            raise ValueError(f"{path}: duplicate template ids {duplicates}; every template id must be unique")
        return cls(templates, data.get("setting"), data.get("meta") or {})

    # ---- editing ----
    def merge_near_duplicates(self, threshold: float = DEFAULT_MERGE_THRESHOLD) -> int:
        """Drop templates whose name and pattern nearly repeat an earlier one; return how many were merged.

        Similarity is rapidfuzz's token-sort ratio (0-100, ignoring case and punctuation), on the name and on the pattern separately; both must
        reach `threshold`. The kept template records the source cases it absorbed in meta["merged"].
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

    def subset(self, n: int, seed: int = 0) -> TemplateLibrary:
        """n templates drawn with a fixed seed, in library order: the pool-size experiments' libraries."""
        if n < 0:
            raise ValueError(f"pool size must be >= 0, got {n}")
        if n >= len(self.templates):
            return TemplateLibrary(list(self.templates), self.setting, dict(self.meta))
        picked = set(random.Random(seed).sample(range(len(self.templates)), n))
        chosen = [t for i, t in enumerate(self.templates) if i in picked]
        return TemplateLibrary(chosen, self.setting, {**self.meta, "subset_of": len(self.templates), "subset_seed": seed})


def _near_duplicate(a: Template, b: Template, threshold: float) -> bool:
    def similar(x: str, y: str) -> bool:  # case, punctuation and word order do not count
        return fuzz.token_sort_ratio(x, y, processor=utils.default_process) >= threshold

    return similar(a.name, b.name) and similar(a.pattern, b.pattern)


def _usable(draft: TemplateDraft | None) -> str | None:
    """Why a draft cannot become a template, or None when it can."""
    if draft is None:
        return "no template in the output"
    if not draft.name.strip() or not draft.pattern.strip():
        return "empty name or pattern"
    if not [s for s in draft.evidence_flow if s.strip()]:
        return "empty evidence flow"
    return None


def distill_one(distiller: Distiller, instance: Instance, problem: GoldProblem, max_retries: int = 2
                ) -> tuple[TemplateDraft | None, str | None]:
    """One solved case -> a draft, retrying unusable output a bounded number of times (never raises for LM output)."""
    error = None
    for attempt in range(max_retries + 1):
        # A retry must not hit the cache entry of the output that just failed.
        config = {"rollout_id": attempt, "temperature": 0.7} if attempt else {}
        try:
            draft = distiller(instance, problem, config=config).template
            error = _usable(draft)
        except Exception as exc:  # noqa: BLE001 - adapter/LM failures are recorded, never fatal
            draft, error = None, f"{type(exc).__name__}: {str(exc)[:300]}"
        if error is None:
            return draft, None
        log.warning("distillation of %s unusable (attempt %d/%d): %s", problem.problem_id, attempt + 1,
                    max_retries + 1, error)
    return None, error


def distill_library(
    instances: list[Instance],
    setting: str,
    *,
    distiller: Distiller | None = None,
    max_retries: int = 2,
    merge_threshold: float | None = DEFAULT_MERGE_THRESHOLD,
    progress: bool = True,
    lm: dspy.LM | None = None,
) -> TemplateLibrary:
    """Distill one template per solved training problem, then merge near-duplicates (unless threshold is None).

    meta records: cases (attempted), distilled, failures [{source_case, error}], merges.
    """
    get_setting(setting)
    distiller = distiller or Distiller(setting)
    cases = solved_cases([i for i in instances if i.setting == setting])
    if not cases:
        raise ValueError(f"no solved {setting} problems to distill among {len(instances)} instances "
                         "(is this the train split of the right setting?)")
    templates, failures = [], []
    bar = tqdm(cases, desc=f"distill {setting}", unit="case", disable=not progress)
    with dspy.context(**({"lm": lm} if lm is not None else {})):
        for instance, problem in bar:
            draft, error = distill_one(distiller, instance, problem, max_retries)
            if draft is None:
                failures.append({"source_case": problem.problem_id, "error": error})
            else:
                templates.append(Template(
                    id=template_id(setting, len(templates) + 1, len(cases)),
                    name=draft.name.strip(), pattern=draft.pattern.strip(),
                    evidence_flow=list(dict.fromkeys(s.strip() for s in draft.evidence_flow if s.strip())),
                    setting=setting, source_case=problem.problem_id,
                ))
            bar.set_postfix(ok=len(templates), failed=len(failures))
    library = TemplateLibrary(templates, setting, {
        "cases": len(cases), "distilled": len(templates), "failures": failures,
    })
    library.meta["merges"] = library.merge_near_duplicates(merge_threshold) if merge_threshold is not None else 0
    return library


def solved_demos(instances: list[Instance], setting: str, n: int) -> list[str]:
    """n solved training problems rendered as raw examples (the Iter + Demos ablation's guidance).

    Taken round-robin over the instances (first problem of each, then the second, ...) so that a small n
    still spans several contexts.
    """
    s = get_setting(setting)
    per_instance = [solved_cases([i]) for i in instances if i.setting == setting]
    cases = [c for layer in zip_longest(*per_instance) for c in layer if c is not None]
    if not cases and n > 0:
        raise ValueError(f"no solved {setting} problems among {len(instances)} instances to use as demos")
    return [s.render_demo(inst, p) for inst, p in cases[:n]]
