"""The trial log of a compile: every evaluation an optimizer scored, so an interrupted compile resumes, a bound on
what it may spend, and a progress bar.

An optimizer scores candidate programs (instructions, demos) on instances. `Logged` wraps the program it is given:
each (candidate, instance) it runs is appended to `trials.jsonl` with its prediction and score, and a rerun with the
same program, data, metric, judge and LM answers those from the log without an LM call. Optimizers propose their
candidates through the LM, and DSPy's cache replays those proposals, so a rerun walks the same path and goes on
where it stopped. A candidate is named by the hash of its predictors' state, so any optimizer (COPRO, MIPROv2,
GEPA, SIMBA) gets this without knowing of it. Bootstrapping optimizers read the traces of a live run, so under a
trace an evaluation always runs.

A `cost.guard.Guard` bounds the LM calls and the dollars of the whole compile, the proposer's included; it is
checked before each evaluation, so a stop comes at most one evaluation past the bound. `BudgetSpent` is then raised
through the optimizer, and the best candidate scored so far stands in for its result.
"""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path

import dspy
from tqdm import tqdm

from tide_dspy.cost.guard import Budget, Guard
from tide_dspy.schemas import Finding, Instance, RoundRecord
from tide_dspy.util.hashing import sha256_hex

LOG_NAME = "trials.jsonl"


def tracing() -> bool:
    """Whether a caller collects DSPy traces in a list of its own (`dspy.context(trace=[])`, as bootstrapping and
    GEPA's reflection do): a logged answer carries no trace, so such an evaluation runs live. Every dspy.context
    copies the global trace list, so only another list means a collector."""
    settings_module = importlib.import_module("dspy.dsp.utils.settings")  # the module, not its Settings object
    current = dspy.settings.trace
    return current is not None and current is not settings_module.main_thread_config.get("trace")


def candidate_key(module: dspy.Module) -> str:
    """A short hash of a candidate's predictor states (instructions, field prefixes, demos), without LMs."""
    return sha256_hex(json.dumps(predictor_states(module), sort_keys=True, default=str))[:16]


def predictor_states(module: dspy.Module) -> dict[str, dict]:
    """name -> DSPy state of each predictor (signature with instructions and field prefixes, demos), without LMs."""
    states = {}
    for name, predictor in module.named_predictors():
        states[name] = predictor.dump_state()
        states[name].pop("lm", None)
    return states


def as_prediction(row: dict) -> dspy.Prediction:
    """The prediction a logged evaluation returned, rebuilt from its row."""
    from tide_dspy.scan import ScanRecord

    scan = row["prediction"].get("scan")
    return dspy.Prediction(findings=[Finding.model_validate(f) for f in row["prediction"]["findings"]],
                           rounds=[RoundRecord.model_validate(r) for r in row["prediction"]["rounds"]],
                           scan=ScanRecord.model_validate(scan) if scan is not None else None)


def _dump(pred) -> dict:
    scan = pred.get("scan") if hasattr(pred, "get") else None
    return {"findings": [f.model_dump() for f in pred.findings], "rounds": [r.model_dump() for r in pred.rounds],
            "scan": scan.model_dump() if scan is not None else None}


