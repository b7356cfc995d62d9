"""Where the files shipped with tide-dspy live: `optimizers/` and `programs/` at the top of the checkout.

They are found from this module's own location, never from the working directory: `tide` is run in strangers'
folders, and a file there must not replace a shipped config or program. `pip install -e .` keeps the checkout in
place, so both folders are found; a wheel carries the package only, and then `--optimizer PATH.yaml`,
`$TIDE_OPTIMIZERS` and `--program` / `--templates` name the files instead.
"""

from __future__ import annotations

from pathlib import Path

CHECKOUT_ROOT = Path(__file__).resolve().parents[1]
OPTIMIZERS_DIR = CHECKOUT_ROOT / "optimizers"
PROGRAMS_DIR = CHECKOUT_ROOT / "programs"
