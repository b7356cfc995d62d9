"""The option groups the commands share, the one place each is defined, and what they hold: the LM options
(`add_lm_options`, read as `backbones.LMOptions`), the cost options (`add_cost_options`, read as a
`cost.guard.Budget` and `cost.prices.Overrides`), the data, program, output and sandbox options. Experiment scripts
take theirs from here too. Nothing here imports DSPy: building the parser and printing its help stays fast.
"""

from __future__ import annotations

import argparse
import sys

from tide_dspy.backbones.providers import DEFAULT_BACKBONE
from tide_dspy.cli.argtypes import (
    count,
    fraction,
    judge_rubric,
    non_negative_float,
    positive_float,
    positive_int,
    price,
    setting_name,
    stop_rule,
)


def add_lm_options(parser: argparse.ArgumentParser, *, with_backbone: bool = True) -> None:
    """The options every command that calls an LM takes: the one place they are defined (LMOptions reads them)."""
    if with_backbone:
        parser.add_argument("--backbone", default=DEFAULT_BACKBONE,
                            help="backbone name (local, local-small, gpt-5-mini, ..., openai-compatible) or a raw DSPy "
                                 "model string")
    parser.add_argument(
        "--judge",
        default="proxy",
        help="judge backbone for identification/resolution, or 'proxy' for the lexical proxy judge, or 'none'",
    )
    parser.add_argument("--judge-rubric", type=judge_rubric, default="probe",
                        help="how an LLM judge rates: probe (the paper's, PROBE's 1 / 0.5 / 0 on the essential and "
                             "secondary details, the action id checked in code) or likert (a 1-5 rating mapped to "
                             "(s-1)/4); default probe")
    parser.add_argument("--judge-runs", type=positive_int, default=1, metavar="N",
                        help="judge each matched pair N times, each a fresh sample at temperature 1.0, score the "
                             "mean and report the judge's spread (default 1: one plain call)")
    parser.add_argument("--api-base", default=None,
                        help="where the backbone's calls go: an openai-compatible server (vLLM, llama.cpp server; "
                             "default $TIDE_API_BASE), or a gateway for a hosted backbone (its key goes there too)")
    parser.add_argument("--judge-api-base", default=None,
                        help="where a hosted judge's calls go, when not to its provider (never --api-base)")
    parser.add_argument("--num-retries", type=count, default=None,
                        help="retries of a call that hit a rate limit, a timeout, a 5xx or a dropped connection, "
                             "waiting the provider's Retry-After or an exponential backoff (default 8: at least 91 s "
                             "in all, longer than a per-minute limit; $TIDE_NUM_RETRIES)")
    parser.add_argument("--timeout", type=positive_float, default=None,
                        help="seconds one request may take before it is retried (default: the client's, 600; "
                             "$TIDE_TIMEOUT)")
    if with_backbone:
        parser.add_argument("--no-check", action="store_true",
                            help="skip the one preflight call to a hosted backbone and judge before the run "
                                 "(tide check)")
    parser.add_argument("--temperature", type=non_negative_float, default=None,
                        help="sampling temperature (not sent to models that take only their default: gpt-5-mini, "
                             "Gemini 3)")
    parser.add_argument("--max-tokens", type=positive_int, default=None,
                        help="output tokens per call (default: the backbone's, 16k for the hosted ones)")
    parser.add_argument("--threads", type=positive_int, default=None, help="CPU threads for the embedded backbone")
    parser.add_argument("--server-schema", default=None, choices=("json_schema", "llama.cpp", "off"),
                        help="how an openai-compatible server takes the output schema: json_schema (vLLM, OpenAI; "
                             "default), llama.cpp (python -m llama_cpp.server), off (default: $TIDE_SERVER_SCHEMA)")


SETTING_HELP = ("the benchmark setting: workspace (a person's mail, calendar and documents; actions) or repository "
                "(a Python project's functions; patches); it picks the data folder, the round signature and the "
                "defaults (docs/settings.md)")


