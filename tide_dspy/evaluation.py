"""Run a program over instances, score each one, and write one JSONL row per instance as soon as it is done.

`evaluate` goes in stages: plan (`Plan.of`: which earlier rows stand, which are judged again, what runs), admit (the
window pre-check, then the budget before each instance starts), run (a row per instance), aggregate (`aggregate`)
and write (`write_run`). With workers > 1, instances run concurrently on a thread pool (DSPy LMs are thread-safe);
each row is still written as soon as its instance finishes, in finishing order. Resumable: with resume=True,
instance ids already scored in out_path are skipped, so a crash loses no finished instance. Rows that ended in an
error are rerun, and so are incomplete ones (a round after the first aborted; a judge call failed: that row is judged
again, its findings kept). Before any LM call, an instance whose prompts cannot fit the backbone's window is skipped
with its reason (a row that --resume checks again, for free); with a budget (cost.guard.Budget) no instance starts
once its estimated calls or cost would pass it, and the rows not run are left for --resume. Beside the results go
config.json, summary.json and lm_usage.json, so a run can be read without rerunning it. A resumed run must use the
same program, judge and model as the rows it continues (config.json says which); its instances and LM usage are
added to those of the earlier sessions.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import logging
import os
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import dspy
from pydantic import BaseModel, ConfigDict
from tqdm.auto import tqdm

from tide_dspy import metrics, tracing
from tide_dspy.backbones import lm_context
from tide_dspy.cost.guard import Budget, Guard, Spend
from tide_dspy.cost.prices import Overrides
from tide_dspy.retry import describe_error
from tide_dspy.schemas import Instance
from tide_dspy.util.hashing import sha256_hex
from tide_dspy.util.jsonio import read_json_or_none, write_json

log = logging.getLogger(__name__)

class EvaluationSummary(BaseModel):
    """What `evaluate` returns: the macro-averaged scores (metrics.aggregate) and the run's counts.

    A component that no judge scored is None. `execution` is set when tests ran (an ExecutionJudge); `out_path`
    when rows were written."""

    model_config = ConfigDict(extra="forbid")

    coverage: dict[str, float | None]
    precision: dict[str, float | None]
    f1: dict[str, float | None]
    n_instances: int
    judge: str
    judge_failures: int = 0
    # With --judge-runs N > 1: the mean over instances of the judge's standard deviation over its N runs, per part
    # (coverage, f1) and judged component (metrics.InstanceScore.judge_spread).
    judge_spread: dict | None = None
    method: str
    n_run: int = 0
    n_resumed: int = 0
    n_failed: int = 0
    # Scored, but truncated (a later round aborted) or partly unjudged: --resume reruns or re-judges them.
    n_incomplete: int = 0
    n_rejudged: int = 0
    # Over the backbone's window: not scored (so not in n_instances), each with its reason.
    n_skipped: int = 0
    skipped: dict[str, str] = {}
    # With --max-cost: the budget, what was spent, and whether (and where) the run stopped at it.
    budget: dict | None = None
    findings: int = 0
    execution: dict | None = None
    # With a scanning program: the mean share of gold evidence among each instance's first focus_size suspects.
    scan_recall: float | None = None
    lm_usage: dict = {}
    out_path: str | None = None

    def summary(self, executed: bool) -> dict:
        """The summary.json record (without out_path; `execution` only when tests ran)."""
        return self.model_dump(exclude={"out_path", *(() if executed else ("execution",))})


# What a row must hold to be continued by --resume; a row without one of them is corrupt and its instance reruns.
ROW_KEYS = ("instance_id", "score", "findings")


def row_problem(row: dict) -> str | None:
    """Why a parsed row cannot be continued (a missing key, a score that does not validate), or None."""
    from tide_dspy.metrics.scoring import InstanceScore

    missing = [k for k in ROW_KEYS if k not in row]
    if missing:
        return f"no {', '.join(missing)}"
    if not isinstance(row["findings"], list):
        return "findings is not a list"
    if row.get("error") or row.get("skipped"):
        return None  # an error row reruns anyway; a skipped row has no score (skipped_row)
    try:
        score = InstanceScore.model_validate(row["score"])
    except ValueError as exc:
        return f"its score does not validate ({str(exc).splitlines()[0]})"
    lacking = [f"{part}.{c}" for part in ("coverage", "precision", "f1") for c in metrics.COMPONENTS
               if c not in getattr(score, part)]
    return f"its score lacks {', '.join(lacking)}" if lacking else None


def read_rows(path: str | Path) -> dict[str, dict]:
    """The last row per instance id of a results JSONL (later rows of an id supersede earlier ones). A row cut
    off by a crash, or one that lacks a key the scores need, is reported by file and line and left out, so
    --resume runs its instance again."""
    path = Path(path)
    rows: dict[str, dict] = {}
    if not path.exists():
        return rows
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                # A crash can cut the last line short; everything before it is intact.
                log.warning("%s: line %d is not valid JSON (an interrupted write?); ignoring it", path, n)
                continue
            except RecursionError:
                raise ValueError(f"{path}: line {n} is nested too deeply to be a result row; start over with "
                                 "--fresh or write to another --out") from None
            if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
                raise ValueError(f"{path}: line {n} is not a result row (no instance_id); start over with --fresh "
                                 "or write to another --out")
            problem = row_problem(row)
            if problem is not None:
                log.warning("%s: line %d is a corrupt result row (%s); its instance %s runs again", path, n,
                            problem, row["instance_id"])
                rows.pop(row["instance_id"], None)
                continue
            rows[row["instance_id"]] = row
    return rows


def trim_partial_line(path: Path) -> None:
    """Cut a last line that a crash left without its newline, so the next row starts on a line of its own."""
    if not path.exists() or path.stat().st_size == 0:
        return
    from tide_dspy.util.safe_write import open_existing

    with os.fdopen(open_existing(path), "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        data = f.read()
        keep = data.rfind(b"\n") + 1
        log.warning("%s: the last row was cut off mid-write (%d bytes); dropping it before appending",
                    path, len(data) - keep)
        f.truncate(keep)


def append_row(path: Path | None, row: dict) -> None:
    """One result row, scrubbed of secrets, appended through util.safe_write (O_APPEND, never through a link);
    nothing when the run keeps no results file."""
    from tide_dspy.util.safe_write import append_text
    from tide_dspy.util.secrets import scrub_text

    if path is not None:
        append_text(path, scrub_text(json.dumps(row, ensure_ascii=False)) + "\n")


def program_hash(program) -> str:
    """SHA-256 of a program's full state (instructions, demos, config), without any LM it carries."""
    state = program.dump_state() if hasattr(program, "dump_state") else {"repr": repr(program)}
    for value in state.values():
        if isinstance(value, dict) and "lm" in value:
            value["lm"] = None
    return sha256_hex(json.dumps(state, sort_keys=True, default=str))


