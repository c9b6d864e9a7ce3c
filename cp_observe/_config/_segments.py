"""Segment label names: from the ``segments`` setting's attribute names to metric label names, checked once.

A segment's label name is its attribute name with every character other than ASCII letters, digits and ``_``
replaced by ``_`` (``retriever.version`` -> ``retriever_version``), so the OTLP attribute and the Prometheus
label are spelled alike. A name that would collide with a label the library (or Prometheus) already puts on
these series, a duplicate, or a name Prometheus cannot carry is refused here, at configuration time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from cp_observe import _names as n

__all__ = ["MAX_SEGMENTS", "label_name", "segment_labels", "segments_problem"]

#: At most this many segments: each multiplies the score series by its values.
MAX_SEGMENTS: Final = 8
_NOT_LABEL: Final = re.compile(r"[^A-Za-z0-9_]")


def label_name(name: str) -> str:
    """A segment's label name: the attribute name with every character but letters, digits and ``_`` made ``_``."""
    return _NOT_LABEL.sub("_", name)


#: Labels already on (or added by Prometheus to) the series a segment labels.
_TAKEN: Final = frozenset(label_name(name) for name in (
    n.GEN_AI_DATA_SOURCE_ID, n.GEN_AI_EVALUATION_NAME, n.GEN_AI_AGENT_NAME, n.GEN_AI_REQUEST_MODEL,
    n.GEN_AI_TOKEN_TYPE, n.CP_JUDGE_MODEL, n.CP_JUDGE_PROMPT_VERSION, n.CP_JUDGE_KIND, n.OUTCOME, n.REASON,
    n.RELEVANT, n.STAGE, n.SEGMENT, n.ERROR_KIND, n.ERROR_SITE, n.EXEMPLAR_TRACE_ID, n.EXEMPLAR_SPAN_ID,
    "le", "quantile", "job", "instance", "otel_scope_name", "otel_scope_version", "service_name",
))


def _names(spec: str | Sequence[str] | None) -> list[str]:
    parts = spec.split(",") if isinstance(spec, str) else list(spec or ())
    return [part.strip() for part in parts if part.strip()]


def segments_problem(spec: str | Sequence[str] | None) -> str | None:
    """Why ``spec`` cannot name segments, or ``None`` when it can (the settings' check)."""
    names = _names(spec)
    if len(names) > MAX_SEGMENTS:
        return f"at most {MAX_SEGMENTS} segments (got {len(names)})"
    seen: dict[str, str] = {}
    for name in names:
        label = label_name(name)
        if label in _TAKEN or label.startswith("__"):
            return (f"segment {name!r} would be the label {label!r}, which cp-observe or Prometheus already puts "
                    "on the score series: choose another attribute")
        if label[0].isdigit():
            return f"segment {name!r} would be the label {label!r}, which Prometheus refuses (starts with a digit)"
        if label in seen:
            return f"segments {seen[label]!r} and {name!r} would both be the label {label!r}"
        seen[label] = name
    return None


def segment_labels(spec: str | Sequence[str] | None) -> tuple[tuple[str, str], ...]:
    """``(attribute name, label name)`` per segment, in the order given; ``()`` when none.

    Raises:
        ValueError: a segment collides with a library label, a duplicate, or too many (``segments_problem``).
    """
    problem = segments_problem(spec)
    if problem is not None:
        raise ValueError(problem)
    return tuple((name, label_name(name)) for name in _names(spec))
