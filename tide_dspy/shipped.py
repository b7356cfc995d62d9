"""Where the files shipped with tide-dspy live: `optimizers/` and `programs/` at the top of the checkout.

They are found from this module's own location, never from the working directory: `tide` is run in strangers'
folders, and a file there must not replace a shipped config or program. `pip install -e .` keeps the checkout in
place, so both folders are found. A wheel carries the package only: then the folder above the package is
site-packages, not a tide-dspy checkout (it has no tide-dspy pyproject.toml), nothing counts as shipped, and
`--optimizer PATH.yaml`, `$TIDE_OPTIMIZERS`, `--program` and `--templates` name the files instead.
"""

from __future__ import annotations

from tide_dspy.util.paths import CHECKOUT_ROOT

OPTIMIZERS_DIR = CHECKOUT_ROOT / "optimizers" if CHECKOUT_ROOT else None
PROGRAMS_DIR = CHECKOUT_ROOT / "programs" if CHECKOUT_ROOT else None
NOT_SHIPPED = ("this install has no tide-dspy checkout beside the package, so no shipped configs or programs "
               "(install with `pip install -e .` from a checkout to get them)")
