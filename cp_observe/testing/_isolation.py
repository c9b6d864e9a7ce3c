"""``IsolatedRuntime``: the process-wide state cp-observe keeps, saved when it opens and put back when it closes.

The decorators read one process-wide runtime on every call (the tracer, content capture, redaction, the
bounds, the trace-id sampler). ``configure()`` and ``EvaluationCapture`` install theirs there, the payloads a
sampled call keeps for the in-process judge wait in a process-wide store, and ``force_evaluation()`` remembers
forced traces process-wide. A test that wires its own tracer provider, changes a capture setting or calls
``configure()`` changes all of that for every later test, and a test that resets it by hand breaks as soon as
the runtime is refactored. Open an ``IsolatedRuntime`` around the test instead (or take the pytest fixture
``cp_observe_runtime``)::

    with IsolatedRuntime(tracer_provider=provider, capture_content=False) as runtime:
        my_rag_app.answer("what is the refund window?")
        runtime.install(redact=lambda text: text.replace("4111", "[card]"))  # changed for the rest of it
        assert runtime.settings.capture_content is False

On close: the processor ``configure()`` installed meanwhile is shut down, the runtime settings and
``configure()``'s current processor are the ones from before, no payload is left waiting and no trace stays
forced. Isolations nest (an inner one restores what the outer one had set).
"""

from __future__ import annotations

from dataclasses import fields
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cp_observe._config._runtime import Runtime
    from cp_observe._processing._processor import ContextPrecisionProcessor

__all__ = ["IsolatedRuntime"]

#: Settings derived from others, never given: the tracer comes from ``tracer_provider``; ``configured`` is
#: ``configure()``'s to say.
_DERIVED = frozenset({"tracer", "configured"})


def _setting_names() -> list[str]:
    from cp_observe._config._runtime import Runtime

    return sorted({f.name for f in fields(Runtime)} - _DERIVED | {"sample_rate", "payload_capacity"})


class IsolatedRuntime:
    """The process-wide runtime, payload store, forced traces and ``configure()`` state, restored on close.

    Args:
        **settings: runtime settings to apply once open, as ``install`` takes them.
    """

    def __init__(self, **settings: Any) -> None:
        self._settings = settings
        self._saved: Runtime | None = None
        self._saved_current: ContextPrecisionProcessor | None = None
        self._saved_capacity = 0

    def open(self) -> IsolatedRuntime:
        """Save the state, then apply the settings given at construction."""
        from cp_observe._capture._payloads import PAYLOADS
        from cp_observe._config._runtime import runtime
        from cp_observe._wiring._configure import current_processor

        if self._saved is not None:
            raise RuntimeError("this IsolatedRuntime is already open")
        self._saved = runtime()
        self._saved_current = current_processor()
        self._saved_capacity = PAYLOADS._max
        if self._settings:
            self.install(**self._settings)
        return self

    def install(self, **settings: Any) -> None:
        """Change the runtime settings the decorators read, for as long as this isolation is open.

        Args:
            **settings: any of ``capture_content``, ``redact``, ``max_value_length``, ``max_contexts``,
                ``max_judged_contexts``, ``keep_payloads``, ``tracer_provider`` (the decorators then write to
                its tracer; ``None`` for the global one), ``sampler`` (a ``TraceIdRatio``) or ``sample_rate``
                (a ratio in [0, 1], the same as a ``TraceIdRatio`` of it), and ``payload_capacity`` (the bound
                of the payload store, to reach its eviction with a few calls).

        Raises:
            TypeError: a name that is not a runtime setting.
            RuntimeError: the isolation is not open.
        """
        from cp_observe._capture import _payloads
        from cp_observe._config import _runtime
        from cp_observe._config._sampling import TraceIdRatio

        if self._saved is None:
            raise RuntimeError("open the IsolatedRuntime (a with block) before installing settings in it")
        unknown = set(settings) - set(_setting_names())
        if unknown:
            raise TypeError(f"not runtime settings: {sorted(unknown)}; known: {_setting_names()}")
        changes = dict(settings)
        if "sample_rate" in changes:
            changes["sampler"] = TraceIdRatio(float(changes.pop("sample_rate")))
        if "payload_capacity" in changes:
            _payloads.PAYLOADS._max = int(changes.pop("payload_capacity"))
        if changes:
            _runtime.install(**changes)

    @property
    def settings(self) -> Runtime:
        """The runtime settings the decorators read now (read them; change them through ``install``)."""
        from cp_observe._config._runtime import runtime

        return runtime()

    @property
    def payloads_held(self) -> int:
        """How many sampled calls' payloads wait in the process-wide store for a processor to take them."""
        from cp_observe._capture._payloads import PAYLOADS

        return len(PAYLOADS)

    def close(self) -> None:
        """Shut down what ``configure()`` installed meanwhile and put back what was there when it opened."""
        from cp_observe._capture import _payloads
        from cp_observe._config import _runtime
        from cp_observe._config._sampling import FORCED
        from cp_observe._wiring._configure import replace_current_processor

        if self._saved is None:
            return
        current = replace_current_processor(self._saved_current)
        if current is not None and current is not self._saved_current:
            current.shutdown()
        _runtime.RUNTIME_HOLDER[0] = self._saved
        _payloads.PAYLOADS.clear()
        _payloads.PAYLOADS._max = self._saved_capacity
        FORCED.clear()
        self._saved = None

    def __enter__(self) -> IsolatedRuntime:
        return self.open()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
