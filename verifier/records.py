"""The records file of one run, as ``tlog-store read RUN --json`` prints it, verified from genesis.

``tlog-verify proof --records`` (:func:`verifier.proofs.verify_proof_file`) reads it to show
which records lead to a proof's head; :func:`verify_records` is that check.

The records file is exactly what ``tlog-store read RUN --json`` prints: JSON Lines, one record
per line, each line ending in LF, each line the object::

    {"seq": S, "hash": "<b64>", "prev_hash": "<b64>", "raw": "<body>"[, "signature":
     {"name": "<key name>", "key_id": "<8 lowercase hex>", "sig": "<b64, 64 bytes>"}]}

with those members in that order, serialised as Python's ``json.dumps(obj,
ensure_ascii=False)`` does (``", "`` and ``": "`` separators): a line is refused unless it is
byte for byte that serialisation of its own values, so one records file has one spelling.
Records start at seq 1 and are contiguous; ``prev_hash`` is GENESIS (32 zero bytes) for
record 1 and the previous record's hash otherwise; ``hash = SHA-256(prev_hash || raw)``;
``raw`` is a canonical record body (:mod:`tlog.journal`) naming one run and its own seq; the
last record's hash must be the proof's head. With trusted record keys (``record_keys``) each
signature of such a key must verify; a signature of another key is not counted, and with
``require_record_signatures`` every record must carry a verified one.

A malformed line raises :class:`~tlog.errors.MalformedError` (``line N: …``); a record that
does not extend the chain, or whose signature of a trusted key does not verify,
:class:`~verifier.report.LocatedError` located at its line, run and seq.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from tlog.encoding import b64decode, parse_hash
from tlog.errors import MalformedError
from tlog.journal import (
    GENESIS,
    KIND_RUN_SEALED,
    MAX_RECORD_SIZE,
    Body,
    chain_hash,
    decode_body,
    parse_json,
    seal_outcome,
)
from tlog.journal import record_signature_message as _signed_bytes
from tlog.keys import format_vkey, parse_vkey
from tlog.note import TYPE_ED25519, Verifier, check_key_name
from verifier.report import InputError, LocatedError

__all__ = [
    "MAX_RECORDS_LINE",
    "RecordsResult",
    "read_records",
    "trusted_record_keys",
    "verify_records",
]

MAX_RECORDS_LINE = 8 * MAX_RECORD_SIZE
"""Longest records-file line read: a body's JSON string escapes at most double its bytes."""

_HEX8 = re.compile(r"[0-9a-f]{8}")
_RECORD_KEYS = ["seq", "hash", "prev_hash", "raw"]
_SIGNATURE_KEYS = ["name", "key_id", "sig"]


@dataclass(frozen=True)
class RecordsResult:
    """What a records file established: its run, its records, and the head it ends at."""

    run: str
    records: int
    head: bytes
    signed: int
    verified: int
    outcome: str | None = None
    """The outcome the last record names when it is the run's seal record (a sealed run)."""