def _run_one(program, instance: Instance, judge, on_round, method: str | None = None) -> dict:
    with tracing.scope(instance_id=instance.instance_id, method=method):
        return _run_scoped(program, instance, judge, on_round)


def _run_scoped(program, instance: Instance, judge, on_round) -> dict:
    t0 = time.perf_counter()
    findings, rounds, error, scan = [], [], None, None
    try:
        pred = program(instance, on_round=on_round)
        findings, rounds = list(pred.findings), list(pred.rounds)
        if pred.get("scan") is not None:
            scan = pred.scan.model_dump()
        if rounds and all(r.failed for r in rounds):
            # Nothing the LM said was usable: an error row, so --resume runs the instance again.
            error = f"every round failed; last: {rounds[-1].error}"
    except Exception as exc:  # noqa: BLE001 - one failing instance must not end the run
        error = describe_error(exc)
        log.warning("instance %s failed: %s\n%s", instance.instance_id, error, traceback.format_exc())
    # A failed instance scores as finding nothing: an error never raises a score.
    with tracing.scope(role="judge"):
        score = metrics.score_instance(instance.problems, findings, judge=judge, setting=instance.setting)
    row = dict(
        findings=[f.model_dump() for f in findings],
        rounds=[r.model_dump() for r in rounds],
        score=score.model_dump(),
        seconds=round(time.perf_counter() - t0, 3),
        error=error,
        **({"scan": scan} if scan is not None else {}),
    )
    row["incomplete"] = incomplete_reasons(row) or None
    return row


