"""Write a discover run as report.md, findings.json, report.html and run.json.

Both human-readable reports render the same per-finding view, so they always say the same thing. Everything in
them that came from outside (model text, file names, error messages) is shown with its control characters
escaped (util.text.printable); Markdown renders no HTML, link, image or clickable URL of it, and HTML escapes it.
Each report holds at most REPORT_MODEL_CHARS characters of model text (each field is capped before, by
util.text.cap_finding). Every file is scrubbed of secrets and written through util.safe_write.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

from tide_dspy.domains import get_setting
from tide_dspy.product.patches import CHECK_COMMAND, PatchCheck
from tide_dspy.product.result import DiscoverResult
from tide_dspy.product.verify import NOT_RUN, VERIFIED, PatchVerification
from tide_dspy.schemas import Finding
from tide_dspy.util.safe_write import write_text
from tide_dspy.util.secrets import scrub_text
from tide_dspy.util.text import json_text, printable

REPORT_MODEL_CHARS = 1_000_000  # model text one report shows; the findings after that are listed cut
CUT_FINDING = "[cut: this report already shows its limit of model text; the finding is in findings.json]"

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
    return get_setting(result.setting).evidence_label(a, result.sources.get(artifact_id))


def template_label(result: DiscoverResult, f: Finding) -> str:
    if not f.used_template_id:
        return f"none cited{get_setting(result.setting).uncited_template_note}" + (f"; {f.why}" if f.why else "")
    name = result.template_name(f.used_template_id)
    head = f"{f.used_template_id} ({name})" if name else f"{f.used_template_id} (not in the library)"
    return f"{head}: {f.why}" if f.why else head


def patch_status(check: PatchCheck | None) -> str | None:
    if check is None:
        return None
    return check.status + (f": {check.reason}" if check.reason and not check.applies else "")


def tests_status(v: PatchVerification | None) -> str | None:
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
    return cap_views(views)


def cap_views(views: list[FindingView], budget: int | None = None) -> list[FindingView]:
    """The views with at most `budget` (default REPORT_MODEL_CHARS) characters of model text in all: a finding
    past it keeps its number, evidence and status, and says its text was cut."""
    left = REPORT_MODEL_CHARS if budget is None else budget
    for v in views:
        size = len(v.description) + len(v.template) + len(v.patch or "") + sum(len(a) for a in v.action)
        if size <= left:
            left -= size
            continue
        left = 0
        v.description, v.template, v.patch, v.action = CUT_FINDING, "-", None, v.action[:1]
        v.flags = [*v.flags, "cut_from_report"]
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
SCAN_COLUMNS = ["rank", "artifact", "score", "template", "reason"]
SCAN_ROWS_SHOWN = 10  # per window: the focus and what comes up next


def scan_rows(result: DiscoverResult) -> list[list[str]]:
    """The most suspect artifacts of each window's scan: score is the expected 0-9 rating (see tide_dspy.scan)."""
    prefix = (lambda w: f"{w}.") if len(result.scans) > 1 else (lambda w: "")
    return [[f"{prefix(w)}{rank}", s.artifact_id, f"{s.score:.2f}", s.template_id or "-", s.reason or "-"]
            for w, scan in enumerate(result.scans, 1)
            for rank, s in enumerate(scan.most_suspect(SCAN_ROWS_SHOWN), 1)]


def failed_round_lines(result: DiscoverResult) -> list[str]:
    """One line per failed round (window, round, error), for both reports."""
    where = (lambda wr: f"window {wr.window}, round {wr.record.round}") if result.windows > 1 else \
        (lambda wr: f"round {wr.record.round}")
    return [f"{where(wr)}: {wr.record.error or 'no parseable output'}" for wr in result.failed_rounds()]


EMBEDDED_RARELY_FINDS = ("The embedded model ({model}) rarely finds anything: on the benchmark it does not beat the "
                         "chance floors, so this says little about the code. For real findings run a hosted backbone "
                         "(--backbone gpt-5-mini with OPENAI_API_KEY set; `tide check gpt-5-mini` first) or your own "
                         "server (--backbone openai-compatible --api-base http://127.0.0.1:8000/v1).")


