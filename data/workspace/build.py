"""Build the v2 workspace set from v1 and the hand-written sources, check it, and print its chance floors.

    python data/workspace/build.py                       # check; write v2/workspaces.jsonl.xz and SHA256SUMS; floors
    python data/workspace/build.py --check               # write nothing; fail if the committed v2 is not the build
    python data/workspace/build.py --paper-scale         # also require the paper's scale (tide data check's option)
    python data/workspace/build.py --only src/ws-x.yaml  # check one source (and its floors), write nothing

Sources are `src/*.yaml` (new workspaces) and `src/extend/*.yaml` (distractors added to a v1 workspace); their
format is in `src/README.md`. v1 is `v1/workspaces.jsonl.xz` beside this file. With no sources, v2 holds v1's
workspaces as they are.

The output is byte-stable: records in a fixed order, one JSON line each, compressed with xz at a fixed preset (no
timestamp in the container). A v2 whose content is already the build's is left as it is, so a liblzma that
compresses differently does not churn the committed file. SHA256SUMS is rewritten from the files.

This is a data-build script, not part of the package: the package reads the built file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
V1 = HERE / "v1" / "workspaces.jsonl.xz"
V2 = HERE / "v2" / "workspaces.jsonl.xz"
XZ_PRESET = 9 | lzma.PRESET_EXTREME
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
    with lzma.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def v1_records() -> list[dict]:
    if not V1.exists():
        raise SystemExit(f"no v1 set at {V1}: restore it from the repository (git checkout -- {V1.relative_to(HERE)})")
    return read_jsonl(V1)


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
    v1 = v1_records()
    unknown = sorted(set(extensions) - {r["instance_id"] for r in v1})
    if unknown:
        raise SystemExit(f"src/extend: {', '.join(unknown)} name no v1 workspace (a file is <instance_id>.yaml)")
    records = [extended(r, extensions[r["instance_id"]]) if r["instance_id"] in extensions else r for r in v1]
    records += [record_from_source(p) for p in sorted((HERE / "src").glob("*.yaml"))]
    return records


def jsonl_bytes(records: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def write_v2(records: list[dict]) -> bool:
    """Write v2 unless its content is already `records`; True when it was written."""
    content = jsonl_bytes(records)
    if V2.exists() and lzma.decompress(V2.read_bytes()) == content:
        return False
    V2.parent.mkdir(parents=True, exist_ok=True)
    V2.write_bytes(lzma.compress(content, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=XZ_PRESET))
    return True


def stale(records: list[dict]) -> list[str]:
    """How the committed v2 and SHA256SUMS differ from a fresh build of `records` (empty when they agree)."""
    from tide_dspy.data.sets import SUMS, sums_text

    out = []
    if not V2.exists():
        out.append(f"{V2} is missing")
    elif lzma.decompress(V2.read_bytes()) != jsonl_bytes(records):
        out.append(f"{V2} is not the build of v1 and src/ (run python data/workspace/build.py)")
    if not (HERE / SUMS).exists() or (HERE / SUMS).read_text(encoding="utf-8") != sums_text(HERE):
        out.append(f"{HERE / SUMS} does not list the files' checksums (run python data/workspace/build.py)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", type=Path, help="build and check only these source files")
    parser.add_argument("--check", action="store_true", help="write nothing; fail when the committed v2 or "
                                                            "SHA256SUMS is not the build's")
    parser.add_argument("--paper-scale", action="store_true", help="also require the paper's scale")
    parser.add_argument("--no-floors", action="store_true", help="skip the chance floors")
    args = parser.parse_args(argv)
    records = build(args.only)
    # The package's checker and floors, the ones `tide data check` runs.
    from tide_dspy.data.records import instance_from_record
    from tide_dspy.data.set_check import check_records, check_set
    from tide_dspy.data.sets import SUMS, sums_text
    from tide_dspy.domains import WORKSPACE
    from tide_dspy.floors import floor_scores, format_floors, split_rows

    card = (HERE / "README.md").read_text(encoding="utf-8")
    if args.only:
        problems = check_records(records, WORKSPACE.name, card)
    else:
        problems = check_set(records, WORKSPACE.name, card, paper_scale=args.paper_scale)
    for line in problems:
        print(line)
    if args.check:
        problems += stale(records)
        for line in stale(records):
            print(line)
    elif problems and not args.only:
        print(f"{V2} not written: {len(problems)} broken invariant(s) above")
    elif not args.only:
        written = write_v2(records)
        (HERE / SUMS).write_text(sums_text(HERE), encoding="utf-8")
        print(f"{'wrote' if written else 'unchanged:'} {V2}: {len(records)} workspaces, "
              f"{sum(len(r['problems']) for r in records)} problems; {SUMS} updated")
    if not args.no_floors:
        instances = [instance_from_record(r, WORKSPACE.name) for r in records]
        print(format_floors(split_rows(instances, floor_scores(instances))))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
