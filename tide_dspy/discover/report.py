"""Write a discover run as report.md, findings.json, report.html and run.json.

Both human-readable reports render the same per-finding view, so they always say the same thing.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

from tide_dspy.discover.patches import CHECK_COMMAND, PatchCheck
from tide_dspy.discover.result import DiscoverResult
from tide_dspy.discover.verify import NOT_RUN, VERIFIED, Verification
from tide_dspy.schemas import Finding

CSS = ("body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;line-height:1.45}"
       "pre{background:#f4f4f4;padding:.6rem;overflow-x:auto}code{background:#f4f4f4}"
       "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:right}"
       ".applies{color:#17702b}.fails{color:#a31515}.finding{border-top:1px solid #ddd;margin-top:1.5rem}")


@dataclass
class FindingView:
    """One finding, in the words both reports print."""

    number: int
    description: str
    evidence: list[str]
    template: str
    action: list[str]  # action id line, then one "name: value" line per parameter
    patch: str | None
    patch_status: str | None  # "applies" | "does not apply: <reason>" | None
    flags: list[str]
    tests: str | None = None  # the --verify outcome: "verified: fixes 1, breaks 0 (fixed: ...)", ...
    fixes: bool = False  # only a verified patch is ever shown as a fix


def evidence_label(result: DiscoverResult, artifact_id: str) -> str:
    a = result.artifact(artifact_id)
    if a is None:
        return artifact_id
    if a.kind == "function":
        p = a.payload
        return f"{p.get('path')}:{p.get('start_line')}-{p.get('end_line')} ({artifact_id})"
    source = result.sources.get(artifact_id)
    return f"{artifact_id} {a.kind} \"{a.title}\"" + (f" ({source})" if source else "")


def template_label(result: DiscoverResult, f: Finding) -> str:
    if not f.used_template_id:
        novel = " (template-novel)" if result.setting == "repository" else ""
        return f"none cited{novel}" + (f"; {f.why}" if f.why else "")
    name = result.template_name(f.used_template_id)
    head = f"{f.used_template_id} ({name})" if name else f"{f.used_template_id} (not in the library)"
    return f"{head}: {f.why}" if f.why else head


def patch_status(check: PatchCheck | None) -> str | None:
    if check is None:
        return None
    return check.status + (f": {check.reason}" if check.reason and not check.applies else "")


def tests_status(v: Verification | None) -> str | None:
    if v is None:
        return None
    details = [f"{what}: {', '.join(ids[:10])}" + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
               for what, ids in (("fixed", v.fixed), ("broke", v.broken)) if ids]
    timing = f"{v.seconds:.1f} s" if v.status != NOT_RUN else ""
    extra = "; ".join([timing, *details]) if timing else ""
    return v.label + (f" ({extra})" if extra else "")


def finding_views(result: DiscoverResult) -> list[FindingView]:
    views = []
    for i, f in enumerate(result.findings):
        action = []
        if f.action is not None:
            action.append(f"{f.action.action_id} ({f.action.type or 'type unknown'})")
            action += [f"{k}: {v}" for k, v in f.action.parameters.items()]
        check = result.patch_checks[i] if i < len(result.patch_checks) else None
        verification = result.verifications[i] if i < len(result.verifications) else None
        views.append(FindingView(
            number=i + 1, description=f.description, evidence=[evidence_label(result, e) for e in f.evidence],
            template=template_label(result, f), action=action, patch=f.patch,
            patch_status=patch_status(check), flags=list(f.flags), tests=tests_status(verification),
            fixes=verification is not None and verification.status == VERIFIED,
        ))
    return views


def header_lines(result: DiscoverResult) -> list[str]:
    model = result.backbone.get("model") or result.backbone.get("name") or "unknown"
    lines = [
        f"Setting: {result.setting}. Program: {result.program_source}. Backbone: {model}.",
        f"Context: {len(result.instance.artifacts)} artifacts in {result.windows} window(s).",
        f"Summary: {result.summary_line()}.",
    ]
    if result.verify:
        lines.append(f"Tests: `{result.verify['command']}` ran in a temporary copy of the tree, unpatched (baseline: "
                     f"{result.verify['baseline']['summary']}) and once per applying patch. A patch counts as a fix "
                     "only when a test that failed in the baseline passes with it; findings are ordered by this.")
    return lines


def round_rows(result: DiscoverResult) -> list[list[str]]:
    rows = []
    for wr in result.rounds:
        r = wr.record
        rows.append([str(wr.window), str(r.round), str(r.new), str(r.rediscovered), str(r.lm_calls),
                     "-" if r.input_tokens is None else str(r.input_tokens),
                     "-" if r.output_tokens is None else str(r.output_tokens),
                     str(r.parse_failures), f"{r.seconds:.1f}"])
    return rows


ROUND_COLUMNS = ["window", "round", "new", "rediscovered", "LM calls", "tokens in", "tokens out", "parse failures", "s"]


def render_markdown(result: DiscoverResult) -> str:
    out = [f"# TIDE discover report: {result.target}", "", *header_lines(result), ""]
    if result.notes:
        out += ["Notes:", *[f"- {n}" for n in result.notes], ""]
    if not result.findings:
        out += ["No findings.", ""]
    for v in finding_views(result):
        out += [f"## Finding {v.number}", "", v.description, "", "Evidence:"]
        out += [f"- `{e}`" for e in v.evidence] or ["- (no valid evidence id)"]
        out += ["", f"Template: {v.template}", ""]
        if v.action:
            out += [f"Action: `{v.action[0]}`", *[f"- {line}" for line in v.action[1:]], ""]
        if v.patch_status is not None:
            out += [f"Patch: **{v.patch_status}** (checked with `{CHECK_COMMAND}`; nothing was applied)", ""]
        if v.tests is not None:
            out += [f"Tests: **{v.tests}**", ""]
        if v.patch:
            out += ["```diff", v.patch.rstrip("\n"), "```", ""]
        if v.flags:
            out += [f"Flags: {', '.join(v.flags)}", ""]
    if result.skipped:
        out += ["## Skipped inputs", "", *[f"- {s['path']}: {s['reason']}" for s in result.skipped], ""]
    out += ["## Rounds", "", "| " + " | ".join(ROUND_COLUMNS) + " |", "|" + "---|" * len(ROUND_COLUMNS)]
    out += ["| " + " | ".join(row) + " |" for row in round_rows(result)]
    return "\n".join(out) + "\n"


def render_html(result: DiscoverResult) -> str:
    e = html.escape
    body = [f"<h1>TIDE discover report: {e(result.target)}</h1>", *[f"<p>{e(line)}</p>" for line in header_lines(result)]]
    if result.notes:
        body.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in result.notes) + "</ul>")
    if not result.findings:
        body.append("<p>No findings.</p>")
    for v in finding_views(result):
        part = [f"<section class='finding'><h2>Finding {v.number}</h2><p>{e(v.description)}</p><h3>Evidence</h3><ul>"]
        part += [f"<li><code>{e(x)}</code></li>" for x in v.evidence] or ["<li>(no valid evidence id)</li>"]
        part.append(f"</ul><p><b>Template:</b> {e(v.template)}</p>")
        if v.action:
            part.append(f"<p><b>Action:</b> <code>{e(v.action[0])}</code></p><ul>")
            part += [f"<li>{e(line)}</li>" for line in v.action[1:]]
            part.append("</ul>")
        if v.patch_status is not None:
            css = "applies" if v.patch_status == "applies" else "fails"
            part.append(f"<p><b>Patch:</b> <span class='{css}'>{e(v.patch_status)}</span></p>")
        if v.tests is not None:
            part.append(f"<p><b>Tests:</b> <span class='{'applies' if v.fixes else 'fails'}'>{e(v.tests)}</span></p>")
        if v.patch:
            part.append(f"<pre>{e(v.patch)}</pre>")
        if v.flags:
            part.append(f"<p><b>Flags:</b> {e(', '.join(v.flags))}</p>")
        body.append("".join(part) + "</section>")
    if result.skipped:
        body.append("<h2>Skipped inputs</h2><ul>" + "".join(f"<li>{e(s['path'])}: {e(s['reason'])}</li>"
                                                           for s in result.skipped) + "</ul>")
    head = "".join(f"<th>{e(c)}</th>" for c in ROUND_COLUMNS)
    rows = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in round_rows(result))
    body.append(f"<h2>Rounds</h2><table><tr>{head}</tr>{rows}</table>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>TIDE report: {e(result.target)}</title>"
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")


def findings_payload(result: DiscoverResult) -> dict:
    rows = []
    for i, f in enumerate(result.findings):
        row = f.model_dump()
        check = result.patch_checks[i] if i < len(result.patch_checks) else None
        if check is not None:
            row["patch_check"] = {"status": check.status, "reason": check.reason}
        verification = result.verifications[i] if i < len(result.verifications) else None
        if verification is not None:
            row["verification"] = verification.to_dict()
        rows.append(row)
    return {"findings": rows, **({"verify": result.verify} if result.verify else {})}


def run_payload(result: DiscoverResult) -> dict:
    return {
        "setting": result.setting, "target": result.target, "program": result.program_source,
        "backbone": result.backbone, "summary": result.summary(), "notes": result.notes, "skipped": result.skipped,
        **({"verify": result.verify} if result.verify else {}),
        "rounds": [{"window": wr.window, **wr.record.model_dump()} for wr in result.rounds],
    }


def write_report(result: DiscoverResult, out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "report.md": render_markdown(result),
        "report.html": render_html(result),
        "findings.json": json.dumps(findings_payload(result), indent=2, ensure_ascii=False) + "\n",
        "run.json": json.dumps(run_payload(result), indent=2, ensure_ascii=False, default=str) + "\n",
    }
    paths = {}
    for name, text in files.items():
        paths[name] = out / name
        paths[name].write_text(text, encoding="utf-8")
    return paths
