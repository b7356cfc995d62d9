"""Reproduce the paper's tables and figures on any backbone.

    python experiments/run.py table1 --setting workspace --backbone local-small --judge proxy
    python experiments/run.py all --setting repository --backbone local-small --max-context-tokens 12000
    python experiments/run.py table1 --setting repository --backbone gpt-5-mini --judge gpt-5-mini --runs 3 --dry-run

Every analysis reads raw per-instance runs under OUT/raw/<method>[-<variant>]/run<r>.jsonl. A missing or partial
raw run is (re)started and resumes where it stopped, so a crash loses no finished instance. Raw runs interleave
methods per instance, so the embedded backbone reuses the shared static prefix across methods.
Budget and per-round analyses re-score the findings of the first k rounds of one T-round run (see
experiments/analysis.py): a 10-round run gives every budget k <= 10 without further LM calls.
`--dry-run` prints what an experiment (or `all`) would send and cost, per inference backbone (every method, run
and judge call, each raw run once; see docs/cost.md), and calls no model.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from tide_dspy import tracing
from tide_dspy.backbones import LMOptions, describe_lm, lm_context, lm_from_options
from tide_dspy.backbones.providers import rules_of
from tide_dspy.cli.options import (
    add_cost_options,
    add_lm_options,
    add_rule_options,
    add_traces_option,
    budget_of,
    overrides_of,
)
from tide_dspy.cost.estimate import Estimate, estimate_runs
from tide_dspy.cost.guard import Guard
from tide_dspy.cost.prices import money
from tide_dspy.data import load_instances
from tide_dspy.data.selection import data_path, select_instances
from tide_dspy.data.sets import locate
from tide_dspy.domains import SETTING_NAMES, get_setting, per_setting
from tide_dspy.evaluation import evaluate, read_rows
from tide_dspy.methods import get_method, lm_methods
from tide_dspy.metrics import InstanceScore, aggregate, make_judge
from tide_dspy.programs import load_program, program_dir, safe_name
from tide_dspy.templates import TemplateLibrary
from tide_dspy.tracking import tracked_run
from tide_dspy.util.safe_write import write_text
from tide_dspy.workflows import ProgramShape, build_method

sys.path.insert(0, str(Path(__file__).parent))
import analysis  # noqa: E402
import plots  # noqa: E402
import tables  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# The chance floors every table and curve shows beside the methods (no LM call; see tide_dspy.methods).
FLOORS = plots.FLOOR_METHODS


# ---- inputs ----

def chosen_instances(args) -> list:
    instances = load_instances(data_path(args.setting.name, args.data, args.data_version), setting=args.setting.name,
                               split=args.split)
    if args.instances:
        wanted = set(args.instances)
        instances = [i for i in instances if i.instance_id in wanted]
    instances = select_instances(instances, max_context_tokens=args.max_context_tokens, limit=args.limit)
    if not instances:
        raise SystemExit("no instances selected: check --split, --max-context-tokens, --instances and --limit")
    return instances


def library_path(args, source: str | None = None) -> Path:
    """The template library of this run (--templates, else PROGRAMS/<setting>/<backbone>/templates.json), or of the
    backbone `source` (PROGRAMS/<setting>/<source>/templates.json: transfer's template sources)."""
    if args.templates and source is None:
        return Path(args.templates)
    return program_dir(args.setting.name, source or args.backbone, root=args.programs) / "templates.json"


def template_library(args, source: str | None = None) -> TemplateLibrary:
    path = library_path(args, source)
    if not path.exists():
        raise SystemExit(f"no template library at {path}: run `tide distill --setting {args.setting.name} "
                         f"--backbone {source or args.backbone} --programs {args.programs}` first, or pass "
                         "--templates")
    return TemplateLibrary.load(path)


def raw_name(method: str, rounds: int, args) -> str:
    """Runs with the default T share one raw folder, so table1, steps, budget and rounds reuse each other's calls."""
    default = args.rounds or args.setting.rounds
    return method if rounds == default else f"{method}-T{rounds}"


COMPILED = "tide-compiled"  # the method name of a compiled program (--compiled), beside the uncompiled tide


def compiled_program(args, templates: TemplateLibrary | None, T: int, k: int):
    """The --compiled program, shaped as the uncompiled TIDE of this run: the same T, k, artifact order, evidence
    bound and (with --scan) focus, so only what compile changed (the instructions) differs between the two rows."""
    program = load_program(args.compiled)
    if program.setting is not args.setting:
        raise SystemExit(f"--compiled {args.compiled} is a {program.setting.name} program, not {args.setting.name}")
    if templates is not None and [t.id for t in program.templates] != [t.id for t in templates.templates]:
        raise SystemExit(f"--compiled {args.compiled} holds templates {[t.id for t in program.templates]}, the run's "
                         f"library {[t.id for t in templates.templates]}: pass the library it was compiled with as "
                         "--templates")
    scan = args.focus_size if args.scan else None
    ProgramShape(rounds=T, per_round=k, max_evidence=args.max_evidence, scan=scan, **rules(args)).apply(program)
    program.context_order_seed = args.shuffle_context  # None too: the uncompiled TIDE's order
    return program


def rules(args) -> dict:
    """The departures from the paper's method this run asks for (None: the paper's rule; docs/paper.md)."""
    return {"stop_on": args.stop_on, "template_names": args.show_template_names, "multi_dedup": args.multi_dedup}


def run_settings(args) -> dict:
    """The method and scoring settings behind this run's numbers, each the paper's rule or a named departure
    (docs/paper.md): what meta-<experiment>.json records and experiments/paper.py shows."""
    return {"rounds": args.rounds or args.setting.rounds, "per_round": args.per_round or args.setting.per_round,
            "template_names": bool(args.show_template_names), "stop_on": args.stop_on or "empty",
            "multi_dedup": bool(args.multi_dedup), "max_evidence": args.max_evidence or args.setting.max_evidence,
            "repository_name_in_prompt": True, "judge_rubric": args.judge_rubric, "judge_runs": args.judge_runs}


def settings_note(args) -> list[str]:
    settings = run_settings(args)
    return ["Settings: " + ", ".join(f"{k} {v}" for k, v in settings.items()) + " (docs/paper.md says which are the "
            "paper's)."]


def make_program(method: str, args, templates: TemplateLibrary | None = None, rounds: int | None = None):
    setting = args.setting
    T, k = rounds or args.rounds or setting.rounds, args.per_round or setting.per_round
    if method == COMPILED:
        return compiled_program(args, templates, T, k)
    # Every LM method gets the same scan (TIDE's library as the scan's guidance, so the scan calls are the same
    # prompts and DSPy's cache answers them once); only the rounds differ.
    scan = args.focus_size if args.scan and method not in FLOORS else None
    shape = ProgramShape(rounds=T, per_round=k, max_evidence=args.max_evidence, shuffle_context=args.shuffle_context,
                         scan=scan, **rules(args))
    own = get_method(method).templates
    return build_method(args.setting, method, shape, templates=templates, data=args.data,
                        data_version=args.data_version,
                        scan_templates=templates.templates if scan and not own and templates else None)


# ---- raw runs ----

def run_raw(args, plan: dict[str, object], instances: list, out: Path, lm, judge) -> dict[str, list[dict]]:
    """Run every (name -> program) of `plan` on every instance, instance-major, `args.runs` times.

    An instance over the backbone's window in any program is left out of every program's rows (they are not
    scores of 0), so each analysis compares the programs on the same instances; `window_skipped` names them."""
    rows: dict[str, list[dict]] = {}
    budget, overrides = budget_of(args), overrides_of(args)
    # One spend counter for every run of the plan: --max-cost and --max-calls bound them together.
    spend = Guard(budget, overrides.targets({"backbone": lm, "judge": getattr(judge, "lm", None)})).spend
    if args.floors_only:  # the floors are rerun from scratch: their rows may come from an older version of them
        for name in plan:
            for r in range(args.runs):
                path = out / "raw" / name / f"run{r}.jsonl"
                held = read_rows(path) if name not in FLOORS and path.exists() else {}
                missing = [i.instance_id for i in instances if name not in FLOORS and i.instance_id not in held]
                if missing:
                    raise SystemExit(f"--floors-only: {path} has no row for {', '.join(missing)}; run the LM "
                                     "methods first (without --floors-only)")
        for name in plan:
            if name in FLOORS and (out / "raw" / name).is_dir():
                for stale in (out / "raw" / name).iterdir():
                    stale.unlink()
    for r in range(args.runs):
        # Repeats are distinct samples only at temperature > 0 (main() raises it for --runs > 1).
        run_lm = lm if r == 0 else lm.copy(rollout_id=r, seed=r)
        for inst in instances:
            for name, program in plan.items():
                path = out / "raw" / name / f"run{r}.jsonl"
                if args.floors_only and name not in FLOORS:
                    continue  # its rows were checked above
                evaluate(program, [inst], judge=judge, out_path=path, resume=True, progress=False, lm=run_lm,
                         method=name, budget=budget, overrides=overrides, spend=spend)
                row = read_rows(path)[inst.instance_id]
                status = (f" ERROR {row['error']}" if row.get("error") else f" SKIPPED {row['skipped']}"
                          if row.get("skipped") else f" INCOMPLETE {'; '.join(row['incomplete'])}"
                          if row.get("incomplete") else "")
                print(f"[run {r}] {inst.instance_id} {name}: {len(row['findings'])} findings, "
                      f"{row['seconds']:.0f}s{status}", flush=True)
    skipped = set(window_skipped(out, plan, args.runs, instances))
    if skipped:
        print(f"left out of every method, over the window: {', '.join(sorted(skipped))}", flush=True)
    wanted = [i.instance_id for i in instances if i.instance_id not in skipped]
    for name in plan:
        rows[name] = []
        for r in range(args.runs):
            done = read_rows(out / "raw" / name / f"run{r}.jsonl")
            rows[name] += [done[i] for i in wanted]
    return rows


def window_skipped(out: Path, names, runs: int, instances: list) -> list[str]:
    """The instances whose raw row, in any of these programs and runs, was skipped as over the window."""
    wanted = {i.instance_id for i in instances}
    found = set()
    for name in names:
        for r in range(runs):
            found |= {i for i, row in read_rows(out / "raw" / name / f"run{r}.jsonl").items()
                      if i in wanted and row.get("skipped")}
    return sorted(found)


def rows_by_run(rows: list[dict], runs: int, n_instances: int) -> list[list[dict]]:
    return [rows[i * n_instances:(i + 1) * n_instances] for i in range(runs)]


# ---- outputs ----

def write_csv(path: Path, records: list[dict]) -> None:
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(records[0]))
    writer.writeheader()
    writer.writerows(records)
    write_text(path, text.getvalue())


