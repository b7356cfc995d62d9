"""`tide data ...`: dataset statistics, the set checker, the repository-instance builder and the workspace
generator."""

from __future__ import annotations

import argparse

from tide_dspy.cli.argtypes import count, positive_int
from tide_dspy.cli.options import add_lm_options, setting_name

GENERATE_DESCRIPTION = """\
Generate workspaces through PROBE's generation stages (fastino-ai/PROBE_benchmark, data_generation/), one DSPy
signature each: persona, world model, bottlenecks of distinct kinds, an action library with one solving action
per problem, the solving action's parameters, per problem an evidence plan, its 2-5 evidence items and a review of
them, then distractors that reuse the problems' people, projects and ids. Each stage's output is checked and
sampled again when refused (--max-attempts); a workspace that still fails, or that the set checker refuses, is
skipped. Every workspace and stage is recorded in <out>.generation.json; --resume generates the workspaces a
stopped run did not write.

Use a strong model. A small local model (the default `local`, Qwen2.5-Coder 1.5B) writes poor workspaces:
shallow, repetitive, the problems stated outright in one item, and many stages refused. Use a hosted backbone
with its key in the environment (--backbone claude-sonnet-4.5 with ANTHROPIC_API_KEY, gpt-5-mini with
OPENAI_API_KEY, gemini-3.5-flash, ...), or a strong model you serve (--backbone openai-compatible --api-base URL).
A workspace takes about 50-60 calls.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser("data", help="inspect, build or generate benchmark data")
    sub = data.add_subparsers(dest="data_command", required=True)

    stats = sub.add_parser("stats", help="instances, problems, artifacts and evidence by split")
    stats.add_argument("path", help="a JSONL file or a folder of JSONL files, or a versioned set's folder")
    stats.add_argument("--data-version", default=None, help="the version of a versioned set (default: its highest)")
    stats.add_argument("--setting", type=setting_name, metavar="SETTING", default=None,
                       help="force the format, workspace or repository (default: detected from the records)")
    stats.add_argument("--split", default=None, help="only this split (train, test, ...)")
    stats.add_argument("--skip-invalid", action="store_true", help="skip invalid records, and list them")
    stats.set_defaults(func=run_stats)

    check = sub.add_parser("check", help="check a benchmark set's invariants and print its chance floors per split")
    check.add_argument("path", nargs="?", default=None,
                       help="a set's folder, one version's folder, or a JSONL file or folder (default: every version "
                            "of every set under the data root: $TIDE_DATA, else the sets shipped with tide-dspy)")
    check.add_argument("--data-version", default=None,
                       help="the version of a versioned set (default: its highest; without PATH, every version)")
    check.add_argument("--paper-scale", action="store_true",
                       help="also require the paper's scale (workspace set; without PATH, its default version): "
                            "88-113 items per workspace, >= 30 workspaces and 150 problems, >= 8 train workspaces "
                            "with >= 40 problems, >= 20 test")
    check.add_argument("--no-floors", action="store_true", help="check the invariants only")
    check.set_defaults(func=run_check)

    build = sub.add_parser("build-repo", help="build multi-bug repository instances from SWE-bench-format rows")
    build.add_argument("--rows", required=True, help="JSONL of SWE-bench rows (instance_id, repo, base_commit, "
                                                     "problem_statement, patch, created_at, ...)")
    build.add_argument("--repo", required=True, help="a local git clone of the rows' repository (left untouched)")
    build.add_argument("--out", required=True, help="output JSONL, in the shared repository format")
    build.add_argument("--max-candidates", type=positive_int, default=650, help="candidate pool limit per instance")
    build.add_argument("--max-problems", type=positive_int, default=40, help="problems limit per instance")
    build.add_argument("--split", default="test", help="split label of the built instances (split by repository)")
    build.add_argument("--repo-name", default=None,
                       help="the rows' `repo` value that --repo is a clone of (needed when rows span repositories)")
    build.set_defaults(func=run_build_repo)

    gen = sub.add_parser(
        "generate-workspace", help="generate workspaces with an LLM backbone, through PROBE's generation stages",
        description=GENERATE_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_lm_options(gen)
    gen.add_argument("--n", type=positive_int, default=1, help="workspaces to generate (numbered 1..N in the run)")
    gen.add_argument("--out", required=True, help="output JSONL, in the workspace set's layout; its record of "
                                                  "stages goes beside it, as <name>.generation.json")
    gen.add_argument("--train", type=count, default=0,
                     help="how many of the N are the train split (the first ones); the rest are test (default 0)")
    gen.add_argument("--seed", type=int, default=0,
                     help="the run's seed: roles, dates, sizes and problem kinds of each workspace")
    gen.add_argument("--max-attempts", type=positive_int, default=3,
                     help="attempts per stage when its output fails a check, the first included")
    gen.add_argument("--workers", type=positive_int, default=4,
                     help="LM calls at once within a workspace (problems' evidence, distractor batches); the "
                          "embedded backbone always takes one")
    gen.add_argument("--resume", action="store_true",
                     help="continue the run that wrote --out (same --seed and --train): generate the workspaces "
                          "it has not written, a skipped one included")
    gen.set_defaults(func=run_generate_workspace)


def run_stats(args: argparse.Namespace) -> int:
    from tide_dspy.data.loaders import load_with_report
    from tide_dspy.data.sets import locate
    from tide_dspy.data.stats import dataset_stats, format_stats_table

    path = locate(args.setting, args.path, args.data_version).path  # a versioned set's folder: its version
    result = load_with_report(path, setting=args.setting, split=args.split, skip_invalid=args.skip_invalid)
    if not result.instances:
        print(f"{path}: no instances" + (f" in split {args.split!r}" if args.split else ""))
    else:
        print(f"{path} ({result.instances[0].setting})")
        print(format_stats_table(dataset_stats(result.instances)))
    if result.skipped:
        print(f"\nskipped {len(result.skipped)} invalid record(s):")
        for error in result.skipped:
            print(f"  {error.path} line {error.line}: {error.reason}")
    return 0


def run_check(args: argparse.Namespace) -> int:
    from tide_dspy.data.set_check import check_data
    from tide_dspy.data.sets import data_root, versions
    from tide_dspy.domains import SETTING_NAMES, WORKSPACE
    from tide_dspy.floors import floor_scores, format_floors, split_rows

    if args.path is not None:
        targets = [(args.path, args.data_version)]
    else:
        root = data_root()
        folders = sorted(p for p in root.iterdir() if p.is_dir() and (versions(p) or p.name in SETTING_NAMES))
        if args.paper_scale:  # the paper's scale is a target of the workspace set's default version
            folders = [p for p in folders if p.name == WORKSPACE.name]
        targets = [(folder, v) for folder in folders for v in ([args.data_version] if args.data_version else
                                                               versions(folder)[-1:] if args.paper_scale else
                                                               versions(folder) or [None])]
    failed = 0
    for path, version in targets:
        result = check_data(path, version=version, paper_scale=args.paper_scale)
        info = result.info
        counts = ", ".join(f"{split} {sum(i.split == split for i in result.instances)} instances / "
                           f"{sum(len(i.problems) for i in result.instances if i.split == split)} problems"
                           for split in dict.fromkeys(i.split for i in result.instances))
        print(f"{info.path}: {info.name} {info.version or '(no version)'}, {result.setting} setting, sha256 "
              f"{info.sha256[:16]}...")
        print(f"  {counts}")
        if result.passed:
            print("  every invariant holds" + (" at the paper's scale" if args.paper_scale else ""))
        else:
            failed += 1
            print(f"  {len(result.problems)} broken invariant(s):")
            for line in result.problems:
                print(f"  - {line}")
        if not args.no_floors:
            rows = split_rows(result.instances, floor_scores(result.instances))
            print("  chance floors, retrieval F1 (mean ± 95% interval half-width over instances):")
            print("\n".join("    " + line for line in format_floors(rows).splitlines()))
        print()
    return 1 if failed else 0


def run_build_repo(args: argparse.Namespace) -> int:
    from tide_dspy.data.repo_builder import build_repository_instances

    report = build_repository_instances(
        args.rows, args.repo, args.out, max_candidates=args.max_candidates, max_problems=args.max_problems,
        split=args.split, repo_name=args.repo_name,
    )
    print(report.summary())
    return 0


def run_generate_workspace(args: argparse.Namespace) -> int:
    from tide_dspy.backbones import LMOptions, lm_from_options
    from tide_dspy.backbones.registry import resolve, serializes_calls
    from tide_dspy.data.workspace_generator import generate_workspaces
    from tide_dspy.util.text import print_line

    if resolve(args.backbone).kind == "local":
        print(f"warning: --backbone {args.backbone} is a small local model; it writes poor workspaces (see --help)")
    lm = lm_from_options(LMOptions.from_namespace(args))
    try:
        report = generate_workspaces(lm, n=args.n, out=args.out, train=args.train, seed=args.seed,
                                     max_attempts=args.max_attempts, resume=args.resume,
                                     workers=1 if serializes_calls(lm) else args.workers)
    except ValueError as exc:
        print_line(f"error: {exc}")
        return 2
    for line in report.summary().splitlines():
        print_line(line)
    return 0 if not report.skipped else 1
