"""The one content hash: a length-prefixed SHA-256 over text parts, for cache keys and the prompt's nonce."""

from __future__ import annotations

__all__ = ["content_digest"]


def content_digest(*parts: str) -> str:
    """Return the hex SHA-256 of ``parts``, each length-prefixed so ("ab", "c") and ("a", "bc") differ."""
    import hashlib  # on first use: loading OpenSSL's hashes costs the host's start-up milliseconds

    digest = hashlib.sha256()
    for part in parts:
        encoded = part.encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "big"))
        digest.update(encoded)
    return digest.hexdigest()
