"""`tide discover`: run TIDE on a user's repository or workspace folder.

The run functions take the LM as an argument (the CLI builds it with `get_lm`; tests pass a DummyLM). Each
context that exceeds the model's window is split into windows of related artifacts; each window gets its own TIDE
run and the findings are merged with the same de-duplication TIDE uses between rounds.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date
from pathlib import Path, PurePosixPath

from tide_dspy.backbones import lm_context
from tide_dspy.cost.estimate import Estimate, Estimator
from tide_dspy.cost.guard import Budget, Guard
from tide_dspy.cost.prices import Overrides, Target
from tide_dspy.data.candidates import list_python_files, parse_candidates
from tide_dspy.data.safe_files import FileListing, matches_any
from tide_dspy.discovery import DiscoveryProgram, DiscoveryState
from tide_dspy.domains import REPOSITORY, WORKSPACE, Setting, get_setting
from tide_dspy.product import library, windows
from tide_dspy.product.ingest import ingest_workspace
from tide_dspy.product.patches import DOES_NOT_APPLY, PatchChecker
from tide_dspy.product.result import DiscoverResult, WindowRound
from tide_dspy.product.verify import DEFAULT_RUN_TIMEOUT, DEFAULT_TOTAL_TIMEOUT, NOT_RUN, PatchVerification, Verifier
from tide_dspy.programs import build_program, load_program, program_dir
from tide_dspy.sandbox import SandboxOptions
from tide_dspy.scan import ScanRecord
from tide_dspy.schemas import Artifact, Instance, RoundRecord
from tide_dspy.shipped import PROGRAMS_DIR
from tide_dspy.util.git import git_toplevel, head_sha, resolve_commit, run_git
from tide_dspy.util.tokens import count_tokens

Progress = Callable[[str], None]


# ---- which program ----

def shipped_file(setting: str, backbone: str, name: str) -> Path | None:
    """programs/<setting>/<backbone>/<name> shipped with tide-dspy (never one in the working directory)."""
    if PROGRAMS_DIR is None:
        return None
    path = program_dir(setting, backbone, root=PROGRAMS_DIR) / name
    return path if path.is_file() else None


def choose_program(setting: Setting, backbone: str, program: str | Path | None = None,
                   templates: str | Path | None = None, rounds: int | None = None,
                   per_round: int | None = None) -> tuple[DiscoveryProgram, str]:
    """(program, a sentence saying which program was used and why)."""
    from tide_dspy.templates import TemplateLibrary

    shipped = shipped_file(setting.name, backbone, "tide.json")
    if program is not None or shipped is not None:
        loaded = load_program(program if program is not None else shipped)
        if loaded.setting is not setting:
            raise ValueError(f"{program or shipped}: this program was compiled for the {loaded.setting.name} setting, "
                             f"not {setting.name}; pass a {setting.name} program")
        source = f"program {program}" if program is not None else f"shipped program {shipped} (compiled for {backbone})"
        if templates is not None:
            loaded.templates = list(TemplateLibrary.load(templates).templates)
            source += f", with templates from {templates}"
    else:
        library_path = templates if templates is not None else shipped_file(setting.name, backbone, "templates.json")
        if library_path is not None:
            loaded = build_program("tide", setting, templates=library_path)
            origin = "" if templates is not None else f"shipped for {backbone}, "
            source = f"plain TIDE module with {len(loaded.templates)} template(s) ({origin}{library_path})"
        else:
            loaded = build_program("iter", setting)
            source = (f"plain TIDE module without templates: no compiled program or template library is shipped "
                      f"for backbone {backbone!r} (pass --program or --templates)")
    for name, value in (("max_rounds", rounds), ("per_round", per_round)):
        if value is not None:
            if value < 1:
                raise ValueError(
                    f"--{'rounds' if name == 'max_rounds' else 'per-round'} must be at least 1, got {value}"
                )
            setattr(loaded, name, value)
    return loaded, source


def shipped_program(setting: str, backbone) -> DiscoveryProgram:
    """The program `tide discover` runs for `backbone` (a name, or an LM that `get_lm` built) when no program or
    library is named: the compiled program shipped for it, else the plain TIDE module with its shipped template
    library, else the plain module without templates (choose_program). Shipped files are found beside the installed
    package, never in the working directory. `program.tide_source` says which it is and why."""
    name = backbone if isinstance(backbone, str) else getattr(backbone, "tide_backbone", None)
    if not name:
        raise ValueError("shipped_program needs a backbone name (e.g. 'local' or 'gpt-5-mini') or an LM built by "
                         "tide_dspy.get_lm")
    program, source = choose_program(get_setting(setting), name)
    program.tide_source = source
    return program


def describe(lm) -> dict:
    from tide_dspy.backbones import describe_lm

    return describe_lm(lm)


# ---- the discovery loop over windows ----

def _step_line(window: int, n_windows: int, step: str, counts: str, calls: RoundRecord | ScanRecord) -> str:
    """`[window w/n, step] counts, N LM call(s), P prompt + O output tokens`: what a round's and a scan's lines
    share."""
    where = f"window {window}/{n_windows}, " if n_windows > 1 else ""
    tokens = ("" if calls.input_tokens is None
              else f", {calls.input_tokens} prompt + {calls.output_tokens or 0} output tokens")
    return f"[{where}{step}] {counts}, {calls.lm_calls} LM call(s){tokens}"


def progress_line(window: int, n_windows: int, r: RoundRecord) -> str:
    failed = f", FAILED ({r.error})" if r.failed else ""
    head = _step_line(window, n_windows, f"round {r.round}", f"{r.new} new, {r.rediscovered} re-found", r)
    return f"{head}, {r.seconds:.1f} s{failed}"


def scan_line(window: int, n_windows: int, scan: ScanRecord, shown: int = 3) -> str:
    failed = f", {scan.failures} FAILED" if scan.failures else ""
    top = ", ".join(f"{s.artifact_id} ({s.score:.2f})" for s in scan.most_suspect(shown))
    head = _step_line(window, n_windows, "scan", f"rated {len(scan.suspects)} artifacts", scan)
    return f"{head}, {scan.seconds or 0:.1f} s{failed}; most suspect: {top}"


def discover_in_windows(program: DiscoveryProgram, instance: Instance, parts: list[list[Artifact]], lm,
                        progress: Progress, guard: Guard) -> tuple[list, list[WindowRound], list[ScanRecord]]:
    """Each window's rounds in turn, the findings merged; a window starts only within the budget (`guard`)."""
    state, rounds, scans = DiscoveryState(), [], []
    for w, artifacts in enumerate(parts, 1):
        window_instance = instance.model_copy(update={"artifacts": artifacts})
        key = f"window {w} of {len(parts)}"
        if not guard.admit(key, guard.needed(window_instance)):
            progress(f"{guard.stopped}; windows {w}..{len(parts)} not run")
            break

        def on_round(record: RoundRecord, w=w) -> None:
            rounds.append(WindowRound(w, record))
            progress(progress_line(w, len(parts), record))

        def on_scan(record: ScanRecord, w=w) -> None:
            scans.append(record)
            progress(scan_line(w, len(parts), record))

        try:
            with lm_context(lm):
                prediction = program(case=window_instance, on_round=on_round,
                                     **({"on_scan": on_scan, "on_progress": progress} if program.scanner is not None
                                        else {}))
        finally:
            guard.release(key)
        state, _, _ = state.extend(list(prediction.findings), program.dedup_threshold)
    return list(state.findings), rounds, scans


