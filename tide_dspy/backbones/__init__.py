"""Backbones: named DSPy LMs (hosted, openai-compatible servers) and the embedded llama.cpp default."""

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

__all__ = ["BACKBONES", "DEFAULT_BACKBONE", "Backbone", "adapter_for", "describe_lm", "get_lm", "lm_context", "resolve", "serializes_calls"]
