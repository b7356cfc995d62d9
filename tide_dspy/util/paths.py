"""Where things live: the tide-dspy checkout (found from this package, never from the working directory), and the
environment variable that names another benchmark data folder (tide_dspy.data.sets reads it)."""

from __future__ import annotations

from pathlib import Path

DATA_ENV = "TIDE_DATA"  # the only environment variable that names the data folder
PACKAGE_PARENT = Path(__file__).resolve().parents[2]


def _checkout_root() -> Path | None:
    """The folder above the package when it is a tide-dspy checkout (its pyproject.toml names tide-dspy), else None
    (a wheel install: the folder above is site-packages)."""
    marker = PACKAGE_PARENT / "pyproject.toml"
    try:
        return (
            PACKAGE_PARENT if marker.is_file() and 'name = "tide-dspy"' in marker.read_text(encoding="utf-8") else None
        )
    except (OSError, UnicodeDecodeError):
        return None


CHECKOUT_ROOT = _checkout_root()
