"""Build the v2 workspace set from its hand-written sources, check it, and print its chance floors.

    python data/workspace/build.py                       # build data/workspace/v2/workspaces.jsonl, check, floors
    python data/workspace/build.py --only src/ws-x.yaml  # check one source (and its floors), write nothing

Sources are `src/*.yaml` (new workspaces) and `src/extend/*.yaml` (distractors added to a v1 workspace); their
format is in `src/README.md`. v1 is read from `v1/workspaces.jsonl[.gz]` beside this file, or from `$TIDE_V1`.

This is a data-build script, not part of the package: the package reads the built JSONL.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
PREFIX = {"email": "email", "calendar": "calendar", "document": "document"}


class _Loader(yaml.SafeLoader):
    """YAML without implicit timestamps: a date stays the string it was written as."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def make_id(prefix: str, instance_id: str, key: str) -> str:
    return f"{prefix}_{hashlib.sha256(f'{instance_id}:{key}'.encode()).hexdigest()[:8]}"


def read_yaml(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        data = yaml.load(f, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    if not isinstance(data, dict):
        raise SystemExit(f"{path}: expected a mapping at the top level")
    return data


def artifact_record(instance_id: str, item: dict, where: str) -> dict:
    for field in ("key", "kind", "created_at", "payload"):
        if field not in item:
            raise SystemExit(f"{where}: artifact {item.get('key', '?')!r} has no {field!r}")
    kind = item["kind"]
    if kind not in PREFIX:
        raise SystemExit(f"{where}: artifact {item['key']!r}: kind {kind!r} is not one of {sorted(PREFIX)}")
    payload = dict(item["payload"])
    if kind == "email":
        payload.setdefault("cc", [])
        payload["timestamp"] = str(item["created_at"])
        payload = {k: payload[k] for k in ("subject", "sender", "to", "cc", "timestamp", "body") if k in payload}
    return {"id": make_id(PREFIX[kind], instance_id, str(item["key"])), "kind": kind,
            "created_at": str(item["created_at"]), "payload": payload}


def record_from_source(path: Path) -> dict:
    src = read_yaml(path)
    iid = src["instance_id"]
    keys: dict[str, str] = {}
    artifacts = []
    for item in src.get("artifacts", []):
        rec = artifact_record(iid, item, str(path))
        if str(item["key"]) in keys:
            raise SystemExit(f"{path}: artifact key {item['key']!r} repeats")
        keys[str(item["key"])] = rec["id"]
        artifacts.append(rec)
    actions, action_ids = [], {}
    for a in src.get("actions", []):
        if str(a["key"]) in action_ids:
            raise SystemExit(f"{path}: action key {a['key']!r} repeats")
        action_ids[str(a["key"])] = (make_id("act", iid, "action:" + str(a["key"])), a["type"])
        actions.append({"id": action_ids[str(a["key"])][0], "type": a["type"], "description": a["description"],
                        "constraints": list(a.get("constraints", [])),
                        "required_parameters": list(a["required_parameters"])})
    problems = []
    for n, p in enumerate(src.get("problems", []), start=1):
        missing = [k for k in p["evidence"] if str(k) not in keys]
        if missing:
            raise SystemExit(f"{path}: problem {n}: evidence keys {missing} are not artifacts")
        gold = p["action"]
        if str(gold["key"]) not in action_ids:
            raise SystemExit(f"{path}: problem {n}: action key {gold['key']!r} is not in actions")
        action_id, action_type = action_ids[str(gold["key"])]
        problems.append({"problem_id": f"{iid}-p{n}", "description": p["description"],
                         "evidence": [keys[str(k)] for k in p["evidence"]],
                         "action": {"action_id": action_id, "type": action_type,
                                    "parameters": dict(gold["parameters"])},
                         "category": p["category"]})
    artifacts.sort(key=lambda a: (a["created_at"], a["id"]))
    return {"instance_id": iid, "split": src["split"], "profile": src["profile"], "actions": actions,
            "artifacts": artifacts, "problems": problems}


def read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def v1_records() -> list[dict]:
    candidates = [Path(os.environ["TIDE_V1"])] if os.environ.get("TIDE_V1") else []
    candidates += [HERE / "v1" / "workspaces.jsonl.gz", HERE / "v1" / "workspaces.jsonl",
                   HERE.parents[2] / "shared" / "data" / "workspace" / "workspaces.jsonl"]
    for path in candidates:
        if path.exists():
            return read_jsonl(path)
    raise SystemExit(f"no v1 set: looked at {', '.join(map(str, candidates))}; set TIDE_V1")


def extended(record: dict, path: Path) -> dict:
    src = read_yaml(path)
    iid = record["instance_id"]
    new = [artifact_record(iid, item, str(path)) for item in src.get("artifacts", [])]
    seen = {a["id"] for a in record["artifacts"]}
    for a in new:
        if a["id"] in seen:
            raise SystemExit(f"{path}: artifact id {a['id']} repeats one already in {iid}")
        seen.add(a["id"])
    out = dict(record)
    out["artifacts"] = sorted(record["artifacts"] + new, key=lambda a: (a["created_at"], a["id"]))
    return out


def build(only: list[Path] | None = None) -> list[dict]:
    if only:
        records = []
        for path in only:
            if path.parent.name == "extend":
                base = {r["instance_id"]: r for r in v1_records()}[path.stem]
                records.append(extended(base, path))
            else:
                records.append(record_from_source(path))
        return records
    extensions = {p.stem: p for p in sorted((HERE / "src" / "extend").glob("*.yaml"))}
    records = [extended(r, extensions[r["instance_id"]]) if r["instance_id"] in extensions else r
               for r in v1_records()]
    records += [record_from_source(p) for p in sorted((HERE / "src").glob("*.yaml"))]
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", type=Path, help="build and check only these source files")
    parser.add_argument("--out", type=Path, default=HERE / "v2" / "workspaces.jsonl")
    parser.add_argument("--no-floors", action="store_true", help="skip the chance floors")
    args = parser.parse_args(argv)
    records = build(args.only)
    from tide_dspy.data.set_check import check_records, print_floors  # the package's checker and floors

    problems = check_records(records)
    for line in problems:
        print(line)
    if not args.only:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        print(f"wrote {args.out}: {len(records)} workspaces, {sum(len(r['problems']) for r in records)} problems")
    if not args.no_floors:
        print_floors(records)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