def raw_seconds(out: Path, instances: list) -> dict[str, float]:
    """Seconds the LM runs behind these results took, per raw run, summed over the chosen instances.

    Raw rows are shared between experiments and may come from earlier sessions, so this (not the wall time of
    the analysing process) is the cost of the results."""
    wanted = {i.instance_id for i in instances}
    totals = {}
    for path in sorted((out / "raw").glob("*/run*.jsonl")):
        rows = [r for r in read_rows(path).values() if r["instance_id"] in wanted]
        if rows:
            totals[f"{path.parent.name}/{path.stem}"] = round(sum(r["seconds"] for r in rows), 1)
    return totals


def write_meta(path: Path, lm, judge, started: float, extra: dict | None = None, floors_only: bool = False) -> None:
    if floors_only and path.exists():
        # The LM rows (and their backbone, judge and cost) come from the run that made them: keep its record and
        # add how the floors were recomputed.
        meta = json.loads(path.read_text())
        meta["floors_recomputed"] = {"command": " ".join(sys.argv),
                                     "date": datetime.now(UTC).isoformat(timespec="seconds"),
                                     "floors": list(FLOORS)}
        path.write_text(json.dumps(meta, indent=2) + "\n")
        return
    meta = {
        "command": " ".join(sys.argv),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "backbone": describe_lm(lm),
        "judge": getattr(judge, "label", "none"),
        "wall_seconds": round(time.time() - started, 1),
        **(extra or {}),
    }
    write_text(path, json.dumps(meta, indent=2) + "\n")


