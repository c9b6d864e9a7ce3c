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
            base = api_base or _env(("AZURE_API_BASE",))
            key = api_key or _env(("AZURE_API_KEY", "AZURE_OPENAI_API_KEY"))
            if not base or not key:
                raise ConfigurationError("--batch with an azure/ judge needs its endpoint (--judge-api-base or "
                                         "AZURE_API_BASE) and key (AZURE_API_KEY)")
            if not azure_deployment:
                raise ConfigurationError("--batch with an azure/ judge needs its global-batch deployment: set "
                                         "CP_OBSERVE_AZURE_BATCH_DEPLOYMENT or --azure-batch-deployment")
            version = os.environ.get("AZURE_API_VERSION") or "2024-10-21"
            return OpenAIBatches(Endpoint(base, key, {"api_version": version}), azure_deployment, azure=True,
                                 sync_model=name)
        return OpenAIBatches(_endpoint("an openai/", api_base, api_key, bases=("OPENAI_BASE_URL", "OPENAI_API_BASE"),
                                       default="https://api.openai.com/v1", keys=("OPENAI_API_KEY",)), name)
    if provider == "anthropic":
        from cp_observe._batch._anthropic import AnthropicBatches

        return AnthropicBatches(_endpoint("an anthropic/", api_base, api_key,
                                          bases=("ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"),
                                          default="https://api.anthropic.com", keys=("ANTHROPIC_API_KEY",)), name)
    from cp_observe._batch._gemini import GeminiBatches

    return GeminiBatches(_endpoint("a gemini/", api_base, api_key, bases=("GEMINI_API_BASE",),
                                   default="https://generativelanguage.googleapis.com",
                                   keys=("GEMINI_API_KEY", "GOOGLE_API_KEY")), name)


def _env(names: tuple[str, ...]) -> str:
    """The first of the environment variables ``names`` that is set and not empty, else ``""``."""
    return next((value for value in map(os.environ.get, names) if value), "")


def _endpoint(judge: str, api_base: str | None, api_key: str | None, *, bases: tuple[str, ...], default: str,
              keys: tuple[str, ...]) -> Endpoint:
    """The judge's base and key, else the provider's environment variables (a key is required)."""
    key = api_key or _env(keys)
    if not key:
        raise ConfigurationError(f"--batch with {judge} judge needs {keys[0]} (or the judge's key)")
    return Endpoint(api_base or _env(bases) or default, key)
