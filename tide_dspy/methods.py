"""The methods a run can name, each defined once.

An entry says which program a method is, what fills the template slot of its prompt (the guidance: templates,
solved examples or nothing) and so whether it reads a template library or solved train examples. `tide evaluate`,
`tide compile`, experiments/run.py and docs/program.md's table all read `METHODS`; workflows.build_method builds
any of them, and programs.build_program when the caller holds the templates or examples already.

Every method may write at most T·k findings per instance, T rounds of k by default the setting's (10 x 1 on
workspaces, 3 x 3 on repositories): TIDE in T rounds of k, Multi-Agent in T independent calls of k, Single-Agent in
one call of T·k (discovery.SingleAgent), a chance floor as T·k picks. The paper compares the methods at matched
budgets (Multi-Agent "matched in number to the rounds"), so Single gets TIDE's finding budget too, and no method
wins or loses F1 by being allowed more or fewer findings.

Adding a method is one entry here, plus its test. Single-Agent with the template library in its prompt:

    Method("single-templates", "SingleAgent", guidance="templates",
           summary="one call that returns every finding at once, guided by the templates")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tide_dspy.discovery import DiscoveryProgram


DEMOS = 3
"""How many solved train examples Iter + Demos shows in the template slot. The paper (Table 2, "Few-Shot as
Template Substitute") draws raw few-shot demonstrations from the pool the templates were distilled from and does
not say how many. Each example carries the whole evidence of a solved case (3-4 workspace items, or 1-2 whole
functions with the issue and its patch), so a few already make the slot as long as a library of a dozen templates;
3 is a common few-shot count and the number the ablation has always run with here."""


@dataclass(frozen=True)
class Method:
    """One method: its name, the program class that runs it (by its name in discovery.PROGRAM_KINDS, so that this
    table loads without DSPy and `--help` stays fast), what guides its rounds, and whether it is a chance floor."""

    name: str
    kind: str
    guidance: str = "none"  # templates | demos | none (discovery.GUIDANCE_KINDS)
    summary: str = ""  # what it does, in a line (docs/program.md's table says the same)
    floor: bool = False  # a chance floor: it calls no model (a discovery.ChanceFloor)

    @property
    def program(self) -> type[DiscoveryProgram]:
        """The program class."""
        from tide_dspy.discovery import PROGRAM_KINDS

        return PROGRAM_KINDS[self.kind]

    @property
    def templates(self) -> bool:
        """It reads a template library."""
        return self.guidance == "templates"

    @property
    def demos(self) -> int:
        """The solved train examples it shows (0: none)."""
        return DEMOS if self.guidance == "demos" else 0


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("tide", "TIDE", "templates", "template-guided iterative discovery"),
    Method("single", "SingleAgent", summary="one call that returns every finding at once (at most T·k)"),
    Method("multi", "MultiAgent", summary="T independent calls of k findings, pooled (duplicates kept for scoring)"),
    Method("iter", "TIDE", summary="the Iter-only ablation: iterative rounds without templates"),
    Method("iter-demos", "TIDE", "demos", f"Iter + Demos: {DEMOS} raw solved train examples in the template slot"),
    Method("random", "RandomBaseline", summary="a chance floor: T·k findings of random artifacts", floor=True),
    Method("first-listed", "FirstListed", summary="a chance floor: the artifacts in the order shown", floor=True),
    Method("lexical-join", "LexicalJoin", summary="a chance floor: artifacts that share rare tokens", floor=True),
    Method("tfidf", "TfidfSimilarity", summary="a chance floor: artifacts with the most alike TF-IDF vectors",
           floor=True),
)}


def get_method(name: str) -> Method:
    """The method of a name; an unknown name is an error that lists the known ones."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; the methods are {', '.join(METHODS)} "
                         "(tide_dspy.methods.METHODS)") from None


def lm_methods() -> list[str]:
    """The methods that call a model (every one but the chance floors)."""
    return [m.name for m in METHODS.values() if not m.floor]


def floor_methods() -> list[str]:
    """The chance floors, in the order every table shows them."""
    return [m.name for m in METHODS.values() if m.floor]


def method_of(program: DiscoveryProgram) -> str:
    """The name of the method a program was built as (its class and guidance), else its class name."""
    for method in METHODS.values():
        if type(program) is method.program and program.guidance == method.guidance:
            return method.name
    return type(program).__name__