def table1_methods(args) -> list[str]:
    return list(dict.fromkeys([*FLOORS, *(args.methods or ["single", "multi", "iter", "tide"])]))


def estimate_table1(args, instances, lm, judge, counter=None) -> Estimate:
    """What table1 would send and cost: every method (the floors call nothing), every run, the judge. `counter`
    (a cost.estimate.PromptCounter) may be shared between estimates of the same prompts."""
    return estimate_experiments(["table1"], args, instances, lm, judge, counter)[args.backbone]


def estimate_experiments(names: list[str], args, instances, lm, judge, counter=None) -> dict[str, Estimate]:
    """What the experiments `names` would send and cost, per inference backbone: the raw runs of their plans, each
    once (experiments share raw runs), every run (--runs), the judge. A library not distilled yet is stood in for
    by the embedded backbone's (each estimate says so). No model is called."""
    from tide_dspy.workflows import estimate_targets, estimator_for, stand_in_templates

    notes: list[str] = []

    def library(source: str | None = None) -> TemplateLibrary:
        backbone = source or args.backbone
        path, note = stand_in_templates(args.setting, backbone, args.templates if source is None else None,
                                        args.programs)
        if note and note not in notes:
            notes.append(note)
        return TemplateLibrary.load(path)

    merged = merge_plans(PLANS[name](args, library) for name in names)
    estimates = {}
    for backbone, programs in merged.items():
        backbone_lm = lm if backbone == args.backbone else lm_from_options(LMOptions.from_namespace(args), backbone)
        targets = estimate_targets(backbone_lm, backbone, judge, args.judge, overrides_of(args))
        estimate = estimate_runs(programs, instances, estimator_for(backbone_lm, targets, counter), targets,
                                 runs=args.runs)
        estimate.notes += [f"{len(instances)} {args.setting.name} instances ({args.split} split) x {args.runs} "
                           f"run(s)", *notes]
        estimates[backbone] = estimate
    return estimates


def merge_plans(plans) -> dict[str, dict[str, object]]:
    """Plans ({inference backbone: {raw run: program}}) merged: a raw run several experiments share counts once."""
    merged: dict[str, dict[str, object]] = {}
    for plan in plans:
        for backbone, programs in plan.items():
            for name, program in programs.items():
                merged.setdefault(backbone, {}).setdefault(name, program)
    return merged


