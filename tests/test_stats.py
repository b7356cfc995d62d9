"""The table statistics on hand-checked cases: runs averaged per instance, the bootstrap interval, the paired
sign-flip test's exact p values and where they cannot reach 0.05."""

from __future__ import annotations

import pytest

from tide_dspy.metrics.stats import compare, instance_means, mean_interval, min_sign_flip_p


def test_runs_are_averaged_per_instance_first():
    assert instance_means([("a", 0.2), ("b", 0.5), ("a", 0.4), ("b", None), ("c", None)]) == {
        "a": pytest.approx(0.3), "b": 0.5}


def test_the_interval_holds_the_mean_and_is_seeded():
    values = [0.0, 0.1, 0.3, 0.35, 0.6, 0.9]
    first, again = mean_interval(values), mean_interval(values)
    assert first == again and first.n == 6
    assert first.mean == pytest.approx(sum(values) / 6) and first.low < first.mean < first.high
    assert 0.0 <= first.low and first.high <= 0.9


def test_one_instance_has_no_interval_and_equal_values_a_point():
    assert mean_interval([0.4]) == mean_interval([0.4]).__class__(0.4, None, None, 1)
    same = mean_interval([0.2, 0.2, 0.2])
    assert same.low == same.high == same.mean == pytest.approx(0.2)
    assert mean_interval([]).mean is None


def test_four_instances_all_better_give_the_exact_p_of_one_eighth_and_say_it_cannot_reach_005():
    c = compare({"a": 0.5, "b": 0.6, "c": 0.7, "d": 0.8}, {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.35})
    assert c.n == 4 and c.diff == pytest.approx(0.4125)
    assert c.p == pytest.approx(2 / 16)  # 2 of the 16 sign assignments are as extreme (all +, all -)
    assert c.min_p == pytest.approx(0.125) and not c.can_reach and "out of reach" in c.note
    assert c.low <= c.diff <= c.high


def test_six_instances_all_better_can_reach_005():
    method = {str(i): 0.5 + i / 100 for i in range(6)}
    baseline = {str(i): 0.1 for i in range(6)}
    c = compare(method, baseline)
    assert c.p == pytest.approx(2 / 64) and c.can_reach and c.note == ""
    assert c.effect_size == pytest.approx(c.diff / 0.018708286933869707)


def test_mixed_signs_give_the_counted_permutation_p():
    # differences +3, -1, +2: |mean| 4/3; as extreme: (+3,-1,+2), (+3,+1,+2), and their negations -> 4 of 8
    c = compare({"a": 3.0, "b": 0.0, "c": 2.0}, {"a": 0.0, "b": 1.0, "c": 0.0})
    assert c.p == pytest.approx(4 / 8)


def test_equal_methods_give_p_one_and_no_effect_size():
    c = compare({"a": 0.3, "b": 0.4}, {"a": 0.3, "b": 0.4})
    assert (c.diff, c.p, c.effect_size, c.nonzero) == (0.0, 1.0, None, 0)


def test_only_shared_instances_are_compared():
    assert compare({"a": 1.0}, {"b": 0.0}) is None
    assert compare({"a": 1.0, "b": 0.5}, {"a": 0.0}).n == 1


def test_the_smallest_p_halves_with_each_nonzero_difference():
    assert [min_sign_flip_p(m) for m in (0, 1, 4, 5, 6)] == [1.0, 1.0, 0.125, 0.0625, 0.03125]
