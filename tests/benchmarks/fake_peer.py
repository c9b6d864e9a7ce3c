"""A peer for ``benchmarks/request_path/bench_hot_path.py`` that needs no peer package: one OpenTelemetry span per call.

It decorates every shape the real peers do (``_peers.GROUPS``) and records the return value as JSON, so the
benchmark's whole comparison (rows, probes, the summary against "the fastest peer") runs without ``.venv-bench``.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

import _common as c  # benchmarks/ is on sys.path: the benchmark's own modules
import _peers
from opentelemetry.sdk.trace import TracerProvider

Fn = Callable[[str], Any]


def _text(value: Any) -> str:
    return json.dumps(value, default=lambda o: getattr(o, "__dict__", repr(o)))


def build() -> list[_peers.Peer]:
    """One fake peer style, in the shape of ``_peers.BUILDERS``' builders."""
    provider, sink = TracerProvider(), c.ListSink()
    provider.add_span_processor(sink)
    tracer = provider.get_tracer("bench.fake-peer")

    def decorate(fn: Fn, role: str) -> Fn:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def traced_async(query: str) -> Any:
                with tracer.start_as_current_span(role) as span:
                    span.set_attribute("input.value", query)
                    value = await fn(query)
                    span.set_attribute("output.value", _text(value))
                    return value

            return traced_async

        @functools.wraps(fn)
        def traced(query: str) -> Any:
            with tracer.start_as_current_span(role) as span:
                span.set_attribute("input.value", query)
                value = fn(query)
                span.set_attribute("output.value", _text(value))
                return value

        return traced

    return [_peers.Peer(_peers._names("@traced", "@traced", "fake peer "), decorate, sink.clear, lambda: sink.spans)]
