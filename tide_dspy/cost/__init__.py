"""The cost wing: what a run's LM calls cost and what fits before any call (prices.py, estimate.py), how many calls
an optimizer makes (optimizers.py), what a run has spent and the budget that stops it (usage.py, guard.py)."""
