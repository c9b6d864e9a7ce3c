"""cp-observe: live context precision of RAG retrieval as OpenTelemetry spans, events and metrics.

The public names are loaded on first use (PEP 562), so ``import cp_observe`` costs next to nothing and the
decorators load only what the request path needs; litellm is imported only when a judge first calls it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cp_observe._exports import lazy_exports

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

_MODULES: dict[str, tuple[str, ...]] = {  # where each public name is defined
    "_capture._decorators": ("agent", "reranker", "retriever"),
    "_config._sampling": ("force_evaluation",),
    "_emission._phoenix": ("PhoenixSink",),
    "_emission._sinks": ("Delivery", "EvaluationRecord", "Sink"),
    "_errors": ("ConfigurationError", "CpObserveError", "JudgeError", "JudgeTransportError"),
    "_judging._lexical": ("LexicalJudge",),
    "_judging._llm_judge": ("LLMJudge",),
    "_judging._map": ("average_precision", "context_precision_score"),
    "_judging._prompt": ("Budget",),
    "_offline._evals": ("EvalItemResult", "EvalRunResult", "arun_evals", "run_evals"),
    "_offline._results": ("write_eval_results",),
    "_offline._scorer": ("ContextPrecisionOptions", "ContextPrecisionScorer", "create_context_precision_scorer"),
    "_processing._processor": ("ContextPrecisionProcessor",),
    "_types": ("Judge", "Judgement", "RerankLift", "ScoreResult", "Usage", "Verdict"),
    "_wiring._configure": ("configure",),
    "dataset._record": ("load_dataset",),
}
__getattr__, __dir__ = lazy_exports(__name__, _MODULES, __all__)

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
