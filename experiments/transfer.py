"""Transfer: TIDE with two template libraries on the same test instances, side by side.

    git show 24bf372:programs/workspace/local-small/templates.json > /tmp/old-ws.json
    python experiments/transfer.py --setting workspace --backbone local-small --judge proxy --limit 1 \\
        --library old=/tmp/old-ws.json --library new=programs/workspace/local-small/templates.json

Each library gets one `tide evaluate --method tide` run (resumable) under OUT/<label>/. Beside the scores, every
finding that names a template (used_template_id) is checked with the abstraction check against that template:
the template's specific tokens the finding repeats although its own context does not contain them (a detail
copied from the training case, not found in this workspace or repository).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tide_dspy.util.safe_write import write_text

ROOT = Path(__file__).resolve().parents[1]


def template_text(template) -> str:
    return "\n".join([template.name, template.pattern, *template.evidence_flow])


def instance_text(setting, instance) -> str:
    """Everything the round shows the model about this instance (context, profile, actions), templates aside."""
    from tide_dspy.domains import ContextView

    inputs = setting.round_inputs(instance, ContextView.of(instance), guidance="", found=[], max_new=1)
    return "\n\n".join(str(v) for k, v in inputs.items() if k != "templates")


def copied_tokens(rows: list[dict], library, instances: dict, setting) -> dict:
    """How many findings copy a template's specific tokens, with the tokens. A finding that names a template is
    checked against it; one that names none (small models often leave the field empty or put a handle there) is
    checked against every template of the library."""
    from tide_dspy.abstraction import check_finding

    by_id = {t.id: t for t in library}
    citing = copying = 0
    tokens: dict[str, int] = {}
    for row in rows:
        instance = instances[row["instance_id"]]
        context = instance_text(setting, instance)
        for finding in row["findings"]:
            cited = by_id.get((finding.get("used_template_id") or "").strip())
            citing += cited is not None
            leaks = {leak.token for template in ([cited] if cited else library)
                     for leak in check_finding(finding["description"], finding.get("why", ""),
                                               template_text(template), context).leaks}
            copying += bool(leaks)
            for token in leaks:
                tokens[token] = tokens.get(token, 0) + 1
    findings = sum(len(r["findings"]) for r in rows)
    return {"findings": findings, "citing_a_template": citing, "copying_template_tokens": copying,
            "copy_rate": round(copying / findings, 4) if findings else None,
            "copied_tokens": dict(sorted(tokens.items(), key=lambda kv: -kv[1])[:20])}


def main(argv: list[str] | None = None) -> int:
    from tide_dspy.cli.main import main as tide
    from tide_dspy.data import load_instances
    from tide_dspy.data.selection import data_path
    from tide_dspy.domains import SETTING_NAMES, get_setting
    from tide_dspy.evaluation import read_rows
    from tide_dspy.templates import TemplateLibrary

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--setting", required=True, choices=SETTING_NAMES)
    p.add_argument("--backbone", default="local-small")
    p.add_argument("--library", action="append", required=True, metavar="LABEL=PATH",
                   help="a template library to run, labelled; give two or more")
    p.add_argument("--out", default=None, help="default: experiments/results/transfer-<setting>-<backbone>")
    p.add_argument("--data", default=None)
    p.add_argument("--split", default="test")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--max-context-tokens", type=int, default=None)
    p.add_argument("--judge", default="proxy")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--max-tokens", type=int, default=None)
    args = p.parse_args(argv)

    libraries = {}
    for item in args.library:
        label, sep, path = item.partition("=")
        if not sep or not label.isidentifier() or not Path(path).is_file():
            raise SystemExit(f"--library {item!r}: expected LABEL=PATH of an existing library file")
        libraries[label] = Path(path)
    out = Path(args.out or ROOT / "experiments" / "results" / f"transfer-{args.setting}-{args.backbone}")
    common = ["--setting", args.setting, "--backbone", args.backbone, "--split", args.split, "--judge", args.judge,
              "--no-track"]
    for flag, value in (("--data", args.data), ("--limit", args.limit), ("--rounds", args.rounds),
                        ("--max-context-tokens", args.max_context_tokens), ("--max-tokens", args.max_tokens)):
        if value is not None:
            common += [flag, str(value)]

    setting = get_setting(args.setting)
    instances = {i.instance_id: i for i in load_instances(data_path(args.setting, args.data), setting=args.setting,
                                                          split=args.split)}
    report = {}
    for label, path in libraries.items():
        run_dir = out / label
        code = tide(["evaluate", "--method", "tide", "--templates", str(path), "--out", str(run_dir), "--resume",
                     *common])
        if code != 0:
            return code
        summary = json.loads((run_dir / "summary.json").read_text())
        ran = set(summary["instances"])
        rows = [r for r in read_rows(run_dir / "results.jsonl").values() if r["instance_id"] in ran]
        report[label] = {"library": str(path), "templates": len(TemplateLibrary.load(path)),
                         "instances": summary["instances"],
                         "f1": summary["f1"], "coverage": summary["coverage"], "judge": summary["judge"],
                         **copied_tokens(rows, TemplateLibrary.load(path), instances, setting)}
    write_text(out / "transfer.json", json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(report, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
