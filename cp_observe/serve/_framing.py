"""HTTP/1.1 chunked request bodies (RFC 9112 7.1), read with bounds: total size, line length, trailer count.

The Node.js OTLP HTTP exporter sends its bodies chunked (no ``Content-Length``); the standard library's
``http.server`` does not decode them. Nothing here buffers more than ``limit`` bytes of body, or more than
``_MAX_CHUNK_LINE`` bytes of one framing line, whatever the sender writes.
"""

from __future__ import annotations

from typing import Any

from cp_observe.serve._otlp import BadRequest

__all__ = ["ClientGone", "read_chunked"]

_MAX_CHUNK_LINE = 1024  # a chunk-size line (hex size and extensions) or a trailer field
_MAX_TRAILERS = 32
_HEX = b"0123456789abcdefABCDEF"


class ClientGone(Exception):
    """The connection ended before the body did."""


def read_chunked(stream: Any, limit: int) -> bytes:
    """Read an HTTP/1.1 chunked body (RFC 9112 7.1) of at most ``limit`` bytes; trailers are read and ignored.

    Raises:
        BadRequest: malformed framing (400) or more than ``limit`` bytes (413).
        ClientGone: the connection ended mid-body.
    """
    parts: list[bytes] = []
    total = 0
    while True:
        line = stream.readline(_MAX_CHUNK_LINE + 1)
        if not line.endswith(b"\n"):
            if len(line) > _MAX_CHUNK_LINE:
                raise BadRequest("chunk size line too long", 400)
            raise ClientGone()
        size_text = line.split(b";", 1)[0].strip()
        if not size_text or len(size_text) > 16 or size_text.strip(_HEX):  # int() would take "0x1f", "+5", "1_0"
            raise BadRequest("invalid chunk size", 400)
        size = int(size_text, 16)
        if size == 0:
            break
        total += size
        if total > limit:
            raise BadRequest(f"request larger than {limit} bytes", 413)
        chunk = stream.read(size)
        if len(chunk) < size:
            raise ClientGone()
        parts.append(chunk)
        if stream.readline(3) not in (b"\r\n", b"\n"):
            raise BadRequest("chunk not followed by CRLF", 400)
    for _ in range(_MAX_TRAILERS + 1):  # trailer fields, up to the empty line
        line = stream.readline(_MAX_CHUNK_LINE + 1)
        if line in (b"\r\n", b"\n"):
            return b"".join(parts)
        if not line.endswith(b"\n"):
            raise ClientGone() if len(line) <= _MAX_CHUNK_LINE else BadRequest("trailer line too long", 400)
    raise BadRequest("too many trailer fields", 400)
