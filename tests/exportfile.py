"""Helpers of the export-file tests (tests/tlog/test_export_format.py,
tests/verifier/test_parallel.py): fixed keys, and the line surgery a forger would do on an
export file (the format is docs/export-format.md: one item a line, the end line last, whose
fifth field is the SHA-256 digest of every line before it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from tlog.encoding import b64encode
from tlog.keys import format_vkey, verifier_for


def seed(label: str) -> bytes:
    """A fixed 32-byte key seed per label."""
    return hashlib.sha256(label.encode()).digest()


def vkey(signer: Any) -> str:
    """The vkey of a tlog signer (any key type)."""
    return format_vkey(verifier_for(signer.name, signer.key_type, signer.public_key))


def lines_of(data: bytes) -> list[bytes]:
    """An export's lines, without their LFs."""
    return data.split(b"\n")[:-1]


def join(lines: Sequence[bytes]) -> bytes:
    """Lines back into an export, each with its LF."""
    return b"".join(line + b"\n" for line in lines)


def redigest(data: bytes) -> bytes:
    """Recompute the end line's digest (what a forger would do)."""
    head, _, end = data.rpartition(b"\nend ")
    tokens = end.split(b" ")
    tokens[4] = b64encode(hashlib.sha256(head + b"\n").digest()).encode() + b"\n"
    return head + b"\nend " + b" ".join(tokens)