def run_plan(args, plan: dict[str, dict[str, object]], instances, out, lm, judge) -> dict[str, list[dict]]:
    """Every raw run of `plan`, each on its inference backbone (this run's `lm`, or one built for another name)."""
    rows = {}
    for backbone, programs in plan.items():
        backbone_lm = lm if backbone == args.backbone else for_runs(
            args, lm_from_options(LMOptions.from_namespace(args), backbone))
        with lm_context(backbone_lm):
            rows.update(run_raw(args, programs, instances, out, backbone_lm, judge))
    return rows


def for_runs(args, lm):
    """`lm`, at temperature 0.7 when --runs > 1 would otherwise repeat one sample at temperature 0."""
    if args.runs > 1 and not lm.kwargs.get("temperature") and rules_of(lm).accepts_temperature:
        return lm.copy(temperature=0.7)
    return lm


def method_record(method: str, rows: list[dict], args, n_instances: int, **fields) -> dict:
    """Each component's coverage and F1 in percent: the mean over instances of each instance's mean over runs,
    its 95% bootstrap interval over instances (experiments/tables.py), and the spread (SD) over runs of the
    run means; `fields` go before them."""
    runs = rows_by_run(rows, args.runs, n_instances)
    summary = analysis.summarize_runs([aggregate([analysis_score(row) for row in run]) for run in runs])
    record = {"method": method, "instances": n_instances, "runs": args.runs,
              "incomplete": sum(1 for run in runs for row in run if row.get("incomplete")), **fields,
              **tables.interval_fields(rows)}
    for c in analysis.COMPONENTS:
        for kind in ("coverage", "f1"):
            sd = summary[kind][c][1]
            record[f"{c}_{kind}_std"] = None if sd is None else round(100 * sd, 2)
    return record


# ---- what each experiment runs: {inference backbone: {raw run name: program}} ----

def table1_plan(args, library) -> dict:
    templates = library()
    return {args.backbone: {m: make_program(m, args, templates) for m in table1_methods(args)}}


def demos_plan(args, library) -> dict:
    templates = library()
    return {args.backbone: {m: make_program(m, args, templates) for m in demos_methods()}}


def steps_plan(args, library) -> dict:
    templates = library()
    return {args.backbone: {m: make_program(m, args, templates) for m in ("tide", "multi")}}


def budget_plan(args, library) -> dict:
    templates, T = library(), max(args.budgets)
    return {args.backbone: {raw_name(m, T, args): make_program(m, args, templates, rounds=T)
                            for m in (*FLOORS, "tide", "multi")}}


def rounds_plan(args, library) -> dict:
    templates = library()
    return {args.backbone: {m: make_program(m, args, templates) for m in (*FLOORS, "tide", "iter")}}


def transfer_name(args, inference: str, source: str) -> str:
    """The raw run of TIDE on `inference` with `source`'s templates: Table 1's own TIDE run when that is it."""
    if inference == args.backbone and library_path(args, source) == library_path(args):
        return "tide"
    return f"tide-{safe_name(inference)}-with-{safe_name(source)}"


def transfer_plan(args, library) -> dict:
    plan: dict[str, dict] = {args.backbone: {m: make_program(m, args) for m in FLOORS}}
    for inference in args.backbones:
        for source in args.template_sources:
            plan.setdefault(inference, {})[transfer_name(args, inference, source)] = make_program(
                "tide", args, library(source))
    return plan


def citations_plan(args, library) -> dict:
    return {b: {transfer_name(args, b, b): make_program("tide", args, library(b))} for b in args.backbones}


def poolsize_plan(args, library) -> dict:
    templates = library()
    return {args.backbone: {**{m: make_program(m, args) for m in FLOORS},
                            **{pool_name(n): make_program("tide" if n else "iter", args, templates.subset(n))
                               for n in pool_sizes(args, templates)}}}


def pool_name(n: int) -> str:
    """Pool size 0 is TIDE without templates, the Iter-only ablation: Table 1's own iter run."""
    return f"tide-pool{n}" if n else "iter"


def pool_sizes(args, templates: TemplateLibrary) -> list[int]:
    return [s for s in args.pool_sizes if s <= len(templates.templates)] or [len(templates.templates)]


def instances_plan(args, library) -> dict:
    return {args.backbone: {"tide": make_program("tide", args, library())}}