# ---- incomplete rows, skipped rows, and what --resume does with them ----

def aborted_later_round(row: dict) -> dict | None:
    """The round record of a round after the first that aborted (the instance stopped there), else None."""
    if row.get("error"):
        return None
    return next((r for r in row.get("rounds") or [] if r.get("aborted") and r.get("round", 1) >= 2), None)


def incomplete_reasons(row: dict) -> list[str]:
    """Why a scored row is not the whole result: a round t >= 2 aborted (its findings stop there), or judge calls
    failed (those pairs count 0). [] for a complete row (and for an error row, which is rerun anyway)."""
    reasons = []
    aborted = aborted_later_round(row)
    if aborted is not None:
        reasons.append(f"round {aborted['round']} aborted, so the findings stop after round {aborted['round'] - 1}: "
                       f"{aborted.get('error') or 'no error recorded'}")
    failures = ((row.get("score") or {}).get("judge_failures") or 0) if not row.get("error") else 0
    if failures:
        reasons.append(f"{failures} judge call(s) failed, so those pairs count 0")
    return reasons


def resume_plan(rows: dict[str, dict]) -> tuple[dict[str, dict], dict[str, dict]]:
    """(rows kept as they are, rows to judge again) of an earlier run. Everything else is run again: error rows,
    rows with an aborted later round, and skipped rows (their window check is repeated; it costs nothing)."""
    keep, rejudge = {}, {}
    for instance_id, row in rows.items():
        if row.get("error") or row.get("skipped") or aborted_later_round(row) is not None:
            continue
        if incomplete_reasons(row):
            rejudge[instance_id] = row
        else:
            keep[instance_id] = row
    return keep, rejudge


def rejudged_row(row: dict, instance: Instance, judge) -> dict:
    """The row with its findings judged again (no backbone call): for rows whose judge calls failed."""
    t0 = time.perf_counter()
    with tracing.scope(instance_id=instance.instance_id, role="judge"):
        score = metrics.score_instance(instance.problems, row.get("findings") or [], judge=judge,
                                       setting=instance.setting)
    new = {**row, "score": score.model_dump(), "rejudge_seconds": round(time.perf_counter() - t0, 3)}
    new["incomplete"] = incomplete_reasons(new) or None
    return new


def skipped_row(instance: Instance, method: str, reason: str) -> dict:
    """The row of an instance that was not run because it cannot fit: no score (it is not a 0), its reason."""
    return {"instance_id": instance.instance_id, "method": method, "findings": [], "rounds": [], "score": None,
            "seconds": 0.0, "error": None, "skipped": reason}


def window_skips(guard: Guard, instances: list[Instance]) -> dict[str, str]:
    """instance id -> why it cannot fit the window, for the instances that cannot (before any LM call)."""
    reasons = {i.instance_id: guard.skip_reason(i) for i in instances}
    return {k: v for k, v in reasons.items() if v is not None}


_noted_serial: list[int] = []


def check_workers(workers: int, lm) -> int:
    """`workers`, validated; with more than one on the embedded engine, a note that its calls take turns."""
    from tide_dspy.backbones import serializes_calls

    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"--workers must be a whole number >= 1, got {workers!r}")
    if workers > 1 and serializes_calls(lm) and not _noted_serial:
        _noted_serial.append(workers)  # once per process, not once per tune trial
        print(f"note: --workers {workers} with the embedded llama.cpp backbone: its calls take turns on one model "
              "(one lock per process), so instances overlap only outside the LM; serve the model "
              "(llama.cpp server, vLLM) for concurrent calls", file=sys.stderr)
    return workers


