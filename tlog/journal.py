"""The journal record format and its hash chain (tlog-toolkit's own format, version 1).

A *run* is an append-only chain of *records*. Record ``seq`` (1, 2, 3, … with no gap) has a
*body*: a canonical JSON object, kept as the exact bytes written (``raw``), whose fields are

=============  ========  ==================================================================
 key            type      meaning
=============  ========  ==================================================================
 ``v``          integer   body format version: always ``1``
 ``run``        string    the run's ID (:func:`check_run_id`)
 ``seq``        integer   the record's position in its run, from 1
 ``epoch``      integer   the writer's lease epoch (its fencing token), from 1
 ``kind``       string    what the record says (:func:`check_kind`); five kinds mean something
                          to the store: ``EffectStarted`` (with ``effect_key``: exactly once per
                          run), ``RunConcluded`` (with ``data.outcome``: the outcome index),
                          ``RunAdmitted`` and ``RunSuspended`` (below: admission keys, waiting
                          runs) and ``RunSealed``, reserved: the *seal record* (below)
 ``case``       string    optional: the case (matter) the record belongs to
 ``effect_key`` string    optional: the identity of an external effect within the run
 ``data``       any JSON  optional: the application's payload
=============  ========  ==================================================================

Optional fields are absent, never ``null`` (``"data":null`` is refused: a record without data
leaves ``data`` out). Canonical JSON here means: UTF-8; object keys sorted
by Unicode code point, each once; no whitespace outside strings; strings escaped as Python's
``json.dumps(…, ensure_ascii=False)`` does (``\\"``, ``\\\\``, ``\\b \\f \\n \\r \\t``, other
characters below U+0020 as ``\\u00XX`` with lowercase hex, everything else literal); integers
in decimal within ±(2^53−1); no floating-point numbers, NaN or infinities; ``data`` at most
:data:`MAX_DEPTH` levels deep, where a scalar has depth 0 and an array or object 1 + the
largest depth of its members (``[]`` and ``{}`` have depth 1, ``[[]]`` 2). So ``raw`` never
holds a byte below 0x20 — in particular no LF, which lets exports carry one record per line —
and ``encode(decode(raw)) == raw`` for every valid body: one record has one spelling.

The chain::

    hash(record 1)   = SHA-256(GENESIS || raw_1)          GENESIS = 32 zero bytes
    hash(record n)   = SHA-256(hash(record n-1) || raw_n)

``seq``, ``run`` and ``epoch`` are inside ``raw``, so a record can be moved to another run,
position or owner only by breaking its hash. A run's *head* is its last record's hash; when a
run is sealed its head becomes a leaf of the log: leaf hash SHA-256(0x00 || head) (RFC 6962).

The seal record. Sealing a run appends one last record to its chain, in the seal's
transaction: kind ``RunSealed`` (:data:`KIND_RUN_SEALED`), the seal's epoch, no case, no effect
key, and ``data`` exactly ``{"outcome": <outcome>}`` (:func:`seal_body`; the outcome follows
:func:`check_outcome`). Its hash is the sealed head, so the leaf — and every checkpoint and
inclusion proof over it — covers the run's outcome. The kind is reserved: a store appends it
only through ``seal``, and an export holds it exactly as the last record of each sealed run.

The admission record. A run started on behalf of an emitter (a producer outside the store: a
queue, a webhook, a peer) begins with a record of kind ``RunAdmitted``
(:data:`KIND_RUN_ADMITTED`) whose ``data`` is an object holding at least ``source`` (who emits:
:func:`check_source`, the run-ID alphabet, so no ``/``) and ``id`` (the emitter's own ID of what
it asked for: 1..256 characters, no control character); other members are the emitter's. Its
*admission key* is the text ``<source>/<id>`` (:func:`admission_key`; split at the first
``/``). It is the run's first record (seq 1), so a run has at most one key and one source. A
tenant's store admits one run per key (see :mod:`store.api`).

The suspension record. A run that stops to wait appends a record of kind ``RunSuspended``
(:data:`KIND_RUN_SUSPENDED`) whose ``data`` is an object holding ``until`` (whole Unix seconds,
0..2^53-1: the instant it waits for, or the deadline of the message it waits for) and,
optionally, ``message`` (the correlation key of the message it waits for: 1..256 characters, no
control character); other members are the writer's. A run is *waiting* while its last record
is a suspension (:func:`suspension_of`).

A record may carry a signature by a configured Ed25519 key (off by default). It signs::

    "tlog-toolkit/record/v1" 0x0A || hash            (23 + 32 bytes)

with the key's name and key ID (:func:`tlog.note.key_id`, type 0x01) stored beside it. Because
the hash chains, one signature commits to the whole prefix of the run.

A body is at most :data:`MAX_RECORD_SIZE` bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from tlog import accel
from tlog.encoding import is_text, shown
from tlog.errors import MalformedError, UsageError, VerificationError
from tlog.note import Ed25519Signer, Verifier

__all__ = [
    "BODY_VERSION",
    "GENESIS",
    "KIND_EFFECT_STARTED",
    "KIND_RUN_ADMITTED",
    "KIND_RUN_CONCLUDED",
    "KIND_RUN_SEALED",
    "KIND_RUN_SUSPENDED",
    "MAX_DEPTH",
    "MAX_RECORD_SIZE",
    "MAX_SAFE_INT",
    "MAX_SEQ",
    "RECORD_SIGNATURE_CONTEXT",
    "SEAL_KIND_TEXT",
    "Body",
    "ChainError",
    "Record",
    "RecordSignature",
    "Suspension",
    "admission_key",
    "admission_of",
    "body_names",
    "canonical_json",
    "chain_hash",
    "check_case_id",
    "check_effect_key",
    "check_kind",
    "check_outcome",
    "check_record",
    "check_run_id",
    "check_source",
    "check_tenant",
    "decode_body",
    "make_record",
    "orjson_body_names",
    "parse_canonical_json",
    "parse_json",
    "record_signature_message",
    "seal_body",
    "seal_outcome",
    "sign_record",
    "split_admission_key",
    "suspension_of",
    "verify_chain",
    "verify_record_signature",
]


GENESIS = bytes(32)
"""The previous hash of a run's first record."""

