"""What the offline steps' commands make of their options: the instances (selection_of) and program shape
(shape_of) they name, the arguments every workflow takes, an output folder checked before any LM work, the command
line written back for provenance, and an estimate printed."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path


def check_output_folder(path: str | Path, option: str = "--out") -> Path:
    """`path` as an output folder: it may not exist yet, but neither it nor a parent may be a file. Checked before
    any LM work, so a run is not lost at the end for want of a place to write."""
    path = Path(path)
    for part in (path, *path.parents):
        if part.exists():
            if not part.is_dir():
                where = "" if part == path else f" (its parent {part} is a file)"
                raise ValueError(f"{option} {path}: not a folder{where}; pass a folder path, e.g. {option} "
                                 f"{path.with_name(path.name + '-report') if part == path else 'tide-report'}")
            break
    return path


def command_line(args: argparse.Namespace) -> str:
    """An equivalent command line, every option spelled out (defaults included), for provenance records; credentials
    in URLs are scrubbed."""
    from tide_dspy.util.secrets import scrub_text

    parts = ["tide", args.command]
    for dest, value in vars(args).items():
        if dest in ("command", "func", "verbose") or value is None or value is False or value == []:
            continue
        flag = "--" + dest.replace("_", "-")
        for v in value if isinstance(value, list) else [value]:
            parts += [flag] if v is True else [flag, scrub_text(str(v))]
    return " ".join(shlex.quote(p) for p in parts)


def step_arguments(args: argparse.Namespace) -> dict:
    """The arguments every workflow step takes: its LM (made once the inputs check out), backbone, judge, where it
    writes and how it is tracked."""
    from tide_dspy import workflows
    from tide_dspy.backbones.options import LMOptions, lm_from_options

    options = LMOptions.from_namespace(args)
    return dict(
        lm=lambda: lm_from_options(options),
        backbone=args.backbone,
        judge=options.judge_spec(args.judge),
        programs=args.programs,
        tracking=workflows.Tracking(enabled=not args.no_track, uri=args.tracking_uri, command_line=command_line(args)),
    )


def estimate_arguments(args: argparse.Namespace) -> dict:
    """The arguments an estimate takes: the LM (built, never called), backbone, judge, programs, prices, window."""
    from tide_dspy.backbones.options import LMOptions, lm_from_options
    from tide_dspy.cli.options import overrides_of

    return dict(lm=lambda: lm_from_options(LMOptions.from_namespace(args)), backbone=args.backbone, judge=args.judge,
                programs=args.programs, overrides=overrides_of(args))


def print_estimate(estimate) -> int:
    print(estimate.table())
    print("dry run: no model was called")
    return 0


def selection_of(args: argparse.Namespace):
    """The data.selection.Selection of the options add_data_options added."""
    from tide_dspy.data.selection import Selection
    from tide_dspy.domains import get_setting

    ids = [i.strip() for i in args.ids.split(",") if i.strip()] if args.ids else None
    setting = get_setting(args.setting) if args.setting else None  # the one lookup of --setting
    return Selection(setting=setting, split=args.split, data=args.data, data_version=args.data_version, ids=ids,
                     max_context_tokens=args.max_context_tokens, limit=args.limit, skip_invalid=args.skip_invalid)


def shape_of(args: argparse.Namespace):
    """The workflows.ProgramShape of the options add_program_options added."""
    from tide_dspy.workflows import ProgramShape

    return ProgramShape(rounds=args.rounds, per_round=args.per_round, max_evidence=args.max_evidence,
                        shuffle_context=args.shuffle_context, scan=args.scan, stop_on=args.stop_on,
                        template_names=args.show_template_names, multi_dedup=args.multi_dedup)
