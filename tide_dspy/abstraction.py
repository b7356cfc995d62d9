"""The abstraction check: which specific tokens of a source text a template (or a finding) carries over.

A thought template must describe a class of problem, so none of the names, ids, numbers, dates, paths or code
identifiers of the case it was distilled from may appear in it. `source_keys` collects those tokens of a source
text (the solved case, or a template when checking findings); `check` finds them in the template's text and adds
the faults that need no source: a field description of the draft type copied as a value, an evidence flow that
lists ids or labels instead of steps, and words copied from the retry hint; and, when the source text is at hand,
a passage or a line (a title, a subject) copied word for word.

Pure functions; the score is 1 / (1 + number of leaks), so 1.0 means fully abstract and any leak fails.
"""

from __future__ import annotations

import builtins
import difflib
import keyword
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from dateutil import parser as date_parser
from rapidfuzz import fuzz, process, utils

from tide_dspy.schemas import TemplateDraft

# Words of a run copied verbatim from the source that make it a copied passage.
PASSAGE_WORDS = 8
# rapidfuzz partial ratio (0-100) at which a field value counts as the draft type's field description.
DESCRIPTION_SIMILARITY = 90.0
# A flow step shorter than this many words is a label or an id, not a step; a flow needs MIN_STEPS steps.
MIN_STEP_WORDS = 4
MIN_STEPS = 2
# rapidfuzz ratio (0-100) at which a field is one of the source's lines (a title, a subject) copied as written.
LINE_SIMILARITY = 90.0
# The fixed sentences of the retry hint. A template that repeats HINT_PASSAGE_WORDS words of them in a row copied
# the hint instead of following it (the 0.5B did, when the hint carried example phrases).
ADVICE = {
    "tokens": "Describe each by its role or kind instead; write no names, ids, numbers, dates, paths or code "
              "identifiers of the case.",
    "passage": "Write in your own words; these were copied from the case:",
    "described": "repeat the field description instead of answering it.",
    "flow": f"Write at least {MIN_STEPS} evidence flow steps, each a sentence of {MIN_STEP_WORDS} or more words "
            "about this kind of problem.",
}
HINT_PASSAGE_WORDS = 5

_MONTHS = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\.?"
_FILE_EXT = (r"py|pyi|pyx|js|ts|tsx|json|ya?ml|toml|cfg|ini|txt|md|rst|csv|html?|xml|c|h|cpp|hpp|java|go|rs|rb|sh"
             r"|ipynb|pdf|docx?|xlsx?|pptx?|eml|ics|mbox|log|sql|lock")
# One alternation, tried left to right at each position, so a span is claimed by its most specific kind.
_TOKEN = re.compile(
    rf"""
    (?P<email>[\w.+-]+@[\w-]+(?:\.[\w-]+)+)
  | (?P<date>\b\d{{4}}-\d{{2}}-\d{{2}}(?:[T ]\d{{2}}:\d{{2}}(?::\d{{2}})?)?
      | \b\d{{1,2}}/\d{{1,2}}(?:/\d{{2,4}})?\b
      | \b{_MONTHS}\s\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s\d{{4}})?\b
      | \b\d{{1,2}}(?:st|nd|rd|th)?\s{_MONTHS}(?:\s\d{{4}})?\b)
  | (?P<path>(?:https?|ftp)://[^\s)>\]"']+
      | (?:\.{{0,2}}/)?(?:[\w.-]+/){{2,}}[\w.-]*\w
      | (?:[\w.-]+/)*[\w-]+\.(?:{_FILE_EXT})\b)
  | (?P<money>(?:[$€£¥]\s?\d[\d,]*(?:\.\d+)?(?:\s?(?:[kKmMbB]|million|billion|thousand)\b)?)
      | \b\d[\d,]*(?:\.\d+)?\s?(?:USD|EUR|GBP|dollars|euros)\b)
  | (?P<id>\#\d+\b
      | \b[A-Za-z]{{1,12}}[-#]?\d+(?:[-.]\d+)*[A-Za-z]?\b
      | \b(?=[a-z]*\d)(?=\d*[a-z])[0-9a-f]{{7,40}}\b)
  | (?P<identifier>\b[A-Za-z_]\w*(?:(?:\.|::)[A-Za-z_]\w*)+\b
      | \b\w*[A-Za-z]\w*_\w*\b
      | \b_\w+\b
      | \b[a-z]+[A-Z]\w*\b
      | \b[A-Z][a-z0-9]+[A-Z]\w*\b)
  | (?P<number>(?<![\w.])\d(?:[\d,]*\d)?(?:\.\d+)?%?)
  | (?P<name>\b[A-Z][A-Za-z-]*[A-Za-z]\b)
    """,
    re.X,
)
LEAK_KINDS = ("email", "path", "money", "date", "id", "identifier", "number", "name")

