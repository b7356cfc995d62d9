"""Backbones: named DSPy LMs (hosted, openai-compatible servers) and the embedded llama.cpp default.

Names are imported on first use, so that the provider rules load without DSPy: `tide --help` stays fast.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "ProviderLM": "tide_dspy.backbones.calls",
    "JudgeSpec": "tide_dspy.backbones.options", "LMOptions": "tide_dspy.backbones.options",
    "lm_from_options": "tide_dspy.backbones.options",
"proposer_from_options": "tide_dspy.backbones.options",
    **{name: "tide_dspy.backbones.registry" for name in (
        "BACKBONES", "DEFAULT_BACKBONE", "Backbone", "adapter_for", "describe_lm", "get_lm", "lm_context", "resolve",
        "serializes_calls", "sized_as")},
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tide_dspy.backbones' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