def plan_windows(setting: Setting, instance: Instance, program: DiscoveryProgram, target: Target,
                 unit_of: Callable[[Artifact], tuple[str, str]], progress: Progress) -> list[list[Artifact]]:
    """One window when the round's context fits the backbone's window (cost.prices.Target), else windows of related
    files. A scanning program's round shows only its focus in full and every other artifact as one line, so it needs
    windows only when that does not fit."""
    size, origin = target.planning_window()
    fixed = program.guidance_text() + setting.static_text(instance)
    budget = windows.window_budget(size, fixed, target.output)
    units = windows.make_units(instance.artifacts, setting.render_artifact, unit_of)
    total = sum(u.tokens for u in units)
    if program.scanner is not None:
        view = program.view(instance)
        compact = sum(count_tokens(setting.render_compact(a, h)) + 1 for a, h in zip(view.artifacts, view.handles))
        largest = sorted((count_tokens(setting.render_artifact(a, h)) for a, h in zip(view.artifacts, view.handles)),
                         reverse=True)[:program.focus_size]
        if compact + sum(largest) <= budget:
            progress(f"scan: each of the {len(view.artifacts)} artifacts is rated on its own; each round reads the "
                     f"{program.focus_size} most suspect unfound ones in full and the rest as one line each")
            return [list(instance.artifacts)]
    parts = windows.split_windows(instance.artifacts, units, budget)
    if len(parts) > 1:
        progress(f"context of about {total} tokens exceeds the {budget} available in a {size}-token window "
                 f"({origin}): split into {len(parts)} windows of related files")
    return parts


