"""TLS for the front doors and the admin port: one set of PEM files, reloaded when they change.

The settings use the names of the Collector's ``configtls`` (``cert_file``, ``key_file``, ``client_ca_file``,
``reload_interval``), prefixed ``tls_``. With ``client_ca_file`` the OTLP ports require a client certificate
signed by that CA (mTLS, as ``configtls`` does); the admin port never asks for one, so that probes work.

Reload: at most once per ``reload_interval_s``, a new connection (HTTP) or handshake (gRPC) checks the files'
modification times and sizes; when they changed, the files are read again and later connections use them.
Connections already open keep their certificate. Files that do not load (a half-written rotation) leave the
previous certificate in use and log a warning; the next check tries again.
"""

from __future__ import annotations

import os
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]  # grpcio ships no type hints

from cp_observe._errors import ConfigurationError
from cp_observe._log import logger

__all__ = ["ServerTls", "peer_identity"]


class ServerTls:
    """The server's certificate, key and optional client CA, as ``ssl`` contexts and gRPC credentials."""

    def __init__(self, cert_file: str, key_file: str, client_ca_file: str | None, reload_interval_s: float) -> None:
        self.cert_file, self.key_file, self.client_ca_file = cert_file, key_file, client_ca_file
        self.reload_interval_s = reload_interval_s
        self._lock = threading.Lock()  # guards _stamp, _checked, _generation, _pem, _otlp and _admin
        self._generation = 0  # +1 per reload: each consumer (HTTP, gRPC) sees every change
        self._checked = time.monotonic()
        self._stamp = self._files_stamp()
        try:
            self._pem = self._read()
            self._otlp, self._admin = self._contexts()
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise ConfigurationError(f"cannot load the TLS files: {exc}") from None

    @property
    def mutual(self) -> bool:
        """True when OTLP senders must show a client certificate."""
        return self.client_ca_file is not None

    def _paths(self) -> list[str]:
        return [p for p in (self.cert_file, self.key_file, self.client_ca_file) if p]

    def _files_stamp(self) -> tuple[tuple[int, int], ...]:
        stamps = []
        for path in self._paths():
            try:
                stat = os.stat(path)
                stamps.append((stat.st_mtime_ns, stat.st_size))
            except OSError:
                stamps.append((-1, -1))
        return tuple(stamps)

    def _read(self) -> tuple[bytes, bytes, bytes | None]:
        ca = Path(self.client_ca_file).read_bytes() if self.client_ca_file else None
        return Path(self.cert_file).read_bytes(), Path(self.key_file).read_bytes(), ca

    def _contexts(self) -> tuple[ssl.SSLContext, ssl.SSLContext]:
        otlp = self._context(self.client_ca_file)
        return otlp, (self._context(None) if self.client_ca_file else otlp)

    def _context(self, client_ca_file: str | None) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2  # configtls' default min_version
        context.load_cert_chain(self.cert_file, self.key_file)
        if client_ca_file:
            context.load_verify_locations(cafile=client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def _maybe_reload(self) -> bool:
        """Reload when the files changed (checked at most once per interval); True when they were reloaded."""
        if self.reload_interval_s <= 0:
            return False
        now = time.monotonic()
        with self._lock:
            if now - self._checked < self.reload_interval_s:
                return False
            self._checked = now
            stamp = self._files_stamp()
            if stamp == self._stamp:
                return False
            try:
                pem = self._read()
                otlp, admin = self._contexts()
            except (OSError, ssl.SSLError, ValueError) as exc:
                logger.warning("TLS files changed but do not load; keeping the previous ones",
                               error_type=type(exc).__name__)
                return False
            self._stamp, self._pem, self._otlp, self._admin = stamp, pem, otlp, admin
            self._generation += 1
        logger.info("TLS files reloaded")
        return True

    def context(self, admin: bool = False) -> ssl.SSLContext:
        """The current server context for a new HTTP connection (the admin one asks for no client cert)."""
        self._maybe_reload()
        with self._lock:
            return self._admin if admin else self._otlp

    def grpc_credentials(self) -> Any:
        """Server credentials that pick up reloaded files at the next handshake."""
        seen = [self._generation]  # the generation gRPC serves; written by fetch() only

        def configuration() -> Any:
            with self._lock:
                cert, key, ca = self._pem
                seen[0] = self._generation
            return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

        def fetch() -> Any:
            self._maybe_reload()
            return configuration() if self._generation != seen[0] else None

        return grpc.dynamic_ssl_server_credentials(configuration(), fetch, require_client_authentication=self.mutual)


def peer_identity(subject: Any) -> str | None:
    """The common name of a verified client certificate's subject (``ssl.getpeercert()['subject']``)."""
    for rdn in subject or ():
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