def add_sandbox_options(p: argparse.ArgumentParser, needs: str) -> None:
    """How the tests of --verify / --verify-repo are boxed (tide_dspy.sandbox); `needs` names the option they
    go with."""
    p.add_argument("--verify-unsandboxed", action="store_true",
                   help=f"with {needs}: run the tests without the bubblewrap sandbox, as you, with your files, "
                        "keys and network in reach (for machines without bubblewrap; see docs/safety.md)")
    p.add_argument("--verify-limit", action="append", default=[], metavar="NAME=VALUE",
                   help=f"with {needs}: raise or lower a limit of the sandbox: processes=256, memory=4G (address "
                        "space per process), file-size=1G (also the size of its /tmp and $HOME), cpu=600 (CPU "
                        "seconds per process), or NAME=unlimited; repeatable")
    p.add_argument("--verify-env", action="append", default=[], metavar="NAME",
                   help=f"with {needs}: also pass this environment variable to the tests (they get PATH, LANG, "
                        "LC_*, TZ, PYTHON* and PYTEST_* that do not look secret, and nothing else); repeatable")
    p.add_argument("--verify-read", action="append", default=[], metavar="DIR",
                   help=f"with {needs}: also let the tests read this folder (read-only), e.g. data or a toolchain "
                        "outside your Python installation; repeatable")


def sandbox_options(args: argparse.Namespace, given: bool, needs: str):
    """The SandboxOptions of the options above; an error when one is set without `needs`. Unsandboxed runs print
    what they risk."""
    from tide_dspy.sandbox import UNSANDBOXED_RISK, ResourceLimits, SandboxOptions

    used = args.verify_unsandboxed or args.verify_limit or args.verify_env or args.verify_read
    if used and not given:
        raise ValueError(f"--verify-unsandboxed, --verify-limit, --verify-env and --verify-read need {needs}")
    if args.verify_unsandboxed and given:
        print(f"tide: warning: {UNSANDBOXED_RISK}", file=sys.stderr)
    return SandboxOptions(unsandboxed=args.verify_unsandboxed, limits=ResourceLimits.parse(args.verify_limit),
                          env=tuple(args.verify_env), read_only=tuple(args.verify_read))


def add_data_options(p: argparse.ArgumentParser, split: str) -> None:
    p.add_argument("--setting", type=setting_name, metavar="SETTING", required=split != "test", help=SETTING_HELP)
    p.add_argument("--split", default=split, help=f"data split (default: {split})")
    p.add_argument("--data", default=None,
                   help="the setting's data: a set's folder, one version's folder, or a JSONL file or folder of your "
                        "own (default: $TIDE_DATA/<setting>, else the set shipped with tide-dspy)")
    p.add_argument("--data-version", default=None, metavar="VERSION",
                   help="the version of a versioned set: v1, v2, ... (default: its highest)")
    p.add_argument("--ids", default=None, help="only these instance ids (comma-separated)")
    p.add_argument("--max-context-tokens", type=positive_int, default=None,
                   help="only instances whose rendered context fits this many (estimated) tokens, smallest first")
    p.add_argument("--limit", type=positive_int, default=None, help="at most N instances (after the filters above)")
    p.add_argument("--skip-invalid", action="store_true",
                   help="skip records of the data that are not valid instances (each is listed), instead of stopping")


def add_output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--programs", default="programs", help="root of the programs/<setting>/<backbone>/ tree")
    p.add_argument("--no-track", action="store_true", help="do not log an MLflow run")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, "
                                                        "else sqlite:///mlflow.db)")
    add_lm_options(p)


def add_program_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--templates", default=None, help="template library (default: programs/<setting>/<backbone>/"
                                                     "templates.json)")
    p.add_argument("--rounds", type=positive_int, default=None, help="rounds T (default: the setting's)")
    p.add_argument(
        "--per-round", type=positive_int, default=None, help="new findings per round k (default: the setting's)"
    )
    p.add_argument("--max-evidence", type=positive_int, default=None,
                   help="the most artifacts one finding may cite "
                        "(default: the setting's, as docs/program.md lists)")
    p.add_argument("--shuffle-context", type=int, default=None, metavar="SEED",
                   help="show the artifacts in a seeded shuffled order (to measure position effects)")
    add_rule_options(p)
    p.add_argument("--scan", type=positive_int, default=None, metavar="N",
                   help="rate every artifact on its own first; each round reads the N most suspect unfound ones in "
                        "full (the scan's instruction is then compiled too; --metric scan-recall scores its ranking)")


def add_workers_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--workers", type=positive_int, default=1,
                   help=f"{what} at once (threads; default 1). Worth it against a served backbone (vLLM, llama.cpp "
                        "server, a hosted API); the embedded engine runs one call at a time")


