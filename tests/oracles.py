"""Independent oracles: RFC 6962 hashes computed by the definition, with hashlib only.

Tests of the commands compare the toolkit's output with these (not with tlog.merkle), so that a
bug in tlog.merkle cannot hide itself. The definitions are RFC 6962 §2.1
(https://www.rfc-editor.org/rfc/rfc6962#section-2.1).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence


def sha(data: bytes) -> bytes:
    """SHA-256 of ``data``."""
    return hashlib.sha256(data).digest()


def b64(data: bytes) -> str:
    """Standard base64 with padding, as text."""
    return base64.b64encode(data).decode("ascii")


def mth(leaves: Sequence[bytes]) -> bytes:
    """RFC 6962 MTH over leaf hashes, by the recursive definition (k: the largest power of two
    smaller than n)."""
    n = len(leaves)
    if n == 0:
        return sha(b"")
    if n == 1:
        return leaves[0]
    k = 1 << ((n - 1).bit_length() - 1)
    return sha(b"\x01" + mth(leaves[:k]) + mth(leaves[k:]))
