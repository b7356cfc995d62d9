"""Where things live: the tide-dspy checkout (found from this package, never from the working directory) and the
benchmark data folder ($TIDE_DATA, else ../shared/data beside the checkout)."""

from __future__ import annotations

import os
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


def data_root() -> Path:
    """The folder holding workspace/ and repository/: $TIDE_DATA, else ../shared/data beside the checkout."""
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV])
    return PACKAGE_PARENT.parent / "shared" / "data"
