"""The batch APIs' HTTP calls: one blocking request at a time, JSON or JSON lines, keys kept out of errors.

Batch calls are few (an upload, a create, a status poll every few seconds, a download), on the offline
commands' own thread, so the standard library's client is enough and nothing is pooled. A ``GET`` (a status,
a results file) is retried on a connection error, a 429 or a 5xx, with backoff; a ``POST`` never is: a create
that reached the provider but whose answer was lost would otherwise become two batches.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import orjson

from cp_observe._errors import CpObserveError

__all__ = ["LIST_PAGES", "BatchApiError", "get_lines", "get_object", "named", "post_json", "post_multipart",
           "seconds_of"]

LIST_PAGES = 10  # pages of a batch listing read when looking for a batch a killed run created

_TIMEOUT_S = 120.0
_GET_ATTEMPTS = 4
_RETRIED = frozenset({0, 408, 429, 500, 502, 503, 504})
# Key-shaped tokens a provider may echo in an error body ("sk-...", Bearer tokens, Google's "AIza...").
_KEY_LIKE = re.compile(r"\b(sk-[A-Za-z0-9_\-]{6,}|Bearer\s+[A-Za-z0-9._\-]{8,}|AIza[A-Za-z0-9_\-]{20,})")


class BatchApiError(CpObserveError):
    """A batch API answered with an error, or could not be reached (``status`` 0)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def _send(method: str, url: str, headers: Mapping[str, str], data: bytes | None) -> bytes:
    request = urllib.request.Request(url, data=data, method=method, headers=dict(headers))
    try:
        # The provider's URL from the settings, not a scheme a request chose.
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
            return bytes(response.read())
    except urllib.error.HTTPError as exc:
        body = _KEY_LIKE.sub("***", exc.read()[:1000].decode("utf-8", "replace"))
        raise BatchApiError(f"{method} {url.split('?', 1)[0]}: HTTP {exc.code}: {body}", exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BatchApiError(f"{method} {url.split('?', 1)[0]}: {type(exc).__name__}: {reason}") from None


def _json(payload: bytes, url: str) -> Any:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise BatchApiError(f"{url.split('?', 1)[0]}: the answer is not JSON: {payload[:200]!r}") from None


def _get(url: str, headers: Mapping[str, str], sleep: Any = time.sleep) -> bytes:
    for attempt in range(_GET_ATTEMPTS):
        try:
            return _send("GET", url, headers, None)
        except BatchApiError as exc:
            if exc.status not in _RETRIED or attempt == _GET_ATTEMPTS - 1:
                raise
            sleep(2.0**attempt)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def get_object(url: str, headers: Mapping[str, str], what: str) -> dict[str, Any]:
    """GET ``url``'s JSON object (retried on a connection error, 429 or 5xx); ``what`` names it in the error."""
    answer = _json(_get(url, headers), url)
    if not isinstance(answer, dict):
        raise BatchApiError(f"{what}: not an object: {str(answer)[:200]}")
    return answer


def named(answer: Any, key: str, what: str, prefix: str = "") -> str:
    """The string ``answer[key]`` (an id a create or upload gave, starting with ``prefix``), else an error."""
    value = answer.get(key) if isinstance(answer, dict) else None
    if not isinstance(value, str) or not value.startswith(prefix):
        raise BatchApiError(f"{what} gave no {prefix}{key}: {str(answer)[:200]}")
    return value


def get_lines(url: str, headers: Mapping[str, str]) -> Iterator[Any]:
    """GET a results file of JSON lines and parse each non-blank line (retried on a connection error, 429 or 5xx)."""
    for line in _get(url, headers).splitlines():
        if line.strip():
            yield orjson.loads(line)


def post_json(url: str, headers: Mapping[str, str], body: Any) -> Any:
    """POST ``body`` as JSON and parse the JSON answer."""
    return _json(_send("POST", url, {**headers, "content-type": "application/json"}, orjson.dumps(body)), url)


def post_multipart(url: str, headers: Mapping[str, str], fields: Mapping[str, str], filename: str,
                   content: bytes) -> Any:
    """POST a ``multipart/form-data`` upload of one file (``file``) plus text fields; parse the JSON answer."""
    boundary = "cp-observe-batch-boundary-7f3a9c"
    parts: list[bytes] = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
                 "Content-Type: application/jsonl\r\n\r\n".encode())
    parts.append(content)
    parts.append(f"\r\n--{boundary}--\r\n".encode())
    body = b"".join(parts)
    answer = _send("POST", url, {**headers, "content-type": f"multipart/form-data; boundary={boundary}"}, body)
    return _json(answer, url)


def seconds_of(value: Any) -> float | None:
    """A provider's creation time as Unix seconds: a number (OpenAI) or an RFC 3339 text; ``None`` if neither."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None