def _lines(stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    number = 0
    while True:
        data = stream.readline(MAX_RECORDS_LINE + 1)
        if not data:
            return
        number += 1
        if not data.endswith(b"\n"):
            if len(data) > MAX_RECORDS_LINE:
                raise MalformedError(f"line {number}: longer than {MAX_RECORDS_LINE} bytes")
            raise MalformedError(f"line {number}: the last line does not end in a newline")
        yield number, data[:-1]


def _record_line(line: bytes) -> dict[str, Any]:
    """Parse one records line; it must be exactly the store's serialisation of itself."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedError(f"not valid UTF-8 (byte {e.start})") from None
    obj = parse_json(text)
    if not isinstance(obj, dict):
        raise MalformedError("not a JSON object")
    keys = list(obj)
    if keys not in (_RECORD_KEYS, [*_RECORD_KEYS, "signature"]):
        raise MalformedError(
            f"members are {keys}, not {_RECORD_KEYS} and an optional 'signature' "
            "(the form 'tlog-store read --json' prints)"
        )
    if "signature" in obj:
        sig = obj["signature"]
        if not isinstance(sig, dict) or list(sig) != _SIGNATURE_KEYS:
            raise MalformedError(f"'signature' is not an object with members {_SIGNATURE_KEYS}")
    try:
        again = json.dumps(obj, ensure_ascii=False)
    except (UnicodeError, ValueError):  # pragma: no cover - parse_json gave plain values
        raise MalformedError("not serialisable") from None
    if again != text:
        raise MalformedError(
            "not in the form 'tlog-store read --json' prints (spacing, escapes or numbers differ)"
        )
    return obj


@dataclass(frozen=True)
class _Record:
    """One records line, parsed and typed (not yet checked against the chain)."""

    line: int
    seq: int
    hash: bytes
    prev_hash: bytes
    raw: bytes
    body: Body
    signature: tuple[str, int, bytes] | None
    """(key name, key ID, 64-byte signature), when the line carries one."""


def _parse_record(number: int, line: bytes) -> _Record:
    """The record on records line ``number``; MalformedError ``line N: …`` for its format."""
    try:
        obj = _record_line(line)
        seq = obj["seq"]
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise MalformedError("'seq' is not an integer")
        for k in ("hash", "prev_hash", "raw"):
            if not isinstance(obj[k], str):
                raise MalformedError(f"{k!r} is not a string")
        h = parse_hash(obj["hash"], "'hash'")
        prev_hash = parse_hash(obj["prev_hash"], "'prev_hash'")
        try:
            raw = obj["raw"].encode("utf-8")
        except UnicodeEncodeError:
            raise MalformedError("'raw' holds a lone surrogate") from None
        try:
            body = decode_body(raw)
        except UnicodeError:
            raise MalformedError("'raw' holds an escaped lone surrogate") from None
        sig = obj.get("signature")
        signature = None if sig is None else _record_signature(sig)
    except MalformedError as e:
        raise MalformedError(f"line {number}: {e}") from None
    return _Record(number, seq, h, prev_hash, raw, body, signature)


def _record_signature(sig: dict[str, Any]) -> tuple[str, int, bytes]:
    """A records line's ``signature`` object as (key name, key ID, signature)."""
    name, kid, b64 = sig["name"], sig["key_id"], sig["sig"]
    if not (isinstance(name, str) and isinstance(kid, str) and isinstance(b64, str)):
        raise MalformedError("'signature' members are not strings")
    check_key_name(name)
    if not _HEX8.fullmatch(kid):
        raise MalformedError("'signature' key_id is not 8 lowercase hex digits")
    raw_sig = b64decode(b64, "'signature' sig")
    if len(raw_sig) != 64:
        raise MalformedError(f"'signature' sig is {len(raw_sig)} bytes, not 64")
    return name, int(kid, 16), raw_sig


class _Chain:
    """The records read so far, from genesis: each new record must extend them."""

    def __init__(self, keys: dict[tuple[str, int], Verifier], require_signatures: bool) -> None:
        self.keys = keys
        self.require_signatures = require_signatures
        self.prev = GENESIS
        self.run: str | None = None
        self.count = self.signed = self.verified = 0
        self.sealed: tuple[int, int, str] | None = None  # (line, seq, outcome) of the seal

    def add(self, r: _Record) -> None:
        """Check ``r`` as the next record; raises LocatedError (at ``r``) if it is not."""
        expected = self.count + 1
        run = self.run = r.body.run if self.run is None else self.run

        def fail(kind: str, message: str) -> LocatedError:
            return LocatedError(kind, message, line=r.line, run=run, seq=r.seq)

        if r.seq != expected:
            raise fail(
                "chain",
                f"record {r.seq} where record {expected} was expected (records start at 1, "
                "with no gap)",
            )
        if r.body.run != run or r.body.seq != r.seq:
            raise fail("chain", f"the body names run {r.body.run} record {r.body.seq}")
        if r.prev_hash != self.prev:
            first = "GENESIS (32 zero bytes)" if r.seq == 1 else "the previous record's hash"
            raise fail("chain", "prev_hash is not " + first)
        if chain_hash(self.prev, r.raw) != r.hash:
            raise fail("chain", "hash does not cover the body and the previous hash")
        if not self._signature_verified(r, fail) and self.require_signatures:
            raise fail("verification", "the record carries no signature of a trusted record key")
        if self.sealed is not None:
            raise fail(
                "chain",
                f"a record after the seal record (record {self.sealed[1]}, line "
                f"{self.sealed[0]}): a sealed run ends with its seal record",
            )
        if r.body.kind == KIND_RUN_SEALED:
            outcome = seal_outcome(r.body)
            if outcome is None:
                raise fail(
                    "chain",
                    'the seal record must hold exactly the data {"outcome": <outcome>}, and no '
                    "case or effect key",
                )
            self.sealed = (r.line, r.seq, outcome)
        self.prev = r.hash
        self.count += 1

    def _signature_verified(self, r: _Record, fail: Callable[[str, str], LocatedError]) -> bool:
        """Whether ``r`` carries a verified signature of a trusted key; a bad one raises."""
        if r.signature is None:
            return False
        self.signed += 1
        name, key_id, sig = r.signature
        v = self.keys.get((name, key_id))
        if v is None:
            return False
        if not v.verify(_signed_bytes(r.hash), sig):
            raise fail("signature", f"record signature of {name}+{key_id:08x} does not verify")
        self.verified += 1
        return True


def verify_records(
    stream: BinaryIO,
    record_keys: Iterable[Verifier] | None,
    require_signatures: bool,
) -> RecordsResult:
    """Verify a records file (module docstring) from genesis; return what it established.

    Raises :class:`MalformedError` (``line N: …``) for the format, and
    :class:`~verifier.report.LocatedError` (``chain``, ``signature``, ``verification``).
    """
    chain = _Chain({(v.name, v.key_id): v for v in record_keys or ()}, require_signatures)
    for number, line in _lines(stream):
        chain.add(_parse_record(number, line))
    if chain.run is None:
        raise MalformedError("line 1: the records file holds no records")
    outcome = None if chain.sealed is None else chain.sealed[2]
    return RecordsResult(chain.run, chain.count, chain.prev, chain.signed, chain.verified, outcome)


def read_records(path: str, trusted: list[Verifier] | None, require: bool) -> RecordsResult:
    """:func:`verify_records` of the records file at ``path`` (``-``: standard input).

    Raises :class:`OSError` when it cannot be opened or read.
    """
    if path == "-":
        return verify_records(sys.stdin.buffer, trusted, require)
    with open(path, "rb") as stream:
        return verify_records(stream, trusted, require)


def trusted_record_keys(record_keys: Iterable[str] | None) -> list[Verifier] | None:
    """The record keys an auditor trusts, from their vkeys (None stays None).

    Each must be an Ed25519 (0x01) vkey, else :class:`~verifier.report.InputError`.
    """
    if record_keys is None:
        return None
    out = []
    for k in record_keys:
        try:
            v = parse_vkey(k)
        except MalformedError as e:
            raise InputError(f"record key {k[:60]!r}: {e}") from None
        if v.key_type != TYPE_ED25519:
            raise InputError(f"record key {format_vkey(v)} is not an Ed25519 (0x01) key")
        out.append(v)
    return out
