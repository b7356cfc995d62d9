"""`tide discover`: TIDE on a user's own repository or workspace export, with a report to act on."""

from tide_dspy.product.report import write_report
from tide_dspy.product.result import DiscoverResult
from tide_dspy.product.run import discover_repository, discover_workspace

__all__ = ["DiscoverResult", "discover_repository", "discover_workspace", "write_report"]
