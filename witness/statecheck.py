"""What the witness state accepts: origins, log keys, and the shape of a compare-and-swap.

The rules (also those of a state file, :mod:`witness.statefile`, and of the configuration,
:mod:`witness.config`):

* Origins are non-empty UTF-8 text of at most :data:`MAX_ORIGIN_BYTES` bytes without control
  characters (Unicode category Cc: U+0000-U+001F, U+007F-U+009F); vkeys parse with
  :func:`tlog.keys.parse_vkey`, are of type 0x01 (Ed25519) or 0x06 (ML-DSA-44) and at most
  :data:`MAX_VKEY_BYTES` bytes (the two limits keep a ``log_keys`` key within PostgreSQL's
  index-row limit). A writer given a bad origin or vkey raises MalformedError; a well-formed
  key of another type, or a value of the wrong Python type, raises UsageError. A *lookup*
  (``log``, ``latest``, ``evidence``) of an origin that breaks these rules finds nothing:
  such a log cannot be configured, so the server answers 404 as for any unknown log.

A compare-and-swap's arguments are checked before the database is touched
(:func:`check_swap`; UsageError: a caller bug): ``new``'s note must be a signed note whose
checkpoint text carries exactly ``new``'s origin, size and root; ``expected`` must name the
same origin; ``new.size >= expected.size``, and at equal sizes the roots must be equal
(anything else would fork the log).
"""

from __future__ import annotations

import re

from store.db import check_int
from tlog.checkpoint import Checkpoint
from tlog.cosignature import TYPE_SUBTREE_V1
from tlog.errors import MalformedError, ProofError, UsageError
from tlog.keys import TYPE_NAMES, parse_vkey_value
from tlog.note import TYPE_ED25519, Verifier, parse_note
from witness.state import Cosigned

MAX_ORIGIN_BYTES = 512
"""Longest origin, in UTF-8 bytes."""

MAX_VKEY_BYTES = 2048
"""Longest log vkey, in UTF-8 bytes (an ML-DSA-44 vkey with a 255-byte name is 2017)."""

MAX_TILES_URL_BYTES = 2048
"""Longest tiles URL of a fed log (:func:`check_tiles_url`)."""

MAX_REASON_CHARS = 1024
"""Longest evidence reason, in characters."""

LOG_KEY_TYPES = (TYPE_ED25519, TYPE_SUBTREE_V1)
"""Key types a log signs checkpoints with: Ed25519 (0x01) and ML-DSA-44 subtree/v1 (0x06)."""

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # Unicode category Cc, exactly
"""A control character (not allowed in origins and evidence reasons)."""


def check_origin(origin: object) -> str:
    """Return ``origin`` if it is a usable origin (see the module docstring), else raise
    MalformedError (UsageError when it is not a str)."""
    if not isinstance(origin, str):
        raise UsageError(f"an origin is a str, not {type(origin).__name__}")
    if not origin:
        raise MalformedError("the origin is empty")
    try:
        size = len(origin.encode("utf-8"))
    except UnicodeEncodeError:
        raise MalformedError(f"origin {origin[:60]!r} is not valid Unicode text") from None
    if size > MAX_ORIGIN_BYTES:
        raise MalformedError(f"origin {origin[:60]!r}… is longer than {MAX_ORIGIN_BYTES} bytes")
    bad = CONTROL.search(origin)
    if bad:
        raise MalformedError(
            f"origin {origin[:60]!r} contains the control character U+{ord(bad.group()):04X}"
        )
    return origin


def could_be_configured(origin: object) -> bool:
    """True when ``origin`` could be configured; UsageError when it is not even a str. The
    server asks before any lookup or cache, so that an origin no log can have costs nothing."""
    try:
        check_origin(origin)
    except MalformedError:
        return False
    return True


def check_log_vkey(vkey: object) -> Verifier:
    """Parse a log's vkey (type 0x01 or 0x06, at most :data:`MAX_VKEY_BYTES`); MalformedError
    when it does not parse, UsageError for another key type or a non-str."""
    v = parse_vkey_value(vkey, "log", "a vkey is a str")
    assert isinstance(vkey, str)  # parse_vkey_value refused anything else
    if len(vkey.encode("utf-8")) > MAX_VKEY_BYTES:
        raise MalformedError(f"log key {v.name}+{v.key_id:08x} is longer than {MAX_VKEY_BYTES}")
    if v.key_type not in LOG_KEY_TYPES:
        kind = TYPE_NAMES.get(v.key_type, "unknown")
        raise UsageError(
            f"key {v.name}+{v.key_id:08x} is a {kind} key (type 0x{v.key_type:02x}); a log"
            " signs with type 0x01 (Ed25519) or 0x06 (ML-DSA-44)"
        )
    return v


