"""The judge's identity: model, prompt version and kind, recorded on every evaluation.

A judge model or prompt change moves scores the way a retrieval regression would; recording who judged lets the
dashboard mark the change and lets series be split by it. Derived once per judge, never per evaluation.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from cp_observe import _names as n

__all__ = ["JudgeIdentity", "judge_identity", "model_family", "same_family"]

_NONE = "none"

# --- whether a reranker's model is the judge's own kind ---------------------------------------------------------
# LLM judges favour LLM rerankers, most of all their own model: in TREC RAG studies an LLM-reranked run ranked far
# higher under LLM judging than under human judging. The rule is a string rule on litellm-style model strings,
# documented in model_family; nothing is looked up.
#: Provider prefixes that serve one vendor's models under another name.
_PROVIDER_FAMILY = {
    "azure": "openai", "azure_ai": "openai", "text-completion-openai": "openai", "openai": "openai",
    "gemini": "google", "vertex_ai": "google", "vertex_ai_beta": "google", "palm": "google",
    "anthropic": "anthropic", "cohere": "cohere", "cohere_chat": "cohere", "mistral": "mistral",
    "codestral": "mistral", "deepseek": "deepseek", "xai": "xai", "voyage": "voyage", "jina_ai": "jina",
}
#: Providers that host many vendors' models (and cloud marketplaces): the family comes from the model name.
_HOSTS = frozenset({
    "bedrock", "bedrock_converse", "sagemaker", "hosted_vllm", "vllm", "ollama", "ollama_chat", "openrouter",
    "together_ai", "huggingface", "fireworks_ai", "groq", "deepinfra", "lm_studio", "llamafile", "nvidia_nim",
    "anyscale", "replicate", "perplexity", "cerebras", "sambanova", "watsonx", "databricks", "litellm_proxy",
})
#: Leading words of bare model names, by vendor (the name with no provider prefix, or a host's model name).
_NAME_FAMILY = (
    ("gpt", "openai"), ("chatgpt", "openai"), ("o1", "openai"), ("o3", "openai"), ("o4", "openai"),
    ("text-embedding", "openai"), ("claude", "anthropic"), ("gemini", "google"), ("gemma", "google"),
    ("command", "cohere"), ("rerank", "cohere"), ("mistral", "mistral"), ("mixtral", "mistral"),
    ("llama", "meta"), ("meta-llama", "meta"), ("qwen", "qwen"), ("deepseek", "deepseek"), ("grok", "xai"),
)
_REGION_PREFIXES = ("us.", "eu.", "apac.", "global.")  # Bedrock's cross-region inference profiles


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


def model_family(model: str) -> str:
    """The vendor family of a litellm-style model string, by a string rule (lower-cased, nothing looked up).

    - ``provider/name`` with a provider serving one vendor: that vendor (``azure/`` is ``openai``, ``gemini/`` and
      ``vertex_ai/`` are ``google``, ``cohere_chat/`` is ``cohere``).
    - A host of many vendors' models (``bedrock/``, ``hosted_vllm/``, ``ollama/``, ``openrouter/``, ...): the family
      of the model name after it (Bedrock's ``anthropic.claude-...`` gives ``anthropic``; ``google/gemma-3`` gives
      ``google``).
    - A name with an organisation (``BAAI/bge-reranker``, ``Qwen/Qwen3-Reranker``): the organisation.
    - A bare name: its vendor by leading word (``gpt``/``o1``/``o3``/``o4`` are ``openai``, ``claude``
      ``anthropic``, ``gemini``/``gemma`` ``google``, ``command``/``rerank`` ``cohere``, ``llama`` ``meta``, ...),
      else the name's leading letters (``bge-reranker`` gives ``bge``).
    """
    text = model.strip().lower()
    head, slash, rest = text.partition("/")
    if slash and head in _PROVIDER_FAMILY:
        return _PROVIDER_FAMILY[head]
    if slash and head in _HOSTS:
        return model_family(rest)
    if slash and head and rest:
        return _NAME_ORGS.get(head, head)
    for prefix in _REGION_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
    vendor, dot, _ = text.partition(".")
    if dot and vendor.isalpha():  # Bedrock's vendor.model ids
        return _NAME_ORGS.get(vendor, vendor)
    for word, family in _NAME_FAMILY:
        if text.startswith(word):
            return family
    letters = "".join(c for c in text.split("-", 1)[0] if c.isalpha())
    return letters or text


#: Organisations on model hubs (and Bedrock vendors) that go by another family name here.
_NAME_ORGS = {"meta-llama": "meta", "mistralai": "mistral", "deepseek-ai": "deepseek", "amazon": "amazon",
              "ai21": "ai21", "cohere": "cohere", "anthropic": "anthropic", "google": "google", "openai": "openai",
              "qwen": "qwen", "meta": "meta", "mistral": "mistral", "microsoft": "microsoft"}


def same_family(judge_model: str | None, reranker_model: str | None) -> bool:
    """True when the reranker's model is the judge's model, or of the same family (``model_family``).

    Either model unknown (``None`` or blank) is never the same: nothing is said when nothing is known.
    """
    if not judge_model or not reranker_model or not judge_model.strip() or not reranker_model.strip():
        return False
    if judge_model.strip().lower() == reranker_model.strip().lower():
        return True
    return model_family(judge_model) == model_family(reranker_model)
