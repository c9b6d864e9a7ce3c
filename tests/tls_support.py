"""Real test certificates, made with the ``openssl`` CLI at test time: two CAs, a server and two clients.

- ``ca``: the CA the service trusts for client certificates and the clients trust for the server;
- ``server``: signed by ``ca``, for ``localhost`` and ``127.0.0.1`` (serverAuth);
- ``client``: signed by ``ca`` (clientAuth), common name ``collector-gateway``;
- ``rogue_ca``, ``rogue_client`` and ``rogue_server``: another CA and the certificates it signed (a client
  refused under mTLS; a server certificate for the reload test).

Every key is an ECDSA P-256 key; the certificates are valid for one day. No network, nothing fake: these
are the files a real deployment mounts from a Secret.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Pki", "find_listeners", "make_pki"]

_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class Pki:
    """Paths of the generated PEM files."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_ca: Path
    rogue_client_cert: Path
    rogue_client_key: Path
    rogue_server_cert: Path
    rogue_server_key: Path

    def read(self, name: str) -> bytes:
        """The bytes of one file (``"ca"``, ``"client_cert"``, ...)."""
        path: Path = getattr(self, name)
        return path.read_bytes()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.crt"
    _openssl("req", "-x509", *_KEY, "-keyout", key.name, "-out", cert.name, "-days", "1", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=directory)
    return cert, key


def _leaf(directory: Path, name: str, common_name: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    key, csr, cert = directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.crt"
    ext = directory / f"{name}.ext"
    ext.write_text(extensions)
    _openssl("req", *_KEY, "-keyout", key.name, "-out", csr.name, "-subj", f"/CN={common_name}", cwd=directory)
    _openssl("x509", "-req", "-in", csr.name, "-CA", ca[0].name, "-CAkey", ca[1].name, "-CAcreateserial",
             "-out", cert.name, "-days", "1", "-extfile", ext.name, cwd=directory)
    return cert, key


def make_pki(directory: Path) -> Pki:
    """Generate the CAs, the server certificate and the client certificates under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca(directory, "ca")
    server = _leaf(directory, "server", "localhost", ca,
                   "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    client = _leaf(directory, "client", "collector-gateway", ca, "extendedKeyUsage=clientAuth\n")
    rogue = _ca(directory, "rogue-ca")
    rogue_client = _leaf(directory, "rogue-client", "collector-gateway", rogue, "extendedKeyUsage=clientAuth\n")
    rogue_server = _leaf(directory, "rogue-server", "localhost", rogue,
                         "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    return Pki(ca[0], server[0], server[1], client[0], client[1], rogue[0], rogue_client[0], rogue_client[1],
               rogue_server[0], rogue_server[1])


def find_listeners(ports: Any) -> dict[int, list[str]]:
    """The local addresses listening on each of ``ports``, read from ``/proc/net/tcp`` and ``tcp6``."""
    found: dict[int, list[str]] = {int(port): [] for port in ports}
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            address, port_hex = local.split(":")
            port = int(port_hex, 16)
            if state == "0A" and port in found and len(address) == width:
                found[port].append(_address(address))
    return found


def _address(hex_address: str) -> str:
    """``/proc/net/tcp`` addresses are little-endian 32-bit words."""
    import ipaddress

    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(words)
    mapped = getattr(address, "ipv4_mapped", None)  # gRPC listens on ::ffff:127.0.0.1 for 127.0.0.1
    return str(mapped or address)