def _work(program, judge, bar, guard: Guard, rejudge: dict[str, dict], method: str | None = None):
    """What is done with one instance: judged again (a row whose judge failed) or run; None when the budget
    does not let it start."""
    def on_round_for(instance_id):
        def on_round(record):
            bar.set_postfix_str(f"{instance_id} round {record.round}: +{record.new} new", refresh=False)
        return on_round

    def work(instance):
        earlier = rejudge.get(instance.instance_id)
        if not guard.admit_instance(instance, judge_only=earlier is not None):
            return None
        try:
            if earlier is not None:
                return rejudged_row(earlier, instance, judge)
            return {"instance_id": instance.instance_id,
                    **_run_one(program, instance, judge, on_round_for(instance.instance_id), method)}
        finally:
            guard.release(instance.instance_id)
    return work


def _run_all(run, todo: list[Instance], workers: int, bar, lm, mark):
    """Yield each instance's row (`run(instance)`, None for one not started) as it finishes; the bar shows
    instances done, ETA and the LM's tokens so far.

    A thread pool of our own rather than DSPy's ParallelExecutor: that one hands back its results only when every
    item is done (a row must be written the moment its instance finishes, so a stopped run keeps it, and the tests
    of --verify-repo run here, in the caller's thread, one instance at a time), and it runs an item again once it
    has taken longer than its straggler timeout (120 s; an instance of T rounds often does), which would bill and
    write that instance twice."""
    from tide_dspy.cost.usage import entries_since, usage_tokens

    def advance():
        tokens_in, tokens_out = usage_tokens(entries_since(lm, mark)) if lm is not None else (None, None)
        bar.set_postfix_str(f"LM tokens in {tokens_in or 0} out {tokens_out or 0}", refresh=False)
        bar.update(1)

    if workers == 1:
        for instance in todo:
            row = run(instance)
            advance()
            yield row
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tide-eval") as pool:
        # Each task gets its own copy of the caller's context, so dspy.context (the LM, the adapter) holds there too.
        futures = [pool.submit(contextvars.copy_context().run, run, instance) for instance in todo]
        try:
            for future in as_completed(futures):
                row = future.result()
                advance()
                yield row
        finally:
            for future in futures:
                future.cancel()


RUN_FILES = ("results.jsonl", "config.json", "summary.json", "lm_usage.json")  # what evaluate writes beside rows


def out_lock(folder: Path):
    """The exclusive lock on a results folder (util.safe_write.OutLock): a second run into it is refused, naming
    the pid that holds it."""
    from tide_dspy.util.safe_write import OutLock

    return OutLock(folder, RUN_FILES)


def holds_out_lock(run):
    """`run` (evaluate) with the lock on its `out_path`'s folder held while it runs."""
    @functools.wraps(run)
    def locked(*args, out_path: str | Path | None = None, **kwargs):
        if out_path is None:
            return run(*args, out_path=None, **kwargs)
        with out_lock(Path(out_path).parent):
            return run(*args, out_path=out_path, **kwargs)
    return locked


@dataclass
class Plan:
    """What one evaluation does (its first stage): the rows an earlier session left that stand (`rows`, then every
    row of this session too), those it judges again, the instances it runs, and those over the window."""

    instances: list[Instance]
    earlier: dict[str, dict] = field(default_factory=dict)
    rows: dict[str, dict] = field(default_factory=dict)
    rejudge: dict[str, dict] = field(default_factory=dict)
    todo: list[Instance] = field(default_factory=list)
    skips: dict[str, str] = field(default_factory=dict)
    continues: bool = False  # earlier rows stand or are judged again: the run continues theirs (config.json)

    @classmethod
    def of(cls, instances: list[Instance], out_path: Path | None, resume: bool) -> Plan:
        """Plan: the earlier rows of `out_path` read (resume) or discarded, and what is left to do."""
        plan = cls(list(instances))
        if out_path is not None:
            out_path.parent.mkdir(parents=True, exist_ok=True)
            if resume:
                trim_partial_line(out_path)
                plan.earlier = read_rows(out_path)
                kept, plan.rejudge = resume_plan(plan.earlier)
                plan.continues = bool(kept or plan.rejudge)
                wanted = {i.instance_id for i in instances}
                plan.rows = {k: r for k, r in kept.items() if k in wanted}
            elif out_path.exists():
                out_path.unlink()
        plan.todo = [i for i in instances if i.instance_id not in plan.rows]
        return plan

    def admit(self, guard: Guard, method: str, out_path: Path | None) -> list[Instance]:
        """Admit: the instances whose prompts fit the backbone's window (the others get a skipped row, written);
        the budget admits each of those as it starts (`_work`)."""
        by_id = {i.instance_id: i for i in self.todo}
        self.skips = window_skips(guard, [i for i in self.todo if i.instance_id not in self.rejudge])
        for instance_id, reason in self.skips.items():
            log.warning("instance %s skipped, %s", instance_id, reason)
            self.rows[instance_id] = skipped_row(by_id[instance_id], method, reason)
            append_row(out_path, self.rows[instance_id])
        return [i for i in self.todo if i.instance_id not in self.skips]

    def stopped(self, guard: Guard) -> None:
        """After a budget stop, the row an earlier session left for an instance not run (incomplete, failed)
        still stands."""
        log.warning("%s; %d instance(s) not run: rerun with --resume (and a budget) to continue", guard.stopped,
                    len(guard.not_run))
        for instance_id in guard.not_run:
            if instance_id in self.earlier:
                self.rows.setdefault(instance_id, self.earlier[instance_id])