def check_keys(keys: object) -> list[str]:
    if isinstance(keys, str) or not isinstance(keys, tuple | list):
        raise UsageError("a log's keys are a tuple of vkey strings")
    if not keys:
        raise UsageError("a log needs at least one key")
    for k in keys:
        check_log_vkey(k)
    return sorted(set(keys))


def check_tiles_url(url: object) -> str:
    """A log's tiles URL, the prefix of its C2SP tlog-tiles resources that ``tlog-witness
    feed`` reads (``<url>checkpoint``, ``<url>tile/...``): ``http://`` or ``https://``,
    printable ASCII without spaces, at most :data:`MAX_TILES_URL_BYTES` bytes, with no query or
    fragment; returned ending in ``/`` (MalformedError otherwise; UsageError for a non-str)."""
    if not isinstance(url, str):
        raise UsageError("a tiles URL is a str")
    if not url.startswith(("http://", "https://")):
        raise MalformedError(f"tiles URL {url[:80]!r} is not http:// or https://")
    if len(url) > MAX_TILES_URL_BYTES or not url.isascii():
        raise MalformedError(
            f"tiles URL {url[:80]!r} is not ASCII of at most {MAX_TILES_URL_BYTES} bytes"
        )
    if any(not "!" <= c <= "~" for c in url):
        raise MalformedError(f"tiles URL {url[:80]!r} holds a space or a control character")
    if "?" in url or "#" in url:
        raise MalformedError(f"tiles URL {url[:80]!r} has a query or a fragment")
    host = url.split("://", 1)[1].split("/", 1)[0]
    if not host:
        raise MalformedError(f"tiles URL {url[:80]!r} has no host")
    return url if url.endswith("/") else url + "/"


def check_qpd(qpd: object) -> int | None:
    return None if qpd is None else check_int(qpd, "qpd (requests per day)", 1)


def check_cosigned(c: object, what: str) -> Cosigned:
    """Shape checks of a Cosigned argument (UsageError: a caller bug)."""
    if not isinstance(c, Cosigned):
        raise UsageError(f"{what} is a Cosigned, not {type(c).__name__}")
    try:
        check_origin(c.origin)
    except MalformedError as e:
        raise UsageError(f"{what}: {e}") from None
    check_int(c.size, f"{what}.size", 0)
    if not isinstance(c.root, bytes) or len(c.root) != 32:
        raise UsageError(f"{what}.root must be 32 bytes")
    if not isinstance(c.note, bytes):
        raise UsageError(f"{what}.note must be bytes")
    check_int(c.updated_at, f"{what}.updated_at", 0)
    return c


def check_new_note(new: Cosigned) -> None:
    """``new.note`` is a signed note of exactly ``new``'s checkpoint (UsageError otherwise)."""
    try:
        text, _ = parse_note(new.note)
        cp = Checkpoint.parse(text)
    except (MalformedError, ProofError) as e:
        raise UsageError(
            f"log {new.origin}: the new note is not a signed checkpoint: {e}"
        ) from None
    if (cp.origin, cp.size, cp.root) != (new.origin, new.size, new.root):
        raise UsageError(
            f"log {new.origin}: the new note's checkpoint ({cp.origin}, size {cp.size}) is not"
            f" the new state's (size {new.size}, its root)"
        )


def check_swap(expected: Cosigned | None, new: Cosigned) -> None:
    """The preconditions of a compare-and-swap (UsageError naming the one that fails)."""
    check_cosigned(new, "new")
    if expected is not None:
        check_cosigned(expected, "expected")
        if expected.origin != new.origin:
            raise UsageError(
                f"compare_and_swap of log {new.origin} with the expected state of {expected.origin}"
            )
        if new.size < expected.size:
            raise UsageError(
                f"log {new.origin}: compare_and_swap would move the state back from size"
                f" {expected.size} to {new.size}"
            )
        if new.size == expected.size and new.root != expected.root:
            raise UsageError(
                f"log {new.origin}: compare_and_swap would store another root for size {new.size}"
            )
    check_new_note(new)


__all__ = [
    "CONTROL",
    "LOG_KEY_TYPES",
    "MAX_ORIGIN_BYTES",
    "MAX_REASON_CHARS",
    "MAX_VKEY_BYTES",
    "check_cosigned",
    "check_keys",
    "check_log_vkey",
    "check_new_note",
    "check_origin",
    "check_qpd",
    "check_swap",
    "could_be_configured",
]
