"""``ServeSettings``: the library's settings plus the service's own, resolved the same way.

Every field ``x`` comes from the explicit argument (a command-line flag), else the variable
``CP_OBSERVE_X``, else its default, exactly like ``cp_observe.configure()``: bad flags raise, bad
environment values warn and fall back. The judge's API key is read from ``CP_OBSERVE_JUDGE_API_KEY`` only,
never from a flag, so it never appears in a process listing.

The hook-only fields of ``Settings`` (``capture_only``, ``hold_spans``, ``max_value_length``,
``max_contexts``, ``metrics_port``, ...) are inherited but unused: the service judges whatever arrives and
serves its metrics on the admin port.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from cp_observe._settings import Settings

__all__ = ["SERVE_FIELDS", "ServeSettings"]


class ServeSettings(Settings):
    """Settings of ``cp-observe serve``; each field ``x`` is also read from ``CP_OBSERVE_X``."""

    # Inherited fields whose meaning differs in the service (same variables, same defaults).
    capture_content: bool = Field(True, description="Export the judge's per-context reasons (they may quote content).")
    queue_size: int = Field(1000, ge=1, description="Items held before requests are refused (429/RESOURCE_EXHAUSTED).")
    otlp_endpoint: str | None = Field(None, description="Where evaluations go (else OTEL_EXPORTER_OTLP_ENDPOINT).")
    service_name: str | None = Field(None, description="service.name (else OTEL_SERVICE_NAME, else cp-observe-scorer).")
    # The service's own.
    evaluation_timeout_s: float = Field(300.0, gt=0, description="Longest one evaluation (all judge calls) may take.")
    listen_host: str = Field("0.0.0.0", description="Address the OTLP and admin ports bind to.")
    grpc_port: int = Field(4317, ge=0, le=65535, description="OTLP/gRPC port (TraceService/Export); 0 picks one.")
    http_port: int = Field(4318, ge=0, le=65535, description="OTLP/HTTP port (POST /v1/traces); 0 picks one.")
    admin_port: int = Field(9464, ge=0, le=65535, description="Port of /healthz, /readyz, /metrics and /stats.")
    drain_timeout_s: float = Field(30.0, gt=0, description="On SIGTERM: how long queued evaluations may finish.")
    retry_after_s: float = Field(1.0, gt=0, description="Retry delay sent with a refusal (HTTP rounds up to 1 s).")
    ready_high_water: float = Field(0.9, gt=0, le=1, description="Share of queue_size above which /readyz fails.")
    max_request_bytes: int = Field(16 << 20, ge=1024, description="Largest OTLP request accepted (decompressed).")

    @classmethod
    def resolve(
        cls, explicit: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
    ) -> ServeSettings:
        """Build settings from explicit arguments (``None`` means unset), then ``CP_OBSERVE_*``, then defaults.

        Raises:
            ConfigurationError: an explicit argument is invalid.
        """
        settings = super().resolve(explicit, environ)
        assert isinstance(settings, ServeSettings)  # Settings.resolve builds cls
        return settings


#: The fields ``cp-observe serve`` exposes as flags, in ``--help`` order (``judge_api_key``: environment only).
SERVE_FIELDS: tuple[str, ...] = (
    "judge",
    "judge_api_base",
    "judge_timeout_s",
    "judge_max_retries",
    "sample_rate",
    "threshold",
    "capture_content",
    "max_evaluations_per_minute",
    "daily_budget_usd",
    "queue_size",
    "concurrency",
    "turn_timeout_s",
    "max_pending_traces",
    "max_judged_contexts",
    "evaluation_timeout_s",
    "circuit_failures",
    "circuit_cooldown_s",
    "listen_host",
    "grpc_port",
    "http_port",
    "admin_port",
    "max_request_bytes",
    "retry_after_s",
    "ready_high_water",
    "drain_timeout_s",
    "otlp_endpoint",
    "service_name",
    "data_source",
)
