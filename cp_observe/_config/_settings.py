"""Settings: explicit argument > ``CP_OBSERVE_*`` (or standard ``OTEL_*``) variable > default.

Bad arguments given in code raise ``ConfigurationError`` when configuring. Bad environment values are
logged as a warning and fall back to the default: a typo in a deployment must not take the service down.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, TypeAdapter, ValidationError, field_validator

from cp_observe._config._bounds import MAX_CONTEXTS, MAX_JUDGED_CONTEXTS, MAX_VALUE_LENGTH, SAMPLE_RATE
from cp_observe._config._envvars import capture_from_otel_env
from cp_observe._errors import ConfigurationError
from cp_observe._log import logger
from cp_observe._names import ENV_PREFIX

__all__ = ["Settings"]


class Settings(BaseModel):
    """Every setting of the hook. Each field ``x`` is also read from the variable ``CP_OBSERVE_X``."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    judge: str = Field("lexical", description="litellm model string of the judge, or 'lexical' (offline).")
    judge_api_base: str | None = Field(None, description="Endpoint of the judge model.")
    judge_api_key: SecretStr | None = Field(None, description="Key of the judge model (else the provider's env var).")
    judge_timeout_s: float = Field(30.0, gt=0, description="Seconds allowed for one judge HTTP call.")
    judge_max_retries: int = Field(3, ge=0, description="Transport retries per judge call.")
    sample_rate: float = Field(1.0, ge=SAMPLE_RATE[0], le=SAMPLE_RATE[1],
        description="Share of traces whose retrievals are scored.")
    max_evaluations_per_minute: float | None = Field(None, gt=0, description="Rate cap on evaluations.")
    daily_budget_usd: float | None = Field(None, ge=0, description="Stop scoring once today's judge cost reaches it.")
    threshold: float = Field(0.5, ge=0, le=1, description="Scores below it are labelled 'fail'.")
    capture_content: bool = Field(True, description="Record query, contexts and answer on spans.")
    capture_only: bool = Field(False, description="Mark and capture spans, but judge nothing in process.")
    max_value_length: int = Field(4096, ge=MAX_VALUE_LENGTH[0], le=MAX_VALUE_LENGTH[1],
        description="Characters kept per recorded value.")
    max_contexts: int = Field(20, ge=MAX_CONTEXTS[0], le=MAX_CONTEXTS[1],
        description="Retrieved documents recorded per span.")
    max_judged_contexts: int = Field(50, ge=MAX_JUDGED_CONTEXTS[0], le=MAX_JUDGED_CONTEXTS[1],
        description="Contexts sent to the judge per retrieval.")
    queue_size: int = Field(1000, ge=1, description="Evaluations waiting before new ones are dropped.")
    concurrency: int = Field(4, ge=1, description="Judge calls in flight at once.")
    turn_timeout_s: float = Field(60.0, gt=0, description="How long a retrieval waits for its agent's answer.")
    max_pending_traces: int = Field(1000, ge=1, description="Traces held for turn assembly at once.")
    hold_spans: bool = Field(False, description="Hold sampled spans back from export until scored.")
    hold_timeout_s: float = Field(30.0, gt=0, description="Longest hold before a span is released unscored.")
    max_held_spans: int = Field(2000, ge=1, description="Most spans held at once; more are released unscored.")
    circuit_failures: int = Field(5, ge=1, description="Consecutive judge failures that open the circuit.")
    circuit_cooldown_s: float = Field(30.0, gt=0, description="Seconds before an open circuit probes again.")
    service_name: str | None = Field(None, description="service.name when cp-observe sets up the providers.")
    otlp_endpoint: str | None = Field(None, description="OTLP endpoint when cp-observe sets up the providers.")
    metrics_port: int | None = Field(None, ge=0, le=65535, description="Serve Prometheus metrics on this port.")
    # Evaluation sinks (beside OpenTelemetry): Phoenix annotations, and the queue every sink gets.
    phoenix_url: str | None = Field(None, description="Arize Phoenix base URL: post each evaluation as annotations.")
    phoenix_api_key: SecretStr | None = Field(None, description="Phoenix API key (else PHOENIX_API_KEY).")
    sink_queue_size: int = Field(1000, ge=1, description="Evaluations a sink holds before new ones are dropped.")
    sink_batch_size: int = Field(100, ge=1, description="Most evaluations a sink sends in one request.")
    sink_max_retries: int = Field(5, ge=0, description="Retries (with backoff) of an evaluation a sink failed to send.")
    sink_timeout_s: float = Field(10.0, gt=0, description="Seconds allowed for one sink HTTP request.")

    @field_validator("phoenix_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value
    data_source: str | None = Field(
        None, description="Span attributes naming a retrieval's data source, comma-separated, tried in order "
        "before the conventions (gen_ai.data_source.id, decorator name, retriever name)."
    )

    def data_source_attributes(self) -> tuple[str, ...] | None:
        """``data_source`` as attribute names (``None`` when unset or empty)."""
        names = tuple(part.strip() for part in (self.data_source or "").split(",") if part.strip())
        return names or None

    @classmethod
    def resolve(cls, explicit: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from explicit arguments (``None`` means unset), then the environment, then defaults.

        Raises:
            ConfigurationError: an explicit argument is invalid.
        """
        env = os.environ if environ is None else environ
        given = {k: v for k, v in (explicit or {}).items() if v is not None}
        unknown = set(given) - set(cls.model_fields)
        if unknown:
            raise ConfigurationError(f"unknown settings: {sorted(unknown)}")
        values: dict[str, Any] = {}
        otel_capture = capture_from_otel_env(env)
        if otel_capture is not None:
            values["capture_content"] = otel_capture
        for name, field in cls.model_fields.items():
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is None or raw == "":
                continue
            try:
                value = TypeAdapter(field.annotation or str).validate_python(raw)
                cls.model_validate({name: value})
            except ValidationError:
                shown = "***" if name.endswith("api_key") else raw[:80]
                logger.warning("ignoring invalid environment value", variable=ENV_PREFIX + name.upper(), value=shown)
                continue
            values[name] = value
        values.update(given)
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise ConfigurationError(str(exc)) from None
