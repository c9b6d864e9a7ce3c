"""The one builder of trace sources from input options: files, a Jaeger or Tempo query, a Phoenix project."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from cp_observe._errors import ConfigurationError
from cp_observe._traces._apis import JaegerQuery, PhoenixProject, TempoQuery
from cp_observe._traces._files import TraceFile
from cp_observe._traces._source import Source

__all__ = ["DEFAULT_WINDOW", "build_sources"]

#: How far back a Jaeger or Tempo query reads when no start is given.
DEFAULT_WINDOW = timedelta(hours=1)


def build_sources(files: Sequence[str], *, format: str = "auto", jaeger: str | None = None,
                  tempo: str | None = None, service: str | None = None, phoenix: str | None = None,
                  project: str | None = None, since: datetime | None = None,
                  until: datetime | None = None) -> list[Source]:
    """The sources these options name, in order: the files, then Jaeger, Tempo and Phoenix.

    A query API reads between ``since`` (default: ``DEFAULT_WINDOW`` before ``until``) and ``until`` (default:
    now); a Phoenix project reads all of it unless bounded.

    Raises:
        ConfigurationError: a Jaeger or Tempo query without ``service``, Phoenix without ``project``.
        ReplayInputError: a file cannot be opened or its format is unknown.
    """
    for flag, url in (("jaeger", jaeger), ("tempo", tempo)):
        if url and not service:
            raise ConfigurationError(f"--{flag} needs --service")
    if phoenix and not project:
        raise ConfigurationError("--phoenix needs --project")
    sources: list[Source] = [TraceFile(path, format=format) for path in files]
    end = until or datetime.now(timezone.utc)
    start = since or end - DEFAULT_WINDOW
    if jaeger:
        sources.append(JaegerQuery(jaeger, service or "", since=start, until=end))
    if tempo:
        sources.append(TempoQuery(tempo, service or "", since=start, until=end))
    if phoenix:
        sources.append(PhoenixProject(phoenix, project or "", since=since, until=until))
    return sources