def table1(args, instances, out, lm, judge, stem: str = "table1") -> dict:
    plan = (demos_plan if stem == "demos" else table1_plan)(args, lambda: template_library(args))
    methods = list(plan[args.backbone])
    raw = run_plan(args, plan, instances, out, lm, judge)
    skipped = window_skipped(out, methods, args.runs, instances)  # left out of `raw`, named under the table
    records = [method_record(m, raw[m], args, len(instances) - len(skipped), skipped=len(skipped),
                             **tables.cost_fields(raw[m])) for m in methods]
    write_csv(out / f"{stem}.csv", records)
    comparisons = tables.comparison_records(raw)
    if comparisons:
        write_csv(out / f"{stem}_tests.csv", comparisons)
    by_id = {i.instance_id: i for i in instances}
    write_csv(out / f"{stem}_hygiene.csv", [
        {"method": m, **analysis.output_hygiene(raw[m]),
         "cited_position": analysis.cited_position(raw[m], by_id, args.shuffle_context),
         "scan_recall_at_focus": (floor_recall(raw[m], by_id, args.focus_size) if m in FLOORS and args.scan
                                  else analysis.scan_recall(raw[m]))} for m in methods])

    lines = [*tables.method_table(records), ""]
    if comparisons:
        lines += [*tables.comparison_table(comparisons), ""]
    lines += ["Backbone calls behind each method (rounds and scan; the judge's are in raw/<method>/lm_usage.json), "
              "over every instance and run; a gold problem counts as found when a finding overlaps its evidence:", "",
              *tables.cost_table(records), "",
              *floor_ratios(records), *completeness_notes(records, skipped), "",
              *tables.footnotes(comparisons, args.runs), *settings_note(args)]
    write_text(out / f"{stem}.md", "\n".join(lines) + f"\n\njudge: {getattr(judge, 'label', 'none')}\n")
    plots.table1(records, out / f"{stem}.png",
                 title=f"{args.setting.name} / {args.backbone} / judge: {getattr(judge, 'label', 'none')}")
    if COMPILED in methods:
        record_heldout(args, out, records, [i.instance_id for i in instances], judge)
    print("\n".join(lines))
    return {
        f"{r['method']}.{c}_f1": r[f"{c}_f1"] for r in records for c in analysis.COMPONENTS if r[f"{c}_f1"] is not None
    }


def record_heldout(args, out: Path, records: list[dict], instance_ids: list[str], judge) -> None:
    """Add this run's numbers to the compiled program's provenance.json (under "heldout", keyed by the run folder):
    the program's record then names where, on what and against which floors it was measured."""
    from tide_dspy.util.jsonio import read_json_file, write_json

    program = Path(args.compiled)
    path = program.parent / "provenance.json"
    data = read_json_file(path, "") if path.exists() else {}
    entry = data.setdefault(program.name, {})
    hygiene = {r["method"]: r for r in csv.DictReader((out / "table1_hygiene.csv").open())}
    floor_name, floor = plots.higher_floor(records)
    entry.setdefault("heldout", {})[out.name] = {
        "command": " ".join(["python", *sys.argv]), "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "split": args.split, "instances": instance_ids, "judge": getattr(judge, "label", "none"),
        "shuffle_context": args.shuffle_context, "highest_floor": floor_name,
        "methods": {r["method"]: {"retrieval_f1": r["retrieval_f1"], "retrieval_coverage": r["retrieval_coverage"],
                                  "scan_recall_at_focus": float(hygiene[r["method"]]["scan_recall_at_focus"])
                                  if hygiene[r["method"]].get("scan_recall_at_focus") else None,
                                  "x_highest_floor": round(r["retrieval_f1"] / floor, 2) if floor else None}
                    for r in records}}
    write_json(path, data, ensure_ascii=True)


def floor_recall(rows: list[dict], by_id: dict, focus: int) -> float | None:
    """A floor's answer to a scan's recall@focus: the share of gold evidence among the first `focus` distinct
    artifacts it cites (its findings in order), so a scan's shortlist is read against the floors' own."""
    from tide_dspy.scan import recall_at

    values = []
    for row in rows:
        cited = list(dict.fromkeys(e for f in row["findings"] for e in f["evidence"]))
        value = recall_at(cited, by_id[row["instance_id"]], focus)
        if value is not None:
            values.append(value)
    return round(sum(values) / len(values), 3) if values else None


def floor_ratios(records: list[dict]) -> list[str]:
    """Each method's retrieval F1 over the highest of the three chance floors, measured in the same run."""
    floor_name, floor = plots.higher_floor(records)
    lines = [f"Highest chance floor: {floor_name}, retrieval F1 {floor:.2f}."]
    for r in records:
        if r["method"] not in FLOORS and r["retrieval_f1"] is not None:
            ratio = f"{r['retrieval_f1'] / floor:.2f}x" if floor else "n/a (floor is 0)"
            lines.append(f"- {r['method']}: retrieval F1 {r['retrieval_f1']:.2f} = {ratio} the floor")
    return lines


def completeness_notes(records: list[dict], skipped: list[str]) -> list[str]:
    """What the table leaves out: instances over the window, and incomplete rows (rerunning the command resumes
    them)."""
    notes = []
    if skipped:
        notes.append(f"skipped: {len(skipped)} (over the window), left out of every method: {', '.join(skipped)}")
    if any(r["incomplete"] for r in records):
        notes.append("incomplete rows (a later round aborted or a judge call failed; rerun to resume them): "
                     + ", ".join(f"{r['method']} {r['incomplete']}" for r in records if r["incomplete"]))
    return notes


def pct_or(v) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def analysis_score(row: dict) -> InstanceScore:
    return InstanceScore.model_validate(row["score"])


