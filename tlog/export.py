"""The export file format: a whole journal and its log in one streaming file (version 2).

An export carries everything an auditor needs to check a journal offline: the log's origin and
keys, every published checkpoint with its cosignatures, and every run with the exact bytes,
hashes and signatures of its records, and each sealed run's log position. The complete
specification, with a worked example, is ``docs/export-format.md``; this docstring is its
summary and the two must agree.

The file is UTF-8, LF-terminated lines, no CR anywhere, no empty line outside checkpoint notes::

    tlog-toolkit export v2                                   magic, line 1
    origin <origin>                                          = the log key's name
    log-key <vkey>                                           type 0x01 (Ed25519)
    record-key <vkey>                   0..n, type 0x01      strictly increasing (bytes)
    witness-key <vkey>                  0..n, 0x04 or 0x06   strictly increasing (bytes)
    checkpoint <L> LF <L bytes: signed note, ending in LF>   0..n, sizes strictly increasing
    run <run ID> <count> [sealed <position> <outcome>]       0..n, see "Runs" below
    <base64 record hash> <record body>                       count lines per run
    [sig <key name> <8 lowercase hex key ID> <base64 signature>]   after a signed record
    end <checkpoints> <runs> <records> <log size> <base64 digest>

Fields are separated by exactly one space (0x20). Decimals are canonical (``0`` or
``[1-9][0-9]*``, at most 2^63-1); base64 is the padded standard alphabet with zero trailing
bits; vkeys are those of :mod:`tlog.keys`, spelled exactly as :func:`tlog.keys.format_vkey`
spells them. Nothing may follow the ``end`` line.

Header. The log key's name equals the origin (so the origin is a valid key name). Record keys
are the Ed25519 keys whose signatures records carry; witness keys are the cosigners of the
checkpoints. No (key name, key ID) appears twice among the log key and the witness keys, nor
twice among the record keys. Keys may be declared and unused.

Checkpoints (:mod:`tlog.checkpoint`). ``L`` is the note's exact byte length, 1..
:data:`tlog.note.MAX_NOTE_SIZE`. Each note parses (:func:`tlog.note.parse_note`,
:meth:`tlog.checkpoint.Checkpoint.parse`), names the header's origin, carries no signature line
twice, carries the log key's line, and **every** signature line names (key name and key ID) the
log key or a witness key, at most one line per key: so no byte of a note can change without
breaking a signature. Sizes strictly increase; size 0 is allowed (empty-tree root); the last
checkpoint may be smaller than the log, none larger.

Runs. Sealed runs come first, by log position ``0, 1, 2, …`` with no gap; then the unsealed
runs by strictly increasing run ID (bytewise). Run IDs follow :func:`tlog.journal.check_run_id`
and appear once; ``count`` is 1..2^63-1 and exactly that many records follow, then a ``run`` or
``end`` line; the outcome follows :func:`tlog.journal.check_outcome`. A sealed run holds at
least two records, and its last is its *seal record* (:func:`tlog.journal.seal_body`: kind
``RunSealed``, ``data`` exactly ``{"outcome": <the run line's outcome>}``, no case, no effect
key); no other record has the kind ``RunSealed``. The log size is the number of sealed runs; a
sealed run's *head* is its last record's hash — the seal record's, so the chain, the leaf and
every checkpoint over it cover the outcome — and its leaf is ``SHA-256(0x00 || head)`` at its
position (RFC 6962).

Records (:mod:`tlog.journal`). Record ``i`` of a run (from 1) is one line: its 32-byte hash in
base64 (44 characters), a space, and its body — the canonical JSON bytes exactly as stored,
which hold no byte below 0x20 (so no LF), at most :data:`tlog.journal.MAX_RECORD_SIZE` bytes.
The body names the run and ``seq = i``. The previous hash is not written: it is GENESIS for
record 1 and the previous line's hash otherwise; every record's hash must equal
``SHA-256(previous hash || body)``. A signed record is followed by one ``sig`` line: the Ed25519
signature (64 bytes) of ``"tlog-toolkit/record/v1" LF || hash`` by a declared record key.

End. The counts of checkpoints, runs, records and sealed runs, and the SHA-256 of every byte of
the file before the ``end`` line. The counts and the digest catch truncation and accidental
corruption; they guard nothing against a deliberate change (anyone can recompute them). What an
auditor can rely on is what the signatures cover (docs/export-format.md §7).

Checks, in file order (each error names its line: ``"line N: …"``):

* :func:`read_export` checks everything that needs no signature and no chain hash: the grammar,
  every spelling, the embedded formats (vkeys, notes, checkpoint texts, record bodies), the
  orders, uniqueness, that each body names its run and seq, the seal records (each sealed
  run's last record, naming its outcome; no other), that every signature line names a declared
  key, the ``end`` counts and the digest.
* :func:`verify_export` adds the cryptography: every checkpoint signature line verifies under
  its key, every record hash and chain link, every record signature, each checkpoint's root is
  the root rebuilt from the sealed heads at its size, and the RFC 6962 consistency proof between
  each two successive checkpoints (from the rebuilt tree) verifies.

Memory: the reader keeps one set entry per sealed run (their IDs, for uniqueness) and the
verifier the log's stored hashes (:class:`tlog.merkle.MemoryHashStore`): both grow with the log,
never with the records. The writer keeps a constant amount of state. Neither the witness quorum
nor any trust in the header's keys is decided here: the caller compares the log key with the
one it trusts (``log_key=``) and applies its policy to the checkpoint notes.
"""