@holds_out_lock
def evaluate(
    program,
    instances: list[Instance],
    *,
    judge=None,
    out_path: str | Path | None = None,
    resume: bool = True,
    progress: bool = True,
    lm: dspy.BaseLM | None = None,
    method: str | None = None,
    config: dict | None = None,
    workers: int = 1,
    execute=None,
    budget: Budget = Budget(),
    overrides: Overrides = Overrides(),
    spend: Spend | None = None,
) -> EvaluationSummary:
    """Score `program` on `instances`, `workers` at a time: plan (Plan.of: what earlier rows stand), admit (the
    window pre-check, and the budget before each instance), run (a row per instance, written as it finishes),
    aggregate (`aggregate`), write (`write_run`). Returns the aggregate scores plus counts (n_run, n_resumed,
    n_failed, n_incomplete, n_skipped).

    `execute(instance, findings)` (e.g. metrics.execution.ExecutionJudge) also runs the instance's tests against
    the findings' patches; its dict goes into the row as "execution" and the total into result.execution.
    `budget` caps the LM calls and USD (`spend`: a counter shared with other runs under the same budget);
    `overrides`: prices, and a window that overrides the backbone's."""
    from tide_dspy.cost.usage import usage_mark
    from tide_dspy.programs import method_of

    judge = metrics.make_judge(judge) if isinstance(judge, str) or judge is None else judge
    method = method or method_of(program)
    out_path = Path(out_path) if out_path else None
    plan = Plan.of(instances, out_path, resume)
    run_lm = lm or dspy.settings.lm
    judge_lm = getattr(judge, "lm", None)
    marks = {"backbone": usage_mark(run_lm), "judge": usage_mark(judge_lm)}
    guard = Guard(budget, overrides.targets({"backbone": run_lm, "judge": judge_lm}), program, spend)
    earlier_usage = None
    if out_path is not None:  # the rows continue an earlier session's only under the same program, judge and model
        run_conf = run_config(program, method, judge, run_lm, instances, config)
        if plan.continues:
            run_conf = continued_config(out_path.parent / "config.json", run_conf)
            earlier_usage = read_json_or_none(out_path.parent / "lm_usage.json")
        write_json(out_path.parent / "config.json", run_conf)

    workers = check_workers(workers, run_lm)
    bar = tqdm(total=len(plan.todo), desc=f"evaluate {method}", unit="inst", disable=not progress)
    # The adapter that parses best on the backbone is scoped here (never configured globally), judge calls included;
    # the window pre-check renders the prompts the adapter in this context would send.
    with lm_context(run_lm) if run_lm is not None else contextlib.nullcontext():
        runnable = plan.admit(guard, method, out_path)
        bar.total = len(runnable)
        by_id = {i.instance_id: i for i in runnable}
        for row in _run_all(_work(program, judge, bar, guard, plan.rejudge, method), runnable, workers, bar, run_lm,
                            marks["backbone"]):
            if row is None:
                continue
            row = {"instance_id": row.pop("instance_id"), "method": method, **row}
            if execute is not None:
                # Tests run in this thread, one instance at a time, as each instance's findings arrive.
                bar.set_postfix_str(f"{row['instance_id']}: running its tests")
                row["execution"] = execute(by_id[row["instance_id"]], row["findings"])
            plan.rows[row["instance_id"]] = row
            append_row(out_path, row)
    bar.close()
    if guard.stopped:
        plan.stopped(guard)
    result = aggregate(plan, guard, method, execute is not None, {"backbone": (run_lm, marks["backbone"]),
                                                                  "judge": (judge_lm, marks["judge"])})
    if out_path is not None:
        write_run(out_path, result, earlier_usage, instances, config, execute is not None)
    return result


