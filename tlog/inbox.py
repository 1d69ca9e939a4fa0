"""The inbox formats: inbound events, their log entries, delivery records and receipts
(tlog-toolkit's own formats, version 1).

An *event* is a message from outside that a run waits for (a payment confirmation, a webhook,
a reply). It has five fields:

=============  ==================================================================================
 field          rule
=============  ==================================================================================
 ``source``     who sent it: the alphabet of a run ID (:func:`tlog.journal.check_source`, no
                ``/``), 1..128 characters
 ``id``         the sender's own ID of the message: 1..256 characters, no control character.
                Unique only per source, so an event's identity is the pair (source, id): two
                senders that both number their messages from 1 never collide
 ``kind``       what it is: the alphabet of a record kind (:func:`tlog.journal.check_kind`)
 ``keys``       its correlation keys: 1..:data:`MAX_KEYS` pairs (namespace, value), each part
                1..256 characters without control characters; in canonical order (sorted by
                namespace, then value, as code points) with no pair twice
 ``payload``    any JSON value with one canonical spelling (:func:`tlog.journal.canonical_json`:
                no floats, integers within ±(2^53−1), at most 64 levels), at most
                :data:`MAX_PAYLOAD` bytes canonical
=============  ==================================================================================

All of it Unicode text (no lone surrogate), and the event's entry (below) at most
:data:`MAX_ENTRY_SIZE` bytes.

The event's JSON form (what ``tlog-store event buffer`` reads and every listing prints) is the
object ``{"source", "id", "kind", "keys": [[namespace, value], …], "payload"}``; the Python
API takes keys in any order and puts them in canonical order (:func:`make_event`), the JSON
form read from outside may list them in any order too, but never twice.

The *payload hash* is SHA-256 of the payload's canonical JSON bytes.

The *entry* is what the tenant's inbox log commits to for each buffered event — not the
payload, so that erasing a payload keeps every proof valid. It is the canonical JSON object
(the journal's canonical JSON, so one entry has one spelling)::

    {"id":…,"keys":[[ns,value],…],"kind":…,"payload_sha256":"<base64 of 32 bytes>",
     "received_at":<whole Unix seconds, < 2^53>,"source":…,"v":1}

with exactly these members. The log is RFC 6962 over the entries: leaf hash
SHA-256(0x00 || entry bytes) (:func:`tlog.merkle.leaf_hash`), one leaf per buffered event, in
the order the store accepted them; the leaf's index is the event's *position*, and position
order is arrival order. The log's checkpoints are C2SP signed notes whose origin is the tenant
log's origin followed by ``/inbox`` (``<base origin>/<tenant>/inbox``, :func:`inbox_origin`),
signed by the store's log key under that name.

A *receipt* is a C2SP tlog-proof@v1 file (:mod:`tlog.proof`) whose ``extra`` data is the
entry bytes and whose index is the event's position: whoever holds it can check offline that
the store accepted exactly that event at that time (:func:`receipt_entry` parses and checks
the entry; the leaf is the leaf hash of ``extra``). A journal run's proof has a 32-byte head as
its extra; an entry is always longer and starts with ``{``, so the two never look alike.

The *delivery record*. When a run resumes on an event, the store appends to the run's chain a
record of kind ``EventDelivered`` (:data:`KIND_EVENT_DELIVERED`) whose data is exactly::

    {"id":…,"keys":[…],"kind":…,"payload_sha256":"…","position":<n>,"source":…}

(:func:`delivery_data`), so an export proves which message resumed which run, and still does
after the payload has been erased everywhere else.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tlog.encoding import HASH_SIZE, MAX_INT63, b64decode, b64encode, is_text, shown
from tlog.errors import MalformedError
from tlog.journal import (
    MAX_RECORD_SIZE,
    MAX_SAFE_INT,
    canonical_json,
    check_kind,
    check_source,
    parse_canonical_json,
)
from tlog.merkle import leaf_hash

__all__ = [
    "ENTRY_VERSION",
    "INBOX_SUFFIX",
    "KIND_EVENT_DELIVERED",
    "MAX_ENTRY_SIZE",
    "MAX_KEYS",
    "MAX_PAYLOAD",
    "Entry",
    "Event",
    "buffered_encodings",
    "check_keys",
    "check_label",
    "delivery_data",
    "delivery_of",
    "entry_leaf",
    "event_from_json",
    "inbox_origin",
    "make_event",
    "payload_hash",
    "receipt_entry",
    "stored_leaf",
]

ENTRY_VERSION = 1
INBOX_SUFFIX = "inbox"
"""The last part of an inbox log's origin: ``<tenant log origin>/inbox``."""
KIND_EVENT_DELIVERED = "EventDelivered"
"""The kind of the delivery record a run's chain gets when it resumes on an event."""
MAX_KEYS = 16
"""Correlation keys of one event or one wait."""
MAX_PAYLOAD = MAX_RECORD_SIZE
"""Bytes of a payload's canonical JSON."""
MAX_ENTRY_SIZE = 16 * 1024
"""Bytes of an entry. Every event of ASCII labels fits (16 keys of 256 + 256 characters);
:func:`make_event` refuses an event whose entry would not (labels of many multi-byte
characters), so that every buffered event's entry fits a receipt's extra data."""

