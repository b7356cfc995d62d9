"""Options shared by several subcommands."""

from __future__ import annotations

import argparse


def add_lm_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backbone", default="local",
                        help="backbone name (local, local-small, gpt-5-mini, ..., openai-compatible) or a raw DSPy model string")
    parser.add_argument("--judge", default="proxy",
                        help="judge backbone for identification/resolution, or 'proxy' for the lexical proxy judge, or 'none'")
    parser.add_argument("--api-base", default=None, help="base URL for openai-compatible servers (vLLM, llama.cpp server)")
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="CPU threads for the embedded backbone")