def aggregate(plan: Plan, guard: Guard, method: str, executed: bool, lms: dict) -> EvaluationSummary:
    """The summary of a planned and run evaluation: macro scores over the scored rows and the counts; `lms`: role
    -> (LM, usage mark)."""
    from tide_dspy.cost.usage import lm_usage

    rows, instances = plan.rows, plan.instances
    scored = [rows[i.instance_id] for i in instances
              if i.instance_id in rows and not rows[i.instance_id].get("skipped")]
    execution = None
    if executed:
        from tide_dspy.metrics.execution import execution_rate

        execution = execution_rate([rows[i.instance_id] for i in instances if i.instance_id in rows])
    recalls = [r["scan"]["recall_at_focus"] for r in rows.values()
               if (r.get("scan") or {}).get("recall_at_focus") is not None]
    not_run, rejudge = set(guard.not_run), plan.rejudge
    return EvaluationSummary(
        **metrics.aggregate([r["score"] for r in scored]),
        method=method,
        n_run=sum(1 for i in plan.todo if i.instance_id not in not_run and i.instance_id not in rejudge
                  and i.instance_id not in plan.skips),
        n_resumed=len(instances) - len(plan.todo),
        n_failed=sum(1 for r in rows.values() if r.get("error")),
        n_incomplete=sum(1 for r in scored if incomplete_reasons(r)),
        n_rejudged=sum(1 for i in rejudge if i in rows and i not in not_run),
        n_skipped=sum(1 for r in rows.values() if r.get("skipped")),
        skipped={k: r["skipped"] for k, r in rows.items() if r.get("skipped")},
        budget=guard.summary(),
        findings=sum(len(r["findings"]) for r in rows.values()),
        execution=execution,
        scan_recall=round(sum(recalls) / len(recalls), 4) if recalls else None,
        lm_usage={role: lm_usage(lm, mark) for role, (lm, mark) in lms.items()},
    )


def write_run(out_path: Path, result: EvaluationSummary, earlier_usage: dict | None, instances: list[Instance],
              config: dict | None, executed: bool) -> None:
    """Beside the rows: lm_usage.json (this session's added to the earlier ones') and summary.json."""
    write_json(out_path.parent / "lm_usage.json", add_usage(earlier_usage, result.lm_usage))
    write_json(out_path.parent / "summary.json",
               {**result.summary(executed=executed), "instances": [i.instance_id for i in instances],
                **({"data": config["data"]} if config and "data" in config else {})})
    result.out_path = str(out_path)


def run_config(program, method: str, judge, lm, instances: list[Instance], extra: dict | None = None) -> dict:
    from tide_dspy.backbones import describe_lm

    config = program.config() if hasattr(program, "config") else {}
    templates = config.pop("templates", [])
    config.pop("demos", None)
    return {
        "method": method,
        "program": {
            **config,
            "template_ids": [t["id"] for t in templates],
            "n_demos": len(getattr(program, "demos", [])),
        },
        "program_hash": program_hash(program),
        "judge": getattr(judge, "label", "none") if judge is not None else "none",
        "lm": describe_lm(lm) if lm is not None else None,
        "instances": [i.instance_id for i in instances],
        **(extra or {}),
    }


# Fields of config.json that must match for rows to be continued; instances may grow, other fields are informative.
RESUME_KEYS = ("method", "program", "program_hash", "judge")


