"""`tide data ...`: dataset statistics, the repository-instance builder and the workspace generator."""

from __future__ import annotations

import argparse

from tide_dspy.backbones.options import add_lm_options
from tide_dspy.cli.common import setting_name
from tide_dspy.util.argtypes import positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser("data", help="inspect, build or generate benchmark data")
    sub = data.add_subparsers(dest="data_command", required=True)

    stats = sub.add_parser("stats", help="instances, problems, artifacts and evidence by split")
    stats.add_argument("path", help="a JSONL file or a folder of JSONL files")
    stats.add_argument("--setting", type=setting_name, metavar="SETTING", default=None,
                       help="force the format, workspace or repository (default: detected from the records)")
    stats.add_argument("--split", default=None, help="only this split (train, test, ...)")
    stats.add_argument("--skip-invalid", action="store_true", help="skip invalid records, and list them")
    stats.set_defaults(func=run_stats)

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

    gen = sub.add_parser("generate-workspace", help="generate PROBE-style workspaces with an LLM backbone")
    add_lm_options(gen)
    gen.add_argument("--n", type=positive_int, default=1, help="number of workspaces")
    gen.add_argument("--out", required=True, help="output JSONL, in the shared workspace format")
    gen.add_argument("--split", default="test", help="split label written on each workspace")
    gen.add_argument("--seed", type=int, default=0, help="seed for personas and ids")
    gen.add_argument("--max-attempts", type=positive_int, default=3,
                     help="attempts per step on malformed LM output, the first included")
    gen.set_defaults(func=run_generate_workspace)


def run_stats(args: argparse.Namespace) -> int:
    from tide_dspy.data.loaders import load_with_report
    from tide_dspy.data.stats import dataset_stats, format_stats_table

    result = load_with_report(args.path, setting=args.setting, split=args.split, skip_invalid=args.skip_invalid)
    if not result.instances:
        print(f"{args.path}: no instances" + (f" in split {args.split!r}" if args.split else ""))
    else:
        print(f"{args.path} ({result.instances[0].setting})")
        print(format_stats_table(dataset_stats(result.instances)))
    if result.skipped:
        print(f"\nskipped {len(result.skipped)} invalid record(s):")
        for error in result.skipped:
            print(f"  {error.path} line {error.line}: {error.reason}")
    return 0


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
    from tide_dspy.data.workspace_generator import generate_workspaces

    lm = lm_from_options(LMOptions.from_namespace(args))
    written = generate_workspaces(lm, n=args.n, out=args.out, split=args.split, seed=args.seed,
                                  max_attempts=args.max_attempts)
    print(f"wrote {written} workspace(s) to {args.out}")
    return 0
