"""What a run may spend, what it has spent, and where it stops: one `Budget` (USD and LM calls) for evaluate,
compile, tune and discover, one spend counter (`Spend`), and the `Guard` that holds a run to both.

Spend is read from the histories of the run's LMs (backbone, judge, proposer): the cost the provider reported for
a call, else its tokens at the prices; cache hits cost nothing. An LM that get_lm built records its copies' calls
in its own history too (backbones.calls), so the calls of copies an optimizer makes are counted.

A run checks the budget in one of two ways. Work whose calls can be estimated (an instance of evaluate and tune, a
window of discover) starts only while what was spent, what work in flight has reserved, and its own estimate stay
within the budget (`Guard.admit`): a stopped run keeps what finished and resumes. A compile's search, whose calls
no estimate foresees, checks what was spent before each evaluation (`Guard.check`) and stops at most one evaluation
past the bound.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from tide_dspy.cost.estimate import Estimator, calls_cost
from tide_dspy.cost.prices import Prices, Target
from tide_dspy.cost.usage import entries_since, entry_cost, usage_mark


class BudgetSpent(BaseException):
    """The budget is spent. Not an Exception: optimizers and DSPy's Evaluate catch Exception per example and would
    score the stop as a failed example instead of stopping."""


@dataclass(frozen=True)
class Budget:
    """A cap on a run's LM spend: USD (`--max-cost`) and LM calls (`--max-calls`); None leaves one open."""

    max_cost: float | None = None
    max_calls: int | None = None

    def __post_init__(self):
        if self.max_cost is not None and not (self.max_cost > 0 and math.isfinite(self.max_cost)):
            raise ValueError(f"--max-cost must be a positive number of USD, got {self.max_cost}")
        if self.max_calls is not None and self.max_calls < 1:
            raise ValueError(f"--max-calls must be >= 1, got {self.max_calls}")

    @property
    def bounded(self) -> bool:
        return self.max_cost is not None or self.max_calls is not None

    def describe(self) -> str:
        parts = ([f"{self.max_calls} LM calls"] if self.max_calls else []) + (
            [f"${self.max_cost:g}"] if self.max_cost else [])
        return " and ".join(parts) or "no bound"

    def allows(self, calls: float, cost: float) -> bool:
        return ((self.max_calls is None or calls <= self.max_calls)
                and (self.max_cost is None or cost <= self.max_cost))


class Spend:
    """LM calls and USD of a run's LMs since the counter was made (role -> LM; `prices` by role for calls whose
    provider reports no cost), cache hits left out."""

    def __init__(self, lms: dict[str, object], prices: dict[str, Prices | None]):
        self.lms = {role: lm for role, lm in lms.items() if lm is not None}
        self.marks = {role: usage_mark(lm) for role, lm in self.lms.items()}
        self.prices = prices

    def spent(self) -> tuple[int, float]:
        calls, cost = 0, 0.0
        for role, lm in self.lms.items():
            for entry in entries_since(lm, self.marks[role]):
                if not getattr(entry.get("response"), "cache_hit", False):
                    calls += 1
                    cost += entry_cost(entry, self.prices.get(role))
        return calls, round(cost, 6)


class Guard:
    """The window pre-check and the budget of one run of `program` on the LMs of `targets` (backbone; judge and
    proposer where there are any). `spend` may be shared by several runs under one budget (tune's trials). A run
    that admits work by its estimate needs a price for every LM under --max-cost; a compile (`estimates` False)
    counts what providers report, and a call with neither a reported cost nor a price as 0."""

    def __init__(self, budget: Budget, targets: dict[str, Target | None], program=None, spend: Spend | None = None,
                 estimates: bool = True):
        self.budget, self.program = budget, program
        self.targets = {role: t for role, t in targets.items() if t is not None}
        self.estimator = Estimator.for_targets(self.targets)
        self.spend = spend or Spend({r: t.lm for r, t in self.targets.items()}, self.prices)
        if budget.max_cost is not None and estimates:
            missing = [f"the {role} {t.name}" for role, t in self.targets.items() if t.prices is None]
            if missing:
                raise ValueError(f"--max-cost needs a price for {' and '.join(missing)}, and none is in the price "
                                 "map: pass --price IN,OUT (and --judge-price IN,OUT for the judge), USD per million "
                                 "tokens")
        self._lock = threading.Lock()
        self._reserved: dict[str, tuple[int, float]] = {}
        self.stopped: str | None = None
        self.not_run: list[str] = []

    @property
    def prices(self) -> dict[str, Prices | None]:
        return {role: t.prices for role, t in self.targets.items()}

    def skip_reason(self, instance) -> str | None:
        """Why `instance` cannot fit the backbone's window (None when it fits, or the window or LM is unknown)."""
        backbone = self.targets.get("backbone")
        if backbone is None or (backbone.window is None and backbone.max_prompt is None):
            return None
        return backbone.skip_reason(self.estimator.largest_prompt(self.program, instance))

    def needed(self, instance, judge_only: bool = False) -> tuple[int, float]:
        """(calls, USD) the estimate gives `instance`; `judge_only`: its judging alone."""
        calls = self.estimator.instance_calls(self.program, instance, "judge" in self.targets)
        calls = [c for c in calls if c.role == "judge" or not judge_only]
        return len(calls), calls_cost(calls, self.prices)

    def admit(self, key: str, needed: tuple[int, float]) -> bool:
        """Whether work `key` estimated at `needed` (calls, USD) may start (reserving it until `release`)."""
        if not self.budget.bounded:
            return True
        with self._lock:
            if self.stopped is None:
                calls, cost = self.spend.spent()
                reserved = [sum(r[i] for r in self._reserved.values()) for i in (0, 1)]
                if self.budget.allows(calls + reserved[0] + needed[0], cost + reserved[1] + needed[1]):
                    self._reserved[key] = needed
                    return True
                self.stopped = (f"stopped at the budget: {calls} LM calls and ${cost:.4f} spent of "
                                f"{self.budget.describe()}, and the next ({key}) is estimated at {needed[0]} calls "
                                f"and ${needed[1]:.4f}")
            self.not_run.append(key)
            return False

    def admit_instance(self, instance, judge_only: bool = False) -> bool:
        return not self.budget.bounded or self.admit(instance.instance_id, self.needed(instance, judge_only))

    def release(self, key: str) -> None:
        with self._lock:
            self._reserved.pop(key, None)

    def check(self) -> None:
        """Raise BudgetSpent once what was spent reaches the budget (a compile's search, before each evaluation)."""
        calls, cost = self.spend.spent()
        if ((self.budget.max_calls is not None and calls >= self.budget.max_calls)
                or (self.budget.max_cost is not None and cost >= self.budget.max_cost)):
            self.stopped = f"budget of {self.budget.describe()} reached ({calls} calls" + (
                f", ${cost:g})" if cost else ")")
            raise BudgetSpent(self.stopped)

    def summary(self) -> dict | None:
        if not self.budget.bounded:
            return None
        calls, cost = self.spend.spent()
        return {"max_cost": self.budget.max_cost, "max_calls": self.budget.max_calls, "spent": cost,
                "calls": calls, "stopped": self.stopped, "not_run": list(self.not_run)}
