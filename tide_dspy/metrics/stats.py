"""Statistics over instances for the results tables: each method's mean with a bootstrap confidence interval, and a
method against another on the same instances (the paired difference with its interval, a paired test with its p
value and effect size).

The unit is the instance: a score's runs are averaged per instance first (`instance_means`), so repeated runs
narrow each instance's value rather than multiply the sample. All resampling is scipy's (`scipy.stats.bootstrap`,
`scipy.stats.permutation_test`), seeded, so a table is the same every time it is written.

The paired test is the sign-flip permutation test of the mean difference: under the null hypothesis each
instance's difference is as likely negative as positive, so the p value is the share of the 2^n sign assignments
whose mean difference is at least as far from 0 as the observed one (exact up to 2^EXACT_UP_TO assignments, else
RESAMPLES random ones). It assumes no distribution, which matters at the handful of instances a benchmark holds;
its smallest possible p value is 2 / 2^m for m non-zero differences, so 5 or fewer instances can never reach
p < 0.05 (`Comparison.note` says so).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

CONFIDENCE = 0.95
RESAMPLES = 10_000
SEED = 0
EXACT_UP_TO = 16  # instances: 2^16 sign assignments are enumerated; beyond, RESAMPLES random ones
ALPHA = 0.05
TEST_NAME = "paired sign-flip permutation test of the mean difference (two-sided)"
INTERVAL_NAME = (f"{CONFIDENCE:.0%} percentile bootstrap over instances ({RESAMPLES:,} resamples, seed {SEED}); "
                 "runs are averaged per instance first")


def instance_means(values: Iterable[tuple[str, float | None]]) -> dict[str, float]:
    """(instance id, value) pairs, one per run, as each instance's mean over its runs (None values left out; an
    instance with none is left out)."""
    by_instance: dict[str, list[float]] = {}
    for instance_id, value in values:
        if value is not None:
            by_instance.setdefault(instance_id, []).append(float(value))
    return {instance_id: float(np.mean(vs)) for instance_id, vs in by_instance.items()}


@dataclass(frozen=True)
class Interval:
    """A mean over n instances and its bootstrap interval (None, None below 2 instances)."""

    mean: float | None
    low: float | None
    high: float | None
    n: int


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def mean_interval(values: Iterable[float], seed: int = SEED) -> Interval:
    """The mean of `values` (one per instance) with its percentile bootstrap interval."""
    data = np.asarray(list(values), dtype=float)
    if data.size == 0:
        return Interval(None, None, None, 0)
    mean = float(data.mean())
    if data.size < 2:
        return Interval(mean, None, None, 1)
    if np.all(data == data[0]):
        return Interval(mean, mean, mean, int(data.size))  # every resample is the same
    ci = scipy_stats.bootstrap((data,), np.mean, confidence_level=CONFIDENCE, n_resamples=RESAMPLES,
                               method="percentile", random_state=_rng(seed)).confidence_interval
    return Interval(mean, float(ci.low), float(ci.high), int(data.size))


@dataclass(frozen=True)
class Comparison:
    """A method against a baseline on the same n instances: the mean difference (method - baseline) with its
    paired bootstrap interval, the sign-flip test's p value, the effect size d_z (mean difference over the standard
    deviation of the differences; None when they do not vary), and how many differences are not 0."""

    diff: float
    low: float | None
    high: float | None
    p: float
    effect_size: float | None
    n: int
    nonzero: int

    @property
    def min_p(self) -> float:
        """The smallest p the test could give on these differences (min_sign_flip_p)."""
        return min_sign_flip_p(self.nonzero)

    @property
    def can_reach(self) -> bool:
        """Whether p < ALPHA is possible at all with these instances."""
        return self.min_p < ALPHA

    @property
    def note(self) -> str:
        """'' or why p cannot fall below ALPHA here."""
        if self.can_reach:
            return ""
        return (f"n={self.n} instance(s) ({self.nonzero} with a non-zero difference): the smallest p this test can "
                f"give is {self.min_p:.3g}, so p < {ALPHA} is out of reach")


def min_sign_flip_p(nonzero: int) -> float:
    """The smallest two-sided p of the exact sign-flip test with `nonzero` non-zero differences: 2 / 2^nonzero."""
    return min(1.0, 2.0 / 2 ** nonzero)


def _mean_difference(x, y, axis=-1):
    return np.mean(x - y, axis=axis)


def compare(method: dict[str, float], baseline: dict[str, float], seed: int = SEED) -> Comparison | None:
    """`method` against `baseline` ({instance id: value}) on the instances both have; None when they share none."""
    shared = sorted(set(method) & set(baseline))
    if not shared:
        return None
    a = np.array([method[i] for i in shared], dtype=float)
    b = np.array([baseline[i] for i in shared], dtype=float)
    d = a - b
    n, nonzero = len(shared), int(np.count_nonzero(d))
    diff = float(d.mean())
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    effect = diff / sd if sd > 0 else None
    if nonzero == 0:
        return Comparison(diff, diff if n > 1 else None, diff if n > 1 else None, 1.0, effect, n, 0)
    if n == 1:  # both signs of one difference are as extreme: p = 1, and no interval
        return Comparison(diff, None, None, 1.0, None, 1, nonzero)
    ci = scipy_stats.bootstrap((a, b), _mean_difference, paired=True, vectorized=True, confidence_level=CONFIDENCE,
                               n_resamples=RESAMPLES, method="percentile", random_state=_rng(seed)).confidence_interval
    low, high = float(ci.low), float(ci.high)
    resamples = np.inf if n <= EXACT_UP_TO else RESAMPLES
    test = scipy_stats.permutation_test((a, b), _mean_difference, permutation_type="samples", vectorized=True,
                                        n_resamples=resamples, alternative="two-sided", random_state=_rng(seed))
    return Comparison(diff, low, high, float(min(1.0, test.pvalue)), effect, n, nonzero)