def plan_line(setting: Setting, instance: Instance, program: DiscoveryProgram, parts: list[list[Artifact]]) -> str:
    """Before any LM call: how many calls the windows take at most, and about how many prompt tokens they read
    (each round re-reads its window and what was already found grows; the estimate counts the window only)."""
    fixed = count_tokens(program.guidance_text() + setting.static_text(instance))
    per_window = [fixed + sum(count_tokens(setting.render_artifact(a)) for a in part) for part in parts]
    rounds = program.max_rounds
    scan_calls = sum(len(part) for part in parts) if program.scanner is not None else 0
    calls = len(parts) * rounds + scan_calls
    scan = f" and {scan_calls} scan call(s)" if scan_calls else ""
    return (f"plan: {len(parts)} window(s) x up to {rounds} round(s){scan} = at most {calls} LM call(s), reading "
            f"about {sum(per_window) * rounds:,} prompt tokens (estimated) before any answer")


@dataclass
class Discovery:
    """What one discover run found, before the setting's own checks: the program used and why, its windows,
    findings and round records."""

    program: DiscoveryProgram
    source: str
    windows: int
    findings: list
    rounds: list[WindowRound]
    scans: list[ScanRecord]
    notes: list[str]


def run_discovery(instance: Instance, *, lm, backbone: str, program: str | Path | None, templates: str | Path | None,
                  rounds: int | None, per_round: int | None, unit_of: Callable[[Artifact], tuple[str, str]],
                  progress: Progress, describe_input: str = "", scan: int | None = None,
                  budget: Budget = Budget(), overrides: Overrides = Overrides()) -> Discovery:
    """Choose the program for the instance's setting, split the context into windows and run it on each, with the
    adapter that parses best on `lm` (backbones.lm_context) scoped around the calls. A window starts only within
    `budget`; `overrides` states the price and the window in place of the cost map's."""
    setting = get_setting(instance.setting)
    tide, source = choose_program(setting, backbone, program, templates, rounds, per_round)
    if scan is not None:
        tide.use_scan(scan)
        source += f", scanning first (focus {scan})"
    progress(f"{describe_input}using {source}")
    from tide_dspy.backbones import sized_as

    guard = Guard(budget, overrides.targets({"backbone": lm}, like={"backbone": sized_as(lm, backbone)}), tide)
    parts = plan_windows(setting, instance, tide, guard.targets["backbone"], unit_of, progress)
    progress(plan_line(setting, instance, tide, parts))
    findings, records, scans = discover_in_windows(tide, instance, parts, lm, progress, guard)
    return Discovery(tide, source, len(parts), findings, records, scans, [guard.stopped] if guard.stopped else [])


def estimate_discovery(instance: Instance, *, lm, backbone: str, program: str | Path | None,
                       templates: str | Path | None, rounds: int | None, per_round: int | None,
                       unit_of: Callable[[Artifact], tuple[str, str]], scan: int | None = None,
                       overrides: Overrides = Overrides(), progress: Progress = print):
    """What `run_discovery` would send and cost (`tide discover --dry-run`): the same program and windows, each
    window's scan and rounds rendered and counted (tide_dspy.cost.estimate), no model called."""
    from tide_dspy.backbones import adapter_for, sized_as

    setting = get_setting(instance.setting)
    tide, source = choose_program(setting, backbone, program, templates, rounds, per_round)
    if scan is not None:
        tide.use_scan(scan)
    progress(f"using {source}")
    target = overrides.targets({"backbone": lm}, like={"backbone": sized_as(lm, backbone)})["backbone"]
    parts = plan_windows(setting, instance, tide, target, unit_of, progress)
    estimator = Estimator.for_targets({"backbone": target}, adapter=adapter_for(lm))
    estimate = Estimate.for_targets({"backbone": target})
    estimate.instances = 1
    for w, artifacts in enumerate(parts, 1):
        label = f"window {w}/{len(parts)}" if len(parts) > 1 else "discover"
        estimate.add(label, estimator.program_calls(tide, instance.model_copy(update={"artifacts": artifacts})))
    return estimate


