"""``ScorerService``: one ``ContextPrecisionProcessor`` behind OTLP front doors, with health, readiness and metrics.

Two front doors (OTLP/gRPC and OTLP/HTTP) turn each request into ``ReadableSpan`` objects
(``_convert``) and offer them to ``Admission``, which feeds them to the processor's ``on_end`` or refuses
the whole request with a retryable status. From ``on_end`` on, everything is the library's in-process
code: turn assembly, sampling, the judge, and emission of the evaluation span, the
``gen_ai.evaluation.result`` event and the metrics, here exported over OTLP (``OTEL_EXPORTER_OTLP_*`` or
``otlp_endpoint``, through the same exporter helpers ``configure()`` uses) and served on ``/metrics``.

Durable intake (on unless ``durable=False``, see ``_intake``): accepted sampled spans are committed to the
store in ``data_dir`` before the 200, and a restarted service resumes them before it opens its doors.

Lifecycle: ``start()`` resumes what the store holds, then binds the ports; ``stop()`` drains: refuse new
requests (503 / ``UNAVAILABLE``), judge what was accepted within ``drain_timeout_s`` (what is not stays in the
store for the next start), flush the exporters, close the ports and the store.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
import time
from collections import Counter
from types import TracebackType
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from prometheus_client import CollectorRegistry

from cp_observe import _names as n
from cp_observe._capture._conventions import DataSource
from cp_observe._errors import ConfigurationError
from cp_observe._log import logger
from cp_observe._traces._convert import spans_from_request
from cp_observe._types import Judge
from cp_observe._wiring._providers import (
    build_providers,
    build_span_exporter,
    exemplar_prometheus_reader,
    judge_from_settings,
    processor_from_settings,
)
from cp_observe.serve._admission import Admission, Decision, evaluator_queue_size
from cp_observe.serve._auth import BearerTokens
from cp_observe.serve._backend import Ingested
from cp_observe.serve._durable import DurableStore, default_data_dir
from cp_observe.serve._intake import AcknowledgingExporter, DurableIntake
from cp_observe.serve._refusals import Refusals
from cp_observe.serve._settings import ServeSettings
from cp_observe.serve._tls import ServerTls

__all__ = [
    "DEFAULT_SERVICE_NAME",
    "Ingested",
    "ScorerService",
    "service_resource",
]

DEFAULT_SERVICE_NAME = "cp-observe-scorer"


class ScorerService:
    """The scoring service: OTLP in, one ``ContextPrecisionProcessor``, evaluations out.

    Args:
        settings: the service's settings (default: ``ServeSettings.resolve()``, i.e. ``CP_OBSERVE_*``).
        judge: a ``Judge`` object instead of the one named by ``settings.judge`` (tests, embedding).
        tracer_provider: where evaluation spans go (default: a new provider exporting over OTLP).
        meter_provider: where metrics go (default: a new provider exporting over OTLP and serving ``/metrics``;
            a provider given here is not served on ``/metrics``).
        logger_provider: where ``gen_ai.evaluation.result`` events go (default: a new provider, OTLP).
        data_source: a callable of a span's attributes naming its data source, ahead of ``settings.data_source``
            and the conventions (embedding; the command line takes attribute names, ``--data-source``).
    """

    def __init__(
        self,
        settings: ServeSettings | None = None,
        *,
        judge: Judge | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        logger_provider: LoggerProvider | None = None,
        data_source: DataSource = None,
    ) -> None:
        self.settings = s = settings if settings is not None else ServeSettings.resolve()
        self.tls, self.tokens = _security(s)  # first: bad TLS or token files leave nothing running
        chosen = judge if judge is not None else judge_from_settings(s)
        # Next: an unwritable data_dir refuses to start with nothing running.
        self.store = DurableStore(
            s.data_dir or default_data_dir(), max_bytes=s.durable_max_bytes, max_age_s=s.durable_max_age_s,
            linger_s=s.turn_timeout_s) if s.durable else None
        acknowledging: AcknowledgingExporter | None = None
        exporter = build_span_exporter(s) if tracer_provider is None else None
        if exporter is not None and self.store is not None:
            exporter = acknowledging = AcknowledgingExporter(exporter, self.store)
        if tracer_provider is None and exporter is None:
            logger.warning("no OTLP endpoint: evaluation spans and events are not exported (set "
                           "OTEL_EXPORTER_OTLP_ENDPOINT or --otlp-endpoint); metrics stay on /metrics")
        self.registry = CollectorRegistry()
        providers = build_providers(
            s.model_copy(update={"metrics_port": None}), service_resource(s.service_name),
            tracer_provider=tracer_provider, meter_provider=meter_provider, logger_provider=logger_provider,
            span_exporter=exporter, sampler=ALWAYS_ON,
            metric_readers=[exemplar_prometheus_reader(self.registry)] if meter_provider is None else [],
        )
        self._providers = providers  # those created here: flushed and shut down by stop()
        # Flush the OTLP readers only: a flushed Prometheus reader would serve that collection again at the next
        # scrape.
        self.metric_readers: list[Any] = list(providers.metric_readers) if meter_provider is None else [meter_provider]
        self.tracer_provider = tracer_provider = providers.tracer_provider
        self.meter_provider = meter_provider = providers.meter_provider
        self.logger_provider = logger_provider = providers.logger_provider
        self.processor = processor_from_settings(
            chosen,
            s,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            logger_provider=logger_provider,
            queue_size=evaluator_queue_size(s.queue_size),
            evaluation_timeout_s=s.evaluation_timeout_s,
            shutdown_timeout_s=s.drain_timeout_s,
            received_spans=True,  # from other processes: a parent that never arrives means a split trace
            **({"data_source": data_source} if data_source is not None else {}),
            # The period's spend survives a restart: kept beside the durable store unless a path is set.
            **({"budget_state_path": str(self.store.directory / "budget.json")}
               if self.store is not None and s.budget_state_path is None and s.daily_budget_usd is not None else {}),
        )
        self.admission = Admission(self.processor, s.queue_size)
        meter = meter_provider.get_meter("cp_observe.serve")
        self.intake = DurableIntake(self.store, self.processor, self.admission, acknowledging, meter.create_counter(
            n.SERVE_METRIC_RECOVERED, unit="{span}",
            description="Targets a restarted service resumed from its durable store.",
        )) if self.store is not None else None
        self._requests = meter.create_counter(
            n.SERVE_METRIC_REQUESTS, unit="{request}", description="OTLP trace requests by protocol and result."
        )
        self._spans = meter.create_counter(n.SERVE_METRIC_SPANS, unit="{span}", description="Spans received.")
        self.refusals = Refusals(meter.create_counter(
            n.SERVE_METRIC_REFUSALS, unit="{request}",
            description="OTLP requests refused before admission, by protocol and reason."))

        def observe(_: CallbackOptions) -> list[Observation]:
            return [Observation(self.admission.occupancy())]

        meter.create_observable_gauge(
            n.SERVE_METRIC_OCCUPANCY, callbacks=[observe], unit="{item}",
            description="Upper bound on the items the scorer holds; requests are refused at queue_size.",
        )
        self._lock = threading.Lock()  # guards _counts, _servers, _started and _stopped
        self._counts: Counter[str] = Counter()
        self._servers: dict[str, Any] = {}
        self._started = False
        self._stopped = False

    # --- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> ScorerService:
        """Bind the gRPC, HTTP and admin ports and serve; returns the service.

        Raises:
            OSError: a port could not be bound (nothing stays open).
        """
        from cp_observe.serve._grpc import GrpcFrontDoor
        from cp_observe.serve._http import AdminServer, OtlpHttpServer

        s = self.settings
        if self.intake is not None and not self._started:
            self.intake.recover()  # before the doors open: what a previous process accepted comes first
        try:
            with self._lock:
                if self._started:
                    raise RuntimeError("the service is already started")
                self._servers["grpc"] = GrpcFrontDoor(self, s.listen_host, s.grpc_port).start()
                self._servers["http"] = OtlpHttpServer(self, s.listen_host, s.http_port).start()
                self._servers["admin"] = AdminServer(self, s.admin_host, s.admin_port).start()
                self._started = True
        except BaseException:
            self._close_servers(0.0)
            raise
        ports = {f"{name}_port": server.port for name, server in self._servers.items()}
        if not _loopback(s.listen_host) and (self.tls is None or not self.tokens.enabled):
            logger.warning("OTLP ports bound beyond loopback without TLS and a bearer token: anyone who can reach "
                           "them can read what senders send or feed the scorer; see 'Securing serve'",
                           listen_host=s.listen_host, tls=self.tls is not None, bearer_auth=self.tokens.enabled)
        logger.info("cp-observe serve started", listen_host=s.listen_host, admin_host=s.admin_host,
                    tls=self.tls is not None, mtls=self.tls is not None and self.tls.mutual,
                    bearer_auth=self.tokens.enabled, **ports)
        return self

    def stop(self, timeout_s: float | None = None) -> bool:
        """Drain and stop: refuse new requests, judge what was accepted, flush the exporters, close the ports.

        Returns True when every accepted evaluation finished within ``timeout_s`` (default ``drain_timeout_s``);
        what did not is counted as dropped (reason ``shutdown``). Idempotent.
        """
        with self._lock:
            if self._stopped:
                return True
            self._stopped = True
        timeout = self.settings.drain_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        self.admission.drain()
        done = self.processor.force_flush(int(timeout * 1000))
        if self.intake is not None:
            self.intake.handover = True  # what shutdown drops now stays in the store for the next start
        self.processor.shutdown()
        self._providers.close(max(0.0, deadline - time.monotonic()))
        self._close_servers(1.0)
        if self.store is not None:
            self.store.close()  # after the exporters' last flush: their acknowledgements are committed
        logger.info("cp-observe serve stopped", drained=done, **self.processor.stats())
        return done

    def _close_servers(self, grace_s: float) -> None:
        for server in list(self._servers.values()):
            try:
                server.stop(grace_s)
            except Exception as exc:  # noqa: BLE001 - closing one port must not keep the others open
                logger.warning("closing a port failed", error_type=type(exc).__name__)

    def __enter__(self) -> ScorerService:
        return self if self._started else self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- the one entry point of both front doors ---------------------------------------------------------------
    def ingest(self, request: ExportTraceServiceRequest, protocol: str) -> Ingested:
        """Convert one OTLP request and offer it, whole, to the processor."""
        converted = spans_from_request(request)
        if self.intake is not None:
            offer = self.intake.offer(request, converted.spans)
        else:
            offer = self.admission.offer(converted.spans)
        self.count(protocol, offer.decision.value, spans=len(converted.spans) + converted.rejected)
        if offer.reason:
            self.refusals.record(protocol, offer.reason)
        if offer.decision is Decision.TOO_LARGE:
            self.refusals.warn("admission_too_large",
                               "request refused: more sampled items than the queue can hold; lower the batch size",
                               items=offer.items, queue_size=self.settings.queue_size)
        return Ingested(offer, len(converted.spans), converted.rejected, converted.error)

    def count(self, protocol: str, result: str, spans: int = 0) -> None:
        """Count one request (and its spans) for ``/metrics`` and ``/stats``."""
        self._requests.add(1, {n.PROTOCOL: protocol, n.RESULT: result})
        if spans:
            self._spans.add(spans, {n.PROTOCOL: protocol})
        with self._lock:
            self._counts[f"{protocol}:{result}"] += 1

    # --- introspection ----------------------------------------------------------------------------------------
    def port(self, name: str) -> int:
        """The bound port of ``"grpc"``, ``"http"`` or ``"admin"`` (useful with port 0)."""
        return int(self._servers[name].port)

    def ready(self) -> tuple[bool, str]:
        """Ready to take traffic: started, not draining, occupancy below the high-water mark."""
        if not self._started:
            return False, "starting"
        if self.admission.draining:
            return False, "draining"
        occupancy = self.admission.occupancy()
        high = self.settings.ready_high_water * self.settings.queue_size
        if occupancy >= high:
            return False, f"queue above the high-water mark ({occupancy}/{self.settings.queue_size})"
        return True, "ready"

    def stats(self) -> dict[str, Any]:
        """The processor's accounting, plus occupancy, queue size, request counts, split traces and state."""
        out = self.processor.stats()
        with self._lock:
            requests = dict(sorted(self._counts.items()))
        out.update(occupancy=self.admission.occupancy(), queue_size=self.settings.queue_size,
                   requests=requests, draining=self.admission.draining, refusals=self.refusals.counts(),
                   sinks=self.processor.sink_stats(), split_traces=self.processor.split_traces,
                   recovered=self.intake.recovered if self.intake is not None else 0,
                   durable=self.intake.stats() if self.intake is not None else None)
        return out

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Judge everything accepted so far and flush the evaluation spans, events and metrics."""
        done = self.processor.force_flush(int(timeout_s * 1000))
        for provider in (self.tracer_provider, self.logger_provider, *self.metric_readers):
            flush = getattr(provider, "force_flush", None)
            if callable(flush):
                flush(int(timeout_s * 1000))
        return done


def _security(s: ServeSettings) -> tuple[ServerTls | None, BearerTokens]:
    """TLS files and bearer tokens, loaded once at start (then reloaded on change).

    Raises:
        ConfigurationError: half a key pair, a client CA without a certificate, or files that do not load.
    """
    if bool(s.tls_cert_file) != bool(s.tls_key_file):
        raise ConfigurationError("tls_cert_file and tls_key_file go together")
    if s.tls_client_ca_file and not s.tls_cert_file:
        raise ConfigurationError("tls_client_ca_file needs tls_cert_file and tls_key_file (mTLS runs over TLS)")
    tls = None
    if s.tls_cert_file and s.tls_key_file:
        tls = ServerTls(s.tls_cert_file, s.tls_key_file, s.tls_client_ca_file, s.tls_reload_interval_s)
    token = s.auth_token.get_secret_value() if s.auth_token is not None else None
    return tls, BearerTokens(token, s.auth_token_file)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def service_resource(service_name: str | None) -> Resource:
    """The resource ``serve`` and ``replay`` export under: the OTel env, a per-process instance id, our name.

    ``OTEL_RESOURCE_ATTRIBUTES`` / ``OTEL_SERVICE_NAME`` first; ``service_name`` (else ``DEFAULT_SERVICE_NAME``
    when the env names none) and a ``service.instance.id`` per process are added.
    """
    resource = Resource.create({})
    extra: dict[str, str] = {}
    if service_name:
        extra["service.name"] = service_name
    elif str(resource.attributes.get("service.name", "unknown_service")).startswith("unknown_service"):
        extra["service.name"] = DEFAULT_SERVICE_NAME
    if "service.instance.id" not in resource.attributes:
        # Replicas' counters must not collide in the backend: one instance id per process.
        extra["service.instance.id"] = f"{socket.gethostname()}-{os.getpid()}"
    return resource.merge(Resource(extra)) if extra else resource