def continued_config(path: Path, now: dict) -> dict:
    """The config of a resumed run: checked against the earlier one, with the instances of both.

    Without a complete config.json nothing says which run made the rows, so they are not continued."""
    before = read_json_or_none(path)
    missing = [k for k in RESUME_KEYS if k not in before] if isinstance(before, dict) else []
    if not isinstance(before, dict) or missing:
        state = ("is missing" if not path.exists() else "is cut off or not valid JSON" if before is None
                 else f"lacks {', '.join(missing)} (cut off, or written by an older tide-dspy)")
        raise ValueError(f"{path} {state}, so nothing says which program and settings made the rows beside it; "
                         "they cannot be resumed: start over (--fresh / resume=False) or write to another --out")
    changed = [k for k in RESUME_KEYS if before.get(k) != now.get(k)]
    model_before, model_now = ((c.get("lm") or {}).get("model") for c in (before, now))
    if model_before != model_now:
        changed.append(f"lm.model ({model_before} -> {model_now})")
    if changed:
        raise ValueError(
            f"{path}: the rows here came from another run configuration (differs in {', '.join(changed)}); "
            "resume with the same settings, or write to another output folder, or start over "
            "(resume=False / --fresh)"
        )
    return {**now, "instances": list(dict.fromkeys([*before.get("instances", []), *now["instances"]]))}


def add_usage(before: dict | None, now: dict) -> dict:
    """LM usage of the earlier sessions of a resumed run plus this session's, per role (backbone, judge)."""
    total = {}
    for role, usage in now.items():
        old = (before or {}).get(role)
        if usage is None or old is None or old.get("model") != usage.get("model"):
            total[role] = usage if usage is not None else old
            continue
        total[role] = {
            "model": usage["model"],
            **{
                k: None
                if old.get(k) is None and usage.get(k) is None
                else round((old.get(k) or 0) + (usage.get(k) or 0), 6)
                for k in ("calls", "prompt_tokens", "completion_tokens", "cost_usd")
            },
        }
    return total


def format_table(result: EvaluationSummary) -> str:
    """The coverage / F1 table of one evaluation, in percent (Markdown)."""
    lines = ["| component | coverage | precision | F1 |", "|---|---|---|---|"]
    for c in metrics.COMPONENTS:
        cells = [getattr(result, part).get(c) for part in ("coverage", "precision", "f1")]
        lines.append(f"| {c} | " + " | ".join("-" if v is None else f"{100 * v:.2f}" for v in cells) + " |")
    lines.append(f"\n{result.n_instances} instances, judge: {result.judge}, "
                 f"failed: {result.n_failed}, resumed: {result.n_resumed}")
    if result.judge_spread:
        lines.append("judge spread (SD over its runs, mean over instances): " + ", ".join(
            f"{c} {part} {100 * result.judge_spread[part][c]:.2f}" for c in metrics.scoring.JUDGED_COMPONENTS
            for part in ("coverage", "f1")))
    lines += run_notes(result)
    return "\n".join(lines)


def run_notes(result: EvaluationSummary) -> list[str]:
    """The lines that say what the scores leave out: incomplete rows, skipped instances, a budget stop."""
    notes = []
    if result.n_incomplete or result.n_rejudged:
        notes.append(f"incomplete: {result.n_incomplete} (a later round aborted or a judge call failed; "
                     f"--resume reruns them){f', re-judged: {result.n_rejudged}' if result.n_rejudged else ''}")
    if result.n_skipped:
        notes.append(f"skipped: {result.n_skipped} (over the window), not scored: " + "; ".join(
            f"{i}: {why}" for i, why in result.skipped.items()))
    budget = result.budget or {}
    if budget.get("stopped"):
        notes.append(f"{budget['stopped']}; {len(budget.get('not_run') or [])} instance(s) not run: rerun with "
                     "--resume to continue")
    elif budget:
        notes.append(f"spent {budget['calls']} LM calls and ${budget['spent']:.4f} of "
                     f"{Budget(budget['max_cost'], budget['max_calls']).describe()}")
    return notes
