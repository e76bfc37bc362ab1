"""Identifiers: unguessable run ids and short, readable part ids."""

from __future__ import annotations

import re
import secrets

_RUN_ID = re.compile(r"wrun_[0-9a-z]{26}")
MAX_CHAT_ID = 200
"""The longest chat id (and assistant message id) a client may send, in characters."""
_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def _base32(nbits: int) -> str:
    value = secrets.randbits(nbits)
    out = []
    for _ in range((nbits + 4) // 5):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def new_run_id() -> str:
    """A run id with 128 random bits (26 base32 characters), e.g. ``wrun_01h...``."""
    return "wrun_" + _base32(128)


def is_run_id(value: str) -> bool:
    """True when ``value`` has the shape of a run id made by :func:`new_run_id`."""
    return bool(_RUN_ID.fullmatch(value))


def new_id(prefix: str, nbits: int = 80) -> str:
    """A random id with a readable prefix, e.g. ``msg_...`` or ``call_...``."""
    return f"{prefix}_{_base32(nbits)}"


def derived_run_id(*parts: str) -> str:
    """A run id derived from ``parts`` (an idempotency key): the same parts, the same run id."""
    import hashlib

    # surrogatepass: a lone surrogate from a client's JSON must not crash the derivation
    value = (
        int.from_bytes(hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).digest()[:17], "big") >> 6
    )
    out = []
    for _ in range(26):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "wrun_" + "".join(reversed(out))
