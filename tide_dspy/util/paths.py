"""Where things live: the tide-dspy checkout (found from this package, never from the working directory) and the
benchmark data folder ($TIDE_DATA, else ../shared/data beside the checkout)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

DATA_ENV = "TIDE_DATA"
OLD_DATA_ENV = "TIDE_SHARED_DATA"  # deprecated spelling of TIDE_DATA
PACKAGE_PARENT = Path(__file__).resolve().parents[2]


def _checkout_root() -> Path | None:
    """The folder above the package when it is a tide-dspy checkout (its pyproject.toml names tide-dspy), else None
    (a wheel install: the folder above is site-packages)."""
    marker = PACKAGE_PARENT / "pyproject.toml"
    try:
        return PACKAGE_PARENT if marker.is_file() and 'name = "tide-dspy"' in marker.read_text(encoding="utf-8") else None
    except (OSError, UnicodeDecodeError):
        return None


CHECKOUT_ROOT = _checkout_root()


def data_root() -> Path:
    """The folder holding workspace/ and repository/: $TIDE_DATA, else ../shared/data beside the checkout.
    $TIDE_SHARED_DATA is still read, with a deprecation warning."""
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV])
    if os.environ.get(OLD_DATA_ENV):
        warnings.warn(f"{OLD_DATA_ENV} is deprecated; set {DATA_ENV} instead", DeprecationWarning, stacklevel=2)
        return Path(os.environ[OLD_DATA_ENV])
    return PACKAGE_PARENT.parent / "shared" / "data"