class TrialLog:
    """`folder/trials.jsonl`: a header line (what the scores depend on), then one line per scored evaluation.

    A log whose header differs from this compile's (another program shape, data, metric, judge or model) is not
    continued: pass fresh=True (`tide compile --fresh`) or another output folder."""

    def __init__(self, folder: str | Path, header: dict, metric, *, guard: Guard | None = None, fresh: bool = False,
                 expected: int | None = None, progress: bool = True):
        """`guard` bounds the search and counts its LM calls (none: no bound, no LM to count)."""
        self.path = Path(folder) / LOG_NAME
        self.header, self.metric, self.guard = header, metric, guard or Guard(Budget(), {})
        self.rows: dict[tuple[str, str], dict] = {}
        self.states: dict[str, dict] = {}  # candidate key -> predictor states, in the order first scored
        self.replayed = self.live = 0
        self.live_seconds = 0.0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fresh and self.path.exists():
            self.path.unlink()
        if self.path.exists():
            self._load()
        else:
            self._append({"header": header})
        self.resumed = len(self.rows)
        self.bar = tqdm(total=expected, desc="compile", unit="eval", disable=not progress,
                        bar_format="{desc}: {n_fmt}/{total_fmt} evaluations [{elapsed}] {postfix}")

    def __deepcopy__(self, memo):
        return self  # one log per compile, shared by every copy an optimizer makes of the program

    def _append(self, record: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")

    def _load(self) -> None:
        from tide_dspy.evaluation import trim_partial_line

        trim_partial_line(self.path)
        lines = [line for line in self.path.read_text().splitlines() if line.strip()]
        earlier = (json.loads(lines[0]).get("header") if lines else None) or {}
        if earlier != self.header:
            changed = sorted(k for k in {*earlier, *self.header} if earlier.get(k) != self.header.get(k))
            raise ValueError(f"{self.path}: these trials were scored under another compile setup (differs in "
                             f"{', '.join(changed) or 'its header'}); rerun with the same options, start over "
                             "with --fresh, or compile into another --programs folder")
        for n, line in enumerate(lines[1:], 2):
            try:
                row = json.loads(line)
                self.rows[row["candidate"], row["instance_id"]] = row
                self.states.setdefault(row["candidate"], row["state"])
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ValueError(f"{self.path}: line {n} is not a trial row; start over with --fresh") from None

    # ---- what the progress bar and the provenance report ----
    def scores(self) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {key: [] for key in self.states}
        for (key, _), row in self.rows.items():
            found[key].append(row["score"])
        return found

    def best(self) -> tuple[str, float] | None:
        """Among the candidates scored on the most instances, the one with the highest mean (the first on a tie):
        a candidate cut off after one instance does not outrank those scored on all."""
        scores = self.scores()
        if not scores:
            return None
        most = max(len(v) for v in scores.values())
        order = list(self.states)
        key = max((k for k, v in scores.items() if len(v) == most),
                  key=lambda k: (sum(scores[k]) / most, -order.index(k)))
        return key, sum(scores[key]) / most

    def summary(self) -> dict:
        calls, cost = self.guard.spend.spent()
        best, scores = self.best(), self.scores()
        return {"trials": len(self.states), "evaluations": len(self.rows), "resumed": self.resumed,
                "replayed": self.replayed, "live": self.live, "lm_calls": calls, "cost_usd": cost or None,
                "best": best[0] if best else None, "best_score": round(best[1], 4) if best else None,
                "stopped": self.guard.stopped,
                "candidates": [{"key": k, "instructions": {n: s["signature"]["instructions"] for n, s in v.items()},
                                "scores": scores[k]} for k, v in self.states.items()]}

    def _show(self) -> None:
        best = self.best()
        calls, _ = self.guard.spend.spent()
        left = self.bar.total - self.bar.n if self.bar.total else 0
        eta = f", ETA {left * self.live_seconds / self.live / 60:.0f} min" if left > 0 and self.live else ""
        trials = f"{len(self.states)} trials, best {best[1]:.3f}" if best else "no trial yet"
        self.bar.set_postfix_str(f"{trials}, {calls} LM calls{eta}")

    # ---- the evaluations ----
    def evaluate(self, module: dspy.Module, target: dspy.Module, case: Instance, **kwargs) -> dspy.Prediction:
        """`target`'s prediction for `case`, as the candidate `module` (its wrapper): from the log when scored
        before, else run live (after a budget check), scored with the metric and logged."""
        key = candidate_key(module)
        row = self.rows.get((key, case.instance_id))
        if row is not None and not tracing():
            self.replayed += 1
            self.bar.update(1)
            self._show()
            return as_prediction(row)
        self.guard.check()
        start, (calls_before, _) = time.perf_counter(), self.guard.spend.spent()
        pred = target(case, **kwargs)
        seconds = time.perf_counter() - start
        score = float(self.metric(dspy.Example(case=case).with_inputs("case"), pred))
        state = self.states.get(key) or predictor_states(module)
        row = {"candidate": key, "instance_id": case.instance_id, "score": score,
               "lm_calls": self.guard.spend.spent()[0] - calls_before, "seconds": round(seconds, 1), "state": state,
               "prediction": _dump(pred)}
        self.rows[key, case.instance_id] = row
        self.states.setdefault(key, state)
        self._append(row)
        self.live, self.live_seconds = self.live + 1, self.live_seconds + seconds
        self.bar.update(1)
        self._show()
        return pred

    def close(self) -> None:
        self.bar.close()


class Logged(dspy.Module):
    """The program an optimizer sees: `target`, with each evaluation logged in (and replayed from) `log`."""

    def __init__(self, target: dspy.Module, log: TrialLog):
        super().__init__()
        self.target = target
        self.log = log

    def forward(self, case: Instance, **kwargs) -> dspy.Prediction:
        return self.log.evaluate(self, self.target, case, **kwargs)

    def candidate(self, key: str) -> dspy.Module:
        """A copy of the target with the predictor states of the logged candidate `key`."""
        states = self.log.states[key]
        chosen = self.target.deepcopy()
        for name, predictor in chosen.named_predictors():
            predictor.load_state({**states[f"target.{name}"], "lm": None})
        return chosen