_EVENT_FIELDS = frozenset({"source", "id", "kind", "keys", "payload"})
_ENTRY_FIELDS = frozenset({"id", "keys", "kind", "payload_sha256", "received_at", "source", "v"})
_DELIVERY_FIELDS = frozenset({"id", "keys", "kind", "payload_sha256", "position", "source"})


def check_label(value: object, what: str, limit: int = 256) -> str:
    """A sender's message ID, a key's namespace or value, a dead-letter reason: 1..``limit``
    characters of Unicode text (no lone surrogate: it has no UTF-8 spelling, so no database
    and no JSON could keep it), no control character (below U+0020, or U+007F)."""
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= limit
        or any(c < " " or c == "\x7f" for c in value)
        or not is_text(value)
    ):
        raise MalformedError(
            f"{what} must be 1-{limit} characters of text without control characters"
        )
    return value


def check_keys(keys: object, what: str = "correlation keys") -> tuple[tuple[str, str], ...]:
    """Correlation keys in canonical order: 1..MAX_KEYS (namespace, value) pairs, sorted, none
    twice. Accepts any sequence of 2-item sequences of strings; MalformedError otherwise."""
    if isinstance(keys, str | bytes) or not isinstance(keys, Sequence):
        raise MalformedError(f"{what} are a list of [namespace, value] pairs")
    if not 1 <= len(keys) <= MAX_KEYS:
        raise MalformedError(f"{what} are 1-{MAX_KEYS} [namespace, value] pairs")
    pairs = []
    for pair in keys:
        if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise MalformedError(f"{what} are a list of [namespace, value] pairs")
        pairs.append(
            (check_label(pair[0], "a key's namespace"), check_label(pair[1], "a key's value"))
        )
    ordered = tuple(sorted(pairs))
    for a, b in itertools.pairwise(ordered):
        if a == b:
            raise MalformedError(f"{what} name [{shown(a[0])}, {shown(a[1])}] twice")
    return ordered


def payload_hash(payload_bytes: bytes) -> bytes:
    """SHA-256 of a payload's canonical JSON bytes."""
    return hashlib.sha256(payload_bytes).digest()


@dataclass(frozen=True)
class Event:
    """An inbound event, checked and canonical (:func:`make_event`). ``payload_bytes`` is the
    payload's canonical JSON; ``payload`` its value."""

    source: str
    id: str
    kind: str
    keys: tuple[tuple[str, str], ...]
    payload: Any
    payload_bytes: bytes
    # Set by make_event once every field is checked; not an argument, so neither a hand-built
    # Event nor dataclasses.replace() of a made one carries it (both are checked again).
    made: bool = field(default=False, init=False, repr=False, compare=False)
    # Also set by make_event, which computes both on its way to the entry's size; a hand-built
    # Event has neither, and computes them when asked.
    _digest: bytes = field(default=b"", init=False, repr=False, compare=False)
    _keys_json: bytes = field(default=b"", init=False, repr=False, compare=False)

    @property
    def payload_sha256(self) -> bytes:
        return self._digest or payload_hash(self.payload_bytes)

    @property
    def stored_keys(self) -> bytes:
        """:func:`keys_json` of the event's keys: how a store keeps them."""
        return self._keys_json or keys_json(self.keys)

    def to_json(self) -> dict[str, Any]:
        """The event's JSON form (module docstring)."""
        return {
            "source": self.source,
            "id": self.id,
            "kind": self.kind,
            "keys": [list(k) for k in self.keys],
            "payload": self.payload,
        }


