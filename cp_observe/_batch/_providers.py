"""Which provider's batch API a judge takes: the one rule of which judges can batch.

``openai/``, ``azure/``, ``anthropic/`` and ``gemini/`` model strings (the Gemini API's batch mode, not
Vertex); any other refuses ``--batch`` with an error naming them. Keys come from the judge's settings or the
provider's usual environment variable, as litellm reads them.
"""

from __future__ import annotations

import os

from cp_observe._batch._api import BatchProvider, Endpoint
from cp_observe._errors import ConfigurationError

__all__ = ["BATCH_PROVIDERS", "provider_for"]

BATCH_PROVIDERS = ("openai", "azure", "anthropic", "gemini")


def provider_for(model: str, api_base: str | None, api_key: str | None,
                 azure_deployment: str | None = None) -> BatchProvider:
    """The batch API of ``model``'s provider, or ``ConfigurationError`` naming the providers that have one."""
    provider, slash, name = model.strip().partition("/")
    if not slash or provider not in BATCH_PROVIDERS or not name:
        raise ConfigurationError(
            f"--batch works with judges of {', '.join(p + '/' for p in BATCH_PROVIDERS)} (the Gemini API, not "
            f"Vertex); {model!r} is not one of them: judge it without --batch")
    if provider in ("openai", "azure"):
        from cp_observe._batch._openai import OpenAIBatches

        if provider == "azure":
            base = api_base or os.environ.get("AZURE_API_BASE") or ""
            key = api_key or os.environ.get("AZURE_API_KEY") or os.environ.get("AZURE_OPENAI_API_KEY") or ""
            if not base or not key:
                raise ConfigurationError("--batch with an azure/ judge needs its endpoint (--judge-api-base or "
                                         "AZURE_API_BASE) and key (AZURE_API_KEY)")
            if not azure_deployment:
                raise ConfigurationError("--batch with an azure/ judge needs its global-batch deployment: set "
                                         "CP_OBSERVE_AZURE_BATCH_DEPLOYMENT or --azure-batch-deployment")
            version = os.environ.get("AZURE_API_VERSION") or "2024-10-21"
            return OpenAIBatches(Endpoint(base, key, {"api_version": version}), azure_deployment, azure=True,
                                 sync_model=name)
        base = api_base or os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE") or \
            "https://api.openai.com/v1"
        key = api_key or os.environ.get("OPENAI_API_KEY") or ""
        if not key:
            raise ConfigurationError("--batch with an openai/ judge needs OPENAI_API_KEY (or the judge's key)")
        return OpenAIBatches(Endpoint(base, key), name)
    if provider == "anthropic":
        from cp_observe._batch._anthropic import AnthropicBatches

        base = api_base or os.environ.get("ANTHROPIC_API_BASE") or os.environ.get("ANTHROPIC_BASE_URL") or \
            "https://api.anthropic.com"
        key = api_key or os.environ.get("ANTHROPIC_API_KEY") or ""
        if not key:
            raise ConfigurationError("--batch with an anthropic/ judge needs ANTHROPIC_API_KEY (or the judge's key)")
        return AnthropicBatches(Endpoint(base, key), name)
    from cp_observe._batch._gemini import GeminiBatches

    base = api_base or os.environ.get("GEMINI_API_BASE") or "https://generativelanguage.googleapis.com"
    key = api_key or os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY") or ""
    if not key:
        raise ConfigurationError("--batch with a gemini/ judge needs GEMINI_API_KEY (or the judge's key)")
    return GeminiBatches(Endpoint(base, key), name)
