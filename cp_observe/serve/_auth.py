"""Bearer-token authentication of OTLP senders, as the Collector's ``bearertokenauth`` client sends it.

The client extension puts ``Authorization: Bearer <token>`` on every HTTP request and the ``authorization``
metadata on every gRPC call. The service accepts a request whose token equals one of its tokens (compared in
constant time). Tokens come from ``CP_OBSERVE_AUTH_TOKEN`` or from ``auth_token_file`` (one token a line, so
a rotation can list the old and the new one), never from the command line. The file is read again when it
changes (checked at most once a second). A token's value is never logged, counted or echoed.
"""

from __future__ import annotations

import hmac
import os
import threading
import time
from pathlib import Path

from cp_observe._errors import ConfigurationError
from cp_observe._log import logger

__all__ = ["MISSING_TOKEN", "WRONG_TOKEN", "BearerTokens"]

MISSING_TOKEN = "missing_token"
WRONG_TOKEN = "wrong_token"
_SCHEME = "bearer"
_RECHECK_S = 1.0


class BearerTokens:
    """The tokens a sender may present; ``check(header)`` says why a request is refused, or ``None``."""

    def __init__(self, token: str | None = None, token_file: str | None = None) -> None:
        self._fixed = tuple(t for t in [(token or "").strip()] if t)
        self._file = token_file
        self._lock = threading.Lock()  # guards _from_file, _stamp and _checked
        self._from_file: tuple[str, ...] = ()
        self._stamp: tuple[int, int] | None = None
        self._checked = time.monotonic()
        if token_file is not None:
            try:
                self._from_file = self._read(token_file)
                self._stamp = self._file_stamp(token_file)
            except OSError as exc:
                raise ConfigurationError(f"cannot read auth_token_file: {exc.strerror}") from None
            if not self._from_file:
                raise ConfigurationError("auth_token_file holds no token")

    @property
    def enabled(self) -> bool:
        """True when requests must carry a token."""
        return bool(self._fixed) or self._file is not None

    @staticmethod
    def _read(path: str) -> tuple[str, ...]:
        return tuple(line.strip() for line in Path(path).read_text("utf-8").splitlines() if line.strip())

    @staticmethod
    def _file_stamp(path: str) -> tuple[int, int]:
        stat = os.stat(path)
        return stat.st_mtime_ns, stat.st_size

    def _tokens(self) -> tuple[str, ...]:
        if self._file is None:
            return self._fixed
        now = time.monotonic()
        with self._lock:
            if now - self._checked >= _RECHECK_S:
                self._checked = now
                try:
                    stamp = self._file_stamp(self._file)
                    if stamp != self._stamp:
                        tokens = self._read(self._file)
                        if tokens:
                            self._from_file, self._stamp = tokens, stamp
                            logger.info("auth tokens reloaded", count=len(tokens))
                except (OSError, UnicodeDecodeError) as exc:
                    logger.warning("auth_token_file unreadable; keeping the previous tokens",
                                   error_type=type(exc).__name__)
            return self._fixed + self._from_file

    def check(self, authorization: str | None) -> str | None:
        """``None`` when ``authorization`` (the header's value) carries a valid token, else the refusal reason."""
        if not self.enabled:
            return None
        scheme, _, presented = (authorization or "").strip().partition(" ")
        presented = presented.strip()
        if scheme.lower() != _SCHEME or not presented:
            return MISSING_TOKEN
        given = presented.encode("utf-8", "surrogateescape")
        valid = False
        for token in self._tokens():  # every token compared: the time taken says nothing about which matched
            valid |= hmac.compare_digest(given, token.encode("utf-8"))
        return None if valid else WRONG_TOKEN