_COMMON = frozenset(dir(builtins)) | frozenset(keyword.kwlist) | {"self", "cls"}
# Title-case function words: capitalised in headings, never names.
_FUNCTION_WORDS = frozenset(
    "A An And As At But By For From If In Into Is It No Not Of On Or Per Re So The Then This That These Those To "
    "Up Via We With You Your Our Its Be Dr Mr Mrs Ms".split()
)
_SENTENCE_START = re.compile(r"(?:^|[.!?:;>\n]\s*|[-*•#|]\s+|[\"'(\[]\s*)$")
_WORD = re.compile(r"[A-Za-z0-9]+")
_LETTERS = re.compile(r"[A-Za-z]+")


@dataclass(frozen=True)
class Leak:
    kind: str
    token: str
    field: str  # where it was found: name, pattern, evidence_flow, description, ...

    def __str__(self) -> str:
        return f"{self.token!r} ({self.kind.replace('_', ' ')}, in {self.field})"


@dataclass
class AbstractionReport:
    leaks: list[Leak] = field(default_factory=list)

    @property
    def score(self) -> float:
        return round(1.0 / (1 + len(self.leaks)), 4)

    @property
    def passed(self) -> bool:
        return not self.leaks

    def feedback(self) -> str:
        """What to change, naming every leaked token: the retry hint of distillation. Its fixed sentences carry
        no phrase worth copying, and copying them is a fault of its own (see ADVICE)."""
        if self.passed:
            return "The template is abstract: it carries no specific detail of the solved case."
        parts = []
        tokens = [f"{lk.token!r} ({lk.kind.replace('_', ' ')})" for lk in self.leaks if lk.kind in LEAK_KINDS]
        if tokens:
            parts.append("The template copies specific details of the solved case: " + ", ".join(tokens) + ". "
                         + ADVICE["tokens"])
        copied = [lk for lk in self.leaks if lk.kind == "passage"]
        if copied:
            parts.append(ADVICE["passage"] + " " + "; ".join(repr(lk.token) for lk in copied) + ".")
        described = [lk for lk in self.leaks if lk.kind == "field_description"]
        if described:
            parts.append("Fields " + ", ".join(sorted({lk.field for lk in described})) + " " + ADVICE["described"])
        if any(lk.kind == "ids_as_flow" for lk in self.leaks):
            parts.append(ADVICE["flow"])
        return " ".join(parts)

    def to_dict(self) -> dict:
        return {"score": self.score, "leaks": [{"kind": lk.kind, "token": lk.token, "field": lk.field}
                                               for lk in self.leaks]}


# ---- tokens ----

def _date_key(surface: str) -> str | None:
    """'date:MM-DD' for anything dateutil reads as a calendar date (so 3/13 and March 13 match)."""
    try:
        when = date_parser.parse(surface.replace("T", " ") if re.match(r"\d{4}-", surface) else surface,
                                 default=datetime(2000, 1, 1))
    except (ValueError, OverflowError):
        return None
    return f"date:{when.month:02d}-{when.day:02d}"


def _amount(surface: str) -> str:
    digits = re.sub(r"[^\d.]", "", surface).strip(".")
    return digits[:-3] if digits.endswith(".00") else digits


def _sentence_initial(text: str, start: int) -> bool:
    return bool(_SENTENCE_START.search(text[max(0, start - 3):start]))


