"""How well the scan ranks the gold evidence: recall@N of four rankings from one scan, side by side.

    python experiments/scan_recall.py --setting repository --backbone local-small --split train --limit 2

One scan per instance (the setting's scan signature, one call per artifact, the library's templates as the
shared prefix). From that one scan, four rankings of the same artifacts:
- probabilities: the rating expected under the model's digit probabilities (`Suspect.score`);
- written: the digit the model wrote, ties in a seeded random order;
- random: a seeded shuffle (the chance floor);
- first-listed: the order the context lists them (the position floor).

recall@N is the share of the gold problems' evidence among the first N. Per-instance scans are written to
OUT/scans.jsonl as they finish, so a crashed run resumes where it stopped. Run it on the train split: this is the
signal the scan instruction is tuned on, and choosing a scoring rule on test would be tuning on test.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from tide_dspy.util.safe_write import append_text, write_text

ROOT = Path(__file__).resolve().parents[1]
RANKINGS = ("probabilities", "written", "random", "first-listed")


def rankings(scan: dict, view_ids: list[str], seed: str) -> dict[str, list[str]]:
    from tide_dspy.scan import Suspect, rank

    suspects = [Suspect.model_validate(s) for s in scan["suspects"]]
    written = [s.model_copy(update={"score": s.rating if s.rating is not None else s.score}) for s in suspects]
    shuffled = list(view_ids)
    random.Random(seed).shuffle(shuffled)
    return {"probabilities": list(rank(suspects, seed).ids), "written": list(rank(written, seed).ids),
            "random": shuffled, "first-listed": list(view_ids)}


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    import dspy

    from tide_dspy.backbones import adapter_for, get_lm
    from tide_dspy.data import load_instances
    from tide_dspy.data.selection import data_path, select_instances
    from tide_dspy.domains import SETTING_NAMES, ContextView, render_templates
    from tide_dspy.scan import Scanner, recall_at
    from tide_dspy.templates import TemplateLibrary

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setting", required=True, choices=SETTING_NAMES)
    parser.add_argument("--backbone", default="local-small")
    parser.add_argument("--split", default="train")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--instances", nargs="*", default=None)
    parser.add_argument("--templates", default=None, help="library JSON (default: programs/<setting>/<backbone>/)")
    parser.add_argument("--at", type=int, nargs="*", default=[4, 8, 16])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    instances = [i for i in load_instances(data_path(args.setting), setting=args.setting) if i.split == args.split]
    if args.instances:
        instances = [i for i in instances if i.instance_id in set(args.instances)]
    instances = sorted(instances, key=lambda i: len(i.artifacts))
    instances = select_instances(instances, limit=args.limit)
    library = Path(args.templates or ROOT / "programs" / args.setting / args.backbone / "templates.json")
    guidance = render_templates(TemplateLibrary.load(library).templates)
    out = Path(
        args.out or ROOT / "experiments" / "results" / f"scan-recall-{args.setting}-{args.backbone}-{args.split}"
    )
    out.mkdir(parents=True, exist_ok=True)
    scans_path = out / "scans.jsonl"
    done = (
        {json.loads(line)["instance_id"]: json.loads(line) for line in scans_path.open()} if scans_path.exists() else {}
    )

    lm = get_lm(args.backbone)
    scanner = Scanner(args.setting)
    rows = []
    for n, instance in enumerate(instances, 1):
        view = ContextView.of(instance)
        scan = done.get(instance.instance_id)
        if scan is None:
            t0 = time.perf_counter()
            with dspy.context(lm=lm, adapter=adapter_for(lm)):
                record = scanner(instance, view, guidance)
            scan = {"instance_id": instance.instance_id, "seconds": round(time.perf_counter() - t0, 1),
                    **record.model_dump()}
            append_text(scans_path, json.dumps(scan) + "\n")
        print(f"[{n}/{len(instances)}] {instance.instance_id}: {len(view.ids)} artifacts, {scan['seconds']} s, "
              f"{scan['from_probabilities']} scored from probabilities, {scan['failures']} failed", flush=True)
        ranked = rankings(scan, view.ids, seed=f"{args.seed}:{instance.instance_id}")
        rows.append({"instance_id": instance.instance_id, "artifacts": len(view.ids),
                     **{f"{name}@{k}": recall_at(ids, instance, k) for name, ids in ranked.items() for k in args.at}})

    means = {key: round(sum(r[key] for r in rows) / len(rows), 4) for key in rows[0] if "@" in key} if rows else {}
    write_text(out / "recall.json", json.dumps({"command": " ".join(sys.argv), "library": str(library),
                                                  "instances": rows, "mean": means}, indent=2))
    lines = ["| ranking | " + " | ".join(f"recall@{k}" for k in args.at) + " |",
             "|---|" + "---|" * len(args.at)]
    lines += [f"| {name} | " + " | ".join(f"{means[f'{name}@{k}']:.3f}" for k in args.at) + " |" for name in RANKINGS]
    table = "\n".join(lines)
    write_text(out / "recall.md", table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
