"""``ServeSettings``: the library's settings plus the service's own, resolved the same way.

Every field ``x`` comes from the explicit argument (a command-line flag), else the variable
``CP_OBSERVE_X``, else its default, exactly like ``cp_observe.configure()``: bad flags raise, bad
environment values warn and fall back. The judge's API key is read from ``CP_OBSERVE_JUDGE_API_KEY`` only,
never from a flag, so it never appears in a process listing; so is the bearer token senders must present
(``CP_OBSERVE_AUTH_TOKEN``, or a file named by ``--auth-token-file``).

The hook-only fields of ``Settings`` (``capture_only``, ``hold_spans``, ``max_value_length``,
``max_contexts``, ``metrics_port``, ...) are inherited but unused: the service judges whatever arrives and
serves its metrics on the admin port. So is ``shutdown_timeout_s``: the service drains within ``drain_timeout_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

from cp_observe._config._fields import setting
from cp_observe._config._settings import Secret, Settings

__all__ = ["SERVE_FIELDS", "ServeSettings"]


@dataclass(frozen=True, kw_only=True)
class ServeSettings(Settings):
    """Settings of ``cp-observe serve``; each field ``x`` is also read from ``CP_OBSERVE_X``."""

    # Inherited fields whose meaning differs in the service (same variables, same defaults).
    capture_content: bool = setting(True, "Export the judge's per-context reasons (they may quote content).")
    queue_size: int = setting(1000, "Items held before requests are refused (429/RESOURCE_EXHAUSTED).", ge=1)
    # One replica's throughput is concurrency / judge latency until its CPU is the bound; with the lean
    # judge path a replica reaches ~460 evaluations/s at 32 calls in flight against a 50 ms judge (4 would cap it
    # at 80/s). The rate cap and the budget still bound what a provider sees.
    concurrency: int = setting(32, "Judge calls in flight at once (the service: latency, not CPU, bounds it).", ge=1)
    otlp_endpoint: str | None = setting(None, "Where evaluations go (else OTEL_EXPORTER_OTLP_ENDPOINT).")
    service_name: str | None = setting(None, "service.name (else OTEL_SERVICE_NAME, else cp-observe-scorer).")
    # The service's own.
    evaluation_timeout_s: float = setting(300.0, "Longest one evaluation (all judge calls) may take.", gt=0)
    listen_host: str = setting("127.0.0.1", "Address the OTLP ports bind to (0.0.0.0: every interface).")
    grpc_port: int = setting(4317, "OTLP/gRPC port (TraceService/Export); 0 picks one.", ge=0, le=65535)
    http_port: int = setting(4318, "OTLP/HTTP port (POST /v1/traces); 0 picks one.", ge=0, le=65535)
    admin_port: int = setting(9464, "Port of /healthz, /readyz, /metrics and /stats.", ge=0, le=65535)
    drain_timeout_s: float = setting(30.0, "On SIGTERM: how long queued evaluations may finish.", gt=0)
    retry_after_s: float = setting(1.0, "Retry delay sent with a refusal (HTTP rounds up to 1 s).", gt=0)
    ready_high_water: float = setting(0.9, "Share of queue_size above which /readyz fails.", gt=0, le=1)
    max_request_bytes: int = setting(16 << 20, "Largest OTLP request accepted (decompressed).", ge=1024)
    # --- Securing serve: bind addresses, TLS (the Collector's configtls names), bearer tokens, logs -------------------
    admin_host: str = setting("127.0.0.1", "Address the admin port binds to (kept apart from OTLP's).")
    tls_cert_file: str | None = setting(None, "PEM server certificate: TLS on the OTLP and admin ports.")
    tls_key_file: str | None = setting(None, "PEM private key of tls_cert_file.")
    tls_client_ca_file: str | None = setting(None, "PEM CA(s): OTLP senders must show a client cert (mTLS).")
    tls_reload_interval_s: float = setting(
        10.0, "How often the TLS files are checked for change and reloaded (0: never).", ge=0)
    admin_tls: bool = setting(True, "Serve the admin port over TLS too when tls_cert_file is set.")
    auth_token_file: str | None = setting(
        None, "File of bearer tokens (one a line) OTLP senders must present; or CP_OBSERVE_AUTH_TOKEN.")
    auth_token: Secret | None = setting(None, "The bearer token (environment only, never a flag).")  # noqa: RUF009 - a field()
    admin_auth: bool = setting(True, "With a token set, /metrics and /stats require it too.")
    log_level: str = setting("info", "Level of the service's log lines on stderr.",
                             pattern=r"(?i)^(debug|info|warning|error|critical)$")
    # --- The HTTP door: bounded connections, idle and slow clients closed ---------------------------------------------
    max_connections: int = setting(
        4096, "Open OTLP/HTTP connections at most; at the bound a new one evicts a new or the longest-idle one.",
        ge=1, le=1_000_000)
    http_idle_timeout_s: float = setting(
        60.0, "Kept-alive HTTP connections that send nothing this long are closed.", gt=0)
    http_read_timeout_s: float = setting(
        30.0, "Longest one HTTP request (or TLS handshake) may take to arrive; slower senders are closed.", gt=0)
    http_first_request_timeout_s: float = setting(
        5.0, "New HTTP connections that send no request headers this long are closed.", gt=0)
    # --- Durable intake: what serve answered 200 for survives a crash until its outcome is counted --------------------
    durable: bool = setting(True, "Write accepted sampled spans to the store in data_dir before answering 200.")
    data_dir: str | None = setting(
        None, "Directory of the durable store (default: $XDG_STATE_HOME/cp-observe, else ~/.local/state/cp-observe).")
    durable_max_bytes: int = setting(
        256 << 20, "Bytes of stored spans beyond which requests are refused (429/RESOURCE_EXHAUSTED).", ge=1 << 16)
    durable_max_age_s: float = setting(
        3600.0, "Age of the oldest stored target beyond which requests are refused; older at start: dropped.", gt=0)


#: The fields ``cp-observe serve`` exposes as flags, in ``--help`` order (``judge_api_key``: environment only).
SERVE_FIELDS: tuple[str, ...] = (
    "judge",
    "judge_api_base",
    "judge_timeout_s",
    "judge_max_retries",
    "cheap_judge",
    "llm_share",
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
    # --- Securing serve; auth_token: environment only -----------------------------------------------------------------
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

# --- evaluation sinks: flags for the sink settings; the Phoenix API key is environment only
# (CP_OBSERVE_PHOENIX_API_KEY, else PHOENIX_API_KEY), like the judge's. processor_from_settings builds the sinks.
SERVE_FIELDS += ("phoenix_url", "sink_queue_size", "sink_batch_size", "sink_max_retries", "sink_timeout_s")

# --- the HTTP door: connection bound and timeouts.
SERVE_FIELDS += ("max_connections", "http_idle_timeout_s", "http_read_timeout_s")
# --- the HTTP door under a flood: a new connection's deadline for its first request's headers.
SERVE_FIELDS += ("http_first_request_timeout_s",)
# --- durable intake: --durable / --no-durable, the store's directory and its bounds.
SERVE_FIELDS += ("durable", "data_dir", "durable_max_bytes", "durable_max_age_s")
# --- calibration: the share of scored retrievals marked needs_label.
SERVE_FIELDS += ("calibration_rate",)
# --- segments: --segments ATTR,ATTR and --max-segment-values N.
SERVE_FIELDS += ("segments", "max_segment_values")
# --- the judge's provider path: --judge-transport litellm forces litellm for every model.
SERVE_FIELDS += ("judge_transport",)
# --- documents without text: --document-resolver module:function, its time and concurrency bounds.
SERVE_FIELDS += ("document_resolver", "document_resolver_timeout_s", "document_resolver_concurrency")
