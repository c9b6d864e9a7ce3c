"""cp-observe: live context precision of RAG retrieval as OpenTelemetry spans, events and metrics."""

from __future__ import annotations

from cp_observe._errors import ConfigurationError, CpObserveError, JudgeError, JudgeTransportError
from cp_observe._map import average_precision, context_precision_score
from cp_observe._types import Judge, Judgement, ScoreResult, Usage, Verdict

__all__ = [
    "ConfigurationError",
    "CpObserveError",
    "Judge",
    "JudgeError",
    "JudgeTransportError",
    "Judgement",
    "ScoreResult",
    "Usage",
    "Verdict",
    "average_precision",
    "context_precision_score",
]
__version__ = "0.1.0"