MAX_RECORD_SIZE = 1 << 20
"""Largest record body, in bytes."""

MAX_SAFE_INT = (1 << 53) - 1
"""Largest magnitude of an integer inside ``data`` (exact in every JSON implementation)."""

MAX_SEQ = (1 << 63) - 1
BODY_VERSION = 1
KIND_EFFECT_STARTED = "EffectStarted"
KIND_RUN_CONCLUDED = "RunConcluded"
KIND_RUN_ADMITTED = "RunAdmitted"
"""The kind of an admission record: a run's first record, naming its admission key."""
KIND_RUN_SUSPENDED = "RunSuspended"
"""The kind of a suspension record: what the run waits for, and until when."""
KIND_RUN_SEALED = "RunSealed"
"""The reserved kind of a seal record: the last record of a sealed run, written by its seal."""
SEAL_KIND_TEXT = b'"kind":"RunSealed"'
"""These bytes are in the canonical body of every seal record (a cheap first test)."""
MAX_DEPTH = 64
"""Deepest nesting of ``data``: a scalar has depth 0, an array or object 1 + its members'."""
RECORD_SIGNATURE_CONTEXT = b"tlog-toolkit/record/v1\n"

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
_KIND = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
_TENANT = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_FIELDS = frozenset({"v", "run", "seq", "epoch", "kind", "case", "effect_key", "data"})


class ChainError(VerificationError):
    """A record does not link to its predecessor, or its hash does not cover its body.

    Attributes: ``run`` and ``seq`` locate the first bad record.
    """

    def __init__(self, run: str, seq: int, detail: str) -> None:
        super().__init__(f"run {run} record {seq}: {detail}")
        self.run = run
        self.seq = seq


def check_run_id(run: str) -> None:
    """A run ID: 1..128 ASCII letters, digits and ``. _ : @ -``, starting alphanumeric."""
    if not isinstance(run, str) or not _ID.fullmatch(run):
        raise MalformedError(f"run ID {shown(run)} is not 1-128 of [A-Za-z0-9._:@-]")


