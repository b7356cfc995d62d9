"""Split a context that is too large for the model's window (cost.prices.Target) into windows of related artifacts.

The unit that is never split is a file (repository) or an item (workspace). Units of the same group (a package
directory, or a mail folder) stay in one window when the group fits; groups and the parts of split groups are then
packed by size, largest first, into as few windows as fit (first-fit decreasing). Order inside a window follows the
original artifact order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tide_dspy.schemas import Artifact
from tide_dspy.util.tokens import count_tokens

# Tokens the round prompt needs besides the context: adapter framing, the signature's instructions, field
# descriptions and the growing "already found" list.
PROMPT_OVERHEAD_TOKENS = 1500


class WindowTooSmall(ValueError):
    """One unit alone does not fit in the window."""


@dataclass(frozen=True)
class Unit:
    name: str  # the file (or item) shown in errors
    group: str  # units with the same group are related
    artifacts: tuple[Artifact, ...]
    tokens: int


def make_units(artifacts: list[Artifact], render: Callable[[Artifact], str],
               unit_of: Callable[[Artifact], tuple[str, str]]) -> list[Unit]:
    """Group artifacts into units (`unit_of` gives each one's unit name and group) costed in estimated tokens."""
    members: dict[tuple[str, str], list[Artifact]] = {}
    for a in artifacts:
        members.setdefault(unit_of(a), []).append(a)
    # +2 tokens per artifact for the blank lines that join rendered artifacts
    return [Unit(name, group, tuple(arts), sum(count_tokens(render(a)) + 2 for a in arts))
            for (name, group), arts in members.items()]


def window_budget(context_window: int, fixed_text: str, output_tokens: int) -> int:
    """Tokens left for the context once the static inputs, the output and the prompt overhead are paid."""
    fixed = count_tokens(fixed_text) + output_tokens + PROMPT_OVERHEAD_TOKENS
    budget = context_window - fixed
    if budget <= 0:
        raise WindowTooSmall(
            f"the templates, actions and instructions alone need about {fixed} tokens (with {output_tokens} for the "
            f"answer), more than the {context_window}-token window; use fewer templates or a larger "
            f"--context-window"
        )
    return budget


def _first_fit(chunks: list[list[Unit]], budget: int) -> list[list[Unit]]:
    windows: list[list[Unit]] = []
    loads: list[int] = []
    for chunk in sorted(chunks, key=lambda c: -sum(u.tokens for u in c)):
        size = sum(u.tokens for u in chunk)
        slot = next((i for i, load in enumerate(loads) if load + size <= budget), None)
        if slot is None:
            windows.append(list(chunk))
            loads.append(size)
        else:
            windows[slot].extend(chunk)
            loads[slot] += size
    return windows


def split_windows(artifacts: list[Artifact], units: list[Unit], budget: int) -> list[list[Artifact]]:
    """Windows (lists of artifacts, each within `budget` tokens) covering every artifact exactly once."""
    too_big = [u for u in units if u.tokens > budget]
    if too_big:
        u = max(too_big, key=lambda x: x.tokens)
        raise WindowTooSmall(
            f"{u.name} alone needs about {u.tokens} tokens, but a window holds {budget} tokens of context; "
            f"exclude it (--exclude), or raise --context-window on a backbone with a larger window"
        )
    if sum(u.tokens for u in units) <= budget:
        return [list(artifacts)]
    groups: dict[str, list[Unit]] = {}
    for u in units:
        groups.setdefault(u.group, []).append(u)
    chunks: list[list[Unit]] = []
    for members in groups.values():
        if sum(u.tokens for u in members) <= budget:
            chunks.append(members)
        else:  # the group itself is too large: split it into parts that fit, then pack those with the rest
            chunks.extend(_first_fit([[u] for u in members], budget))
    position = {a.id: i for i, a in enumerate(artifacts)}
    return [
        sorted((a for u in w for a in u.artifacts), key=lambda a: position[a.id]) for w in _first_fit(chunks, budget)
    ]