def steps(args, instances, out, lm, judge) -> dict:
    raw = run_plan(args, steps_plan(args, lambda: template_library(args)), instances, out, lm, judge)
    records = []
    for m in ("tide", "multi"):
        for t, v in analysis.steps_new_vs_rediscovered(raw[m]).items():
            records.append({"method": m, "step": t, **{k: round(x, 3) for k, x in v.items()}})
    write_csv(out / "steps.csv", records)
    plots.steps(records, out / "steps.png")
    return {}


def budget(args, instances, out, lm, judge) -> dict:
    raw = run_plan(args, budget_plan(args, lambda: template_library(args)), instances, out, lm, judge)
    by_id = {i.instance_id: i for i in instances}
    records = [{"method": name.split("-T")[0], "budget": k,
                **tables.rate_fields(at_budget(rows, by_id, k), "retrieval")}
               for name, rows in raw.items() for k in args.budgets]
    write_csv(out / "budget.csv", records)
    plots.budget(records, out / "budget.png")
    return {}


def rounds(args, instances, out, lm, judge) -> dict:
    T = args.rounds or args.setting.rounds
    raw = run_plan(args, rounds_plan(args, lambda: template_library(args)), instances, out, lm, judge)
    by_id = {i.instance_id: i for i in instances}
    records = [{"method": name, "round": k, **tables.rate_fields(at_budget(rows, by_id, k), "retrieval",
                                                                 ("coverage", "precision"))}
               for name, rows in raw.items() for k in range(1, T + 1)]
    write_csv(out / "rounds.csv", records)
    plots.rounds(records, out / "rounds.png")
    return {}


def at_budget(rows: list[dict], by_id: dict, k: int) -> list[tuple[str, dict]]:
    """(instance id, the score of its findings of rounds <= k) per row that did not fail (analysis.score_at_budget)."""
    return [(r["instance_id"], analysis.score_at_budget(r, by_id[r["instance_id"]], k).model_dump())
            for r in rows if not r.get("error")]


def demos_methods() -> list[str]:
    return [*FLOORS, "iter-demos", "tide"]


def demos(args, instances, out, lm, judge) -> dict:
    return table1(args, instances, out, lm, judge, stem="demos")


def transfer(args, instances, out, lm, judge) -> dict:
    """Table 3: TIDE on each inference backbone with the templates each source backbone distilled, retrieval
    coverage (the paper's number) and F1 of every component, beside the chance floors (which call no model)."""
    raw = run_plan(args, transfer_plan(args, lambda source=None: template_library(args, source)), instances, out,
                   lm, judge)
    n = len(instances)
    records = [{"inference": "-", "templates_from": "-", **method_record(m, raw[m], args, n)} for m in FLOORS]
    for inference in args.backbones:
        for source in args.template_sources:
            records.append({"inference": inference, "templates_from": source,
                            **method_record("tide", raw[transfer_name(args, inference, source)], args, n)})
    write_csv(out / "transfer.csv", records)
    comparisons = []
    for inference in args.backbones:
        for source in args.template_sources:
            cell_raw = {f"tide {inference} with {source}": raw[transfer_name(args, inference, source)],
                        **{m: raw[m] for m in FLOORS}}
            comparisons += tables.comparison_records(cell_raw, target=f"tide {inference} with {source}")
    if comparisons:
        write_csv(out / "transfer_tests.csv", comparisons)
    cells = {(r["inference"], r["templates_from"]): r for r in records}
    lines = ["Retrieval coverage / F1 (percent; mean over instances [95% CI]), inference backbone x template "
             "source.", "",
             f"| inference \\ templates from | {' | '.join(args.template_sources)} |",
             f"|---|{'---|' * len(args.template_sources)}"]
    for inference in args.backbones:
        row = [cells[inference, s] for s in args.template_sources]
        lines.append(f"| {inference} | "
                     + " | ".join(f"{tables.cell(r, 'retrieval_coverage')} / {tables.cell(r, 'retrieval_f1')}"
                                  for r in row) + " |")
    lines += ["", "Chance floors (no model): " + "; ".join(
        f"{r['method']} {tables.cell(r, 'retrieval_coverage')} / {tables.cell(r, 'retrieval_f1')}"
        for r in records[:len(FLOORS)]) + f". {n} instance(s) x {args.runs} run(s); judge: "
        f"{getattr(judge, 'label', 'none')}.", ""]
    for target in dict.fromkeys(c["method"] for c in comparisons):
        lines += [*tables.comparison_table([c for c in comparisons if c["method"] == target]), ""]
    lines += [*tables.footnotes(comparisons, args.runs), *settings_note(args)]
    write_text(out / "transfer.md", "\n".join(lines) + "\n")
    plots.transfer([r for r in records if r["method"] == "tide"], out / "transfer.png")
    print("\n".join(lines))
    return {f"{r['inference']}.{r['templates_from']}.retrieval_coverage": r["retrieval_coverage"]
            for r in records if r["method"] == "tide" and r["retrieval_coverage"] is not None}