from __future__ import annotations

import binascii
import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from tlog.checkpoint import Checkpoint
from tlog.cosignature import TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1
from tlog.encoding import MAX_INT63, b64decode, b64encode, parse_decimal, parse_hash
from tlog.errors import (
    InvalidSignatureError,
    MalformedError,
    ProofError,
    UsageError,
    VerificationError,
)
from tlog.journal import (
    GENESIS,
    KIND_RUN_SEALED,
    MAX_RECORD_SIZE,
    MAX_SEQ,
    SEAL_KIND_TEXT,
    ChainError,
    Record,
    RecordSignature,
    body_names,
    chain_hash,
    check_outcome,
    check_run_id,
    decode_body,
    record_signature_message,
    seal_outcome,
)
from tlog.keys import format_vkey, parse_vkey
from tlog.merkle import MemoryHashStore, consistency_proof, leaf_hash
from tlog.merkle import verify_consistency as _verify_consistency
from tlog.note import (
    MAX_NOTE_SIZE,
    TYPE_ED25519,
    Signature,
    Verifier,
    check_key_name,
    parse_note,
    parse_signature_line,
)

MAGIC = b"tlog-toolkit export v2"
_MAGIC_V1 = b"tlog-toolkit export v1"  # before seal records: refused with its own reason
"""The first line of every version-1 export (without its LF)."""

HASH_TEXT_SIZE = 44
"""Length of a base64 SHA-256 hash."""

RECORD_SIGNATURE_SIZE = 64
"""Bytes of an Ed25519 record signature."""

MAX_LINE = HASH_TEXT_SIZE + 1 + MAX_RECORD_SIZE
"""Longest line of an export, LF excluded: a record line with a body of the largest size."""

_HEX8 = re.compile(rb"[0-9a-f]{8}")
_CONTROL_BYTE = re.compile(rb"[\x00-\x1f]")


# --- errors ---------------------------------------------------------------------------------


class ExportFormatError(MalformedError):
    """An export does not follow the format. ``line`` is the 1-based line it names."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


class ExportVerificationError(VerificationError):
    """A well-formed export that does not verify (an undeclared key, a wrong digest, …)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


class ExportProofError(ProofError):
    """A checkpoint's root is not the rebuilt log's, or two checkpoints are inconsistent."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


class ExportChainError(ChainError):
    """A record's hash, link, run or seq is wrong. ``run``, ``seq`` and ``line`` locate it."""

    def __init__(self, line: int, run: str, seq: int, detail: str) -> None:
        VerificationError.__init__(self, f"line {line}: run {run} record {seq}: {detail}")
        self.run = run
        self.seq = seq
        self.line = line


class ExportSignatureError(InvalidSignatureError):
    """A signature line of a declared key does not verify (on a checkpoint or a record)."""

    def __init__(self, line: int, name: str, key_id: int, where: str) -> None:
        VerificationError.__init__(
            self, f"line {line}: {where}: invalid signature for key {name}+{key_id:08x}"
        )
        self.name = name
        self.key_id = key_id
        self.line = line


# --- values and items -----------------------------------------------------------------------


@dataclass(frozen=True)
class ExportHeader:
    """The export's origin and keys, as vkey texts (:func:`tlog.keys.format_vkey`).

    The writer sorts ``record_keys`` and ``witness_keys``; the reader returns them sorted.
    """

    origin: str
    log_key: str
    record_keys: tuple[str, ...] = ()
    witness_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunSeal:
    """A sealed run's log position and outcome."""

    position: int
    outcome: str


@dataclass(frozen=True)
class HeaderItem:
    """The header; ``line`` is that of the ``origin`` line (2)."""

    header: ExportHeader
    line: int


@dataclass(frozen=True)
class CheckpointItem:
    """One published checkpoint: the note's exact bytes, its parsed text and signature lines.

    ``line`` is that of the ``checkpoint <L>`` line; signature line ``j`` (from 0) of the note
    is file line :meth:`signature_line`.
    """

    note: bytes
    checkpoint: Checkpoint
    text: bytes
    signatures: tuple[Signature, ...]
    line: int

    def signature_line(self, j: int) -> int:
        """The file line of the note's ``j``-th signature line."""
        return self.line + self.text.count(b"\n") + 2 + j


@dataclass(frozen=True)
class RunItem:
    """A ``run`` line: the run ID, its record count, and its seal (None when unsealed)."""

    run: str
    count: int
    seal: RunSeal | None
    line: int


@dataclass(frozen=True)
class RecordItem:
    """A record line (and its ``sig`` line at ``line + 1`` when the record is signed).

    ``record.prev_hash`` is derived (GENESIS or the previous line's hash) and ``record.hash``
    is the hash the line claims: only :func:`verify_export` checks it.
    """

    record: Record
    line: int


@dataclass(frozen=True)
class EndItem:
    """The ``end`` line, after its counts and digest were checked."""

    checkpoints: int
    runs: int
    records: int
    log_size: int
    digest: bytes
    line: int


ExportItem = HeaderItem | CheckpointItem | RunItem | RecordItem | EndItem


@dataclass(frozen=True)
class ExportSummary:
    """What :func:`verify_export` checked.

    ``signed_records`` counts the records carrying a signature, every one of which verified.
    ``cosignatures`` maps each witness vkey to the number of checkpoints it cosigned (0 for a
    declared key that signed none). ``consistency_proofs`` counts the successive checkpoint
    pairs (both of size > 0) whose RFC 6962 proof was verified; a pair from size 0 needs none.
    """

    header: ExportHeader
    checkpoints: int
    checkpoint_sizes: tuple[int, ...]
    runs: int
    sealed_runs: int
    records: int
    signed_records: int
    log_size: int
    log_root: bytes
    consistency_proofs: int
    cosignatures: dict[str, int]
    last_checkpoint: bytes | None
    digest: bytes