def make_event(source: str, id: str, kind: str, keys: object, payload: Any) -> Event:
    """An :class:`Event` from its fields, each checked (MalformedError naming the first bad
    one); the keys put in canonical order."""
    check_source(source)
    check_label(id, "an event's id")
    check_kind(kind, "event kind")
    ordered = check_keys(keys)
    raw = canonical_json(payload)
    if len(raw) > MAX_PAYLOAD:
        raise MalformedError(
            f"the payload is {len(raw)} bytes of canonical JSON, more than {MAX_PAYLOAD}"
        )
    event = Event(source, id, kind, ordered, payload, raw)
    digest = payload_hash(raw)
    keys = _keys_text(ordered)
    # Its entry (at the latest time one can hold) must be Unicode text that fits a receipt:
    # a lone surrogate has no UTF-8, and 16 keys of 4-byte characters exceed MAX_ENTRY_SIZE.
    size = len(Entry(source, id, kind, ordered, digest, MAX_SAFE_INT)._encode(keys))
    if size > MAX_ENTRY_SIZE:
        raise MalformedError(
            f"the event's inbox entry would be {size} bytes, more than {MAX_ENTRY_SIZE}"
        )
    object.__setattr__(event, "_digest", digest)
    if keys is not None:  # UTF-8 text: the entry that holds it verbatim was
        object.__setattr__(event, "_keys_json", keys.encode("utf-8"))
    object.__setattr__(event, "made", True)
    return event


def event_from_json(value: object) -> Event:
    """An event from its JSON form (a parsed object): exactly the members ``source``, ``id``,
    ``kind``, ``keys`` and ``payload`` (``payload`` may be any JSON value, ``null`` too)."""
    if not isinstance(value, Mapping):
        raise MalformedError("an event is a JSON object")
    missing = sorted(_EVENT_FIELDS - value.keys())
    if missing:
        raise MalformedError(f"an event has no {shown(missing[0])}")
    extra = sorted(value.keys() - _EVENT_FIELDS)
    if extra:
        raise MalformedError(f"an event has no member {shown(extra[0])}")
    return make_event(value["source"], value["id"], value["kind"], value["keys"], value["payload"])


