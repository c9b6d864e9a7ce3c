"""``ServeSettings``: the library's settings plus the service's own, resolved the same way.

Every field ``x`` comes from the explicit argument (a command-line flag), else the variable
``CP_OBSERVE_X``, else its default, exactly like ``cp_observe.configure()``: bad flags raise, bad
environment values warn and fall back. The judge's API key is read from ``CP_OBSERVE_JUDGE_API_KEY`` only,
never from a flag, so it never appears in a process listing; so is the bearer token senders must present
(``CP_OBSERVE_AUTH_TOKEN``, or a file named by ``--auth-token-file``).

The hook-only fields of ``Settings`` (``capture_only``, ``hold_spans``, ``max_value_length``,
``max_contexts``, ``metrics_port``, ...) are inherited but unused: the service judges whatever arrives and
serves its metrics on the admin port.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, SecretStr

from cp_observe._config._settings import Settings

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
    listen_host: str = Field("127.0.0.1", description="Address the OTLP ports bind to (0.0.0.0: every interface).")
    grpc_port: int = Field(4317, ge=0, le=65535, description="OTLP/gRPC port (TraceService/Export); 0 picks one.")
    http_port: int = Field(4318, ge=0, le=65535, description="OTLP/HTTP port (POST /v1/traces); 0 picks one.")
    admin_port: int = Field(9464, ge=0, le=65535, description="Port of /healthz, /readyz, /metrics and /stats.")
    drain_timeout_s: float = Field(30.0, gt=0, description="On SIGTERM: how long queued evaluations may finish.")
    retry_after_s: float = Field(1.0, gt=0, description="Retry delay sent with a refusal (HTTP rounds up to 1 s).")
    ready_high_water: float = Field(0.9, gt=0, le=1, description="Share of queue_size above which /readyz fails.")
    max_request_bytes: int = Field(16 << 20, ge=1024, description="Largest OTLP request accepted (decompressed).")
    # --- Securing serve (issue 16): bind addresses, TLS (the Collector's configtls names), bearer tokens, logs ---
    admin_host: str = Field("127.0.0.1", description="Address the admin port binds to (kept apart from OTLP's).")
    tls_cert_file: str | None = Field(None, description="PEM server certificate: TLS on the OTLP and admin ports.")
    tls_key_file: str | None = Field(None, description="PEM private key of tls_cert_file.")
    tls_client_ca_file: str | None = Field(None, description="PEM CA(s): OTLP senders must show a client cert (mTLS).")
    tls_reload_interval_s: float = Field(
        10.0, ge=0, description="How often the TLS files are checked for change and reloaded (0: never).")
    admin_tls: bool = Field(True, description="Serve the admin port over TLS too when tls_cert_file is set.")
    auth_token_file: str | None = Field(
        None, description="File of bearer tokens (one a line) OTLP senders must present; or CP_OBSERVE_AUTH_TOKEN.")
    auth_token: SecretStr | None = Field(None, description="The bearer token (environment only, never a flag).")
    admin_auth: bool = Field(True, description="With a token set, /metrics and /stats require it too.")
    log_level: str = Field("info", pattern=r"(?i)^(debug|info|warning|error|critical)$",
                           description="Level of the service's log lines on stderr.")

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
    # --- Securing serve (issue 16); auth_token: environment only ---
    "admin_host",
    "tls_cert_file",
    "tls_key_file",
    "tls_client_ca_file",
    "tls_reload_interval_s",
    "admin_tls",
    "auth_token_file",
    "admin_auth",
    "log_level",
    "data_source",
)

# --- evaluation sinks (issue 17): flags for the sink settings; the Phoenix API key is environment only
# (CP_OBSERVE_PHOENIX_API_KEY, else PHOENIX_API_KEY), like the judge's. processor_from_settings builds the sinks.
SERVE_FIELDS += ("phoenix_url", "sink_queue_size", "sink_batch_size", "sink_max_retries", "sink_timeout_s")
