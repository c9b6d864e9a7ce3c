"""cp-observe: live context precision of RAG retrieval as OpenTelemetry spans, events and metrics."""

from __future__ import annotations

from cp_observe._configure import configure
from cp_observe._decorators import agent, retriever
from cp_observe._errors import ConfigurationError, CpObserveError, JudgeError, JudgeTransportError
from cp_observe._evals import EvalItemResult, EvalRunResult, arun_evals, run_evals
from cp_observe._lexical import LexicalJudge
from cp_observe._llm_judge import LLMJudge
from cp_observe._map import average_precision, context_precision_score
from cp_observe._processor import ContextPrecisionProcessor
from cp_observe._prompt import Budget
from cp_observe._sampling import force_evaluation
from cp_observe._scorer import ContextPrecisionOptions, ContextPrecisionScorer, create_context_precision_scorer
from cp_observe._types import Judge, Judgement, ScoreResult, Usage, Verdict

__all__ = [
    "Budget",
    "ConfigurationError",
    "ContextPrecisionOptions",
    "ContextPrecisionProcessor",
    "ContextPrecisionScorer",
    "CpObserveError",
    "EvalItemResult",
    "EvalRunResult",
    "Judge",
    "JudgeError",
    "JudgeTransportError",
    "Judgement",
    "LLMJudge",
    "LexicalJudge",
    "ScoreResult",
    "Usage",
    "Verdict",
    "agent",
    "arun_evals",
    "average_precision",
    "configure",
    "context_precision_score",
    "create_context_precision_scorer",
    "force_evaluation",
    "retriever",
    "run_evals",
]
__version__ = "0.1.0"