@dataclass(frozen=True)
class Entry:
    """An inbox log entry (module docstring): what a leaf commits to."""

    source: str
    id: str
    kind: str
    keys: tuple[tuple[str, str], ...]
    payload_sha256: bytes
    received_at: int

    @classmethod
    def of(cls, event: Event, received_at: int) -> Entry:
        return cls(
            event.source, event.id, event.kind, event.keys, event.payload_sha256, received_at
        )

    def _check_ranges(self) -> None:
        if len(self.payload_sha256) != HASH_SIZE:
            raise MalformedError("an entry's payload hash is 32 bytes")
        if type(self.received_at) is not int or not 0 <= self.received_at <= MAX_SAFE_INT:
            raise MalformedError(
                f"an entry's received_at {shown(self.received_at)} is out of range"
            )

    def encode(self) -> bytes:
        """The entry's canonical bytes."""
        return self._encode(_keys_text(self.keys))

    def _encode(self, keys: str | None) -> bytes:
        """:meth:`encode`, given :func:`_keys_text` of the entry's keys."""
        self._check_ranges()
        fast = _entry_text(self, keys)
        if fast is not None:
            try:
                return fast.encode("utf-8")
            except UnicodeEncodeError:
                pass  # a lone surrogate: canonical_json below refuses it with its own error
        return canonical_json(
            {
                "id": self.id,
                "keys": [list(k) for k in self.keys],
                "kind": self.kind,
                "payload_sha256": b64encode(self.payload_sha256),
                "received_at": self.received_at,
                "source": self.source,
                "v": ENTRY_VERSION,
            }
        )

    @property
    def leaf(self) -> bytes:
        """The entry's RFC 6962 leaf hash."""
        return leaf_hash(self.encode())

    @classmethod
    def parse(cls, raw: bytes) -> Entry:
        """An entry from its canonical bytes; MalformedError for anything else (a member
        missing or extra, a field that breaks its rule, a spelling that is not canonical)."""
        if len(raw) > MAX_ENTRY_SIZE:
            raise MalformedError(f"an inbox entry is at most {MAX_ENTRY_SIZE} bytes")
        value = parse_canonical_json(raw)
        if not isinstance(value, dict) or set(value) != _ENTRY_FIELDS:
            raise MalformedError(
                "an inbox entry is an object of exactly: " + ", ".join(sorted(_ENTRY_FIELDS))
            )
        if value["v"] != ENTRY_VERSION or type(value["v"]) is not int:
            raise MalformedError(f"inbox entry version {shown(value['v'])} is not {ENTRY_VERSION}")
        at = value["received_at"]
        if type(at) is not int or at < 0:
            raise MalformedError("an inbox entry's received_at is whole seconds")
        digest = value["payload_sha256"]
        if not isinstance(digest, str):
            raise MalformedError("an inbox entry's payload_sha256 is base64")
        for name in ("source", "id", "kind"):
            if not isinstance(value[name], str):
                raise MalformedError(f"an inbox entry's {name} is a string")
        check_source(value["source"])
        check_label(value["id"], "an event's id")
        check_kind(value["kind"], "event kind")
        keys = check_keys(value["keys"])
        if [list(k) for k in keys] != value["keys"]:
            raise MalformedError("an inbox entry's keys are not in canonical order")
        entry = cls(
            value["source"],
            value["id"],
            value["kind"],
            keys,
            b64decode(digest, "payload_sha256"),
            at,
        )
        if len(entry.payload_sha256) != HASH_SIZE:
            raise MalformedError("an inbox entry's payload_sha256 is not 32 bytes")
        if entry.encode() != raw:
            raise MalformedError("an inbox entry is not in canonical form")
        return entry

    def matches(self, event: Event) -> bool:
        """Whether this entry commits to ``event`` (every field, the payload by its hash)."""
        return (
            self.source == event.source
            and self.id == event.id
            and self.kind == event.kind
            and self.keys == event.keys
            and self.payload_sha256 == event.payload_sha256
        )


def entry_leaf(raw: bytes) -> bytes:
    """The leaf hash of an entry's bytes."""
    return leaf_hash(raw)


def inbox_origin(log_origin: str) -> str:
    """The origin of the inbox log beside the tenant log of origin ``log_origin``."""
    return f"{log_origin}/{INBOX_SUFFIX}"


def receipt_entry(extra: bytes | None) -> Entry:
    """The entry a receipt's ``extra`` data holds; MalformedError when it holds none."""
    if extra is None:
        raise MalformedError("the proof has no extra data: it is not an inbox receipt")
    return Entry.parse(extra)


def delivery_data(entry: Entry, position: int) -> dict[str, Any]:
    """The ``data`` of the delivery record of the event at ``position`` with ``entry``."""
    if type(position) is not int or not 0 <= position <= MAX_INT63:
        raise MalformedError(f"position {shown(position)} is out of range")
    return {
        "id": entry.id,
        "keys": [list(k) for k in entry.keys],
        "kind": entry.kind,
        "payload_sha256": b64encode(entry.payload_sha256),
        "position": position,
        "source": entry.source,
    }


def delivery_of(data: object) -> tuple[str, str, str, tuple[tuple[str, str], ...], bytes, int]:
    """(source, id, kind, keys, payload hash, position) of an ``EventDelivered`` record's data;
    MalformedError when it is not exactly what :func:`delivery_data` writes."""
    if not isinstance(data, Mapping) or set(data) != _DELIVERY_FIELDS:
        raise MalformedError(
            "an EventDelivered record's data is an object of exactly: "
            + ", ".join(sorted(_DELIVERY_FIELDS))
        )
    position = data["position"]
    if type(position) is not int or position < 0:
        raise MalformedError("an EventDelivered record's position is a whole number")
    for name in ("source", "id", "kind", "payload_sha256"):
        if not isinstance(data[name], str):
            raise MalformedError(f"an EventDelivered record's {name} is a string")
    check_source(data["source"])
    check_label(data["id"], "an event's id")
    check_kind(data["kind"], "event kind")
    keys = check_keys(data["keys"])
    if [list(k) for k in keys] != data["keys"]:
        raise MalformedError("an EventDelivered record's keys are not in canonical order")
    digest = b64decode(data["payload_sha256"], "payload_sha256")
    if len(digest) != HASH_SIZE:
        raise MalformedError("an EventDelivered record's payload_sha256 is not 32 bytes")
    return data["source"], data["id"], data["kind"], keys, digest, position


