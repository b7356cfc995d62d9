"""Content hashes: one SHA-256 helper for ids and fingerprints."""

from __future__ import annotations

import hashlib


def sha256_hex(*parts: str | bytes, sep: str = "\0") -> str:
    """The SHA-256 hex digest of `parts` joined by `sep` (strings are UTF-8 encoded)."""
    h = hashlib.sha256()
    for n, part in enumerate(parts):
        if n and sep:
            h.update(sep.encode())
        h.update(part.encode() if isinstance(part, str) else part)
    return h.hexdigest()


def short_sha256(*parts: str | bytes, sep: str = "\0", length: int = 16) -> str:
    """The first `length` hex digits of sha256_hex(*parts): a stable short id."""
    return sha256_hex(*parts, sep=sep)[:length]
