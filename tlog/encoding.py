"""Strict scalar encodings shared by every tlog format.

The C2SP specs give each value exactly one spelling, and every parser in this package accepts
only that spelling:

* decimal integers: ASCII ``0`` or ``[1-9][0-9]*`` — no sign, no space, no underscore, no leading
  zero, no non-ASCII digit (Python's ``int()`` accepts all of those, hence this module);
* base64: RFC 4648 §4, the standard alphabet, with padding, and canonical — the unused trailing
  bits must be zero, so that re-encoding the value gives back the same text;
* hashes: base64 of exactly 32 bytes (44 characters);
* opaque octet strings (tlog-policy names and URLs) held as ``str``: decoded as UTF-8 with the
  ``surrogateescape`` error handler, which maps every octet string to exactly one ``str`` and
  back (:func:`decode_octets`, :func:`encode_octets`; :func:`show_octets` for messages).

Sizes, indexes and timestamps are bounded by ``MAX_INT63`` (2^63−1), the range of Go's int64
used by golang.org/x/mod/sumdb/tlog, and the bound tlog-cosignature sets on timestamps.
"""

from __future__ import annotations

import base64
import binascii
import re

from tlog.errors import MalformedError

__all__ = [
    "HASH_SIZE",
    "MAX_INT63",
    "b64decode",
    "b64encode",
    "decode_octets",
    "encode_octets",
    "is_text",
    "parse_decimal",
    "parse_hash",
    "show_octets",
    "shown",
]


MAX_INT63 = (1 << 63) - 1
"""Largest tree size, index or timestamp accepted anywhere (Go's int64, tlog-cosignature)."""

HASH_SIZE = 32
_DECIMAL = re.compile(r"0|[1-9][0-9]*")
_B64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


def is_text(value: str) -> bool:
    """Whether ``value`` has a UTF-8 spelling: no lone surrogate (which no database and no
    JSON could keep). Cheap for ASCII, the common case."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(value: object, limit: int = 120) -> str:
    """repr() of ``value`` for an error message, cut after ``limit`` characters: a hostile
    megabyte of input must not become the message (nor an HTTP answer's body)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def parse_decimal(text: str, what: str, maximum: int = MAX_INT63) -> int:
    """Parse a canonical ASCII decimal in ``[0, maximum]``.

    ``what`` names the field in the error message ("checkpoint size").
    """
    if not _DECIMAL.fullmatch(text):
        if text[:1] == "0" and len(text) > 1 and text.isascii() and text.isdigit():
            raise MalformedError(f"{what} {shown(text)} has a leading zero")
        raise MalformedError(f"{what} {shown(text)} is not a canonical decimal number")
    # Bound the length before int(): a megabyte of digits must not cost a bignum conversion.
    if len(text) > len(str(maximum)) or (value := int(text)) > maximum:
        cut = text if len(text) <= 40 else f"{text[:40]}… ({len(text)} digits)"
        raise MalformedError(f"{what} {cut} is larger than {maximum}")
    return value


def b64decode(text: str | bytes, what: str) -> bytes:
    """Decode canonical, padded, standard-alphabet base64 (RFC 4648 §4).

    Refuses any character outside the alphabet (including CR, LF and spaces, which Go's decoder
    skips and Python's non-validating decoder drops), missing padding, and non-zero trailing bits.
    """
    # Fast path: text that is exactly the canonical encoding of what it decodes to is
    # canonical, however lenient the decoder was on the way. Anything else takes the slow
    # path below, which names what is wrong.
    try:
        data = text if isinstance(text, bytes) else text.encode("ascii")
        raw = binascii.a2b_base64(data)
        if binascii.b2a_base64(raw, newline=False) == data:
            return raw
    except (UnicodeEncodeError, binascii.Error):
        pass
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            raise MalformedError(f"{what} is not base64") from None
    if not _B64.fullmatch(text):
        raise MalformedError(f"{what} is not canonical padded base64")
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:  # pragma: no cover - the regex admits only decodable text
        raise MalformedError(f"{what} is not base64") from None
    if base64.b64encode(raw).decode("ascii") != text:
        raise MalformedError(f"{what} is non-canonical base64 (trailing bits are not zero)")
    return raw


def encode_octets(s: str) -> bytes:
    """The octets that ``s`` (from :func:`decode_octets`) stands for."""
    return s.encode("utf-8", "surrogateescape")


def decode_octets(b: bytes) -> str:
    """The ``str`` that stands for the octets ``b``, UTF-8 or not (surrogate escapes)."""
    return b.decode("utf-8", "surrogateescape")


def show_octets(s: str) -> str:
    """``s`` printable: opaque non-UTF-8 octets as ``\\xNN`` escapes."""
    return encode_octets(s).decode("utf-8", "backslashreplace")


def b64encode(data: bytes) -> str:
    """Standard padded base64, as a str."""
    return base64.b64encode(data).decode("ascii")


def parse_hash(text: str | bytes, what: str) -> bytes:
    """Decode one base64 SHA-256 hash: 44 characters, exactly 32 bytes."""
    raw = b64decode(text, what)
    if len(raw) != HASH_SIZE:
        raise MalformedError(f"{what} is {len(raw)} bytes, a SHA-256 hash is 32")
    return raw
