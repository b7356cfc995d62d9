"""LM usage accounting from `lm.history`: calls, tokens and cost since a bookmark, free of secrets."""

from __future__ import annotations


def usage_mark(lm) -> str | None:
    """A bookmark in lm.history: the uuid of its last entry (history is bounded, so indexes shift)."""
    history = getattr(lm, "history", None) or []
    return history[-1].get("uuid") if history else None


def entries_since(lm, mark: str | None) -> list[dict]:
    """History entries newer than the entry with uuid `mark` (all of them if the mark has been evicted)."""
    history = list(getattr(lm, "history", None) or [])
    if mark is None:
        return history
    for i in range(len(history) - 1, -1, -1):
        if history[i].get("uuid") == mark:
            return history[i + 1:]
    return history


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


def lm_usage(lm, mark: str | None = None) -> dict | None:
    """Calls, tokens and cost of the LM since `mark`: the summary written to lm_usage.json and MLflow."""
    if lm is None:
        return None
    return entries_usage(entries_since(lm, mark), getattr(lm, "model", type(lm).__name__))


def entries_usage(entries: list[dict], model: str) -> dict:
    """Calls, tokens and cost of these history entries (e.g. those of an LM's copies, kept by a module)."""
    prompt, completion = usage_tokens(entries)
    costs = [e["cost"] for e in entries if e.get("cost") is not None]
    return {
        "model": model,
        "calls": len(entries),
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cost_usd": round(sum(costs), 6) if costs else None,
    }