def embedded_note(result: DiscoverResult) -> str | None:
    """What an empty report on the embedded backbone means, and how to get real findings; None otherwise."""
    from tide_dspy.backbones.registry import BACKBONES

    name = result.backbone.get("backbone")
    backbone = BACKBONES.get(name) if isinstance(name, str) else None
    if backbone is None or backbone.kind != "local" or result.findings or result.every_round_failed():
        return None
    return EMBEDDED_RARELY_FINDS.format(model=backbone.note.split(",")[0])


def no_findings_line(result: DiscoverResult) -> str:
    if result.every_round_failed():
        return (f"No findings, because every round failed (first error: {result.first_error()}). This is not a clean "
                "result: fix the cause and run again.")
    note = embedded_note(result)
    return "No findings." + (f" {note}" if note else "")


# ---- Markdown: text from the LM and from file names is escaped, never rendered as HTML ----

def _longest_run(text: str, char: str) -> int:
    longest = run = 0
    for c in text:
        run = run + 1 if c == char else 0
        longest = max(longest, run)
    return longest


# A URL a Markdown renderer would make clickable (GFM autolinks scheme:// and www. forms): shown as code instead.
_URL = re.compile(r"(?:\b[a-z][a-z0-9+.-]*://|\bwww\.)[^\s<>`]*", re.I)
_BLOCK_START = "#>-+*=|~`:"  # a first character that could open a heading, quote, list, rule or table


def _one_line(text) -> str:
    return printable(" ".join(str(text).splitlines()))


def _md_plain(text: str) -> str:
    """Escaped so that nothing renders: HTML tags and entities, and the brackets of links, images and references."""
    return html.escape(text, quote=False).replace("[", "\\[").replace("]", "\\]")


def md_inline(text) -> str:
    """Plain text in Markdown on one line: control characters shown escaped, raw HTML escaped, links and images
    shown as their text (`[x](javascript:...)` stays visible and inert), URLs shown as code (not clickable)."""
    text, out, at = _one_line(text), [], 0
    for m in _URL.finditer(text):
        url = m.group().rstrip(").,;:!?'\"")
        out += [_md_plain(text[at:m.start()]), md_code(url)]
        at = m.start() + len(url)
    out.append(_md_plain(text[at:]))
    return "".join(out)


def md_text(text) -> str:
    """`md_inline` that also cannot open a block (heading, quote, list, rule, table, fence) where a line starts."""
    inline = md_inline(text)
    return "\\" + inline if inline[:1] in _BLOCK_START and not inline.startswith("`") else inline


