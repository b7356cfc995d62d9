"""What the provider simulator answers to the workspace generator's stages (`tide_dspy.data.workspace_prompts`):
a compliant model's output, written by rule from the request's own inputs, so that a generation run through the
simulator exercises every stage, check and wire format at full size.

The answers are deterministic (a function of the inputs) and plainly synthetic: names and organisations come from
short lists, texts are sentences of common words seeded by a hash of the request, so no two texts are near copies.
They obey what each stage asks (counts, kinds, word ranges, dates inside the window, one solving action per
problem, anchors reused by distractors), nothing more: they are not realistic workspaces.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from datetime import datetime, timedelta
from typing import Any

FIRST = ("Avery", "Blake", "Carmen", "Dario", "Elif", "Farah", "Gideon", "Hana", "Ines", "Jonas", "Kiran", "Lena",
         "Marco", "Nadia", "Oren", "Priya", "Quentin", "Rosa", "Soren", "Tamsin", "Umar", "Vera", "Wren", "Yusuf")
LAST = ("Abbott", "Brandt", "Castell", "Dunmore", "Ekwueme", "Fairley", "Grell", "Holloway", "Ivanova", "Jarvik",
        "Kessler", "Lindqvist", "Morrow", "Nakashima", "Okafor", "Pellegrini", "Quist", "Rahman", "Salas", "Thorne")
PLACES = ("Alder", "Birchmont", "Cobalt", "Dunmere", "Eastfold", "Foxglove", "Greywater", "Hollin", "Ironbridge")
THINGS = ("Larch", "Meridian", "Nimbus", "Orchard", "Pillar", "Quarry", "Redwing", "Saltmarsh", "Tidewell")
# The generator's relationship types (workspace_prompts.RELATIONSHIP_TYPES; this layer cannot import it).
RELATIONSHIP_TYPES = ("colleague", "manager", "direct_report", "client", "stakeholder", "vendor", "mentor", "mentee",
                      "cross_functional_partner")
SYSTEMS = ("ledger", "roster", "tracker", "portal", "register", "workbook", "queue", "archive")
VOCAB = ("the team", "agreed", "schedule", "notes", "review", "draft", "update", "vendor", "budget", "quarter",
         "thanks", "attached", "meeting", "please", "confirm", "numbers", "week", "Monday", "Thursday", "room",
         "invoice", "summary", "timeline", "training", "handbook", "forecast", "request", "approval", "figures",
         "follow up", "shared", "folder", "minutes", "site", "visit", "contract", "renewal", "checklist", "audit",
         "catering", "parking", "badge", "survey", "feedback", "project", "status", "milestone", "deliverable",
         "spreadsheet", "template", "policy", "rollout", "pilot", "launch", "lunch", "holiday", "calendar", "call",
         "report", "dashboard", "metrics", "target", "slides", "agenda", "item", "owner", "reminder", "deadline",
         "planning", "capacity", "staffing", "shift", "order", "delivery", "shipment", "quote", "estimate",
         "signed", "filed", "posted", "closed", "opened", "moved", "kept", "checked", "noted", "circulated",
         "quietly", "again", "later", "first", "next", "also", "still", "already", "soon", "today", "yesterday")


def _rng(*parts: Any) -> random.Random:
    return random.Random(hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest())


def _json(value: str, default: Any = None) -> Any:
    """The JSON value a section starts with (the last section runs on into the adapter's closing request)."""
    try:
        return json.JSONDecoder().raw_decode((value or "").strip())[0]
    except ValueError:
        return default


def _int(value: str, default: int) -> int:
    found = re.match(r"\s*(\d+)", value or "")
    return int(found.group(1)) if found else default


def filler(rng: random.Random, n_words: int, mentions: list[str]) -> str:
    """About `n_words` words in sentences, with each of `mentions` placed once."""
    tokens = [rng.choice(VOCAB) for _ in range(max(1, n_words - sum(len(m.split()) for m in mentions)))]
    for m in mentions:
        tokens.insert(rng.randrange(len(tokens) + 1), m)
    sentences, i = [], 0
    while i < len(tokens):
        size = rng.randint(8, 14)
        chunk = " ".join(tokens[i:i + size])
        sentences.append(chunk[:1].upper() + chunk[1:] + ".")
        i += size
    return " ".join(sentences)


def _range(text: str, default: tuple[int, int]) -> tuple[int, int]:
    m = re.search(r"(\d+)\s*-\s*(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else default


def _window(text: str) -> tuple[datetime, datetime]:
    found = re.findall(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}", text or "")
    if len(found) >= 2:
        return datetime.fromisoformat(found[0]), datetime.fromisoformat(found[1])
    now = datetime(2026, 3, 1, 17, 0)
    return now - timedelta(days=60), now


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", text.lower())


# ---- one writer per stage ----

def persona(inputs: dict) -> Any:
    rng = _rng("persona", inputs.get("role_hint"), inputs.get("today"))
    first, last = rng.choice(FIRST), rng.choice(LAST)
    company = f"{rng.choice(PLACES)} {rng.choice(THINGS)} Group"
    hint = re.sub(r"^(a|an) ", "", (inputs.get("role_hint") or "operations lead").strip())
    return {"full_name": f"{first} {last}", "email": f"{first}.{last}@{_slug(company)}.example".lower(),
            "occupation": hint.split(" at ")[0].title(), "company_name": company, "department": "Operations",
            "about": f"Runs day-to-day operations for {company}. Owns the schedules, suppliers and reports of the "
                     "department, and answers for its deadlines."}


def world_model(inputs: dict) -> Any:
    me = _json(inputs.get("persona", ""), {}) or {}
    domain = (me.get("email") or "org@org.example").split("@")[-1]
    rng = _rng("world", me)
    names = [f"{f} {la}" for f in FIRST for la in LAST if f"{f} {la}" != me.get("full_name")]
    rng.shuffle(names)
    people = []
    for i, name in enumerate(names[:_int(inputs.get("relationship_count", "10"), 10)]):
        kind = RELATIONSHIP_TYPES[i % len(RELATIONSHIP_TYPES)]
        where = f"{_slug(rng.choice(PLACES))}-supply.example" if kind in ("vendor", "client") else domain
        people.append({"name": name, "email": f"{name.replace(' ', '.').lower()}@{where}", "type": kind,
                       "department": "Operations" if where == domain else "External",
                       "context": f"Works with the persona on the {rng.choice(THINGS)} programme this quarter."})
    return {"relationships": people,
            "personal_context": {"work_style": "Plans the week on Monday and keeps a running list.",
                                 "communication_preferences": ["email", "short calls"],
                                 "current_priorities": ["quarterly plan", "supplier renewals", "staff rota"],
                                 "pain_points": ["approvals stall", "meeting overload"]},
            "organization": {"team_size": 8, "reporting_to": "Director of Operations",
                             "key_meetings": ["Monday team sync", "Thursday supplier review", "Monthly board pack"]}}


def bottlenecks(inputs: dict) -> Any:
    world = _json(inputs.get("world_model", ""), {}) or {}
    names = [p["name"] for p in world.get("relationships", [])] or ["Someone Else"]
    today = datetime.fromisoformat((inputs.get("today") or "2026-03-01").strip()[:10])
    rng = _rng("bottlenecks", world, inputs.get("today"))
    out = []
    for k, kind in enumerate(_json(inputs.get("kinds", ""), []) or [], 1):
        person = names[(2 * k) % len(names)]
        anchors = [f"Project {rng.choice(THINGS)}-{k}{rng.randint(10, 99)}", f"REQ-{rng.randint(1000, 9999)}",
                   f"{rng.choice(PLACES)} {rng.choice(SYSTEMS)} {k}"]
        deadline = (today + timedelta(days=7 + k)).date().isoformat()
        out.append({"category": kind, "people": [person], "anchors": anchors, "deadline": deadline,
                    "description": f"Simulated problem {k} ({kind}): {person} is held up on {anchors[0]} because "
                                   f"{anchors[1]} is stuck in the {anchors[2]}, and it bites on {deadline}."})
    return out


def action_library(inputs: dict) -> Any:
    offered = [re.match(r"^(\w+): (.*) \[(.*)\]$", t) for t in _json(inputs.get("action_types", ""), []) or []]
    offered = [m.groups() for m in offered if m] or [("send_email", "Send an email.", "recipients, subject, body")]
    n = len(_json(inputs.get("problems", ""), []) or [])
    actions = []
    for i in range(_int(inputs.get("count", "16"), 16)):
        kind, description, params = offered[(3 * i) % len(offered)]
        actions.append({"type": kind, "description": f"{description} (variant {i + 1})", "constraints": [],
                        "required_parameters": [p.strip() for p in params.split(",") if p.strip()],
                        "solves": i + 1 if i < n else 0})
    return actions


def gold_parameters(inputs: dict) -> Any:
    action = _json(inputs.get("action", ""), {}) or {}
    problem = _json(inputs.get("problem", ""), {}) or {}
    anchor = (problem.get("anchors") or ["the matter"])[0]
    return [{"name": p, "value": f"simulated {p} for {anchor}"} for p in action.get("required_parameters", [])]


def evidence_plan(inputs: dict) -> Any:
    problem = _json(inputs.get("problem", ""), {}) or {}
    anchors = problem.get("anchors") or ["the matter"]
    start, end = _window(inputs.get("window", ""))
    rng = _rng("plan", problem)
    kinds = ["email", "document", "calendar"]
    first = rng.randrange(3)
    pieces = []
    for j in range(_int(inputs.get("count", "3"), 3)):
        when = end - timedelta(days=3 * j + 1 + rng.randrange(3), hours=rng.randrange(6))
        pieces.append({"kind": kinds[(first + j) % 3], "created_at": max(when, start).strftime("%Y-%m-%dT%H:%M:%S"),
                       "role": f"shows part {j + 1} of the matter", "carries": [anchors[j % len(anchors)]],
                       "why_insufficient_alone": "it shows one part only"})
    return pieces


def _artifact(kind: str, rng: random.Random, people: list[str], mentions: list[str], word_range: str,
              created: datetime) -> Any:
    defaults = {"email": (60, 170), "calendar": (20, 90), "document": (60, 300)}
    low, high = _range(word_range, defaults.get(kind, (60, 120)))
    start = created + timedelta(days=rng.randint(1, 9), hours=rng.randint(0, 5))
    return {"kind": kind, "title": f"{rng.choice(THINGS)} {rng.choice(VOCAB)} {rng.randint(1, 99)}",
            "people": [] if kind == "document" else rng.sample(people, min(3, len(people))),
            "text": filler(rng, rng.randint(low + 2, high - 2), mentions),
            "start_time": start.strftime("%Y-%m-%dT%H:%M:%S") if kind == "calendar" else "",
            "end_time": (start + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S") if kind == "calendar" else "",
            "location": f"{rng.choice(PLACES)} room" if kind == "calendar" else "",
            "mime": "text/markdown" if kind == "document" else ""}


def evidence_artifact(inputs: dict) -> Any:
    role = _json(inputs.get("role", ""), {}) or {}
    people = _json(inputs.get("people", ""), []) or []
    rng = _rng("evidence", inputs)
    created = datetime.fromisoformat(role.get("created_at") or "2026-03-01T09:00:00")
    item = _artifact(role.get("kind", "email"), rng, people, list(role.get("carries", []))[:1],
                     inputs.get("word_range", ""), created)
    return item


def evidence_review(inputs: dict) -> Any:
    return {"each_insufficient_alone": True, "sufficient_together": True, "free_of_other_problems": True,
            "natural": True, "notes": "", "rewrites": []}


def distractors(inputs: dict) -> Any:
    people = _json(inputs.get("people", ""), []) or []
    anchors = _json(inputs.get("anchors", ""), []) or ["the programme"]
    strategies = [s.split(":")[0] for s in _json(inputs.get("strategies", ""), []) or ["routine"]]
    start, end = _window(inputs.get("window", ""))
    rng = _rng("distractors", inputs)
    span = int((end - start).total_seconds()) - 3600
    out = []
    for i in range(_int(inputs.get("count", "1"), 1)):
        created = start + timedelta(seconds=rng.randrange(max(span, 1)))
        item = _artifact((inputs.get("kind") or "email").strip(), rng, people, [anchors[i % len(anchors)]],
                         inputs.get("word_range", ""), created)
        out.append({**item, "created_at": created.strftime("%Y-%m-%dT%H:%M:%S"),
                    "strategy": strategies[i % len(strategies)],
                    "why_not_a_problem": "A routine note: it asks nothing of the persona."})
    return out


WRITERS = {"persona": persona, "world_model": world_model, "bottlenecks": bottlenecks,
           "action_library": action_library, "gold_parameters": gold_parameters, "evidence_plan": evidence_plan,
           "evidence_artifact": evidence_artifact, "evidence_review": evidence_review, "distractors": distractors}


def generation_values(fields: list[str], inputs: dict[str, str]) -> dict | None:
    """The answer to a generator stage (its output field names one), or None for any other request."""
    name = next((f for f in fields if f in WRITERS), None)
    return None if name is None else {name: WRITERS[name](inputs)}
