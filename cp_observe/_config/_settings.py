"""Settings: explicit argument > ``CP_OBSERVE_*`` (or standard ``OTEL_*``) variable > default.

Bad arguments given in code raise ``ConfigurationError`` when configuring. Bad environment values are
logged as a warning and fall back to the default: a typo in a deployment must not take the service down.

The table below is the one home of each setting's name, type, default, bounds and description. It is a
frozen dataclass read by ``_fields`` rather than a pydantic model: ``configure()`` runs while the host starts,
and pydantic cost it about 90 ms (``benchmarks/HISTORY.md``, "Import").

Fields declared ``processor=True`` are ``ContextPrecisionProcessor``'s keywords too: the processor validates
what it is given into a ``Settings`` (its options object, frozen; fields it does not take keep their defaults)
and hands that one object to the evaluator, the emitter, the hold and the sinks, which read the fields they
use. Adding a processor setting is one field here plus the code that reads it (ARCHITECTURE.md, "Adding a
setting").
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from cp_observe._config._bounds import MAX_CONTEXTS, MAX_JUDGED_CONTEXTS, MAX_VALUE_LENGTH, SAMPLE_RATE
from cp_observe._config._envvars import capture_from_otel_env
from cp_observe._config._fields import FieldTable, Secret, setting
from cp_observe._config._segments import segment_labels, segments_problem
from cp_observe._errors import ConfigurationError
from cp_observe._log import logger
from cp_observe._names import ENV_PREFIX

__all__ = ["Secret", "Settings"]

_S = TypeVar("_S", bound="Settings")


def _http_url(value: str) -> str | None:
    return None if value.startswith(("http://", "https://")) else "must be an http:// or https:// URL"


def _module_function(value: str) -> str | None:
    module, colon, name = value.partition(":")
    return None if colon and module.strip() and name.strip() else "must be module:function"


def _judge_transport(value: str) -> str | None:
    return None if value in ("auto", "litellm") else "must be 'auto' or 'litellm'"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """Every setting of the hook. Each field ``x`` is also read from the variable ``CP_OBSERVE_X``."""

    #: name -> ``SettingField`` (type, default, bounds, description), in declaration order.
    model_fields = FieldTable()  # no annotation: a class attribute, not a field

    judge: str = setting("lexical", "litellm model string of the judge, or 'lexical' (offline).")
    judge_api_base: str | None = setting(None, "Endpoint of the judge model.")
    judge_api_key: Secret | None = setting(None, "Key of the judge model (else the provider's env var).")  # noqa: RUF009 - a field()
    judge_timeout_s: float = setting(30.0, "Seconds allowed for one judge HTTP call.", gt=0)
    judge_max_retries: int = setting(3, "Transport retries per judge call.", ge=0)
    cheap_judge: str | None = setting(None, "A cheap judge ('lexical' or a litellm model string) that scores "
                                      "every sampled retrieval; `judge` then also scores a uniform llm_share of them.",
                                      processor=True)
    llm_share: float = setting(1.0, "With cheap_judge: the share of retrievals also judged by `judge`.", ge=0, le=1,
                               processor=True)
    judge_transport: str = setting("auto", "'auto': OpenAI-compatible providers skip litellm's call path; "
                                   "'litellm': every call through litellm.", check=_judge_transport)
    # What a judge call asks for and at which price: prompt version, reasons, reasoning effort, service tier.
    judge_prompt_version: str = setting("cp-3", "The judge prompt: 'cp-3' (the default: system message the same "
                                        "for every call, so it caches), 'cp-4' (cp-3 with a one-line reply and "
                                        "reasons of at most six words: fewer tokens) or 'cp-2' (the oldest).",
                                        pattern=r"^cp-[234]$")
    judge_reasons: str = setting("all", "What the judge writes reasons for: 'all' verdicts, only 'no' verdicts, "
                                 "or 'none' (fewer output tokens).", pattern=r"^(all|no|none)$")
    judge_reasoning_effort: str = setting("auto", "Reasoning models' effort: 'auto' (the lowest above none for "
                                          "OpenAI's and Gemini's reasoning models) or none, minimal, low, medium, "
                                          "high.",
                                          pattern=r"^(auto|none|minimal|low|medium|high)$")
    judge_service_tier: str | None = setting(None, "service_tier sent with each judge call: 'flex' (batch prices, "
                                             "slower; a refusal falls back to standard), default, priority, auto.",
                                             pattern=r"^(auto|default|flex|priority)$")
    judge_flex_timeout_s: float = setting(900.0, "Seconds allowed for one judge HTTP call on the flex tier.", gt=0)
    sample_rate: float = setting(1.0, "Share of traces whose retrievals are scored.",
                                 ge=SAMPLE_RATE[0], le=SAMPLE_RATE[1], processor=True)
    max_evaluations_per_minute: float | None = setting(None, "Rate cap on evaluations.", gt=0, processor=True)
    daily_budget_usd: float | None = setting(
        None, "Judge cost allowed per budget period (a UTC day unless budget_period_s says otherwise), shared by "
        "budget_replicas processes; paced over the period unless budget_pacing is false, and a hard cap.", ge=0,
        processor=True)
    # The paced budget and the allocation of evaluations across data sources (_processing/_rate_plan.py).
    budget_period_s: float = setting(86400.0, "Length of the budget's period in seconds, aligned to UTC (86400: a "
                                     "UTC day; 3600: each UTC hour).", ge=60, le=31 * 86400, processor=True)
    budget_pacing: bool = setting(True, "Spread daily_budget_usd over its period: the sample rate follows what is "
                                  "left and how long is left; false spends until the cap.", processor=True)
    budget_burst: float = setting(2.0, "Within one pacing window, spend may reach this multiple of the window's "
                                  "paced share before judge calls are skipped (budget_paced).", ge=1, processor=True)
    budget_replicas: int = setting(1, "Processes (serve replicas, application instances) sharing daily_budget_usd: "
                                   "each paces daily_budget_usd / budget_replicas.", ge=1, processor=True)
    budget_state_path: str | None = setting(None, "File keeping the current period's spend, so a restarted process "
                                            "resumes it (serve: on its durable volume).", processor=True)
    pacing_window_s: float = setting(300.0, "Sample rates change only at these UTC-aligned boundaries (seconds).",
                                     ge=1, le=3600, processor=True)
    allocation: bool = setting(True, "With a budget or max_evaluations_per_minute, choose each data source's rate "
                               "so the quietest are caught sooner (sample_rate the ceiling); false: one flat rate.",
                               processor=True)
    allocation_drop: float = setting(0.1, "The drop in MAP the allocation aims to catch soonest (sets how many "
                                     "evaluations a data source can use).", gt=0, le=1, processor=True)
    threshold: float = setting(0.5, "Scores below it are labelled 'fail'.", ge=0, le=1, processor=True)
    capture_content: bool = setting(True, "Record query, contexts and answer on spans.", processor=True)
    capture_only: bool = setting(False, "Mark and capture spans, but judge nothing in process.")
    max_value_length: int = setting(4096, "Characters kept per recorded value.",
                                    ge=MAX_VALUE_LENGTH[0], le=MAX_VALUE_LENGTH[1])
    max_contexts: int = setting(20, "Retrieved documents recorded per span.", ge=MAX_CONTEXTS[0], le=MAX_CONTEXTS[1])
    max_judged_contexts: int = setting(50, "Contexts sent to the judge per retrieval.",
                                       ge=MAX_JUDGED_CONTEXTS[0], le=MAX_JUDGED_CONTEXTS[1], processor=True)
    queue_size: int = setting(1000, "Targets waiting or being judged before new ones are dropped (counted).", ge=1,
                              processor=True)
    concurrency: int = setting(4, "Judge calls in flight at once.", ge=1, processor=True)
    turn_timeout_s: float = setting(60.0, "How long a retrieval waits for its agent's answer.", gt=0, processor=True)
    max_pending_traces: int = setting(1000, "Traces held for turn assembly at once.", ge=1, processor=True)
    hold_spans: bool = setting(False, "Hold sampled spans back from export until scored.")
    hold_timeout_s: float = setting(30.0, "Longest hold before a span is released unscored.", gt=0, processor=True)
    max_held_spans: int = setting(2000, "Most spans held at once; more are released unscored.", ge=1, processor=True)
    circuit_failures: int = setting(5, "Consecutive judge failures that open the circuit.", ge=1, processor=True)
    circuit_cooldown_s: float = setting(30.0, "Seconds before an open circuit probes again.", gt=0, processor=True)
    evaluation_timeout_s: float = setting(300.0, "Longest one evaluation (all judge calls) may take.", gt=0,
                                          processor=True)
    shutdown_timeout_s: float = setting(
        5.0, "At shutdown or interpreter exit: how long queued and in-flight evaluations may finish; the rest "
        "are counted dropped (shutdown).", gt=0, processor=True)
    service_name: str | None = setting(None, "service.name when cp-observe sets up the providers.")
    otlp_endpoint: str | None = setting(None, "OTLP endpoint when cp-observe sets up the providers.")
    metrics_port: int | None = setting(None, "Serve Prometheus metrics on this port.", ge=0, le=65535)
    # Evaluation sinks (beside OpenTelemetry): Phoenix annotations, and the queue every sink gets.
    phoenix_url: str | None = setting(None, "Arize Phoenix base URL: post each evaluation as annotations.",
                                      check=_http_url)
    phoenix_api_key: Secret | None = setting(None, "Phoenix API key (else PHOENIX_API_KEY).")  # noqa: RUF009 - a field()
    sink_queue_size: int = setting(1000, "Evaluations a sink holds before new ones are dropped.", ge=1,
                                   processor=True)
    sink_batch_size: int = setting(100, "Most evaluations a sink sends in one request.", ge=1, processor=True)
    sink_max_retries: int = setting(5, "Retries (with backoff) of an evaluation a sink failed to send.", ge=0,
                                    processor=True)
    sink_timeout_s: float = setting(10.0, "Seconds allowed for one sink HTTP request.", gt=0)
    # The uniform share of scored retrievals marked needs_label, for people to label (calibrate).
    calibration_rate: float = setting(0.0, "Share of scored retrievals marked needs_label for people to label.",
                                      ge=0, le=1, processor=True)
    data_source: str | None = setting(
        None, "Span attributes naming a retrieval's data source, comma-separated, tried in order "
        "before the conventions (gen_ai.data_source.id, decorator name, retriever name).", processor=True,
    )
    # Segments, the user's own span attributes copied as labels onto the score series.
    segments: str | None = setting(
        None, "Span attributes whose values label the score series (canary variants, tenants), comma-separated.",
        check=segments_problem, processor=True,
    )
    max_segment_values: int = setting(50, "Distinct values kept per segment per processor; later ones are 'other'.",
                                      ge=1, le=1000, processor=True)
    # Documents without text (the GenAI convention's ids and scores): the user's function that gives their text.
    document_resolver: str | None = setting(
        None, "module:function giving a document's text from its id: (document_id, data_source) -> text; for "
        "retrievals whose documents carry no text. configure() also takes the callable itself.",
        check=_module_function, processor=True,
    )
    document_resolver_timeout_s: float = setting(5.0, "Longest one retrieval's documents may take to resolve.", gt=0,
                                                       processor=True)
    document_resolver_concurrency: int = setting(4, "Document resolver calls running at once.", ge=1,
                                                    processor=True)
    azure_batch_deployment: str | None = setting(
        None, "Azure OpenAI global-batch deployment that replay --batch and calibrate --batch send azure/ judges to.")

    def __post_init__(self) -> None:
        """Type and bound every field (``"5"`` becomes 5, a key a ``Secret``); all problems in one error.

        Raises:
            ConfigurationError: a value does not fit its field; the message names each such field.
        """
        problems = []
        for name, field in self.model_fields.items():
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, field.coerce(value))  # still in __init__: frozen afterwards
            except ValueError as exc:
                problems.append(f"{name}={field.shown(value)}: {exc}")
        if problems:
            raise ConfigurationError(f"invalid settings for {type(self).__name__}: " + "; ".join(problems))

    def model_copy(self: _S, *, update: Mapping[str, Any]) -> _S:
        """A copy with ``update``'s fields replaced (validated like the rest), named as pydantic named it."""
        return dataclasses.replace(self, **update)

    @staticmethod
    def processor_fields() -> tuple[str, ...]:
        """The names ``ContextPrecisionProcessor`` takes as keywords, in declaration order.

        Read from this table, not a subclass's: ``ServeSettings`` redeclares some of them with its own wording.
        """
        return tuple(name for name, field in Settings.model_fields.items() if field.processor)

    def processor_options(self) -> dict[str, Any]:
        """This object's processor settings as keywords (what ``processor_from_settings`` passes on)."""
        return {name: getattr(self, name) for name in Settings.processor_fields()}

    def data_source_attributes(self) -> tuple[str, ...] | None:
        """``data_source`` as attribute names (``None`` when unset or empty)."""
        names = tuple(part.strip() for part in (self.data_source or "").split(",") if part.strip())
        return names or None

    @staticmethod
    def data_source_setting(spec: object) -> str | None:
        """The setting's value from a ``data_source`` argument of attribute names (a list, or comma-separated).

        The one check of that argument, for ``configure()`` and the processor alike (a callable is theirs to keep
        apart), with one error.

        Raises:
            ConfigurationError: neither a string nor attribute names (a mapping, a number, a list of non-strings).
        """
        if spec is None or isinstance(spec, str):
            return spec
        names = tuple(spec) if isinstance(spec, Iterable) and not isinstance(spec, Mapping) else None
        if names is None or not all(isinstance(name, str) for name in names):
            raise ConfigurationError("data_source must be a callable (attributes) -> name or attribute names")
        return ",".join(names)

    def segment_labels(self) -> tuple[tuple[str, str], ...]:
        """``segments`` as ``(attribute name, label name)`` pairs (``()`` when unset)."""
        return segment_labels(self.segments)

    @classmethod
    def resolve(cls: type[_S], explicit: Mapping[str, Any] | None = None,
                environ: Mapping[str, str] | None = None) -> _S:
        """Build settings from explicit arguments (``None`` means unset), then the environment, then defaults.

        Raises:
            ConfigurationError: an explicit argument is invalid.
        """
        env = os.environ if environ is None else environ
        fields = cls.model_fields
        given = {k: v for k, v in (explicit or {}).items() if v is not None}
        unknown = set(given) - set(fields)
        if unknown:
            raise ConfigurationError(f"unknown settings: {sorted(unknown)}")
        values: dict[str, Any] = {}
        otel_capture = capture_from_otel_env(env)
        if otel_capture is not None:
            values["capture_content"] = otel_capture
        for name, field in fields.items():
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is None or raw == "":
                continue
            try:
                values[name] = field.coerce(raw)
            except ValueError:
                logger.warning("ignoring invalid environment value", variable=ENV_PREFIX + name.upper(),
                               value=field.shown(raw, as_text=True))
        values.update(given)
        return cls(**values)