def citations(args, instances, out, lm, judge) -> dict:
    """Figure 5: how often each backbone's TIDE findings cite each of its templates (its own library)."""
    raw = run_plan(args, citations_plan(args, lambda source=None: template_library(args, source)), instances, out,
                   lm, judge)
    records = []
    for backbone in args.backbones:
        for template_id, n in analysis.template_citations(raw[transfer_name(args, backbone, backbone)]).most_common():
            records.append({"backbone": backbone, "template": template_id, "citations": n})
    if not records:
        records = [{"backbone": b, "template": "none", "citations": 0} for b in args.backbones]
    write_csv(out / "citations.csv", records)
    plots.citations(records, out / "citations.png")
    return {}


def poolsize(args, instances, out, lm, judge) -> dict:
    library = template_library(args)
    raw = run_plan(args, poolsize_plan(args, lambda: library), instances, out, lm, judge)
    sizes = pool_sizes(args, library)
    # The chance floors have no pool: each is drawn at its one value across the sizes, beside TIDE.
    series = [("tide", n, raw[pool_name(n)]) for n in sizes] + [(m, n, raw[m]) for m in FLOORS for n in sizes]
    records = [{"method": name, "pool_size": n,
                **{f"{c}_{key}": value for c in analysis.COMPONENTS
                   for key, value in tables.rate_fields([(r["instance_id"], r["score"]) for r in rows], c,
                                                        ("f1",)).items()}}
               for name, n, rows in series]
    write_csv(out / "poolsize.csv", records)
    plots.poolsize(records, out / "poolsize.png")
    return {}


def per_instance(args, instances, out, lm, judge) -> dict:
    raw = run_plan(args, instances_plan(args, lambda: template_library(args)), instances, out, lm, judge)
    by_id = {i.instance_id: i for i in instances}
    records = analysis.per_instance_counts(raw["tide"], by_id)
    write_csv(out / "per_instance.csv", records)
    plots.per_instance(records, out / "per_instance.png")
    return {}


EXPERIMENTS = {
    "table1": table1, "steps": steps, "budget": budget, "rounds": rounds, "demos": demos,
    "transfer": transfer, "citations": citations, "poolsize": poolsize, "instances": per_instance,
}
PLANS = {
    "table1": table1_plan, "steps": steps_plan, "budget": budget_plan, "rounds": rounds_plan, "demos": demos_plan,
    "transfer": transfer_plan, "citations": citations_plan, "poolsize": poolsize_plan, "instances": instances_plan,
}