# The hot path of buffering spells entries and key lists directly: canonical_json's spelling
# of these shapes, with its string encoder (json's, without ASCII escaping), and without its
# walk over the value (every part is a str, the time an int in range: nothing to check).
# Anything else — a part that is not exactly a str, a key that is not a pair — returns None
# and goes through canonical_json. tests/tlog/test_inbox_format.py checks, with Hypothesis,
# that both spellings are the same bytes.
_json_str = json.encoder.encode_basestring


def _keys_text(keys: object) -> str | None:
    """``[list(k) for k in keys]`` as canonical_json spells it; None when it cannot say."""
    if not isinstance(keys, tuple | list):
        return None
    parts = []
    for k in keys:
        if not isinstance(k, tuple | list) or len(k) != 2:
            return None
        ns, value = k
        if type(ns) is not str or type(value) is not str:
            return None
        parts.append(f"[{_json_str(ns)},{_json_str(value)}]")
    return f"[{','.join(parts)}]"


def _entry_text(entry: Entry, keys: str | None) -> str | None:
    """The canonical JSON text of ``entry`` (its fields' ranges checked by the caller) whose
    keys' text is ``keys`` (:func:`_keys_text`); None when it cannot say (see above)."""
    if (
        keys is None
        or type(entry.id) is not str
        or type(entry.kind) is not str
        or type(entry.source) is not str
        or type(entry.payload_sha256) is not bytes
    ):
        return None
    return (
        f'{{"id":{_json_str(entry.id)},"keys":{keys},"kind":{_json_str(entry.kind)},'
        f'"payload_sha256":"{b64encode(entry.payload_sha256)}",'
        f'"received_at":{entry.received_at},"source":{_json_str(entry.source)},'
        f'"v":{ENTRY_VERSION}}}'
    )


def keys_json(keys: Iterable[tuple[str, str]]) -> bytes:
    """Canonical JSON of a key list (how the store keeps an event's keys)."""
    fast = _keys_text(keys)
    if fast is not None:
        try:
            return fast.encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate: canonical_json below refuses it with its own error
    return canonical_json([list(k) for k in keys])


def buffered_encodings(
    event: Event, payload_sha256: bytes, received_at: int
) -> tuple[bytes, bytes]:
    """``(keys_json(event.keys), Entry(…event's fields…, payload_sha256, received_at).leaf)``:
    what buffering stores of an event, its keys spelled once for both."""
    entry = Entry(event.source, event.id, event.kind, event.keys, payload_sha256, received_at)
    keys = _keys_text(event.keys)
    if keys is not None:
        entry._check_ranges()
        text = _entry_text(entry, keys)
        if text is not None:
            try:
                return keys.encode("utf-8"), leaf_hash(text.encode("utf-8"))
            except UnicodeEncodeError:
                pass  # a lone surrogate: refused below, as keys_json and encode refuse it
    return keys_json(event.keys), entry.leaf


def stored_leaf(
    source: str, id: str, kind: str, keys: str, payload_sha256: bytes, received_at: int
) -> bytes:
    """The leaf of the entry of an event as a store keeps it: ``keys`` is the text of
    :func:`keys_json`'s bytes, which the entry's canonical spelling holds verbatim (so it is
    not parsed again; the caller wrote it). :attr:`Entry.leaf` of the same event."""
    entry = Entry(source, id, kind, (), payload_sha256, received_at)
    entry._check_ranges()
    text = _entry_text(entry, keys)
    assert text is not None  # the fields' types are the caller's
    return leaf_hash(text.encode("utf-8"))


def parse_keys_json(raw: bytes) -> tuple[tuple[str, str], ...]:
    """Keys from :func:`keys_json`'s bytes; MalformedError when they are not exactly that."""
    keys = check_keys(parse_canonical_json(raw))
    if keys_json(keys) != raw:
        raise MalformedError("stored keys are not in canonical order")
    return keys
