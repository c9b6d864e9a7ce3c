"""The judge's identity: model, prompt version and kind, recorded on every evaluation.

A judge model or prompt change moves scores the way a retrieval regression would; recording who judged lets the
dashboard mark the change and lets series be split by it. Derived once per judge, never per evaluation.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from cp_observe import _names as n

__all__ = ["JudgeIdentity", "judge_identity"]

_NONE = "none"


#: Annotator kinds a judge may declare for annotation sinks (Phoenix's ``annotator_kind``).
_ANNOTATORS = frozenset({n.ANNOTATOR_LLM, n.ANNOTATOR_CODE, "HUMAN"})


@dataclass(frozen=True, slots=True)
class JudgeIdentity:
    """Who judged: the kind (``llm``, ``lexical`` or ``custom``) and the prompt version; the model is per result.

    ``annotator`` is the same identity in the annotation vocabulary of sinks such as Phoenix: ``LLM`` for an LLM
    judge, ``CODE`` otherwise (the lexical judge is arithmetic), unless the judge declares ``annotator_kind``.
    """

    kind: str
    prompt_version: str
    annotator: str = n.ANNOTATOR_CODE

    @property
    def declared_prompt_version(self) -> str | None:
        """The prompt version, or None when the judge has none."""
        return None if self.prompt_version == _NONE else self.prompt_version


def judge_identity(judge: Any) -> JudgeIdentity:
    """The identity of ``judge``; a custom judge may declare ``kind`` and ``prompt_version`` attributes.

    Reading them never raises: a property that fails on a user's judge gives ``custom`` / ``none``.
    """
    declared_annotator = _declared(judge, "annotator_kind", "")
    # Neither judge module is imported to ask: when one is not loaded, no judge can be its instance (the lexical
    # judge's word tables cost an LLM-judged service ~9 ms at configure()).
    lexical_module = sys.modules.get("cp_observe._judging._lexical")
    if lexical_module is not None and isinstance(judge, lexical_module.LexicalJudge):
        return JudgeIdentity(n.JUDGE_KIND_LEXICAL, _NONE, _annotator(declared_annotator, n.ANNOTATOR_CODE))
    llm_module = sys.modules.get("cp_observe._judging._llm_judge")
    if llm_module is not None and isinstance(judge, llm_module.LLMJudge):
        from cp_observe._judging._prompt import PROMPT_VERSION

        return JudgeIdentity(
            n.JUDGE_KIND_LLM,
            _declared(judge, "prompt_version", PROMPT_VERSION),
            _annotator(declared_annotator, n.ANNOTATOR_LLM),
        )
    return JudgeIdentity(
        _declared(judge, "kind", n.JUDGE_KIND_CUSTOM),
        _declared(judge, "prompt_version", _NONE),
        _annotator(declared_annotator, n.ANNOTATOR_CODE),
    )


def _annotator(declared: str, default: str) -> str:
    return declared if declared in _ANNOTATORS else default


def _declared(judge: Any, name: str, default: str) -> str:
    try:
        value = getattr(judge, name, None)
    except Exception:  # noqa: BLE001 - a user's property must not stop the evaluation
        return default
    return str(value)[:64] if isinstance(value, str) and value else default
