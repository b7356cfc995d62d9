"""How a compile's optimizer spends calls besides the validation before and after: one plan per DSPy optimizer,
read off its algorithm (dspy/teleprompt) and the config's arguments. The dry run prices the plan; the compile's
progress bar counts its evaluations where the arguments fix them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class OptimizerPlan:
    """Passes of the program over the train part and over the validation part (fractions where the optimizer
    reads batches), and proposal calls (`proposal_prompt`: their prompt size when it is not the usual one).
    `exact`: the arguments fix the evaluations (else the plan approximates: the optimizer may stop early)."""

    train_passes: float
    val_passes: float
    proposals: int
    note: str
    proposal_prompt: int | None = None
    exact: bool = True

    def evaluations(self, n_train: int, n_val: int) -> int | None:
        """The (candidate, instance) evaluations the optimizer makes, for the progress bar; None when not fixed."""
        return round(self.train_passes * n_train + self.val_passes * n_val) if self.exact else None


def copro(init: dict, comp: dict, n_train: int, n_val: int, predictors: int, round_prompt: int) -> OptimizerPlan:
    """Each of `depth` steps scores the newest `breadth` candidates of each predictor on the train part; with
    several predictors every candidate so far is scored again with the others' best (copro_optimizer.py), so step d
    scores d x breadth. Proposals: breadth - 1 candidates, then breadth at each later step, per predictor (DSPy
    sends a call's n candidates as n requests)."""
    breadth, depth = int(init.get("breadth", 10)), int(init.get("depth", 3))
    per_predictor = breadth * depth if predictors == 1 else breadth * depth * (depth + 1) // 2
    return OptimizerPlan(per_predictor * predictors, 0, (breadth - 1 + (depth - 1) * breadth) * predictors,
                         f"COPRO: {breadth} candidates x {depth} steps per predictor ({predictors}), each scored on "
                         f"the {n_train} train instances")


def miprov2(init: dict, comp: dict, n_train: int, n_val: int, predictors: int, round_prompt: int) -> OptimizerPlan:
    """The default program, then each trial, on the validation part; proposals: the candidates per predictor."""
    n = {"light": 6, "medium": 12, "heavy": 18}.get(init.get("auto"), int(init.get("num_candidates") or 6))
    exact = init.get("auto") is None and isinstance(comp.get("num_trials"), int)
    trials = int(comp.get("num_trials") or max(2 * predictors * math.log2(max(n, 2)), 1.5 * n))
    return OptimizerPlan(0, trials + 1, n * predictors,
                         f"MIPROv2: {n} candidates per predictor, {trials} trials on the {n_val} validation "
                         "instances", exact=exact)


def gepa(init: dict, comp: dict, n_train: int, n_val: int, predictors: int, round_prompt: int) -> OptimizerPlan:
    metric_calls = int(init.get("max_metric_calls") or 0)
    if not metric_calls:
        raise ValueError("GEPA without max_metric_calls has no fixed budget to estimate; set it with "
                         "--opt init.max_metric_calls=N")
    minibatch = int(init.get("reflection_minibatch_size", 3))
    return OptimizerPlan(metric_calls / max(n_train, 1), 0, math.ceil(metric_calls / max(minibatch, 1) / 2),
                         f"GEPA: {metric_calls} metric calls; each reflection reads {minibatch} examples",
                         proposal_prompt=minibatch * round_prompt)


def simba(init: dict, comp: dict, n_train: int, n_val: int, predictors: int, round_prompt: int) -> OptimizerPlan:
    bsize = min(int(init.get("bsize", 32)), n_train)
    candidates, steps = int(init.get("num_candidates", 6)), int(init.get("max_steps", 8))
    return OptimizerPlan(steps * bsize * (candidates + 1) / max(n_train, 1), 0, steps * candidates,
                         f"SIMBA: {steps} steps x {candidates} candidates on batches of {bsize}", exact=False)


def bootstrap(init: dict, comp: dict, n_train: int, n_val: int, predictors: int, round_prompt: int) -> OptimizerPlan:
    return OptimizerPlan(1.0, 0, 0, "BootstrapFewShot: at most one run per train instance")


def labeled(init: dict, comp: dict, n_train: int, n_val: int, predictors: int, round_prompt: int) -> OptimizerPlan:
    return OptimizerPlan(0.0, 0, 0, "LabeledFewShot: no run; the demos are the labels")


@functools.cache
def _plans() -> dict[type, object]:
    import dspy.teleprompt as teleprompt

    return {teleprompt.COPRO: copro, teleprompt.MIPROv2: miprov2, teleprompt.GEPA: gepa, teleprompt.SIMBA: simba,
            teleprompt.BootstrapFewShot: bootstrap, teleprompt.LabeledFewShot: labeled}


def optimizer_plan(optimizer: type, init: dict, comp: dict, *, n_train: int, n_val: int, predictors: int,
                   round_prompt: int = 0) -> OptimizerPlan:
    """The plan of the DSPy optimizer class `optimizer` with these arguments. Raises for one it has no plan for."""
    plan = _plans().get(optimizer)
    if plan is None:
        raise ValueError(f"no call plan for optimizer {optimizer.__name__}; the dry run knows COPRO, MIPROv2, GEPA, "
                         "SIMBA, BootstrapFewShot and LabeledFewShot")
    return plan(init, comp, n_train, n_val, predictors, round_prompt)