def check_case_id(case: str) -> None:
    """A case ID: the same alphabet as a run ID."""
    if not isinstance(case, str) or not _ID.fullmatch(case):
        raise MalformedError(f"case ID {shown(case)} is not 1-128 of [A-Za-z0-9._:@-]")


def check_kind(kind: str, what: str = "record kind") -> None:
    """A record kind (an event's, a wait's: ``what``): a letter, then up to 63 letters,
    digits and ``_ . -``."""
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        raise MalformedError(
            f"{what} {shown(kind)} is not a letter followed by up to 63 of [A-Za-z0-9_.-]"
        )


def check_outcome(outcome: str) -> None:
    """A run outcome (``succeeded``, ``failed``, …): the same alphabet as a record kind."""
    if not isinstance(outcome, str) or not _KIND.fullmatch(outcome):
        raise MalformedError(f"outcome {shown(outcome)} is not a letter followed by [A-Za-z0-9_.-]")


def check_effect_key(key: str) -> None:
    """An effect key: 1..256 characters of text (no lone surrogate: it has no UTF-8
    spelling), none of them a control character below U+0020."""
    if (
        not isinstance(key, str)
        or not 1 <= len(key) <= 256
        or any(c < " " for c in key)
        or not is_text(key)
    ):
        raise MalformedError("effect key must be 1-256 characters without control characters")


def check_source(source: str) -> None:
    """An emitter's name, the source half of an admission key: the alphabet of a run ID."""
    if not isinstance(source, str) or not _ID.fullmatch(source):
        raise MalformedError(f"source {shown(source)} is not 1-128 of [A-Za-z0-9._:@-]")


def _check_token(value: object, what: str) -> str:
    # An emitter's ID, a correlation key: free text a log line can show as it is.
    if not isinstance(value, str) or not 1 <= len(value) <= 256 or any(c < " " for c in value):
        raise MalformedError(f"{what} must be 1-256 characters without control characters")
    return value


def admission_key(source: str, emitter_id: str) -> str:
    """The admission key ``<source>/<emitter_id>`` (both checked; see the module docstring)."""
    check_source(source)
    _check_token(emitter_id, "an emitter's ID")
    return f"{source}/{emitter_id}"


def split_admission_key(key: str) -> tuple[str, str]:
    """(source, emitter ID) of an admission key; MalformedError when it is not one."""
    if not isinstance(key, str) or "/" not in key:
        raise MalformedError(f"admission key {shown(key)} is not <source>/<id>")
    source, emitter_id = key.split("/", 1)
    admission_key(source, emitter_id)
    return source, emitter_id


def _data_object(body: Body) -> Mapping[str, Any]:
    if not body.has_data or not isinstance(body.data, Mapping):
        raise MalformedError(f"a {body.kind} record's data is an object")
    return body.data


def admission_of(body: Body) -> str | None:
    """The admission key a ``RunAdmitted`` body names (None for another kind); MalformedError
    when its ``data`` has no valid ``source`` and ``id``."""
    if body.kind != KIND_RUN_ADMITTED:
        return None
    data = _data_object(body)
    source, emitter_id = data.get("source"), data.get("id")
    if not isinstance(source, str) or not isinstance(emitter_id, str):
        raise MalformedError("a RunAdmitted record's data holds a string source and id")
    return admission_key(source, emitter_id)


@dataclass(frozen=True)
class Suspension:
    """What a suspended run waits for: the instant ``until`` (``message`` None), or the message
    with the correlation key ``message`` until the deadline ``until`` (whole Unix seconds)."""

    until: int
    message: str | None = None


def suspension_of(body: Body) -> Suspension | None:
    """The suspension a ``RunSuspended`` body names (None for another kind); MalformedError
    when its ``data`` has no valid ``until`` or an invalid ``message``."""
    if body.kind != KIND_RUN_SUSPENDED:
        return None
    data = _data_object(body)
    until = data.get("until")
    if type(until) is not int or not 0 <= until <= MAX_SAFE_INT:
        raise MalformedError("a RunSuspended record's data.until is whole seconds, 0..2^53-1")
    message = data.get("message")
    if message is not None:
        _check_token(message, "a RunSuspended record's data.message")
    return Suspension(until, message)