def finish(result: DiscoverResult, started: float, progress: Progress) -> DiscoverResult:
    result.seconds = time.perf_counter() - started
    progress(f"done: {result.summary_line()}")
    return result


# ---- repository ----

def changed_since(root: Path, ref: str) -> set[str]:
    """Paths (relative to root) changed in the working tree since `ref`, plus untracked files."""
    if git_toplevel(root) is None:
        raise ValueError(f"--since needs a git repository, and {root} is not inside one; use --include instead")
    # The ref is user text: resolved as a commit, never read as an option, and only its sha reaches git diff.
    sha = resolve_commit(root, ref)
    if sha is None:
        raise ValueError(f"--since {ref}: not a commit in {root}; pass a branch, tag or commit "
                         "(e.g. --since main or --since HEAD~3)")
    diff = run_git(["diff", "--name-only", "--relative", "--end-of-options", sha, "--"], root)
    if diff.returncode != 0:
        raise ValueError(f"--since {ref}: git diff failed in {root}: {diff.stderr.strip()}")
    untracked = run_git(["ls-files", "--others", "--exclude-standard", "--"], root)
    return set(diff.stdout.split()) | set(untracked.stdout.split())


def select_files(root: Path, include: Iterable[str] = (), exclude: Iterable[str] = (),
                 since: str | None = None) -> FileListing:
    """The .py files to read after --include/--exclude/--since, and the selected ones left out as unsafe."""
    listing = list_python_files(root)
    include, exclude = list(include), list(exclude)
    changed = changed_since(root, since) if since else None

    def keep(path: str) -> bool:
        return ((changed is None or path in changed) and (not include or matches_any(path, include))
                and not matches_any(path, exclude))

    return FileListing([f for f in listing.files if keep(f)], [s for s in listing.skipped if keep(s["path"])])


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def parse_reporting_skips(root: Path, files: list[str]) -> tuple[list[Artifact], list[dict[str, str]]]:
    """Candidates of `files`, plus the files the parser skipped ({path, reason}), from its warnings."""
    parser_log = logging.getLogger(parse_candidates.__module__)
    collect = _Collect()
    parser_log.addHandler(collect)
    try:
        artifacts = parse_candidates(root, files)
    finally:
        parser_log.removeHandler(collect)
    skipped = []
    for message in collect.messages:
        path = next((f for f in files if message.startswith(f)), None)
        if path is not None:
            skipped.append({"path": path, "reason": message[len(path):].lstrip(" :")})
    return artifacts, skipped


def head_commit(root: Path) -> str | None:
    return head_sha(root, dirty_mark=False)


def start_verifier(root: Path, command: str, run_timeout: float, total_timeout: float,
                   progress: Progress, sandbox: SandboxOptions = SandboxOptions()) -> Verifier:
    verifier = Verifier(root, command, run_timeout=run_timeout, total_timeout=total_timeout, sandbox=sandbox)
    try:
        for rel in verifier.left_out:
            progress(f"verify: left {rel} out of the copy (a link that points outside {root})")
        where = "without a sandbox" if sandbox.unsandboxed else "in a bubblewrap sandbox"
        progress(f"verify: running {command!r} on an unpatched copy of {root} {where} (baseline)")
        progress(f"verify: baseline {verifier.run_baseline().describe()}")
    except BaseException:
        verifier.close()
        raise
    return verifier


