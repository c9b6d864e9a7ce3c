"""``cp-observe serve``: flags for every setting (each also ``CP_OBSERVE_<NAME>``), run until SIGTERM, then drain."""

from __future__ import annotations

import argparse
import gc
import logging
import queue
import signal
import sys
from collections.abc import Sequence
from typing import Any

from cp_observe._errors import ConfigurationError
from cp_observe._log import LOGGER_NAME, add_log_format_argument, log_to_stderr
from cp_observe._names import ENV_PREFIX
from cp_observe.serve._settings import SERVE_FIELDS, ServeSettings

__all__ = ["add_arguments", "main", "run"]

_EPILOG = f"""\
Every option falls back to its environment variable, then to its default (shown in brackets).

Environment only:
  {ENV_PREFIX}JUDGE_API_KEY       the judge's API key (or the provider's own variable, e.g. OPENAI_API_KEY)
  {ENV_PREFIX}AUTH_TOKEN          bearer token OTLP senders must present (or --auth-token-file)
  OTEL_EXPORTER_OTLP_ENDPOINT      where evaluation spans, events and metrics go (or --otlp-endpoint)
  OTEL_EXPORTER_OTLP_PROTOCOL      http/protobuf (default) or grpc
  OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES   the scorer's resource (service.instance.id: one per process)
  OTEL_METRIC_EXPORT_INTERVAL      milliseconds between OTLP metric exports

Endpoints: OTLP/gRPC TraceService/Export on --grpc-port; OTLP/HTTP POST /v1/traces (protobuf or JSON) on
--http-port; GET /healthz, /readyz, /metrics and /stats on --admin-port. A full queue answers
RESOURCE_EXHAUSTED / 429 with a retry delay; SIGTERM drains (new requests get UNAVAILABLE / 503).

Secure by default: every port binds 127.0.0.1 unless --listen-host / --admin-host say otherwise. TLS on all
three ports with --tls-cert-file and --tls-key-file (mTLS with --tls-client-ca-file); bearer tokens as the
Collector's bearertokenauth sends them. Log lines go to stderr (--log-level; --log-format json: one object per line)."""

# Evaluation sinks.
_EPILOG += f"""

Evaluation sinks: --phoenix-url posts every evaluation to Arize Phoenix as annotations on the scored span
(key: {ENV_PREFIX}PHOENIX_API_KEY or PHOENIX_API_KEY, environment only); counted as context_precision.sink.*."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one option per setting in ``SERVE_FIELDS``; ``None`` (not given) defers to the environment."""
    parser.description = ("Score retrievals received over OTLP with the same turn assembly, sampling, judge and "
                           "emission as the in-process hook; run it behind a Collector gateway.")
    parser.epilog = _EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.allow_abbrev = False  # "--auth-token SECRET" must fail, not name a file after the secret
    fields = ServeSettings.model_fields
    for name in SERVE_FIELDS:
        info = fields[name]
        flag = "--" + name.replace("_", "-")
        help_text = f"{info.description} [{ENV_PREFIX}{name.upper()}; {info.default!r}]".replace("%", "%%")
        kind = _scalar(info.annotation)
        if kind is bool:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        else:
            parser.add_argument(flag, dest=name, type=kind, default=None, metavar=_metavar(kind), help=help_text)
    add_log_format_argument(parser)


def _scalar(annotation: Any) -> type[Any]:
    """``float | None`` -> ``float``; the settings use str, int, float and bool only."""
    for candidate in (bool, int, float, str):
        if annotation is candidate or candidate in getattr(annotation, "__args__", ()):
            return candidate
    return str


def _metavar(kind: type[Any]) -> str:
    return {int: "N", float: "X", str: "TEXT"}.get(kind, "VALUE")


_FULL_COLLECTION_AFTER = 100  # collections of the middle generation between full ones (CPython's default: 10)


def run(args: argparse.Namespace) -> int:
    """Start the service, wait for SIGTERM or SIGINT, drain; returns the exit code."""
    # Before resolving: warnings about bad environment values are shown too.
    restore = log_to_stderr(getattr(args, "log_format", None))
    try:
        return _serve(args)
    finally:
        restore()  # an in-process caller (a test, an embedding) gets its logging set-up back


def _serve(args: argparse.Namespace) -> int:
    from cp_observe.serve._service import ScorerService

    explicit = {name: getattr(args, name, None) for name in SERVE_FIELDS}
    try:
        settings = ServeSettings.resolve(explicit)
        logging.getLogger(LOGGER_NAME).setLevel(settings.log_level.upper())
        service = ScorerService(settings)
    except (ConfigurationError, ValueError) as exc:
        print(f"cp-observe serve: {exc}", file=sys.stderr)
        return 2
    # The handler runs in the main thread between two bytecodes, possibly while that thread is inside the wait
    # below: it must take no lock the main thread may hold. Event.set() would (the Condition's lock, held while
    # Event.wait() is still setting up); SimpleQueue.put is documented reentrant for exactly this use.
    stop: queue.SimpleQueue[int] = queue.SimpleQueue()
    previous = {sig: signal.signal(sig, lambda signum, _frame: stop.put(signum))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    thresholds = gc.get_threshold()
    try:
        try:
            service.start()
        except OSError as exc:
            print(f"cp-observe serve: {exc}", file=sys.stderr)
            service.stop(1.0)
            return 1
        # A full collection stalls every request in flight for as long as it walks the heap (benchmarks/README.md,
        # "The HTTP door under a flood, at the defaults"). Everything built so far (modules, the service) lives as
        # long as the process: frozen, out of the collector's sight (the imported modules alone took ~70 ms to walk
        # on a loaded 2-core box). A closed connection leaves no cycle (serve/_connections.py), so full collections
        # can be ten times rarer than CPython's default without garbage piling up: under a flood of reopened
        # connections the default ran one every second or two, over every open connection.
        gc.collect()
        gc.freeze()
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, _FULL_COLLECTION_AFTER)
        scheme = "tls" if service.tls is not None else "plaintext"
        print(f"cp-observe serve: grpc {settings.listen_host}:{service.port('grpc')}, http "
              f"{settings.listen_host}:{service.port('http')} ({scheme}), admin {settings.admin_host}:"
              f"{service.port('admin')}, judge {service.processor.judge.model}, "
              f"queue {settings.queue_size}, concurrency {settings.concurrency}", flush=True)
        stop.get()  # until SIGTERM or SIGINT; the blocked get() still lets the handler run
        print("cp-observe serve: draining", flush=True)
        drained = service.stop()
        stats = service.processor.stats()
        print(f"cp-observe serve: stopped ({'drained' if drained else 'drain timed out'}); sampled "
              f"{stats['sampled']}, scored {stats['scored']}, failed {stats['failed']}, dropped {stats['dropped']}, "
              f"skipped {stats['skipped']}", flush=True)
        return 0
    finally:
        for sig, previous_handler in previous.items():
            signal.signal(sig, previous_handler)
        gc.set_threshold(*thresholds)  # an in-process caller (a test, an embedding) gets its collector back
        gc.unfreeze()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cp_observe.serve``: the same as ``cp-observe serve``."""
    parser = argparse.ArgumentParser(prog="cp-observe serve")
    add_arguments(parser)
    return run(parser.parse_args(argv))
