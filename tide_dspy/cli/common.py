"""Options shared by several subcommands."""

from __future__ import annotations

import argparse
from pathlib import Path


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    return _int_at_least(text, 1)


def count(text: str) -> int:
    """An argparse type: an integer of at least 0."""
    return _int_at_least(text, 0)


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
    return value


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


def add_lm_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backbone", default="local",
                        help="backbone name (local, local-small, gpt-5-mini, ..., openai-compatible) or a raw DSPy model string")
    parser.add_argument("--judge", default="proxy",
                        help="judge backbone for identification/resolution, or 'proxy' for the lexical proxy judge, or 'none'")
    parser.add_argument("--api-base", default=None, help="base URL for openai-compatible servers (vLLM, llama.cpp server)")
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--max-tokens", type=positive_int, default=None)
    parser.add_argument("--threads", type=positive_int, default=None, help="CPU threads for the embedded backbone")
    parser.add_argument("--server-schema", default=None, choices=("json_schema", "llama.cpp", "off"),
                        help="how an openai-compatible server takes the output schema: json_schema (vLLM, OpenAI; "
                             "default), llama.cpp (python -m llama_cpp.server), off (default: $TIDE_SERVER_SCHEMA)")


def lm_from_args(args: argparse.Namespace, backbone: str | None = None):
    """`backbones.get_lm` (the one LM factory) for `backbone` (default: --backbone), with the LM options mapped to
    its keywords. The adapter is not chosen here: the library scopes it around its calls (backbones.lm_context).
    Tests replace this function to inject a DummyLM."""
    from tide_dspy.backbones import get_lm

    return get_lm(backbone or args.backbone, api_base=args.api_base, temperature=args.temperature,
                  max_tokens=args.max_tokens, num_threads=args.threads,
                  **({"server_schema": args.server_schema} if getattr(args, "server_schema", None) else {}))
