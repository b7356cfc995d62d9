"""Where the files shipped with tide-dspy live: `optimizers/` and `programs/` at the top of the checkout.

They are found from this module's own location, never from the working directory: `tide` is run in strangers'
folders, and a file there must not replace a shipped config or program. `pip install -e .` keeps the checkout in
place, so both folders are found. A wheel carries the package only: then the folder above the package is
site-packages, not a tide-dspy checkout (it has no tide-dspy pyproject.toml), nothing counts as shipped, and
`--optimizer PATH.yaml`, `$TIDE_OPTIMIZERS`, `--program` and `--templates` name the files instead.
"""

from __future__ import annotations

from pathlib import Path


def _checkout_root() -> Path | None:
    root = Path(__file__).resolve().parents[1]
    marker = root / "pyproject.toml"
    try:
        return root if marker.is_file() and 'name = "tide-dspy"' in marker.read_text(encoding="utf-8") else None
    except (OSError, UnicodeDecodeError):
        return None


CHECKOUT_ROOT = _checkout_root()
OPTIMIZERS_DIR = CHECKOUT_ROOT / "optimizers" if CHECKOUT_ROOT else None
PROGRAMS_DIR = CHECKOUT_ROOT / "programs" if CHECKOUT_ROOT else None
NOT_SHIPPED = ("this install has no tide-dspy checkout beside the package, so no shipped configs or programs "
               "(install with `pip install -e .` from a checkout to get them)")
