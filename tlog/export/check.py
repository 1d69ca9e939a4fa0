"""The export format's rules for one element at a time, shared by every reader and the writer.

Each function checks one thing the format (``docs/export-format.md``) says of one element — the
header's keys, a checkpoint note, a run line's grammar, a record's hash, body and seal record, a
``sig`` line — and raises the error, with its message, that every path reports for it: the
one-pass reader (:func:`tlog.export.read_export`), the writer (:class:`tlog.export.ExportWriter`)
and the run scanner (:mod:`tlog.export.scan`) call these and write no message of their own for
what is checked here. The checks that depend on what came before (orders, counts, the rebuilt
log) are :mod:`tlog.export.scan`'s and :mod:`tlog.export.follow`'s.

Fast paths (:func:`hash_of`, the spelling of :data:`RUN_LINE`, the declared-key lookup of
:func:`parse_sig_line`) accept exactly a subset of what the full check accepts, with the same
value, and fall back to it whenever unsure: so the verdict, and every message, is the full
check's.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from tlog.checkpoint import Checkpoint
from tlog.cosignature import TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1
from tlog.encoding import MAX_INT63, b64decode, parse_decimal, parse_hash
from tlog.errors import MalformedError, ProofError, UsageError
from tlog.export.format import (
    RECORD_SIGNATURE_SIZE,
    CheckpointItem,
    ExportChainError,
    ExportFormatError,
    ExportHeader,
    ExportProofError,
    ExportVerificationError,
    NoteItem,
)
from tlog.journal import (
    KIND_RUN_SEALED,
    MAX_RECORD_SIZE,
    MAX_SEQ,
    SEAL_KIND_TEXT,
    RecordSignature,
    body_names,
    check_outcome,
    check_run_id,
    decode_body,
    seal_outcome,
)
from tlog.keys import format_vkey, parse_vkey
from tlog.note import (
    TYPE_ED25519,
    Verifier,
    check_key_name,
    parse_note,
    parse_signature_line,
)

N = TypeVar("N", bound=NoteItem)

_HEX8 = re.compile(rb"[0-9a-f]{8}")

# A run line as read_run_line accepts it, in its common spelling: a run ID, a count of at most
# 18 digits, and for a sealed run a position of at most 18 digits and an outcome (18 digits stay
# below 2^63, so no bound needs checking; a sealed run's count of 1 is refused by the full
# grammar). Anything else goes through the full grammar.
RUN_LINE = re.compile(
    rb"run ([A-Za-z0-9][A-Za-z0-9._:@-]{0,127}) ([1-9][0-9]{0,17})"
    rb"(?: sealed (0|[1-9][0-9]{0,17}) ([A-Za-z][A-Za-z0-9_.-]{0,63}))?"
)


@dataclass
class HeaderKeys:
    """A checked header's keys, by (key name, key ID), as the signature lines name them."""

    log: Verifier
    note_keys: dict[tuple[str, int], tuple[Verifier, str]]  # log + witness keys, with vkeys
    record_keys: dict[tuple[str, int], Verifier]
    record_key_text: dict[tuple[bytes, bytes], tuple[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # (name, 8 lowercase hex) as a sig line spells them -> (name, key ID).
        self.record_key_text = {
            (name.encode("utf-8"), b"%08x" % kid): (name, kid) for name, kid in self.record_keys
        }


def _parse_key(vkey: str, line: int, role: str) -> Verifier:
    try:
        v = parse_vkey(vkey)
    except MalformedError as e:
        raise ExportFormatError(line, f"{role}: {e}") from None
    if format_vkey(v) != vkey:  # pragma: no cover - parse_vkey accepts one spelling only
        raise ExportFormatError(line, f"{role} is not spelled canonically")
    return v


def _declared_keys(
    texts: Sequence[str], line: int, field: str, types: tuple[int, ...], types_text: str
) -> Iterator[tuple[Verifier, str]]:
    """Each ``field`` line's key and text, from file line ``line`` on: of one of ``types``, in
    strictly increasing (bytewise) order. A key declared twice is the caller's check, since
    the log key and the witness keys share one namespace."""
    prev: bytes | None = None
    for i, text in enumerate(texts):
        v = _parse_key(text, line + i, field)
        if v.key_type not in types:
            raise ExportFormatError(
                line + i, f"{field} has type 0x{v.key_type:02x}, not {types_text}"
            )
        b = text.encode("utf-8")
        if prev is not None and b <= prev:
            raise ExportFormatError(line + i, f"{field} lines are not in strictly increasing order")
        prev = b
        yield v, text


def check_header(h: ExportHeader) -> HeaderKeys:
    """Validate a header; errors name the line each field has in the file (origin on 2)."""
    if not isinstance(h.origin, str):
        raise ExportFormatError(2, "origin is not a string")
    try:
        check_key_name(h.origin)
    except MalformedError as e:
        raise ExportFormatError(
            2, f"origin must be a valid key name (the log key's): {e}"
        ) from None
    log = _parse_key(h.log_key, 3, "log-key")
    if log.key_type != TYPE_ED25519:
        raise ExportFormatError(3, f"log-key has type 0x{log.key_type:02x}, not 0x01 (Ed25519)")
    if log.name != h.origin:
        raise ExportFormatError(3, f"log-key is named {log.name!r}, not the origin {h.origin!r}")
    record_keys: dict[tuple[str, int], Verifier] = {}
    keys = _declared_keys(h.record_keys, 4, "record-key", (TYPE_ED25519,), "0x01")
    for i, (v, _) in enumerate(keys):
        k = (v.name, v.key_id)
        if k in record_keys:
            raise ExportFormatError(4 + i, f"record key {v.name}+{v.key_id:08x} is declared twice")
        record_keys[k] = v
    note_keys: dict[tuple[str, int], tuple[Verifier, str]] = {
        (log.name, log.key_id): (log, h.log_key)
    }
    first = 4 + len(h.record_keys)
    for i, (v, text) in enumerate(
        _declared_keys(
            h.witness_keys,
            first,
            "witness-key",
            (TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1),
            "0x04 or 0x06",
        )
    ):
        k = (v.name, v.key_id)
        if k in note_keys:
            raise ExportFormatError(first + i, f"key {v.name}+{v.key_id:08x} is declared twice")
        note_keys[k] = (v, text)
    return HeaderKeys(log, note_keys, record_keys)


def parse_checkpoint(
    note: bytes, line: int, keys: HeaderKeys, origin: str, prev_size: int | None
) -> CheckpointItem:
    """Check a checkpoint note's structure and keys (not its signatures)."""
    return parse_note_item(note, line, keys, origin, prev_size, CheckpointItem)


def parse_note_item(
    note: bytes,
    line: int,
    keys: HeaderKeys,
    origin: str,
    prev_size: int | None,
    cls: type[N],
) -> N:
    """:func:`parse_checkpoint` of a note of ``origin`` whose keys are ``keys``, as a ``cls``
    (the inbox log's checkpoints are :class:`~tlog.export.format.InboxCheckpointItem`)."""
    try:
        text, _ = parse_note(note)
    except MalformedError as e:
        raise ExportFormatError(_note_error_line(note, line), f"checkpoint: {e}") from None
    try:
        cp = Checkpoint.parse(text)
    except MalformedError as e:
        raise ExportFormatError(line, f"checkpoint: {e}") from None
    except ProofError as e:
        raise ExportProofError(line, f"checkpoint: {e}") from None
    if cp.origin != origin:
        raise ExportFormatError(line, f"checkpoint origin {cp.origin!r} is not {origin!r}")
    if prev_size is not None and cp.size <= prev_size:
        raise ExportFormatError(
            line, f"checkpoint of size {cp.size} follows one of size {prev_size} (sizes increase)"
        )
    # parse_note drops byte-identical repeated lines; the export carries each line once, so
    # the lines are taken again, all of them (parse_note has checked each).
    lines = note[len(text) + 1 : -1].split(b"\n")
    sigs = [parse_signature_line(raw.decode("utf-8")) for raw in lines]
    first = line + text.count(b"\n") + 2
    seen: set[tuple[str, int]] = set()
    for j, sig in enumerate(sigs):
        k = (sig.name, sig.key_id)
        where = first + j
        if k not in keys.note_keys:
            raise ExportVerificationError(
                where,
                f"checkpoint of size {cp.size}: signature line of {sig.name}+{sig.key_id:08x} "
                "is from no key of the header (log-key or witness-key)",
            )
        if k in seen:
            raise ExportFormatError(
                where, f"checkpoint of size {cp.size}: key {sig.name}+{sig.key_id:08x} signs twice"
            )
        seen.add(k)
    if (keys.log.name, keys.log.key_id) not in seen:
        raise ExportVerificationError(
            line, f"checkpoint of size {cp.size} carries no signature of the log key"
        )
    return cls(note, cp, text, tuple(sigs), line)


def _note_error_line(note: bytes, line: int) -> int:
    """The file line of the first malformed signature line of a note, else the note's line."""
    split = note.rfind(b"\n\n")
    if split < 0 or not note.endswith(b"\n"):
        return line
    first = line + note[: split + 1].count(b"\n") + 2
    for j, raw in enumerate(note[split + 2 : -1].split(b"\n")):
        try:
            parse_signature_line(raw.decode("utf-8"))
        except (MalformedError, UnicodeDecodeError):
            return first + j
    return line


def check_record_signature(
    sig: RecordSignature, keys: HeaderKeys, line: int, where: str
) -> Verifier:
    v = keys.record_keys.get((sig.name, sig.key_id))
    if v is None:
        raise ExportVerificationError(
            line, f"{where}: signed by {sig.name}+{sig.key_id:08x}, which is no record-key"
        )
    if len(sig.sig) != RECORD_SIGNATURE_SIZE:
        raise ExportFormatError(
            line, f"{where}: signature is {len(sig.sig)} bytes, not {RECORD_SIGNATURE_SIZE}"
        )
    return v


def _is_seal_record(raw: bytes, run: str, seq: int, outcome: str) -> bool:
    """True when ``raw`` — a body that passed :func:`check_body` for ``run`` and ``seq`` — is
    the seal record naming ``outcome``; False when not sure. The canonical body of that record is
    ``{"data":{"outcome":"<outcome>"},"epoch":<epoch>,"kind":"RunSealed","run":"<run>",
    "seq":<seq>,"v":1}`` (no field sorts between ``data`` and ``epoch``, nor between ``epoch``
    and ``kind``): given a valid body, this prefix and suffix leave room for the epoch alone."""
    return raw.startswith(b'{"data":{"outcome":"%s"},"epoch":' % outcome.encode()) and raw.endswith(
        b',"kind":"RunSealed","run":"%s","seq":%d,"v":1}' % (run.encode(), seq)
    )


def check_seal_record(
    raw: bytes, run: str, seq: int, line: int, run_line: int, outcome: str | None
) -> None:
    """The seal-record rule (docs/export-format.md §4.5) for record ``seq`` of ``run``, whose
    body passed :func:`check_body`. ``outcome``: the run line's outcome when this record is the
    last of a sealed run (it must be the seal record naming that outcome), else None (it must
    not be a seal record)."""
    if outcome is None:
        if SEAL_KIND_TEXT not in raw:  # in the body of every seal record
            return
    elif _is_seal_record(raw, run, seq, outcome):
        return
    body = decode_body(raw)
    if outcome is None:
        if body.kind == KIND_RUN_SEALED:
            raise ExportChainError(
                line,
                run,
                seq,
                f"a seal record (kind {KIND_RUN_SEALED}) that is not the last record of a "
                f"sealed run (the run line is line {run_line})",
            )
        return
    if body.kind != KIND_RUN_SEALED:
        raise ExportChainError(
            line,
            run,
            seq,
            f"the last record of a sealed run is not its seal record: kind {body.kind}, not "
            f"{KIND_RUN_SEALED} (the run line is line {run_line})",
        )
    named = seal_outcome(body)
    if named is None:
        raise ExportChainError(
            line,
            run,
            seq,
            'the seal record must hold exactly the data {"outcome": <outcome>}, and no case '
            "or effect key",
        )
    raise ExportChainError(
        line,
        run,
        seq,
        f"the seal record names the outcome {named}, the run line (line {run_line}) {outcome}",
    )


def check_body(raw: bytes, run: str, seq: int, line: int, run_line: int) -> None:
    if body_names(raw, run, seq):  # the fast path; decode_body gives any failure's message
        return
    if len(raw) > MAX_RECORD_SIZE:
        raise ExportFormatError(line, f"run {run} record {seq}: body is longer than allowed")
    try:
        body = decode_body(raw)
    except MalformedError as e:
        raise ExportFormatError(line, f"run {run} record {seq}: {e}") from None
    except UnicodeError:
        # tlog.journal.decode_body lets an escaped lone surrogate ("\ud800") escape as a
        # UnicodeEncodeError when it re-encodes the body; it is not canonical UTF-8 either way.
        raise ExportFormatError(
            line, f"run {run} record {seq}: body holds an escaped lone surrogate"
        ) from None
    if body.run != run or body.seq != seq:
        raise ExportChainError(
            line,
            run,
            seq,
            f"body names run {body.run} record {body.seq} (the run line is line {run_line})",
        )


def text_of(data: bytes, line: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ExportFormatError(line, f"not valid UTF-8 (byte {e.start})") from None


def decimal(token: bytes, line: int, what: str, lo: int = 0, hi: int = MAX_INT63) -> int:
    try:
        value = parse_decimal(token.decode("ascii", "replace"), what, hi)
    except MalformedError as e:
        raise ExportFormatError(line, str(e)) from None
    if value < lo:
        raise ExportFormatError(line, f"{what} {value} is less than {lo}")
    return value


def describe(data: bytes) -> str:
    return repr(data[:40].decode("utf-8", "replace")) + ("…" if len(data) > 40 else "")


def keyword(data: bytes, word: bytes) -> bytes | None:
    """The rest of ``data`` after ``word`` and one space, or None."""
    prefix = word + b" "
    return data[len(prefix) :] if data.startswith(prefix) else None


def run_line_fields(rest: bytes, n: int) -> tuple[str, int, int, str]:
    """The grammar of run line ``n`` (``rest``: what follows ``run ``): (run ID, count, sealed
    position or -1, outcome or ""). The checks that depend on the runs before it are the
    caller's."""
    tokens = rest.split(b" ")
    if len(tokens) not in (2, 5) or (len(tokens) == 5 and tokens[2] != b"sealed"):
        raise ExportFormatError(
            n,
            "expected 'run <run ID> <count>' or 'run <run ID> <count> sealed <pos> <outcome>'",
        )
    run = text_of(tokens[0], n)
    try:
        check_run_id(run)
    except MalformedError as e:
        raise ExportFormatError(n, str(e)) from None
    count = decimal(tokens[1], n, f"record count of run {run}", 1, MAX_SEQ)
    if len(tokens) == 2:
        return run, count, -1, ""
    if count < 2:
        raise ExportFormatError(
            n, f"sealed run {run} has 1 record: a sealed run holds its records and its seal record"
        )
    pos = decimal(tokens[3], n, f"log position of run {run}")
    outcome = text_of(tokens[4], n)
    try:
        check_outcome(outcome)
    except MalformedError as e:
        raise ExportFormatError(n, f"run {run}: {e}") from None
    return run, count, pos, outcome


def b64_exact(text: bytes) -> bytes | None:
    """The bytes ``text`` is the canonical (padded, strict) base64 of; None when not sure."""
    try:
        raw = binascii.a2b_base64(text, strict_mode=True)
    except binascii.Error:
        return None
    return raw if binascii.b2a_base64(raw, newline=False) == text else None


def hash_of(text: bytes) -> bytes | None:
    """The hash when ``text`` is canonical base64 of 32 bytes; None when not sure."""
    h = b64_exact(text)
    return h if h is not None and len(h) == 32 else None


def record_hash(text: bytes, line: int, run: str, seq: int) -> bytes:
    """The hash a record line spells (its first :data:`HASH_TEXT_SIZE` bytes, ``text``)."""
    h = hash_of(text)
    if h is not None:
        return h
    try:
        return parse_hash(text, f"hash of run {run} record {seq}")
    except MalformedError as e:
        raise ExportFormatError(line, str(e)) from None


RunLine = tuple[bytes, str, int, int, bytes | None]
"""A run line's fields: (run ID as bytes, run ID, count, sealed position or -1, outcome as bytes
or None)."""


def read_run_line(n: int, data: bytes) -> RunLine | None:
    """The fields of line ``n`` when it is a ``run`` line (its own grammar checked), else None.

    The checks that depend on the runs before it are :class:`tlog.export.scan.RunOrder`'s.
    """
    plain = RUN_LINE.fullmatch(data)
    if plain is not None and (plain[3] is None or plain[2] != b"1"):
        # The common spelling, whose values need no further check.
        pos = -1 if plain[3] is None else int(plain[3])
        return plain[1], plain[1].decode("ascii"), int(plain[2]), pos, plain[4]
    rest = keyword(data, b"run")
    if rest is None:
        return None
    run, count, pos, outcome = run_line_fields(rest, n)
    return run.encode("ascii"), run, count, pos, outcome.encode("ascii") if pos >= 0 else None


def parse_sig_line(data: bytes, line: int, keys: HeaderKeys, where: str) -> RecordSignature:
    tokens = data.split(b" ")
    if len(tokens) == 4:
        k = keys.record_key_text.get((tokens[1], tokens[2]))
        if k is not None:
            sig = b64_exact(tokens[3])
            if sig is not None and len(sig) == RECORD_SIGNATURE_SIZE:
                return RecordSignature(k[0], k[1], sig)
    if len(tokens) != 4:
        raise ExportFormatError(line, f"{where}: expected 'sig <key name> <key ID> <signature>'")
    name = text_of(tokens[1], line)
    try:
        check_key_name(name)
    except MalformedError as e:
        raise ExportFormatError(line, f"{where}: {e}") from None
    if not _HEX8.fullmatch(tokens[2]):
        raise ExportFormatError(line, f"{where}: key ID is not 8 lowercase hex digits")
    try:
        sig = b64decode(tokens[3], f"{where}: signature")
    except MalformedError as e:
        raise ExportFormatError(line, str(e)) from None
    rs = RecordSignature(name, int(tokens[2], 16), sig)
    check_record_signature(rs, keys, line, where)
    return rs


def canonical_vkey(vkey: str, what: str) -> str:
    try:
        return format_vkey(parse_vkey(vkey))
    except MalformedError as e:
        raise UsageError(f"{what}: {e}") from None
