from datetime import date, timedelta

from shelf.loans import LOAN_DAYS, due_date, is_overdue, late_fee


def test_due_date_is_three_weeks_later():
    assert due_date(date(2026, 1, 1)) == date(2026, 1, 22)


def test_not_overdue_on_the_due_date():
    checkout = date(2026, 1, 1)
    assert not is_overdue(checkout, checkout + timedelta(days=LOAN_DAYS))
    assert is_overdue(checkout, checkout + timedelta(days=LOAN_DAYS + 1))


def test_late_fee_grows_per_day():
    assert late_fee(0) == 0.0
    assert late_fee(2) == 0.5


def test_late_fee_never_exceeds_the_cap():
    assert late_fee(100) == 5.0
