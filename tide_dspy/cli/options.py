"""Option groups several commands share, and what they hold: the cost options (`add_cost_options`, read back as a
`cost.guard.Budget` and `cost.prices.Overrides`)."""

from __future__ import annotations

import argparse

from tide_dspy.util.argtypes import positive_float, positive_int


def price(text: str):
    """An argparse type: IN,OUT[,CACHED] in USD per million tokens (cost.prices.parse_price)."""
    from tide_dspy.cost.prices import parse_price

    try:
        return parse_price(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
    """The cost.prices.Overrides of the options add_cost_options (and add_proposer_options) added."""
    from tide_dspy.cost.prices import Overrides

    prices = {role: getattr(args, name, None) for role, name in (
        ("backbone", "price"), ("judge", "judge_price"), ("proposer", "prompt_price"))}
    return Overrides(prices={r: p for r, p in prices.items() if p is not None},
                     window=getattr(args, "context_window", None))


def add_proposer_options(parser: argparse.ArgumentParser) -> None:
    """The options of a command whose optimizer proposes instructions with a model of its own (`tide compile`)."""
    parser.add_argument("--prompt-model", default=None, metavar="BACKBONE",
                        help="the model that proposes or reflects on instructions (MIPROv2's and COPRO's "
                             "prompt_model, GEPA's reflection_lm, SIMBA's prompt_model): any backbone name "
                             "(default: the backbone being compiled); its calls count toward --max-calls and "
                             "--max-cost and appear in lm_usage.json")
    parser.add_argument("--prompt-api-base", default=None, metavar="URL",
                        help="where --prompt-model's calls go, when not to its provider (never --api-base)")
    parser.add_argument("--prompt-price", type=price, default=None, metavar="IN,OUT[,CACHED]",
                        help="--prompt-model's USD per million tokens, where LiteLLM's price map has none")
