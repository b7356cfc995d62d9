"""Backbones: named DSPy LMs (hosted, openai-compatible servers) and the embedded llama.cpp default."""

from tide_dspy.backbones.calls import ProviderLM, RetryPolicy
from tide_dspy.backbones.options import (
    JudgeSpec,
    LMOptions,
    add_lm_options,
    add_proposer_options,
    lm_from_options,
    proposer_from_options,
)
from tide_dspy.backbones.registry import (
    BACKBONES,
    DEFAULT_BACKBONE,
    Backbone,
    adapter_for,
    describe_lm,
    get_lm,
    lm_context,
    resolve,
    serializes_calls,
)

__all__ = ["BACKBONES", "DEFAULT_BACKBONE", "Backbone", "JudgeSpec", "LMOptions", "ProviderLM", "RetryPolicy",
           "adapter_for", "add_lm_options", "add_proposer_options", "describe_lm", "get_lm", "lm_context",
           "lm_from_options", "proposer_from_options", "resolve", "serializes_calls"]