# --- shared validation (reader and writer) --------------------------------------------------


@dataclass
class _Keys:
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


def _check_header(h: ExportHeader) -> _Keys:
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
    line = 4
    record_keys: dict[tuple[str, int], Verifier] = {}
    prev: bytes | None = None
    for text in h.record_keys:
        v = _parse_key(text, line, "record-key")
        if v.key_type != TYPE_ED25519:
            raise ExportFormatError(line, f"record-key has type 0x{v.key_type:02x}, not 0x01")
        b = text.encode("utf-8")
        if prev is not None and b <= prev:
            raise ExportFormatError(line, "record-key lines are not in strictly increasing order")
        prev = b
        k = (v.name, v.key_id)
        if k in record_keys:
            raise ExportFormatError(line, f"record key {v.name}+{v.key_id:08x} is declared twice")
        record_keys[k] = v
        line += 1
    note_keys: dict[tuple[str, int], tuple[Verifier, str]] = {
        (log.name, log.key_id): (log, h.log_key)
    }
    prev = None
    for text in h.witness_keys:
        v = _parse_key(text, line, "witness-key")
        if v.key_type not in (TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1):
            raise ExportFormatError(
                line, f"witness-key has type 0x{v.key_type:02x}, not 0x04 or 0x06"
            )
        b = text.encode("utf-8")
        if prev is not None and b <= prev:
            raise ExportFormatError(line, "witness-key lines are not in strictly increasing order")
        prev = b
        k = (v.name, v.key_id)
        if k in note_keys:
            raise ExportFormatError(line, f"key {v.name}+{v.key_id:08x} is declared twice")
        note_keys[k] = (v, text)
        line += 1
    return _Keys(log, note_keys, record_keys)


def _parse_checkpoint(
    note: bytes, line: int, keys: _Keys, origin: str, prev_size: int | None
) -> CheckpointItem:
    """Check a checkpoint note's structure and keys (not its signatures)."""
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
    return CheckpointItem(note, cp, text, tuple(sigs), line)


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


def _check_record_signature(sig: RecordSignature, keys: _Keys, line: int, where: str) -> Verifier:
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
    """True when ``raw`` — a body that passed :func:`_check_body` for ``run`` and ``seq`` — is
    the seal record naming ``outcome``; False when not sure. The canonical body of that record is
    ``{"data":{"outcome":"<outcome>"},"epoch":<epoch>,"kind":"RunSealed","run":"<run>",
    "seq":<seq>,"v":1}`` (no field sorts between ``data`` and ``epoch``, nor between ``epoch``
    and ``kind``): given a valid body, this prefix and suffix leave room for the epoch alone."""
    return raw.startswith(b'{"data":{"outcome":"%s"},"epoch":' % outcome.encode()) and raw.endswith(
        b',"kind":"RunSealed","run":"%s","seq":%d,"v":1}' % (run.encode(), seq)
    )


def _check_seal_record(
    raw: bytes, run: str, seq: int, line: int, run_line: int, outcome: str | None
) -> None:
    """The seal-record rule (docs/export-format.md §4.5) for record ``seq`` of ``run``, whose
    body passed :func:`_check_body`. ``outcome``: the run line's outcome when this record is the
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


def _check_body(raw: bytes, run: str, seq: int, line: int, run_line: int) -> None:
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


# --- reading --------------------------------------------------------------------------------


class _Lines:
    """LF-terminated lines of a byte stream, counted and hashed, with one line of push-back."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._digest = hashlib.sha256()
        self.before_end: bytes | None = None
        self.lineno = 0  # the number of the last line read
        self._back: tuple[int, bytes] | None = None

    def next(self) -> tuple[int, bytes] | None:
        """The next line (number, bytes without LF), or None at the end of the stream."""
        if self._back is not None:
            back, self._back = self._back, None
            return back
        data = self._stream.readline(MAX_LINE + 1)
        if not data:
            return None
        self.lineno += 1
        if not data.endswith(b"\n"):
            if len(data) > MAX_LINE:
                raise ExportFormatError(self.lineno, f"line is longer than {MAX_LINE} bytes")
            raise ExportFormatError(self.lineno, "the export is truncated (last line has no LF)")
        if data.startswith(b"end "):
            self.before_end = self._digest.digest()
        self._digest.update(data)
        return self.lineno, data[:-1]

    def push_back(self, item: tuple[int, bytes]) -> None:
        self._back = item

    def read_note(self, size: int, line: int) -> bytes:
        """Exactly ``size`` bytes (a note, which must end in LF)."""
        parts: list[bytes] = []
        need = size
        while need:
            chunk = self._stream.read(need)
            if not chunk:
                raise ExportFormatError(
                    line, f"the export is truncated inside the checkpoint of {size} bytes"
                )
            parts.append(chunk)
            need -= len(chunk)
        note = b"".join(parts)
        self._digest.update(note)
        if not note.endswith(b"\n"):
            raise ExportFormatError(line, f"checkpoint of {size} bytes does not end in LF")
        self.lineno += note.count(b"\n")
        return note

    def at_eof(self) -> bool:
        return self._back is None and not self._stream.read(1)