def print_estimates(estimates: dict[str, Estimate], names: list[str], out: Path) -> None:
    """Each inference backbone's estimate, then their total, for the experiments `names`."""
    for backbone, estimate in estimates.items():
        print(f"## {', '.join(names)} on {backbone}\n\n{estimate.table()}\n")
    costs = [e.cost() for e in estimates.values()]
    total = "unknown (a backbone has no prices; pass --price)" if any(c is None for c in costs) else money(sum(costs))
    print(f"total: {total} for {', '.join(names)}; raw runs already in {out / 'raw'} are resumed, not repeated, "
          "so a rerun costs less")
    print("dry run: no model was called, nothing written")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=[*EXPERIMENTS, "all"])
    parser.add_argument("--setting", required=True, choices=SETTING_NAMES)
    parser.add_argument("--split", default="test")
    parser.add_argument("--data", default=None, help="a set's folder, one version's, or a JSONL file or folder "
                                                     "(default: $TIDE_DATA/<setting>, else the shipped set)")
    parser.add_argument("--data-version", default=None, help="the version of a versioned set (default: its highest)")
    parser.add_argument(
        "--templates",
        default=None,
        help="template library JSON (default: programs/<setting>/<backbone>/templates.json)",
    )
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--instances", nargs="*", default=None, help="only these instance ids")
    parser.add_argument(
        "--max-context-tokens", type=int, default=None, help="keep instances whose rendered context fits"
    )
    parser.add_argument("--runs", type=int, default=1, help="repeats (distinct rollout ids); spread is reported")
    parser.add_argument(
        "--rounds", type=int, default=None, help=f"T (default: the setting's, {per_setting('rounds')})"
    )
    parser.add_argument(
        "--per-round", type=int, default=None, help=f"k (default: the setting's, {per_setting('per_round')})"
    )
    parser.add_argument("--methods", nargs="*", default=None, choices=[*lm_methods(), COMPILED],
                        help="LM methods of table1 (default: single multi iter tide); the chance floors always run. "
                             f"{COMPILED}: the --compiled program, shaped as this run's tide")
    parser.add_argument("--compiled", default=None, metavar="PROGRAM",
                        help=f"a compiled TIDE program (tide compile's tide.json) for method {COMPILED}")
    parser.add_argument("--shuffle-context", type=int, default=None, metavar="SEED",
                        help="show artifacts in a seeded shuffled order (results go to a -shuffled<SEED> folder)")
    parser.add_argument("--max-evidence", type=int, default=None,
                        help=f"the most artifacts a finding may cite (default: the setting's, "
                             f"{per_setting('max_evidence')})")
    add_rule_options(parser)
    add_traces_option(parser)
    parser.add_argument("--scan", action="store_true",
                        help="LM methods scan every artifact first and read the most suspect in full (results go to "
                             "a -scan folder)")
    parser.add_argument("--focus-size", type=int, default=8, help="with --scan: artifacts each round reads in full")
    parser.add_argument("--budgets", type=int, nargs="*", default=list(range(2, 11)))
    parser.add_argument("--pool-sizes", type=int, nargs="*", default=[0, 5, 10, 20, 40, 108])
    parser.add_argument("--backbones", nargs="*", default=None, help="transfer/citations: inference backbones")
    parser.add_argument("--template-sources", nargs="*", default=None, help="transfer: template source backbones")
    parser.add_argument("--out", default=None, help="default: experiments/results/<setting>-<backbone>")
    parser.add_argument("--programs", type=Path, default=ROOT / "programs",
                        help="the programs/<setting>/<backbone>/ tree the template libraries are read from "
                             "(default: the checkout's programs/)")
    parser.add_argument("--floors-only", action="store_true",
                        help="run only the chance floors (no LM call) and rebuild the tables from the LM methods' "
                             "raw rows already in --out; meta-<experiment>.json keeps the command that made them")
    add_lm_options(parser)
    add_cost_options(parser, stops="no instance starts once what was spent plus its estimate would pass the cap; "
                                   "rerun the same command to continue")
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    """The options, checked, with --setting resolved to its Setting (the one lookup of the name)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if (COMPILED in (args.methods or [])) != bool(args.compiled):
        parser.error(f"--compiled PROGRAM and --methods ... {COMPILED} go together")
    args.setting = get_setting(args.setting)
    args.backbones = args.backbones or [args.backbone]
    args.template_sources = args.template_sources or args.backbones
    return args


def main(argv=None) -> int:
    args = parse_args(argv)

    variant = (f"-shuffled{args.shuffle_context}" if args.shuffle_context is not None else "") + (
        "-scan" if args.scan else "")
    out = Path(args.out or ROOT / "experiments" / "results" / f"{args.setting.name}-{args.backbone}{variant}")
    instances = chosen_instances(args)
    print(f"{len(instances)} instances: {', '.join(i.instance_id for i in instances)}", flush=True)
    if args.floors_only:
        for meta_path in out.glob("meta-*.json"):
            made = json.loads(meta_path.read_text()).get("instances")
            if made is not None and made != [i.instance_id for i in instances]:
                raise SystemExit(f"--floors-only: {meta_path} was made on {made}, these options select other "
                                 "instances; pass the options of the command it records")
    options = LMOptions.from_namespace(args)
    lm = lm_from_options(options)  # a hosted backbone is checked with one cheap call first (--no-check skips it)
    names = list(EXPERIMENTS) if args.experiment == "all" else [args.experiment]
    if args.dry_run:
        print_estimates(estimate_experiments(names, args, instances, lm, make_judge(options.judge_spec(args.judge))),
                        names, out)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    if for_runs(args, lm) is not lm:
        print("--runs > 1 at temperature 0 would repeat one sample: using temperature 0.7 for every run")
        lm = for_runs(args, lm)
    judge = make_judge(options.judge_spec(args.judge))
    if args.traces:
        plan = merge_plans(PLANS[n](args, lambda source=None: template_library(args, source)) for n in names)
        programs = [p for backbone in plan.values() for p in backbone.values()]
        tracing.announce(*tracing.estimate_bytes(programs, instances, args.runs),
                         "each experiment's MLflow run (raw runs already in OUT/raw are resumed, not traced again)")
    for name in names:
        started = time.time()
        data = locate(args.setting.name, args.data, args.data_version)
        params = {"split": args.split, "instances": len(instances), "runs": args.runs, **data.params(),
                  "judge": getattr(judge, "label", "none"), **describe_lm(lm)}
        with tracked_run(f"experiment-{name}", setting=args.setting.name, backbone=args.backbone,
                         params=params) as run:
            with tracing.traces(args.traces, tracking=run.enabled, folder=out / "traces"), lm_context(lm):
                metrics = EXPERIMENTS[name](args, instances, out, lm, judge)
            write_meta(out / f"meta-{name}.json", lm, judge, started, {
                "experiment": name, "setting": args.setting.name, "split": args.split, "data": data.record(),
                "runs": args.runs,
                "settings": run_settings(args),
                "instances": [i.instance_id for i in instances],
                "raw_lm_seconds": raw_seconds(out, instances)}, floors_only=args.floors_only)
            run.record(metrics=metrics, files={f: None for f in sorted(out.glob("*.*"))})
    return 0


if __name__ == "__main__":
    sys.exit(main())