def verify_findings(result: DiscoverResult, verifier: Verifier, progress: Progress) -> None:
    """Run the tests with each applying patch, record the outcomes, and order the findings by them."""
    for n, (f, check) in enumerate(zip(result.findings, result.patch_checks), 1):
        if check is None or not check.applies:
            result.verifications.append(PatchVerification(NOT_RUN, reason=check.status if check else "no patch"))
            continue
        evidence = [a.payload["path"] for a in map(result.artifact, f.evidence) if a is not None]
        v = verifier.verify(f.patch, evidence)
        result.verifications.append(v)
        progress(f"verify: finding {n}: {v.label}" + (f" ({v.seconds:.1f} s)" if v.status != NOT_RUN else ""))
    baseline = verifier.baseline
    result.verify = {"command": verifier.command, "argv": baseline.argv, "left_out": verifier.left_out,
                     "baseline": {"returncode": baseline.returncode, "seconds": baseline.seconds,
                                  "outcomes": baseline.outcomes, "summary": baseline.describe()}}
    result.order_by_verification()


def repository_unit(a: Artifact) -> tuple[str, str]:
    """A function's window unit: its file, grouped with the files of its folder."""
    return a.payload["path"], str(PurePosixPath(a.payload["path"]).parent)


def repository_instance(path: str | Path, include: Iterable[str] = (), exclude: Iterable[str] = (),
                        since: str | None = None, progress: Progress = print) -> tuple[Instance, list[dict]]:
    """The candidate functions of a source tree as an instance, and the files left out ({path, reason})."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise FileNotFoundError(f"{path}: not a directory; pass the root of a Python source tree")
    selected = select_files(root, include, exclude, since)
    files = selected.files
    for s in selected.skipped:
        progress(f"skipped {s['path']}: {s['reason']}")
    if not files:
        raise ValueError(f"{root}: no Python files left after --include/--exclude/--since"
                         + (f" ({len(selected.skipped)} left out as unsafe to read)" if selected.skipped else ""))
    artifacts, unparsed = parse_reporting_skips(root, files)
    skipped = selected.skipped + unparsed
    for s in unparsed:
        progress(f"skipped {s['path']}: {s['reason']}")
    if not artifacts:
        raise ValueError(f"{root}: no functions found in the {len(files)} selected Python file(s)")
    instance = Instance(instance_id=f"discover-{root.name}", setting=REPOSITORY.name, repo=root.name,
                        anchor_commit=head_commit(root) if git_toplevel(root) else None,
                        artifacts=artifacts, meta={"root": str(root), "files": len(files)})
    return instance, skipped


def discover_repository(path: str | Path, *, lm, backbone: str = "local", include: Iterable[str] = (),
                        exclude: Iterable[str] = (), since: str | None = None, program: str | Path | None = None,
                        templates: str | Path | None = None, rounds: int | None = None, per_round: int | None = None,
                        budget: Budget = Budget(), overrides: Overrides = Overrides(), verify: str | None = None,
                        verify_timeout: float = DEFAULT_RUN_TIMEOUT, verify_total: float = DEFAULT_TOTAL_TIMEOUT,
                        verify_sandbox: SandboxOptions = SandboxOptions(), scan: int | None = None,
                        progress: Progress = print) -> DiscoverResult:
    """`verify`: a test command run on a copy of the tree, unpatched and then with each patch that applies
    (tide_dspy.product.verify), inside the sandbox `verify_sandbox` describes. It executes the project's code
    and the model's patches, so it runs only when given. `scan`: rate every
    function on its own first and let each round read this many of the most suspect in full (see tide_dspy.scan)."""
    started = time.perf_counter()
    instance, skipped = repository_instance(path, include, exclude, since, progress)
    root, artifacts = Path(instance.meta["root"]), instance.artifacts
    with contextlib.ExitStack() as stack:
        verifier = (stack.enter_context(start_verifier(root, verify, verify_timeout, verify_total, progress,
                                                       verify_sandbox))
                    if verify is not None else None)
        run = run_discovery(instance, lm=lm, backbone=backbone, program=program, templates=templates, rounds=rounds,
                            per_round=per_round, budget=budget, overrides=overrides, unit_of=repository_unit,
                            progress=progress, scan=scan,
                            describe_input=f"{root}: {len(artifacts)} candidate functions in "
                                           f"{instance.meta['files']} files; ")
        checker = PatchChecker(root)
        checks = [checker.check(f.patch) for f in run.findings]
        for f, check in zip(run.findings, checks):
            if check.status == DOES_NOT_APPLY:
                f.flags.append("patch_does_not_apply")
        result = DiscoverResult(setting=REPOSITORY.name, target=str(root), instance=instance, findings=run.findings,
                                program_source=run.source, templates=list(run.program.templates), patch_checks=checks,
                                rounds=run.rounds, scans=run.scans, windows=run.windows, skipped=skipped,
                                notes=run.notes, backbone=describe(lm))
        if verifier is not None:
            verify_findings(result, verifier, progress)
    return finish(result, started, progress)


# ---- workspace ----

def workspace_unit(sources: dict[str, str]) -> Callable[[Artifact], tuple[str, str]]:
    """An item's window unit: the item and the file it came from, grouped with the files of its folder."""
    return lambda a: (f"{a.id} ({sources[a.id]})", str(PurePosixPath(sources[a.id]).parent))


