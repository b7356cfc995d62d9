"""Batch mode: every LM call of a run sent through its provider's batch API, at the batch price.

`batch_lm(lm, collector, role)` gives an LM whose calls wait in batches (batch.engine); `Collector` gathers the
calls of every worker into batches, polls them and answers the callers (batch.collector); `Ledger` keeps the
batches of a run folder so a stopped run resumes without sending anything twice (batch.ledger); batch.clients
speaks each provider's batch API (LiteLLM's file and batch calls where it has them).
"""

from tide_dspy.batch.collector import BatchLineFailed, BatchSettings, Collector
from tide_dspy.batch.engine import BatchEngine, batch_judge, batch_lm
from tide_dspy.batch.ledger import LEDGER, Ledger

__all__ = ["LEDGER", "BatchEngine", "BatchLineFailed", "BatchSettings", "Collector", "Ledger", "batch_judge",
           "batch_lm"]