def add_split_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metric", default="retrieval-f1",
                   help="component[-kind]: retrieval|identification|resolution|mean, kind f1 (default)|coverage; "
                        "or scan-recall (with --scan: gold evidence among the scan's first N)")
    p.add_argument("--val-fraction", type=fraction, default=0.25, help="held-out share of train used for validation")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/validation split")




def add_cost_options(p: argparse.ArgumentParser, *, judge: bool = True, budget: bool = True, stops: str = "") -> None:
    """--dry-run, the prices (--price; --judge-price where a judge runs) and, where a command runs programs under a
    budget, the backbone's --context-window and the budget (--max-cost, --max-calls); `stops` says where this
    command checks the budget and what it keeps."""
    group = p.add_argument_group("cost and window")
    group.add_argument("--dry-run", action="store_true",
                       help="render the prompts the run would send, count their tokens, print the calls, prompt and "
                            "output tokens and USD per method and backbone (judge included), and exit without "
                            "calling a model")
    group.add_argument("--price", type=price, default=None, metavar="IN,OUT[,CACHED]",
                       help="the backbone's USD per million prompt and output tokens (and cached prompt tokens), for "
                            "estimates and budgets where LiteLLM's price map has none or you pay another price")
    if judge:
        group.add_argument("--judge-price", type=price, default=None, metavar="IN,OUT[,CACHED]",
                           help="the same for the judge backbone")
    if not budget:
        return
    group.add_argument("--context-window", type=positive_int, default=None, metavar="TOKENS",
                       help="the backbone's context window, prompt and output together (default: the embedded "
                            "engine's n_ctx, else the backbone's, e.g. 200000 for claude-sonnet-4.5)")
    stops = stops or ("no instance starts once what was spent plus its estimate would pass the cap; finished rows "
                      "are kept and --resume continues")
    group.add_argument("--max-cost", type=positive_float, default=None, metavar="USD",
                       help="a cap on the USD the run's LM calls spend (what the provider reports for a call, else "
                            f"its tokens at the prices; the embedded model costs nothing): {stops}")
    group.add_argument("--max-calls", type=positive_int, default=None, metavar="N",
                       help=f"a cap on the run's LM calls, every model's together: {stops}")


def budget_of(args: argparse.Namespace):
    """The cost.guard.Budget of the options add_cost_options added."""
    from tide_dspy.cost.guard import Budget

    return Budget(max_cost=getattr(args, "max_cost", None), max_calls=getattr(args, "max_calls", None))


def overrides_of(args: argparse.Namespace):
    """The cost.prices.Overrides of the options add_cost_options (and compile's --prompt-price) added."""
    from tide_dspy.cost.prices import Overrides

    prices = {role: getattr(args, name, None) for role, name in (
        ("backbone", "price"), ("judge", "judge_price"), ("proposer", "prompt_price"))}
    return Overrides(prices={r: p for r, p in prices.items() if p is not None},
                     window=getattr(args, "context_window", None))


def add_rule_options(p: argparse.ArgumentParser) -> None:
    """The options that depart from the paper's method, each named (docs/paper.md): without them every method
    runs by the paper's rules. `tide compile | evaluate` and experiments/run.py take them; ProgramShape applies
    them (None: the program's own)."""
    p.add_argument("--stop-on", type=stop_rule, default=None, metavar="{empty,no-new}",
                   help="when TIDE's rounds stop early: empty (the paper's rule, the default for a fresh program): "
                        "on a round that returns no finding; no-new: also on a round that only re-finds")
    p.add_argument("--show-template-names", action="store_true", default=None,
                   help="show each template's name beside its pattern and evidence flow (the paper shows only "
                        "those two)")
    p.add_argument("--multi-dedup", action="store_true", default=None,
                   help="merge Multi-Agent's re-found findings before scoring (the paper scores the pool with "
                        "its duplicates)")


def add_traces_option(parser: argparse.ArgumentParser) -> None:
    """`--traces` (tide evaluate, tide compile, experiments/run.py): record every LM call (tracing.traces)."""
    parser.add_argument("--traces", action="store_true",
                        help="record every LM call (prompt, answer, tokens, cache hit, instance and round): as MLflow "
                             "traces of the run (the MLflow UI's Traces tab), or with tracking off as "
                             "<out>/traces/<instance>.jsonl. Each holds its whole prompt, so they can be large: the "
                             "estimated size is printed before the run")