def check_tenant(tenant: str) -> None:
    """A tenant: 1..64 of lowercase ASCII letters, digits and ``. _ -``, starting alphanumeric.

    Tenants become part of a log's origin (``<origin>/<tenant>``) and of every storage key.
    """
    if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
        raise MalformedError(f"tenant {shown(tenant)} is not 1-64 of [a-z0-9._-]")


def _check_json(value: Any, where: str, depth: int = 0) -> None:
    # Only the JSON values with exactly one canonical spelling. ``depth`` is the number of
    # containers around ``value``: a container there makes the whole value depth + 1 deep.
    if depth >= MAX_DEPTH and isinstance(value, list | dict):
        raise MalformedError(f"{where} nests deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int):
        if not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
            raise MalformedError(f"{where} holds an integer beyond ±(2^53-1)")
        return
    if isinstance(value, float):
        raise MalformedError(f"{where} holds a floating-point number (not canonical)")
    if isinstance(value, list):
        for item in value:
            _check_json(item, where, depth + 1)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise MalformedError(f"{where} has a non-string object key")
            _check_json(v, where, depth + 1)
        return
    raise MalformedError(f"{where} holds a {type(value).__name__}, not a JSON value")


_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
# json.dumps(**options) builds a JSONEncoder, and JSONEncoder.encode a C encoder, on every call;
# build the C encoder once (markers=None: parsed JSON has no cycles). Same output.
_C_ENCODE = (
    None
    if _c_make_encoder is None
    else _c_make_encoder(
        None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", True, False, False
    )
)


def _encode(value: Any) -> str:
    if _C_ENCODE is None:  # pragma: no cover - CPython has the accelerator
        return _ENCODER.encode(value)
    return "".join(_C_ENCODE(value, 0))


def _dumps(value: Any) -> bytes:
    try:
        return _encode(value).encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (from "\\ud800" in JSON, or a str built in Python) has no UTF-8.
        raise MalformedError("JSON string holds a lone surrogate (not Unicode text)") from None


def canonical_json(value: Any) -> bytes:
    """The canonical JSON encoding of ``value`` (see the module docstring)."""
    _check_json(value, "value")
    return _dumps(value)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise MalformedError(f"JSON object repeats the key {shown(k)}")
        out[k] = v
    return out


def _no_float(text: str) -> Any:
    raise MalformedError(f"JSON number {text} is not an integer")


def _no_constant(text: str) -> Any:
    raise MalformedError(f"JSON constant {text} is not allowed")


_STRICT = json.JSONDecoder(
    object_pairs_hook=_no_duplicates, parse_float=_no_float, parse_constant=_no_constant
)


def parse_json(text: str) -> Any:
    """Parse JSON text that has one canonical spelling: no repeated keys, no floating-point
    numbers, no NaN or infinities (whitespace and key order are still free here)."""
    try:
        return _STRICT.decode(text)
    except json.JSONDecodeError as e:
        raise MalformedError(f"not JSON: {e.msg} at character {e.pos}") from None
    except RecursionError:
        raise MalformedError("JSON nests too deeply") from None


def parse_canonical_json(raw: bytes) -> Any:
    """Parse canonical JSON; refuse anything that would not re-encode to the same bytes."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedError(f"JSON is not valid UTF-8 (byte {e.start})") from None
    value = parse_json(text)
    if canonical_json(value) != raw:
        raise MalformedError("JSON is not in canonical form")
    return value


@dataclass(frozen=True)
class Body:
    """A record body, decoded."""

    run: str
    seq: int
    epoch: int
    kind: str
    case: str | None = None
    effect_key: str | None = None
    data: Any = None
    has_data: bool = False

    def encode(self) -> bytes:
        """The canonical bytes of this body (validates every field)."""
        check_run_id(self.run)
        check_kind(self.kind)
        if type(self.seq) is not int or not 1 <= self.seq <= MAX_SEQ:
            raise MalformedError(f"record seq {shown(self.seq)} is out of range")
        if type(self.epoch) is not int or not 1 <= self.epoch <= MAX_SEQ:
            raise MalformedError(f"record epoch {shown(self.epoch)} is out of range")
        obj: dict[str, Any] = {
            "v": BODY_VERSION,
            "run": self.run,
            "seq": self.seq,
            "epoch": self.epoch,
            "kind": self.kind,
        }
        if self.case is not None:
            check_case_id(self.case)
            obj["case"] = self.case
        if self.effect_key is not None:
            check_effect_key(self.effect_key)
            obj["effect_key"] = self.effect_key
        if self.has_data:
            if self.data is None:
                raise MalformedError(
                    "record data is null: leave data out (optional fields are absent, never null)"
                )
            _check_json(self.data, "record data")
            obj["data"] = self.data
        # seq and epoch are bounded by 2^63-1, beyond the ±2^53 of data: encode them directly.
        raw = _dumps(obj)
        if len(raw) > MAX_RECORD_SIZE:
            raise MalformedError(
                f"record body is {len(raw)} bytes, more than the {MAX_RECORD_SIZE} allowed"
            )
        return raw

    @property
    def outcome(self) -> str | None:
        """For a ``RunConcluded`` record with a string ``data.outcome``: that outcome."""
        if self.kind != KIND_RUN_CONCLUDED or not isinstance(self.data, Mapping):
            return None
        outcome = self.data.get("outcome")
        return outcome if isinstance(outcome, str) and outcome else None


def seal_body(run: str, seq: int, epoch: int, outcome: str) -> Body:
    """The body of the seal record of ``run`` (see the module docstring): record ``seq``,
    written under ``epoch``, naming ``outcome``. MalformedError for an invalid outcome."""
    check_outcome(outcome)
    return Body(run, seq, epoch, KIND_RUN_SEALED, data={"outcome": outcome}, has_data=True)


def seal_outcome(body: Body) -> str | None:
    """The outcome a seal record names, or None when ``body`` is not a well-formed seal record
    (another kind, a case or effect key, ``data`` other than ``{"outcome": <outcome>}``)."""
    if body.kind != KIND_RUN_SEALED or body.case is not None or body.effect_key is not None:
        return None
    data = body.data
    if type(data) is not dict or len(data) != 1:
        return None
    outcome = data.get("outcome")
    if type(outcome) is not str or not _KIND.fullmatch(outcome):
        return None
    return outcome


def decode_body(raw: bytes) -> Body:
    """Parse and validate record body bytes; they must be canonical."""
    if len(raw) > MAX_RECORD_SIZE:
        raise MalformedError(f"record body is {len(raw)} bytes, more than {MAX_RECORD_SIZE}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedError(f"record body is not valid UTF-8 (byte {e.start})") from None
    try:
        obj = parse_json(text)
    except MalformedError as e:
        raise MalformedError(f"record body: {e}") from None
    if not isinstance(obj, dict):
        raise MalformedError("record body is not a JSON object")
    unknown = set(obj) - _FIELDS
    if unknown:
        raise MalformedError(f"record body has unknown fields {sorted(unknown)}")
    for f in ("v", "run", "seq", "epoch", "kind"):
        if f not in obj:
            raise MalformedError(f"record body has no {shown(f)}")
    if obj["v"] != BODY_VERSION or isinstance(obj["v"], bool):
        raise MalformedError(f"record body version {shown(obj['v'])} is not {BODY_VERSION}")
    for f in ("seq", "epoch"):
        if not isinstance(obj[f], int) or isinstance(obj[f], bool):
            raise MalformedError(f"record {f} is not an integer")
    body = Body(
        run=obj["run"],
        seq=obj["seq"],
        epoch=obj["epoch"],
        kind=obj["kind"],
        case=obj.get("case"),
        effect_key=obj.get("effect_key"),
        data=obj.get("data"),
        has_data="data" in obj,
    )
    if body.encode() != raw:
        raise MalformedError("record body is not in canonical form")
    return body


# orjson_body_names's byte tests for floats and long integers. A cheap one first, on a copy of
# the body with every digit made "0" and every "[" made "{": "0" then ".", "e" or "E" is where a
# float could be, 16 zeros where an integer beyond ±(2^53-1) could be. Strings hit it often (UUIDs,
# hex digests, "x1.txt", "12:30:00.5Z"), so a hit is checked by a precise one, on a copy with
# every digit "0", every ". e E" ".", every byte that can stand before or after a value in a
# container ("[ , :" and ", ] }") "S", and the signs deleted: a number with a fraction or an
# exponent is then "S0+\.[0.]*S", one of 16 digits or more "S0{16}" (matches inside strings,
# as in "a,1.5]", merely take the slow path).
_BYTE_CLASSES = bytes.maketrans(b"0123456789[", b"0" * 10 + b"{")
_MAYBE_FLOAT_OR_LONG = re.compile(rb"0(?:[.eE]|0{15})")
_TOKEN_CLASSES = bytes.maketrans(b"0123456789.eE[,:]}", b"0" * 10 + b"..." + b"SSSSS")
_FLOAT_OR_LONG_VALUE = re.compile(rb"S0+\.[0.]*S|S0{16}")
_SORT_KEYS = orjson.OPT_SORT_KEYS
# the same question answered in C (tlog/_speedups.c), or None: about 8x faster
_c_body_names: Callable[[bytes, bytes, int], bool] | None = accel.body_names


def body_names(raw: bytes, run: str, seq: int) -> bool:
    """True only when ``decode_body(raw)`` succeeds with ``run`` and ``seq``; False when not
    sure (then call :func:`decode_body` for the verdict and its message).

    Requires: ``run`` is a valid run ID, 1 <= seq <= MAX_SEQ. Two fast paths, each a sound
    subset of ``decode_body``: the C one of ``tlog/_speedups.c`` when it is built (a canonical
    JSON scanner; its header comment says what it accepts and why), then
    :func:`orjson_body_names` for what the C one is not sure of (an escaped key, an integer of
    16 digits, nesting deeper than 32).
    """
    if _c_body_names is not None and _c_body_names(raw, run.encode(), seq):
        return True
    return orjson_body_names(raw, run, seq)


def orjson_body_names(raw: bytes, run: str, seq: int) -> bool:
    """:func:`body_names`'s pure-Python fast path (the only one without the C extension).

    Requires: ``run`` is a valid run ID, 1 <= seq <= MAX_SEQ. Parses with orjson and re-encodes
    with orjson (``OPT_SORT_KEYS``), which spells every JSON value without a float exactly as
    the canonical encoder does: keys sorted by code point (UTF-8 byte order is code point
    order), strings escaped as ``json.dumps(…, ensure_ascii=False)`` escapes them, integers in
    decimal, no whitespace. Why True implies acceptance: the bytes are the canonical encoding
    of the parsed value, so they are UTF-8, hold no whitespace between tokens, no escape that
    is not canonical and no repeated key (the re-encode would be shorter); orjson parses a
    number as a float only when it has a fraction or an exponent or is beyond 64 bits, and no
    such number, nor one of 16 or more digits, stands as a value right after ``[ , :`` and
    right before ``, ] }`` (where every number value of the canonical encoding of an object
    stands) — so there is no float and every integer is within ±(2^53-1); orjson refuses NaN,
    infinities and lone surrogate escapes; at most 64 ``{``/``[`` bytes, the body's own
    included, so ``data`` is at most 63 levels deep; ``data`` is not null; the other fields are
    checked as :meth:`Body.encode` checks them; and
    the stdlib parser that ``decode_body`` uses reads the canonical bytes as the same value.
    """
    try:
        if len(raw) > MAX_RECORD_SIZE:
            return False
        classes = raw.translate(_BYTE_CLASSES)
        if classes.count(b"{") > 64:
            return False
        if _MAYBE_FLOAT_OR_LONG.search(classes) and _FLOAT_OR_LONG_VALUE.search(
            raw.translate(_TOKEN_CLASSES, b"+-")
        ):
            return False
        obj = orjson.loads(raw)
        if type(obj) is not dict or not _FIELDS.issuperset(obj):
            return False
        v, s, epoch, kind = obj.get("v"), obj.get("seq"), obj.get("epoch"), obj.get("kind")
        if type(v) is not int or v != 1 or type(s) is not int or s != seq:
            return False
        if obj.get("run") != run or type(epoch) is not int or not 1 <= epoch <= MAX_SEQ:
            return False
        if type(kind) is not str or not _KIND.fullmatch(kind):
            return False
        if "case" in obj and (type(obj["case"]) is not str or not _ID.fullmatch(obj["case"])):
            return False
        if "data" in obj and obj["data"] is None:
            return False
        if "effect_key" in obj:
            if type(obj["effect_key"]) is not str:
                return False
            check_effect_key(obj["effect_key"])
        return orjson.dumps(obj, option=_SORT_KEYS) == raw
    except Exception:  # any doubt (orjson.JSONDecodeError, MalformedError): decode_body decides
        return False


def chain_hash(prev_hash: bytes, raw: bytes) -> bytes:
    """SHA-256(prev_hash || raw): the hash of a record whose predecessor's hash is prev_hash."""
    if len(prev_hash) != 32:
        raise UsageError("previous hash must be 32 bytes")
    return hashlib.sha256(prev_hash + raw).digest()


@dataclass(frozen=True)
class RecordSignature:
    """An Ed25519 signature over a record hash, with the signing key's name and key ID."""

    name: str
    key_id: int
    sig: bytes


def record_signature_message(record_hash: bytes) -> bytes:
    """The bytes a record signature signs."""
    return RECORD_SIGNATURE_CONTEXT + record_hash


def sign_record(signer: Ed25519Signer, record_hash: bytes) -> RecordSignature:
    """Sign a record hash with a type-0x01 Ed25519 key."""
    return RecordSignature(
        signer.name, signer.key_id, signer.sign(record_signature_message(record_hash))
    )


def verify_record_signature(
    signature: RecordSignature, record_hash: bytes, verifiers: Iterable[Verifier]
) -> bool:
    """True when a verifier with the signature's (name, key ID) accepts it; False otherwise."""
    msg = record_signature_message(record_hash)
    for v in verifiers:
        if v.name == signature.name and v.key_id == signature.key_id:
            return v.verify(msg, signature.sig)
    return False


@dataclass(frozen=True)
class Record:
    """A stored record: its body bytes, its place in the chain, and its optional signature."""

    run: str
    seq: int
    raw: bytes
    prev_hash: bytes
    hash: bytes
    signature: RecordSignature | None = None

    def body(self) -> Body:
        """Decode the body (validated and canonical)."""
        return decode_body(self.raw)


def make_record(body: Body, prev_hash: bytes, signer: Ed25519Signer | None = None) -> Record:
    """Encode ``body``, chain it after ``prev_hash`` and sign it when a signer is given."""
    raw = body.encode()
    h = chain_hash(prev_hash, raw)
    sig = sign_record(signer, h) if signer is not None else None
    return Record(body.run, body.seq, raw, prev_hash, h, sig)


def check_record(record: Record) -> None:
    """Check that a record's hash covers its body and previous hash; raise :class:`ChainError`."""
    if len(record.prev_hash) != 32 or len(record.hash) != 32:
        raise ChainError(record.run, record.seq, "stored hashes are not 32 bytes")
    if chain_hash(record.prev_hash, record.raw) != record.hash:
        raise ChainError(record.run, record.seq, "hash does not cover the stored body")


def verify_chain(records: Iterable[Record], run: str, start: int = 1) -> bytes:
    """Check that ``records`` are the run's chain from ``start``; return the last hash.

    Requires: when ``start`` is 1 the chain begins at :data:`GENESIS`; otherwise the first
    record's ``prev_hash`` is taken on trust. Checks contiguous seqs, links, hashes, and that
    every body names this run and its own seq. Returns GENESIS for an empty run from 1.
    """
    expect_seq = start
    prev: bytes | None = GENESIS if start == 1 else None
    for r in records:
        if r.seq != expect_seq:
            raise ChainError(run, r.seq, f"sequence gap: expected record {expect_seq}")
        if prev is not None and r.prev_hash != prev:
            raise ChainError(run, r.seq, "does not link to the previous record's hash")
        check_record(r)
        try:
            body = decode_body(r.raw)
        except MalformedError as e:
            raise ChainError(run, r.seq, f"body: {e}") from None
        if body.run != run or body.seq != r.seq:
            raise ChainError(run, r.seq, f"body names run {body.run} record {body.seq}")
        prev = r.hash
        expect_seq += 1
    return prev if prev is not None else GENESIS