def _identifier_parts(surface: str) -> list[str]:
    return [p for p in re.split(r"\.|::", surface) if p]


def _code_shaped(word: str) -> bool:
    """An identifier a template must not name: not a builtin, keyword or dunder protocol name."""
    if word in _COMMON or re.fullmatch(r"__\w+__", word) or not re.search(r"[A-Za-z]", word):
        return False
    return "_" in word.strip("_") or word.startswith("_") or bool(re.search(r"[a-z][A-Z]|[A-Z][a-z0-9]+[A-Z]", word))


def tokens(text: str) -> list[tuple[str, str, str, int]]:
    """(kind, surface, key, start) of every specific-looking token of text; key is what matching compares."""
    out = []
    for m in _TOKEN.finditer(text or ""):
        kind, surface = m.lastgroup, m.group()
        key = None
        if kind == "email":
            key = surface.lower()
        elif kind == "path":
            key = surface.rstrip(".,;:")
        elif kind == "money":
            key = "num:" + _amount(surface)
        elif kind == "date":
            key = _date_key(surface)
            if key is None:
                kind, key = "number", "num:" + _amount(surface)
        elif kind == "id":
            key = surface.upper()
        elif kind == "identifier":
            parts = _identifier_parts(surface)
            if len(parts) > 1 and all(len(p) <= 2 for p in parts):
                continue  # e.g, i.e, U.S
            if len(parts) == 1 and not _code_shaped(surface):
                continue
            key = surface
        elif kind == "number":
            digits = re.sub(r"\D", "", surface)
            if len(digits) < 2:
                continue
            key = "num:" + _amount(surface.rstrip("%"))
        elif kind == "name":
            if surface in _FUNCTION_WORDS or surface in _COMMON or re.fullmatch(r"[A-Z]{2,4}s?", surface):
                continue
            key = surface
        out.append((kind, surface, key, m.start()))
    return out


def source_keys(text: str) -> set[str]:
    """The specific tokens of a source text, as match keys.

    Names are words the source writes capitalised in mid-sentence and never in lower case. Paths add each of
    their trailing parts (evaluate.py for src/mark/evaluate.py), qualified identifiers each of their code-shaped
    parts, and e-mail addresses their domain.
    """
    keys: set[str] = set()
    lower_words = {w for w in _LETTERS.findall(text or "") if w.islower()}
    for kind, surface, key, start in tokens(text):
        if kind == "name":
            if surface.lower() in lower_words or _sentence_initial(text, start):
                continue
        keys.add(key)
        if kind == "path":
            segments = key.split("/")
            keys.update("/".join(segments[i:]) for i in range(1, len(segments)) if segments[i])
        elif kind == "identifier":
            parts = _identifier_parts(surface)
            keys.update(p for p in parts if _code_shaped(p))
            keys.update(".".join(parts[i:]) for i in range(1, len(parts) - 1))
        elif kind == "email":
            keys.add(key.partition("@")[2])
    return keys


# ---- the check ----

def _field_texts(fields: dict[str, str | list[str]]) -> Iterable[tuple[str, str]]:
    for name, value in fields.items():
        for item in value if isinstance(value, list) else [value]:
            yield name, item or ""


def _passages(text: str, source_words: list[str], source_lines: list[str], min_words: int = PASSAGE_WORDS
              ) -> list[str]:
    """Runs of PASSAGE_WORDS or more words copied from the source, or the whole text when it is one of the
    source's lines (a title, a header, a subject) copied nearly as written."""
    words = [w.lower() for w in _WORD.findall(text)]
    if len(words) >= MIN_STEP_WORDS - 1 and source_lines:
        line = process.extractOne(text, source_lines, scorer=fuzz.ratio, processor=utils.default_process,
                                  score_cutoff=LINE_SIMILARITY)
        if line is not None:
            return [" ".join(words)]
    if len(words) < min_words:
        return []
    matcher = difflib.SequenceMatcher(None, words, source_words, autojunk=False)
    return [" ".join(words[b.a:b.a + b.size]) for b in matcher.get_matching_blocks() if b.size >= min_words]


