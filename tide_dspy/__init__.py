"""tide-dspy: template-guided iterative discovery of hidden problems, as a DSPy program.

    import dspy, tide_dspy
    instance = tide_dspy.load_benchmark(setting, split="test").instances[0]   # the shipped set of a setting
    lm = tide_dspy.get_lm("local")
    program = tide_dspy.shipped_program(setting, lm)   # or tide_dspy.load_program(path or models:/ URI)
    with dspy.context(lm=lm):
        prediction = program(instance)   # Prediction(findings, rounds)

Names are imported on first use, so `import tide_dspy` stays light (no dspy, mlflow or model loading).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    # programs
    "TIDE": "tide_dspy.discovery",
    "SingleAgent": "tide_dspy.discovery",
    "MultiAgent": "tide_dspy.discovery",
    "DiscoveryProgram": "tide_dspy.discovery",
    "build_program": "tide_dspy.programs",
    "save_program": "tide_dspy.programs",
    "load_program": "tide_dspy.programs",
    "shipped_program": "tide_dspy.product.run",
    # schemas
    "Artifact": "tide_dspy.schemas",
    "Action": "tide_dspy.schemas",
    "ChosenAction": "tide_dspy.schemas",
    "GoldProblem": "tide_dspy.schemas",
    "Instance": "tide_dspy.schemas",
    "Finding": "tide_dspy.schemas",
    "Template": "tide_dspy.schemas",
    "RoundRecord": "tide_dspy.schemas",
    # templates, data, backbones, scoring
    "TemplateLibrary": "tide_dspy.templates",
    "load_instances": "tide_dspy.data",
    "load_benchmark": "tide_dspy.data",
    "data_path": "tide_dspy.data.selection",
    "get_lm": "tide_dspy.backbones",
    "score_instance": "tide_dspy.metrics",
    "evaluate": "tide_dspy.evaluation",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tide_dspy' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
