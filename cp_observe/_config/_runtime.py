"""Process-wide state the decorators read on every call.

The decorators run on the request path, so what they need is one attribute read away: the capture
settings, the redaction hook, the sampler and the tracer. ``configure()`` (or a processor) installs them.
(The payloads the decorators hand to the processor are kept beside them, in ``_capture/_payloads.py``.)
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Tracer, TracerProvider

from cp_observe._config._sampling import TraceIdRatio
from cp_observe._fork import at_fork

__all__ = ["RUNTIME", "Runtime"]

Redactor = Callable[[str], str]


@dataclass(slots=True)
class Runtime:
    """Settings the decorators read per call. Replaced wholesale, never mutated field by field."""

    capture_content: bool = True
    redact: Redactor | None = None
    max_value_length: int = 4096
    max_contexts: int = 20
    max_judged_contexts: int = 50
    sampler: TraceIdRatio = field(default_factory=lambda: TraceIdRatio(1.0))
    tracer_provider: TracerProvider | None = None
    tracer: Tracer = field(default_factory=lambda: trace.get_tracer("cp_observe"))
    configured: bool = False
    #: False in capture-only mode: no in-process judge will ever take a payload.
    keep_payloads: bool = True


def from_environment() -> Runtime:
    """The settings before any ``configure()``: the ``CP_OBSERVE_*`` and ``OTEL_*`` variables, else defaults.

    Content capture in particular obeys the environment even when a processor is wired by hand: turning it off
    with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=false`` must hold everywhere.
    """
    from cp_observe._config._bounds import MAX_CONTEXTS, MAX_JUDGED_CONTEXTS, MAX_VALUE_LENGTH, SAMPLE_RATE
    from cp_observe._config._envvars import capture_from_otel_env, env_bool, env_float, env_int

    defaults = Runtime()
    capture = env_bool("capture_content")
    if capture is None:
        capture = capture_from_otel_env(os.environ)
    rate = env_float("sample_rate", *SAMPLE_RATE)
    return Runtime(
        capture_content=defaults.capture_content if capture is None else capture,
        max_value_length=env_int("max_value_length", *MAX_VALUE_LENGTH) or defaults.max_value_length,
        max_contexts=env_int("max_contexts", *MAX_CONTEXTS) or defaults.max_contexts,
        max_judged_contexts=env_int("max_judged_contexts", *MAX_JUDGED_CONTEXTS) or defaults.max_judged_contexts,
        sampler=TraceIdRatio(1.0 if rate is None else rate),
    )


RUNTIME_HOLDER: list[Runtime] = [from_environment()]


def runtime() -> Runtime:
    """The current runtime settings."""
    return RUNTIME_HOLDER[0]


def install(**changes: object) -> Runtime:
    """Replace the runtime settings with ``changes`` applied; returns the new settings."""
    from dataclasses import replace

    current = RUNTIME_HOLDER[0]
    updated = replace(current, **changes)  # type: ignore[arg-type]
    if "tracer_provider" in changes:
        provider: Any = changes["tracer_provider"]
        updated.tracer = provider.get_tracer("cp_observe") if provider is not None else trace.get_tracer("cp_observe")
    RUNTIME_HOLDER[0] = updated
    return updated


_LIVE_SAMPLERS: dict[int, TraceIdRatio] = {}  # live processors' samplers, by id(processor); _LIVE_LOCK
_SAMPLER_CHANGES: deque[tuple[int, TraceIdRatio | None]] = deque()  # registrations not yet applied
_LIVE_LOCK = threading.Lock()  # guards _LIVE_SAMPLERS; only ever tried, never waited on


def register_sampler(owner: int, sampler: TraceIdRatio | None) -> None:
    """Record (or with ``None`` forget) a live processor's sampler and re-derive the decorators' marks.

    Without ``configure()``, calls are marked sampled at the highest rate of the live processors: decisions
    nest (low bits of the trace id), so each processor's own share is a subset of what was marked, and a
    processor added for another provider never starves this one.

    A dropped processor's ``weakref.finalize`` calls this from inside the garbage collector, which may have
    interrupted this very function on the same thread. So the change is queued and the lock only tried: its
    holder (another thread, or the interrupted call) applies every queued change before it lets go.
    """
    _SAMPLER_CHANGES.append((owner, sampler))
    while _SAMPLER_CHANGES and _LIVE_LOCK.acquire(blocking=False):
        try:
            _apply_sampler_changes()
        finally:
            _LIVE_LOCK.release()
        # A change queued between the last look and the release was left to us: look again.


def _apply_sampler_changes() -> None:
    """Apply the queued registrations, then re-derive the decorators' sampler (under ``_LIVE_LOCK``)."""
    while _SAMPLER_CHANGES:
        while _SAMPLER_CHANGES:
            owner, sampler = _SAMPLER_CHANGES.popleft()
            if sampler is None:
                _LIVE_SAMPLERS.pop(owner, None)
            else:
                _LIVE_SAMPLERS[owner] = sampler
        if RUNTIME_HOLDER[0].configured:
            continue
        best = max(_LIVE_SAMPLERS.values(), key=lambda s: s.rate, default=None)
        install(sampler=best if best is not None else from_environment().sampler)
        # install() allocates, so a collection may have queued another change meanwhile: the loop looks again.


def _after_fork() -> None:
    global _LIVE_LOCK  # noqa: PLW0603 - a fresh lock in a forked child: the parent's may be held by a dead thread
    _LIVE_LOCK = threading.Lock()


at_fork(_after_fork)
RUNTIME = RUNTIME_HOLDER
