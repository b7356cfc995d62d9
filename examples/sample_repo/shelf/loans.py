from datetime import date, timedelta

LOAN_DAYS = 21


def due_date(checkout: date) -> date:
    return checkout + timedelta(days=LOAN_DAYS)


def is_overdue(checkout: date, today: date) -> bool:
    """A loan is overdue the day after its due date."""
    return today >= due_date(checkout)


def late_fee(days_late: int, per_day: float = 0.25, cap: float = 5.0) -> float:
    """The fee grows per day late but never exceeds `cap`."""
    if days_late <= 0:
        return 0.0
    return max(days_late * per_day, cap)