def _text(data: bytes, line: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ExportFormatError(line, f"not valid UTF-8 (byte {e.start})") from None


def _decimal(token: bytes, line: int, what: str, lo: int = 0, hi: int = MAX_INT63) -> int:
    try:
        value = parse_decimal(token.decode("ascii", "replace"), what, hi)
    except MalformedError as e:
        raise ExportFormatError(line, str(e)) from None
    if value < lo:
        raise ExportFormatError(line, f"{what} {value} is less than {lo}")
    return value


def _describe(data: bytes) -> str:
    return repr(data[:40].decode("utf-8", "replace")) + ("…" if len(data) > 40 else "")


def _expect(lines: _Lines, what: str) -> tuple[int, bytes]:
    got = lines.next()
    if got is None:
        raise ExportFormatError(lines.lineno + 1, f"the export is truncated: expected {what}")
    return got


def _keyword(data: bytes, word: bytes) -> bytes | None:
    """The rest of ``data`` after ``word`` and one space, or None."""
    prefix = word + b" "
    return data[len(prefix) :] if data.startswith(prefix) else None


def _run_line(rest: bytes, n: int) -> tuple[str, int, int, str]:
    """The grammar of run line ``n`` (``rest``: what follows ``run ``): (run ID, count, sealed
    position or -1, outcome or ""). The checks that depend on the runs before it are the
    caller's."""
    tokens = rest.split(b" ")
    if len(tokens) not in (2, 5) or (len(tokens) == 5 and tokens[2] != b"sealed"):
        raise ExportFormatError(
            n,
            "expected 'run <run ID> <count>' or 'run <run ID> <count> sealed <pos> <outcome>'",
        )
    run = _text(tokens[0], n)
    try:
        check_run_id(run)
    except MalformedError as e:
        raise ExportFormatError(n, str(e)) from None
    count = _decimal(tokens[1], n, f"record count of run {run}", 1, MAX_SEQ)
    if len(tokens) == 2:
        return run, count, -1, ""
    if count < 2:
        raise ExportFormatError(
            n, f"sealed run {run} has 1 record: a sealed run holds its records and its seal record"
        )
    pos = _decimal(tokens[3], n, f"log position of run {run}")
    outcome = _text(tokens[4], n)
    try:
        check_outcome(outcome)
    except MalformedError as e:
        raise ExportFormatError(n, f"run {run}: {e}") from None
    return run, count, pos, outcome


def read_export(stream: BinaryIO) -> Iterator[ExportItem]:
    """Parse an export strictly, streaming; yield its items in file order.

    Checks every rule that needs no signature or chain hash (see the module docstring) and
    raises :class:`ExportFormatError` (a MalformedError), :class:`ExportVerificationError`,
    :class:`ExportChainError` or :class:`ExportProofError`, each message starting with
    ``"line N: "``. An item is yielded once its own checks pass; the ``end`` line's checks
    (counts, digest, nothing after it) pass before :class:`EndItem` is yielded, so a consumer
    must not treat the export as valid before then.

    Requires: ``stream`` is a binary stream positioned at the start of the export; it is read
    sequentially, never sought.
    """
    lines = _Lines(stream)
    got = lines.next()
    if got is None:
        raise ExportFormatError(1, f"the export is empty (expected {MAGIC.decode()!r})")
    if got[1] == _MAGIC_V1:
        raise ExportFormatError(
            1,
            "this is a version 1 export, which is no longer read: its sealed runs carry no seal"
            " record, so no signature covers their outcomes; export the store again with this"
            " version",
        )
    if got[1] != MAGIC:
        raise ExportFormatError(1, f"expected {MAGIC.decode()!r}, found {_describe(got[1])}")

    # Header.
    n, data = _expect(lines, "the origin line")
    rest = _keyword(data, b"origin")
    if rest is None:
        raise ExportFormatError(n, f"expected 'origin <origin>', found {_describe(data)}")
    origin = _text(rest, n)
    n, data = _expect(lines, "the log-key line")
    rest = _keyword(data, b"log-key")
    if rest is None:
        raise ExportFormatError(n, f"expected 'log-key <vkey>', found {_describe(data)}")
    log_key = _text(rest, n)
    record_keys: list[str] = []
    witness_keys: list[str] = []
    while True:
        got = _expect(lines, "a key, checkpoint, run or end line")
        n, data = got
        rest = _keyword(data, b"record-key")
        if rest is not None:
            if witness_keys:
                raise ExportFormatError(n, "record-key line after the witness-key lines")
            record_keys.append(_text(rest, n))
            continue
        rest = _keyword(data, b"witness-key")
        if rest is not None:
            witness_keys.append(_text(rest, n))
            continue
        lines.push_back(got)
        break
    header = ExportHeader(origin, log_key, tuple(record_keys), tuple(witness_keys))
    keys = _check_header(header)
    yield HeaderItem(header, 2)

    # Checkpoints.
    sizes: list[tuple[int, int]] = []  # (size, line): few, kept for the end check
    while True:
        got = _expect(lines, "a checkpoint, run or end line")
        n, data = got
        rest = _keyword(data, b"checkpoint")
        if rest is None:
            lines.push_back(got)
            break
        size = _decimal(rest, n, "checkpoint length", 1, MAX_NOTE_SIZE)
        note = lines.read_note(size, n)
        item = _parse_checkpoint(note, n, keys, origin, sizes[-1][0] if sizes else None)
        sizes.append((item.checkpoint.size, n))
        yield item

    # Runs.
    sealed_ids: set[str] = set()
    position = 0  # the next sealed position; also the log size so far
    last_unsealed: str | None = None
    runs = records = 0
    while True:
        n, data = _expect(lines, "a run or end line")
        rest = _keyword(data, b"run")
        if rest is None:
            break
        run, count, pos, outcome = _run_line(rest, n)
        seal: RunSeal | None = None
        if pos >= 0:
            if last_unsealed is not None:
                raise ExportFormatError(n, f"sealed run {run} follows an unsealed run")
            if pos != position:
                raise ExportFormatError(
                    n, f"run {run} is sealed at position {pos}, the next position is {position}"
                )
            if run in sealed_ids:
                raise ExportFormatError(n, f"run {run} appears twice")
            sealed_ids.add(run)
            position += 1
            seal = RunSeal(pos, outcome)
        else:
            if last_unsealed is not None and run <= last_unsealed:
                raise ExportFormatError(
                    n, f"unsealed run {run} does not follow {last_unsealed} in run ID order"
                )
            if run in sealed_ids:
                raise ExportFormatError(n, f"run {run} appears twice (sealed and unsealed)")
            last_unsealed = run
        runs += 1
        run_line = n
        yield RunItem(run, count, seal, n)

        prev = GENESIS
        sealed_as = outcome if seal is not None else None
        for seq in range(1, count + 1):
            n, data = _expect(lines, f"record {seq} of run {run} ({count} announced)")
            if data.startswith((b"run ", b"end ")):
                raise ExportFormatError(
                    n,
                    f"run {run} (line {run_line}) announced {count} records, "
                    f"the export holds {seq - 1}",
                )
            if len(data) < HASH_TEXT_SIZE + 2 or data[HASH_TEXT_SIZE] != 0x20:
                raise ExportFormatError(
                    n, f"expected record {seq} of run {run} ('<hash> <body>'): {_describe(data)}"
                )
            h = _fast_hash(data[:HASH_TEXT_SIZE])
            if h is None:
                try:
                    h = parse_hash(data[:HASH_TEXT_SIZE], f"hash of run {run} record {seq}")
                except MalformedError as e:
                    raise ExportFormatError(n, str(e)) from None
            raw = data[HASH_TEXT_SIZE + 1 :]
            _check_body(raw, run, seq, n, run_line)
            _check_seal_record(raw, run, seq, n, run_line, sealed_as if seq == count else None)
            signature: RecordSignature | None = None
            nxt = lines.next()
            if nxt is not None and nxt[1].startswith(b"sig "):
                signature = _parse_sig_line(nxt[1], nxt[0], keys, f"run {run} record {seq}")
                nxt = lines.next()
            if nxt is not None:
                lines.push_back(nxt)
                # The run must end here before its last record is handed on: a verifier
                # enters a sealed run's head into the log on the last record.
                if seq == count and not nxt[1].startswith((b"run ", b"end ")):
                    raise ExportFormatError(
                        nxt[0],
                        f"run {run} (line {run_line}) announced {count} records; expected a "
                        f"run or end line after its last, found {_describe(nxt[1])}",
                    )
            records += 1
            yield RecordItem(Record(run, seq, raw, prev, h, signature), n)
            prev = h

    # End.
    rest = _keyword(data, b"end")
    if rest is None:
        expected = "a run or end line"
        if not runs:
            expected = "a checkpoint, run or end line"
            if not sizes:
                expected = "a key, checkpoint, run or end line"
        raise ExportFormatError(n, f"expected {expected}, found {_describe(data)}")
    tokens = rest.split(b" ")
    if len(tokens) != 5:
        raise ExportFormatError(
            n, "expected 'end <checkpoints> <runs> <records> <log size> <digest>'"
        )
    counted = {
        "checkpoints": len(sizes),
        "runs": runs,
        "records": records,
        "log size": position,
    }
    for token, (what, have) in zip(tokens, counted.items(), strict=False):
        declared = _decimal(token, n, f"end {what}")
        if declared != have:
            raise ExportFormatError(
                n, f"the end line counts {declared} {what}, the export holds {have}"
            )
    try:
        digest = parse_hash(tokens[4], "end digest")
    except MalformedError as e:
        raise ExportFormatError(n, str(e)) from None
    if digest != lines.before_end:
        raise ExportVerificationError(
            n,
            "the digest does not match the bytes before the end line: the export was changed "
            "or damaged",
        )
    if not lines.at_eof():
        raise ExportFormatError(n + 1, "data after the end line")
    for size, line in sizes:
        if size > position:
            raise ExportProofError(
                line, f"checkpoint of size {size} is larger than the log ({position} sealed runs)"
            )
    yield EndItem(len(sizes), runs, records, position, digest, n)


def _fast_hash_any(text: bytes) -> bytes | None:
    try:
        raw = binascii.a2b_base64(text, strict_mode=True)
    except binascii.Error:
        return None
    return raw if binascii.b2a_base64(raw, newline=False) == text else None


def _fast_hash(text: bytes) -> bytes | None:
    """The hash when ``text`` is canonical base64 of 32 bytes; None when not sure."""
    try:
        h = binascii.a2b_base64(text, strict_mode=True)
    except binascii.Error:
        return None
    return h if len(h) == 32 and binascii.b2a_base64(h, newline=False) == text else None


def _parse_sig_line(data: bytes, line: int, keys: _Keys, where: str) -> RecordSignature:
    tokens = data.split(b" ")
    if len(tokens) == 4:
        k = keys.record_key_text.get((tokens[1], tokens[2]))
        if k is not None:
            sig = _fast_hash_any(tokens[3])
            if sig is not None and len(sig) == RECORD_SIGNATURE_SIZE:
                return RecordSignature(k[0], k[1], sig)
    if len(tokens) != 4:
        raise ExportFormatError(line, f"{where}: expected 'sig <key name> <key ID> <signature>'")
    name = _text(tokens[1], line)
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
    _check_record_signature(rs, keys, line, where)
    return rs


# --- verifying ------------------------------------------------------------------------------


@dataclass
class _Pending:
    size: int
    root: bytes
    line: int


@dataclass
class ExportVerifier:
    """The full offline check of an export, in one streaming pass (see :func:`verify_export`).

    ``log_key``: the vkey the caller trusts for the log; the header's must be exactly it.
    ``record_keys``: when given, the vkeys the caller trusts for records; every record-key of
    the header must be one of them. ``require_record_signatures``: every record must be signed.

    :meth:`items` yields each item once it and everything before it verified, so a restore
    can replay while verifying; :attr:`summary` is set once the last item (the end) verified.
    """

    log_key: str | None = None
    record_keys: Iterable[str] | None = None
    require_record_signatures: bool = False
    summary: ExportSummary | None = field(default=None, init=False)

    def items(self, stream: BinaryIO) -> Iterator[ExportItem]:
        """Verify ``stream`` item by item; yield each verified item."""
        trusted_log = _canonical_vkey(self.log_key, "trusted log key") if self.log_key else None
        trusted_records = (
            None
            if self.record_keys is None
            else {_canonical_vkey(k, "trusted record key") for k in self.record_keys}
        )
        tree = MemoryHashStore()
        header: ExportHeader | None = None
        keys: _Keys | None = None
        pending: list[_Pending] = []  # checkpoints whose size the tree has not reached yet
        reached: _Pending | None = None  # the last checkpoint checked against the tree
        sizes: list[int] = []
        cosignatures: dict[str, int] = {}
        consistency = signed = 0
        last_note: bytes | None = None
        run: RunItem | None = None
        runs_started = False

        def reach(at_line: int) -> None:
            # Check every checkpoint whose size the rebuilt tree has now reached.
            nonlocal reached, consistency
            while pending and pending[0].size == tree.size:
                cp = pending.pop(0)
                rebuilt = tree.root()
                if rebuilt != cp.root:
                    raise ExportProofError(
                        cp.line,
                        f"checkpoint of size {cp.size}: its root is not the root of the log "
                        f"rebuilt from the sealed runs (size {cp.size} reached at line {at_line})",
                    )
                if reached is not None and reached.size > 0:
                    proof = consistency_proof(reached.size, cp.size, tree)
                    try:
                        _verify_consistency(reached.size, cp.size, reached.root, cp.root, proof)
                    except ProofError as e:  # pragma: no cover - both roots matched the tree
                        raise ExportProofError(cp.line, str(e)) from None
                    consistency += 1
                reached = cp

        for item in read_export(stream):
            if isinstance(item, HeaderItem):
                header = item.header
                keys = _check_header(header)
                if trusted_log is not None and header.log_key != trusted_log:
                    raise ExportVerificationError(3, "log-key is not the trusted log key")
                if trusted_records is not None:
                    for i, k in enumerate(header.record_keys):
                        if k not in trusted_records:
                            raise ExportVerificationError(
                                4 + i, "record-key is not one of the trusted record keys"
                            )
                cosignatures = dict.fromkeys(header.witness_keys, 0)
            elif isinstance(item, CheckpointItem):
                assert keys is not None
                cp = item.checkpoint
                for j, sig in enumerate(item.signatures):
                    v, vkey = keys.note_keys[(sig.name, sig.key_id)]
                    if not v.verify(item.text, sig.sig):
                        raise ExportSignatureError(
                            item.signature_line(j),
                            sig.name,
                            sig.key_id,
                            f"checkpoint of size {cp.size}",
                        )
                    if vkey in cosignatures:
                        cosignatures[vkey] += 1
                pending.append(_Pending(cp.size, cp.root, item.line))
                sizes.append(cp.size)
                last_note = item.note
            elif isinstance(item, RunItem):
                if not runs_started:
                    runs_started = True
                    reach(item.line)
                run = item
            elif isinstance(item, RecordItem):
                assert keys is not None and run is not None
                r = item.record
                if chain_hash(r.prev_hash, r.raw) != r.hash:
                    raise ExportChainError(
                        item.line,
                        r.run,
                        r.seq,
                        "hash does not cover the body and the previous record's hash",
                    )
                if r.signature is not None:
                    signed += 1
                    s = r.signature
                    v = keys.record_keys[(s.name, s.key_id)]
                    if not v.verify(record_signature_message(r.hash), s.sig):
                        raise ExportSignatureError(
                            item.line + 1, s.name, s.key_id, f"run {r.run} record {r.seq}"
                        )
                elif self.require_record_signatures:
                    raise ExportVerificationError(
                        item.line, f"run {r.run} record {r.seq} is not signed"
                    )
                if run.seal is not None and r.seq == run.count:
                    tree.append(leaf_hash(r.hash))
                    reach(item.line)
            else:
                if not runs_started:
                    reach(item.line)
                assert header is not None and not pending, "read_export checked the sizes"
                self.summary = ExportSummary(
                    header=header,
                    checkpoints=item.checkpoints,
                    checkpoint_sizes=tuple(sizes),
                    runs=item.runs,
                    sealed_runs=item.log_size,
                    records=item.records,
                    signed_records=signed,
                    log_size=tree.size,
                    log_root=tree.root(),
                    consistency_proofs=consistency,
                    cosignatures=cosignatures,
                    last_checkpoint=last_note,
                    digest=item.digest,
                )
            yield item


def _canonical_vkey(vkey: str, what: str) -> str:
    try:
        return format_vkey(parse_vkey(vkey))
    except MalformedError as e:
        raise UsageError(f"{what}: {e}") from None


def verify_export(
    stream: BinaryIO,
    *,
    log_key: str | None = None,
    record_keys: Iterable[str] | None = None,
    require_record_signatures: bool = False,
) -> ExportSummary:
    """Verify a whole export in one streaming pass and return what was checked.

    Everything :func:`read_export` checks, then: every checkpoint signature line verifies
    under its declared key; every record's hash is SHA-256(previous hash || body); every
    record signature verifies; each sealed run's head (its last record's hash) is its log leaf
    at its position; each checkpoint's root equals the root rebuilt at its size; successive
    checkpoints are consistent (RFC 6962 proof from the rebuilt tree). Options: see
    :class:`ExportVerifier`.

    Raises a :class:`~tlog.errors.TlogError` whose message starts with ``"line N: "``:
    :class:`ExportFormatError` (a MalformedError) for format errors, and
    :class:`ExportVerificationError`, :class:`ExportChainError`, :class:`ExportSignatureError`
    or :class:`ExportProofError` (VerificationErrors) for content that does not verify; a
    :class:`UsageError` for an unparsable trusted key argument. The witness quorum is not
    checked here (apply a tlog.policy to the checkpoint notes).
    """
    v = ExportVerifier(log_key, record_keys, require_record_signatures)
    for _ in v.items(stream):
        pass
    assert v.summary is not None
    return v.summary


# --- writing --------------------------------------------------------------------------------


class _Out:
    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._digest = hashlib.sha256()
        self.lines = 0

    def write(self, data: bytes) -> None:
        self._out.write(data)
        self._digest.update(data)
        self.lines += data.count(b"\n")

    def digest(self) -> bytes:
        return self._digest.digest()


class ExportWriter:
    """Write an export to a binary stream, streaming: nothing is buffered beyond one line.

    Call :meth:`header` once, then :meth:`checkpoint` for each published note by increasing
    size, then for each run :meth:`run` followed by exactly ``count`` calls to :meth:`record`
    (sealed runs first by position, then unsealed runs by run ID), then :meth:`end`.

    Calls out of this order, a wrong record count, a sealed position out of turn, a record of
    another run or seq, or one that does not link to its predecessor raise
    :class:`UsageError`; a value that would make the export invalid (a malformed key, a note
    of another origin or with a signature line of an undeclared key, a record whose hash does
    not cover its body) raises the error the reader would raise, with the line it would name.
    The writer checks no signature, and — to keep its memory constant — does not check that a
    sealed run's ID differs from every earlier sealed run's (the store's key guarantees it;
    the reader checks it).
    """

    def __init__(self, out: BinaryIO) -> None:
        self._out = _Out(out)
        self._keys: _Keys | None = None
        self._origin = ""
        self._state = "header"  # header, checkpoints, runs, ended
        self._last_size: int | None = None
        self._checkpoints = 0
        self._max_size = 0
        self._max_size_line = 0
        self._position = 0
        self._last_unsealed: str | None = None
        self._runs = 0
        self._records = 0
        self._run: str | None = None
        self._count = 0
        self._written = 0
        self._prev = GENESIS
        self._outcome: str | None = None  # the current run's outcome when it is sealed
        self._head: bytes | None = None
        self._run_line = 0

    def header(self, h: ExportHeader) -> None:
        """Write the magic line and the header (record and witness keys sorted)."""
        if self._state != "header":
            raise UsageError("the header is written once, first")
        h = ExportHeader(
            h.origin,
            h.log_key,
            tuple(sorted(h.record_keys, key=lambda k: k.encode("utf-8"))),
            tuple(sorted(h.witness_keys, key=lambda k: k.encode("utf-8"))),
        )
        self._keys = _check_header(h)
        self._origin = h.origin
        out = [MAGIC, b"origin " + h.origin.encode(), b"log-key " + h.log_key.encode()]
        out += [b"record-key " + k.encode() for k in h.record_keys]
        out += [b"witness-key " + k.encode() for k in h.witness_keys]
        self._out.write(b"".join(line + b"\n" for line in out))
        self._state = "checkpoints"

    def checkpoint(self, note: bytes) -> None:
        """Write one published checkpoint note (sizes strictly increasing)."""
        if self._state != "checkpoints":
            raise UsageError("checkpoints follow the header and precede every run")
        assert self._keys is not None
        line = self._out.lines + 1
        if not 1 <= len(note) <= MAX_NOTE_SIZE:
            raise ExportFormatError(line, f"checkpoint of {len(note)} bytes")
        item = _parse_checkpoint(note, line, self._keys, self._origin, self._last_size)
        self._out.write(b"checkpoint %d\n" % len(note) + note)
        self._last_size = item.checkpoint.size
        self._max_size, self._max_size_line = item.checkpoint.size, line
        self._checkpoints += 1

    def run(
        self,
        run_id: str,
        count: int,
        seal: RunSeal | tuple[int, str] | None = None,
        *,
        head: bytes | None = None,
    ) -> None:
        """Start a run of ``count`` records; ``seal`` is (position, outcome) for a sealed run.

        ``head``, when given for a sealed run, is the store's sealed head: the run's last
        record must carry it.
        """
        if self._state not in ("checkpoints", "runs"):
            raise UsageError("runs follow the header and the checkpoints")
        self._finish_run()
        line = self._out.lines + 1
        try:
            check_run_id(run_id)
        except MalformedError as e:
            raise ExportFormatError(line, str(e)) from None
        if not isinstance(count, int) or not 1 <= count <= MAX_SEQ:
            raise UsageError(f"run {run_id}: record count {count!r} is not in 1..2^63-1")
        text = f"run {run_id} {count}"
        outcome: str | None = None
        if seal is not None:
            position, outcome = seal if isinstance(seal, tuple) else (seal.position, seal.outcome)
            try:
                check_outcome(outcome)
            except MalformedError as e:
                raise ExportFormatError(line, f"run {run_id}: {e}") from None
            if count < 2:
                raise UsageError(
                    f"sealed run {run_id} has 1 record: a sealed run holds its records and its "
                    "seal record"
                )
            if self._last_unsealed is not None:
                raise UsageError(f"sealed run {run_id} after the unsealed runs")
            if position != self._position:
                raise UsageError(
                    f"run {run_id} is sealed at position {position}; the next is {self._position}"
                )
            if head is not None and len(head) != 32:
                raise UsageError("a sealed head is 32 bytes")
            self._position += 1
            text += f" sealed {position} {outcome}"
        else:
            if head is not None:
                raise UsageError("an unsealed run has no sealed head")
            if self._last_unsealed is not None and run_id <= self._last_unsealed:
                raise UsageError(f"unsealed run {run_id} is not after {self._last_unsealed}")
            self._last_unsealed = run_id
        self._run_line = line
        self._out.write(text.encode() + b"\n")
        self._state = "runs"
        self._run, self._count, self._written = run_id, count, 0
        self._prev, self._outcome, self._head = GENESIS, outcome, head
        self._runs += 1

    def record(self, record: Record) -> None:
        """Write the next record of the current run (and its signature line)."""
        if self._run is None or self._written == self._count:
            raise UsageError("a record belongs to a started run with records still to come")
        assert self._keys is not None
        seq = self._written + 1
        if record.run != self._run or record.seq != seq:
            raise UsageError(
                f"expected record {seq} of run {self._run}, got {record.seq} of {record.run}"
            )
        if record.prev_hash != self._prev:
            raise UsageError(f"run {record.run} record {seq} does not link to record {seq - 1}")
        line = self._out.lines + 1
        if len(record.hash) != 32:
            raise ExportFormatError(line, f"run {record.run} record {seq}: hash is not 32 bytes")
        if _CONTROL_BYTE.search(record.raw):
            raise ExportFormatError(
                line, f"run {record.run} record {seq}: body holds a byte below 0x20"
            )
        _check_body(record.raw, record.run, seq, line, self._run_line)
        _check_seal_record(
            record.raw,
            record.run,
            seq,
            line,
            self._run_line,
            self._outcome if seq == self._count else None,
        )
        if chain_hash(self._prev, record.raw) != record.hash:
            raise ExportChainError(line, record.run, seq, "hash does not cover the body")
        out = b64encode(record.hash).encode() + b" " + record.raw + b"\n"
        if record.signature is not None:
            s = record.signature
            _check_record_signature(s, self._keys, line + 1, f"run {record.run} record {seq}")
            out += f"sig {s.name} {s.key_id:08x} {b64encode(s.sig)}\n".encode()
        if seq == self._count and self._head is not None and record.hash != self._head:
            raise UsageError(f"run {record.run}: the last record is not the sealed head")
        self._out.write(out)
        self._written = seq
        self._prev = record.hash
        self._records += 1

    def _finish_run(self) -> None:
        if self._run is not None and self._written != self._count:
            raise UsageError(
                f"run {self._run} announced {self._count} records, {self._written} were written"
            )

    def item(self, item: ExportItem) -> bytes | None:
        """Write any item read by :func:`read_export`; for the end item, return the digest.

        The end line is recomputed from what was written, not copied from the item.
        """
        if isinstance(item, HeaderItem):
            self.header(item.header)
        elif isinstance(item, CheckpointItem):
            self.checkpoint(item.note)
        elif isinstance(item, RunItem):
            self.run(item.run, item.count, item.seal)
        elif isinstance(item, RecordItem):
            self.record(item.record)
        else:
            return self.end()
        return None

    def end(self) -> bytes:
        """Write the end line; return the digest. The export is complete."""
        if self._state not in ("checkpoints", "runs"):
            raise UsageError("end follows the header, the checkpoints and the runs, once")
        self._finish_run()
        if self._max_size > self._position:
            raise ExportProofError(
                self._max_size_line,
                f"checkpoint of size {self._max_size} is larger than the log "
                f"({self._position} sealed runs)",
            )
        digest = self._out.digest()
        counts = (self._checkpoints, self._runs, self._records, self._position)
        self._out.write(b"end %d %d %d %d %s\n" % (*counts, b64encode(digest).encode()))
        self._state = "ended"
        return digest


def write_export(out: BinaryIO, items: Iterable[ExportItem]) -> bytes:
    """Write ``items`` (as :func:`read_export` yields them) to ``out``; return the digest.

    Requires: ``items`` end with an :class:`EndItem`; ``write_export(out, read_export(x))``
    writes ``x`` again, byte for byte.
    """
    w = ExportWriter(out)
    for item in items:
        digest = w.item(item)
        if digest is not None:
            return digest
    raise UsageError("the items end without an end item")