def leaked_tokens(fields: dict[str, str | list[str]], keys: set[str], allowed: set[str] = frozenset()) -> list[Leak]:
    """The tokens of `fields` whose keys are among the source's `keys` (and not in `allowed`), once each."""
    leaks, seen = [], set()
    for name, text in _field_texts(fields):
        for kind, surface, key, _ in tokens(text):
            hits = [key] if key in keys else []
            if not hits and kind == "identifier":
                hits = [p for p in _identifier_parts(surface) if p in keys and _code_shaped(p)]
            for hit in hits:
                if hit in allowed or hit in seen:
                    continue
                seen.add(hit)
                leaks.append(Leak(kind, surface if hit == key else hit, name))
    return leaks


def structural_faults(name: str, pattern: str, evidence_flow: list[str]) -> list[Leak]:
    """Faults no source is needed for: a draft-type field description as a value; ids instead of steps."""
    faults = []
    descriptions = [f.description for f in TemplateDraft.model_fields.values() if f.description]
    for field_name, text in (("name", name), ("pattern", pattern), *(("evidence_flow", s) for s in evidence_flow)):
        for desc in descriptions:
            if (
                text.strip()
                and fuzz.partial_ratio(text, desc, processor=utils.default_process) >= DESCRIPTION_SIMILARITY
                and len(text) >= len(desc) * 0.6
            ):
                faults.append(Leak("field_description", desc, field_name))
    steps = [s for s in evidence_flow if s.strip()]
    short = [s for s in steps if len(_WORD.findall(s)) < MIN_STEP_WORDS or "|" in s]
    if len(steps) < MIN_STEPS or len(short) * 2 >= len(steps):
        faults.append(Leak("ids_as_flow", "; ".join(short[:5]) or "(empty)", "evidence_flow"))
    return list(dict.fromkeys(faults))


def check(name: str, pattern: str, evidence_flow: list[str], *, source: str | None = None,
          keys: set[str] | None = None, not_copied_from: tuple[str, ...] = ()) -> AbstractionReport:
    """Score a template's text against its source case: the case text (`source`), or its stored `keys`.

    With `source`, copied passages are found as well; with `keys` alone (a library checked without the data),
    everything else is. Runs of HINT_PASSAGE_WORDS words copied from the retry hint (ADVICE) or from
    `not_copied_from` (the distill instructions) are copied passages too.
    """
    if keys is None:
        keys = source_keys(source or "")
    fields = {"name": name, "pattern": pattern, "evidence_flow": list(evidence_flow)}
    leaks = leaked_tokens(fields, keys)
    leaks += structural_faults(name, pattern, list(evidence_flow))
    hints = (" ".join(ADVICE.values()), *not_copied_from)
    for text_source, min_words in ((source, PASSAGE_WORDS), *((h, HINT_PASSAGE_WORDS) for h in hints)):
        if not text_source:
            continue
        source_words = [w.lower() for w in _WORD.findall(text_source)]
        lines = [ln.strip() for ln in re.split(r"\n|(?<=[.!?])\s+", text_source) if ln.strip()]
        source_lines = lines + [ln.split(": ", 1)[1] for ln in lines if ": " in ln]  # Title: ..., Subject: ...
        for field_name, text in _field_texts(fields):
            leaks += [Leak("passage", p, field_name) for p in _passages(text, source_words, source_lines, min_words)]
    return AbstractionReport(list(dict.fromkeys(leaks)))


def case_text(case: dict[str, str]) -> str:
    """One text of a solved case (context, problem, resolution), as the distill signature receives it."""
    return "\n\n".join(str(v) for v in case.values())


def check_finding(description: str, why: str, template_text: str, context_text: str = "") -> AbstractionReport:
    """Specific tokens a finding copies from a template: the template's tokens that appear in the
    finding but not in the finding's own context (a token the context has is the finding's own detail)."""
    allowed = source_keys(context_text) if context_text else set()
    fields = {"description": description, "why": why}
    return AbstractionReport(leaked_tokens(fields, source_keys(template_text), allowed))
