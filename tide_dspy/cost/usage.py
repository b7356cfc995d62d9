"""LM usage from the LMs' histories: calls, tokens (cached ones too) and cost since a bookmark, free of secrets, and
the cost of one entry."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tide_dspy.cost.prices import Prices

# The totals logged as MLflow metrics (per role: backbone_prompt_tokens, ...); lm_usage.json holds the same.
USAGE_METRICS = ("calls", "prompt_tokens", "completion_tokens", "cached_prompt_tokens", "cache_write_tokens",
                 "cost_usd")


def usage_mark(lm) -> str | None:
    """A bookmark in lm.history: the uuid of its last entry (history is bounded, so indexes shift)."""
    history = getattr(lm, "history", None) or []
    return history[-1].get("uuid") if history else None


def entries_since(lm, mark: str | None) -> list[dict]:
    """The LM's history entries newer than the entry with uuid `mark` (all of them when `mark` is None or has been
    evicted)."""
    history = list(getattr(lm, "history", None) or [])
    if mark is None:
        return history
    for i in range(len(history) - 1, -1, -1):
        if history[i].get("uuid") == mark:
            return history[i + 1:]
    return history


def entry_cost(entry: dict, prices: Prices | None) -> float:
    """USD of one LM history entry: what the provider reported, else its tokens at `prices` (cache reads and writes
    at their own prices, Prices.cost_of), else 0."""
    if entry.get("cost") is not None:
        return float(entry["cost"])
    if prices is None:
        return 0.0
    prompt, completion = usage_tokens([entry])
    read, write = cache_tokens(entry.get("usage") or {})
    return prices.cost_of(prompt or 0, completion or 0, read or 0, write or 0)


def usage_tokens(entries: list[dict]) -> tuple[int | None, int | None]:
    """Summed (prompt, completion) tokens; None where no entry reported them."""
    ins = outs = None
    for e in entries:
        u = e.get("usage") or {}
        i = u.get("prompt_tokens", u.get("input_tokens"))
        o = u.get("completion_tokens", u.get("output_tokens"))
        if i is not None:
            ins = (ins or 0) + int(i)
        if o is not None:
            outs = (outs or 0) + int(o)
    return ins, outs


def cache_tokens(usage: dict) -> tuple[int | None, int | None]:
    """(prompt tokens read from the provider's cache, tokens written to it) of one call's usage, whichever client
    reported it (lm15: prompt_tokens_details; LiteLLM also Anthropic's own cache_*_input_tokens); None: not said."""
    details = usage.get("prompt_tokens_details") or {}
    read = details.get("cached_tokens", usage.get("cache_read_input_tokens"))
    write = next((v for v in (details.get("cache_creation_tokens"), details.get("cache_write_tokens"),
                              usage.get("cache_creation_input_tokens")) if v is not None), None)
    return (int(read) if read is not None else None), (int(write) if write is not None else None)


def lm_usage(lm, mark: str | None = None) -> dict | None:
    """Calls, tokens and cost of the LM since `mark`: the summary written to lm_usage.json and MLflow."""
    if lm is None:
        return None
    from tide_dspy.cost.prices import prices_of

    return entries_usage(entries_since(lm, mark), getattr(lm, "model", type(lm).__name__), prices_of(lm))


def _sum(values) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def entries_usage(entries: list[dict], model: str, prices: Prices | None = None) -> dict:
    """Calls, tokens and cost of these history entries (e.g. those of an LM's copies, kept by a module).

    The cost is the client's; an entry it could not price (a model string missing from its price map, as a
    backbone priced under another entry is) is priced at `prices` (cost.prices.prices_of), when given."""
    prompt, completion = usage_tokens(entries)
    cached = [cache_tokens(e.get("usage") or {}) for e in entries]
    costs = []
    for entry in entries:
        cost = entry.get("cost")
        if cost is None and prices is not None and usage_tokens([entry]) != (None, None):
            cost = entry_cost(entry, prices)
        if cost is not None:
            costs.append(cost)
    return {
        "model": model,
        "calls": len(entries),
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_prompt_tokens": _sum(r for r, _ in cached),
        "cache_write_tokens": _sum(w for _, w in cached),
        "cost_usd": round(sum(costs), 6) if costs else None,
    }
