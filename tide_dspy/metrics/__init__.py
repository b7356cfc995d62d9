"""The TIDE metric: retrieval-only matching, coverage / precision / F1 per component, judges, DSPy metrics."""

from tide_dspy.metrics.dspy_metrics import (
                                            component_value,
                                            feedback_text,
                                            scan_feedback_metric,
                                            scan_recall_metric,
                                            tide_feedback_metric,
                                            tide_metric,
)
from tide_dspy.metrics.judges import LLMJudge, ProxyJudge, make_judge, normalise_likert
from tide_dspy.metrics.scoring import (
                                            COMPONENTS,
                                            InstanceScore,
                                            PairRecord,
                                            aggregate,
                                            match,
                                            retrieval_overlap,
                                            score_instance,
)

__all__ = [
    "COMPONENTS",
    "InstanceScore",
    "LLMJudge",
    "PairRecord",
    "ProxyJudge",
    "aggregate",
    "component_value",
    "feedback_text",
    "make_judge",
    "match",
    "normalise_likert",
    "retrieval_overlap",
    "scan_feedback_metric",
    "scan_recall_metric",
    "score_instance",
    "tide_feedback_metric",
    "tide_metric",
]
