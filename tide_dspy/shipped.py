"""Where the files shipped with tide-dspy live: the checkout's top-level `optimizers/`, `programs/` and `data/` (the
benchmark sets).

In a checkout (`pip install -e .`) they are the folders beside the package; a wheel carries them inside the package
as `tide_dspy/_shipped/{optimizers,programs,data}` (pyproject.toml maps them there). Either way they are found from this
module's own location, never from the working directory: `tide` is run in strangers' folders, and a file there
must not replace a shipped config or program.
"""

from __future__ import annotations

from pathlib import Path

from tide_dspy.util.paths import CHECKOUT_ROOT


def _shipped(name: str) -> Path | None:
    if CHECKOUT_ROOT is not None:
        return CHECKOUT_ROOT / name
    packaged = Path(__file__).resolve().parent / "_shipped" / name
    return packaged if packaged.is_dir() else None


OPTIMIZERS_DIR = _shipped("optimizers")
PROGRAMS_DIR = _shipped("programs")
DATA_DIR = _shipped("data")
NOT_SHIPPED = ("this install carries no shipped configs or programs (neither a tide-dspy checkout beside the "
               "package nor tide_dspy/_shipped inside it); reinstall tide-dspy, or name the files with --optimizer, "
               "--program and --templates")