def md_code(text) -> str:
    """An inline code span whose fence is longer than any run of backticks inside it."""
    text = _one_line(text)
    fence = "`" * (_longest_run(text, "`") + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_fenced(body: str, info: str = "") -> list[str]:
    """A fenced code block whose fence is longer than any run of backticks in the body (control characters shown
    escaped, line breaks kept)."""
    body = printable(body, keep_newlines=True)
    fence = "`" * max(3, _longest_run(body, "`") + 1)
    return [fence + info, body.rstrip("\n"), fence]


def md_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table whose cells are plain text (escaped, and a `|` inside a cell does not split it)."""
    cell = lambda text: md_inline(text).replace("|", "\\|")  # noqa: E731
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]]


def render_markdown(result: DiscoverResult) -> str:
    out = [f"# TIDE discover report: {md_text(result.target)}", "", *[md_text(h) for h in header_lines(result)], ""]
    if result.notes:
        out += ["Notes:", *[f"- {md_text(n)}" for n in result.notes], ""]
    if not result.findings:
        out += [md_text(no_findings_line(result)), ""]
    for v in finding_views(result):
        out += [f"## Finding {v.number}", "", md_text(v.description), "", "Evidence:"]
        out += [f"- {md_code(e)}" for e in v.evidence] or ["- (no valid evidence id)"]
        out += ["", f"Template: {md_text(v.template)}", ""]
        if v.action:
            out += [f"Action: {md_code(v.action[0])}", *[f"- {md_text(line)}" for line in v.action[1:]], ""]
        if v.patch_status is not None:
            out += [f"Patch: **{md_text(v.patch_status)}** (checked with `{CHECK_COMMAND}`; nothing was applied)", ""]
        if v.tests is not None:
            out += [f"Tests: **{md_text(v.tests)}**", ""]
        if v.patch:
            out += [*md_fenced(v.patch, "diff"), ""]
        if v.flags:
            out += [f"Flags: {md_text(', '.join(v.flags))}", ""]
    if result.skipped:
        out += [
            "## Skipped inputs",
            "",
            *[f"- {md_text(s['path'])}: {md_text(s['reason'])}" for s in result.skipped],
            "",
        ]
    failed = failed_round_lines(result)
    if failed:
        out += [
            f"## Failed rounds ({len(failed)} of {len(result.rounds)})",
            "",
            *[f"- {md_text(x)}" for x in failed],
            "",
        ]
    if result.scans:
        out += ["## Scan: the most suspect artifacts", "", *md_table(SCAN_COLUMNS, scan_rows(result)), ""]
    out += ["## Rounds", "", *md_table(ROUND_COLUMNS, round_rows(result))]
    return "\n".join(out) + "\n"


def html_text(text, keep_newlines: bool = False) -> str:
    """Text in HTML: control characters shown escaped, then HTML-escaped (quotes too); never markup or a link."""
    return html.escape(printable(text, keep_newlines=keep_newlines))


_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def html_prose(text) -> str:
    """`html_text` with each `code` span (as Markdown writes one) shown as <code>: its text escaped the same way,
    never markup."""
    return _CODE_SPAN.sub(lambda m: f"<code>{m.group(1)}</code>", html_text(text))


def html_table(title: str, columns: list[str], rows: list[list[str]]) -> str:
    e = html_text
    head = "".join(f"<th>{e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<h2>{e(title)}</h2><table><tr>{head}</tr>{body}</table>"


# The page loads nothing and runs nothing, whatever its text says: no script, image, frame or remote style.
CSP = "default-src 'none'; style-src 'unsafe-inline'"


def render_html(result: DiscoverResult) -> str:
    e = html_prose
    body = [
        f"<h1>TIDE discover report: {html_text(result.target)}</h1>",
        *[f"<p>{e(line)}</p>" for line in header_lines(result)],
    ]
    if result.notes:
        body.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in result.notes) + "</ul>")
    if not result.findings:
        body.append(f"<p>{e(no_findings_line(result))}</p>")
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
            part.append(f"<pre>{html_text(v.patch, keep_newlines=True)}</pre>")
        if v.flags:
            part.append(f"<p><b>Flags:</b> {e(', '.join(v.flags))}</p>")
        body.append("".join(part) + "</section>")
    if result.skipped:
        body.append("<h2>Skipped inputs</h2><ul>" + "".join(f"<li>{e(s['path'])}: {e(s['reason'])}</li>"
                                                           for s in result.skipped) + "</ul>")
    failed = failed_round_lines(result)
    if failed:
        body.append(f"<h2>Failed rounds ({len(failed)} of {len(result.rounds)})</h2><ul class='fails'>"
                    + "".join(f"<li>{e(x)}</li>" for x in failed) + "</ul>")
    if result.scans:
        body.append(html_table("Scan: the most suspect artifacts", SCAN_COLUMNS, scan_rows(result)))
    body.append(html_table("Rounds", ROUND_COLUMNS, round_rows(result)))
    return (
        f"<!doctype html><html><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\"><title>TIDE report: {html_text(result.target)}"
        "</title>"
        f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )


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
        **({"scans": [s.model_dump() for s in result.scans]} if result.scans else {}),
    }


REPORT_FILES = ("report.md", "report.html", "findings.json", "run.json")


def write_report(result: DiscoverResult, out_dir: str | Path) -> dict[str, Path]:
    """The four files in `out_dir`, each scrubbed of secrets and written through util.safe_write (never through
    a link; a link at `out_dir` or at one of the files is refused)."""
    out = Path(out_dir)
    files = {
        "report.md": render_markdown(result),
        "report.html": render_html(result),
        "findings.json": json_text(findings_payload(result), indent=2) + "\n",
        "run.json": json_text(run_payload(result), indent=2, default=str) + "\n",
    }
    return {name: write_text(out / name, scrub_text(text)) for name, text in files.items()}