def workspace_instance(folder: str | Path, profile: str | Path | None = None, actions: str | Path | None = None,
                       exclude: Iterable[str] = (), progress: Progress = print):
    """(the workspace folder as an instance, what was ingested, the notes on defaults and fallbacks)."""
    root = Path(folder).resolve()
    ingested = ingest_workspace(root, exclude=exclude, progress=progress)
    counts = ingested.counts()
    progress(f"{root}: read {len(ingested.artifacts)} items ({counts.get('email', 0)} emails, "
             f"{counts.get('calendar', 0)} calendar entries, {counts.get('document', 0)} documents); "
             f"{len(ingested.skipped)} file(s) skipped, {len(ingested.ignored)} of other types ignored")
    for s in ingested.skipped:
        progress(f"skipped {s.path}: {s.reason}")
    if not ingested.artifacts:
        raise ValueError(f"{root}: no readable .eml, .mbox, .ics, .md, .txt or .csv file "
                         f"({len(ingested.skipped)} skipped as unreadable)")
    notes = [f"{f.path}: kept, {f.reason}" for f in ingested.fallbacks]
    if actions is None:
        action_list = library.default_actions()
        notes.append(f"No --actions given: offered the default action library ({len(action_list)} generic actions, "
                     "one per PROBE action type). Pass --actions actions.yaml for your own.")
    else:
        action_list = library.load_actions(actions)
    if profile is None:
        person = library.default_profile(date.today().isoformat())
        notes.append("No --profile given: the model infers the person from the workspace; today is the run date.")
    else:
        person = library.load_profile(profile)
        person.setdefault("today", date.today().isoformat())
    for note in notes:
        progress(note)
    instance = Instance(instance_id=f"discover-{root.name}", setting=WORKSPACE.name, profile=person,
                        actions=action_list, artifacts=ingested.artifacts, meta={"root": str(root)})
    return instance, ingested, notes


def discover_workspace(
    folder: str | Path,
    *,
    lm,
    backbone: str = "local",
    profile: str | Path | None = None,
    actions: str | Path | None = None,
    exclude: Iterable[str] = (),
    program: str | Path | None = None,
    templates: str | Path | None = None,
    rounds: int | None = None,
    per_round: int | None = None,
    budget: Budget = Budget(),
    overrides: Overrides = Overrides(),
    scan: int | None = None,
    progress: Progress = print,
) -> DiscoverResult:
    started = time.perf_counter()
    instance, ingested, notes = workspace_instance(folder, profile, actions, exclude, progress)
    root = Path(instance.meta["root"])
    run = run_discovery(instance, lm=lm, backbone=backbone, program=program, templates=templates, rounds=rounds,
                        per_round=per_round, budget=budget, overrides=overrides,
                        unit_of=workspace_unit(ingested.sources), progress=progress, scan=scan)
    result = DiscoverResult(setting=WORKSPACE.name, target=str(root), instance=instance, findings=run.findings,
                            program_source=run.source, templates=list(run.program.templates), rounds=run.rounds,
                            scans=run.scans, windows=run.windows, sources=ingested.sources, notes=notes + run.notes,
                            skipped=[{"path": s.path, "reason": s.reason} for s in ingested.skipped],
                            backbone=describe(lm))
    return finish(result, started, progress)
