"""cp-observe: live context precision of RAG retrieval as OpenTelemetry spans, events and metrics.

The public names are loaded on first use (PEP 562), so ``import cp_observe`` costs next to nothing and the
decorators load only what the request path needs; litellm is imported only when a judge first calls it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "Budget",
    "ConfigurationError",
    "ContextPrecisionOptions",
    "ContextPrecisionProcessor",
    "ContextPrecisionScorer",
    "CpObserveError",
    "Delivery",
    "EvalItemResult",
    "EvalRunResult",
    "EvaluationRecord",
    "Judge",
    "JudgeError",
    "JudgeTransportError",
    "Judgement",
    "LLMJudge",
    "LexicalJudge",
    "PhoenixSink",
    "RerankLift",
    "ScoreResult",
    "Sink",
    "Usage",
    "Verdict",
    "agent",
    "arun_evals",
    "average_precision",
    "configure",
    "context_precision_score",
    "create_context_precision_scorer",
    "force_evaluation",
    "load_dataset",
    "reranker",
    "retriever",
    "run_evals",
    "write_eval_results",
]
__version__ = "0.1.0"

_WHERE: dict[str, str] = {
    "Budget": "_judging._prompt",
    "ConfigurationError": "_errors",
    "ContextPrecisionOptions": "_offline._scorer",
    "ContextPrecisionProcessor": "_processing._processor",
    "ContextPrecisionScorer": "_offline._scorer",
    "CpObserveError": "_errors",
    "Delivery": "_emission._sinks",
    "EvalItemResult": "_offline._evals",
    "EvalRunResult": "_offline._evals",
    "EvaluationRecord": "_emission._sinks",
    "Judge": "_types",
    "JudgeError": "_errors",
    "JudgeTransportError": "_errors",
    "Judgement": "_types",
    "LLMJudge": "_judging._llm_judge",
    "LexicalJudge": "_judging._lexical",
    "PhoenixSink": "_emission._phoenix",
    "Sink": "_emission._sinks",
    "RerankLift": "_types",
    "ScoreResult": "_types",
    "Usage": "_types",
    "Verdict": "_types",
    "agent": "_capture._decorators",
    "arun_evals": "_offline._evals",
    "average_precision": "_judging._map",
    "configure": "_wiring._configure",
    "context_precision_score": "_judging._map",
    "create_context_precision_scorer": "_offline._scorer",
    "force_evaluation": "_config._sampling",
    "load_dataset": "dataset._record",
    "reranker": "_capture._decorators",
    "retriever": "_capture._decorators",
    "run_evals": "_offline._evals",
    "write_eval_results": "_offline._results",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'cp_observe' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"cp_observe.{module}"), name)
    globals()[name] = value  # later lookups are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from cp_observe._capture._decorators import agent, reranker, retriever
    from cp_observe._config._sampling import force_evaluation
    from cp_observe._emission._phoenix import PhoenixSink
    from cp_observe._emission._sinks import Delivery, EvaluationRecord, Sink
    from cp_observe._errors import ConfigurationError, CpObserveError, JudgeError, JudgeTransportError
    from cp_observe._judging._lexical import LexicalJudge
    from cp_observe._judging._llm_judge import LLMJudge
    from cp_observe._judging._map import average_precision, context_precision_score
    from cp_observe._judging._prompt import Budget
    from cp_observe._offline._evals import EvalItemResult, EvalRunResult, arun_evals, run_evals
    from cp_observe._offline._results import write_eval_results
    from cp_observe._offline._scorer import (
        ContextPrecisionOptions,
        ContextPrecisionScorer,
        create_context_precision_scorer,
    )
    from cp_observe._processing._processor import ContextPrecisionProcessor
    from cp_observe._types import Judge, Judgement, RerankLift, ScoreResult, Usage, Verdict
    from cp_observe._wiring._configure import configure
    from cp_observe.dataset._record import load_dataset
