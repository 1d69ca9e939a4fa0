"""The export format's values: its constants, the items a reader yields, and its errors.

The format itself is specified in ``docs/export-format.md`` and summarised in :mod:`tlog.export`.
Every error names the file line it is about (``"line N: …"``); the five classes are the small
hierarchy a caller catches: :class:`ExportFormatError` (a :class:`~tlog.errors.MalformedError`:
the bytes do not follow the format) and four :class:`~tlog.errors.VerificationError` kinds (a
well-formed export whose content does not verify).
"""

from __future__ import annotations

from dataclasses import dataclass

from tlog.checkpoint import Checkpoint
from tlog.encoding import b64encode
from tlog.errors import InvalidSignatureError, MalformedError, ProofError, VerificationError
from tlog.inbox import Entry
from tlog.journal import MAX_RECORD_SIZE, ChainError, Record
from tlog.note import Signature

MAGIC = b"tlog-toolkit export v2"
MAGIC_V1 = b"tlog-toolkit export v1"  # before seal records: refused with its own reason
"""The first line of every version-1 export (without its LF)."""

HASH_TEXT_SIZE = 44
"""Length of a base64 SHA-256 hash."""

RECORD_SIGNATURE_SIZE = 64
"""Bytes of an Ed25519 record signature."""

MAX_LINE = HASH_TEXT_SIZE + 1 + MAX_RECORD_SIZE
"""Longest line of an export, LF excluded: a record line with a body of the largest size."""


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
class NoteItem:
    """A checkpoint note of an export: the note's exact bytes, its parsed text and signature
    lines (the base of :class:`CheckpointItem`, the log's, and :class:`InboxCheckpointItem`,
    the inbox log's).

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
class CheckpointItem(NoteItem):
    """One published checkpoint of the log (see :class:`NoteItem`)."""


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


@dataclass(frozen=True)
class InboxItem:
    """The ``inbox`` line that opens the inbox section: the inbox log's origin, its size (the
    event lines that follow), the number of wait lines, and the store's wait counter (the last
    wait number it gave, at least every wait's number)."""

    origin: str
    size: int
    waits: int
    wait_counter: int
    line: int


@dataclass(frozen=True)
class InboxCheckpointItem(NoteItem):
    """One kept checkpoint of the inbox log (see :class:`NoteItem`)."""


@dataclass(frozen=True)
class EventItem:
    """An ``event`` line (and its ``payload`` line at ``line + 1`` when the payload is kept).

    ``entry_raw`` is the entry's canonical bytes (its leaf data), ``entry`` its fields.
    ``payload`` is the payload's canonical JSON, None once erased. Claimed: ``claimed_by``,
    ``claimed_for`` (the effect key of the wait the claim satisfied), ``claimed_at`` and
    ``held``; dead: ``dead_reason`` and ``dead_at``; ``delivered_seq``: the
    seq of the claiming run's ``EventDelivered`` record. :func:`tlog.export.verify_export` checks
    the payload's hash and the delivery.
    """

    position: int
    entry: Entry
    entry_raw: bytes
    payload: bytes | None
    claimed_by: str | None
    claimed_at: int | None
    held: bool
    dead_reason: str | None
    dead_at: int | None
    delivered_seq: int | None
    line: int
    claimed_for: str | None = None

    @property
    def state(self) -> str:
        """``live``, ``claimed`` or ``dead``."""
        if self.dead_reason is not None:
            return "dead"
        return "live" if self.claimed_by is None else "claimed"


@dataclass(frozen=True)
class WaitItem:
    """A ``wait`` line: a registered wait (``case`` None when it has none)."""

    run: str
    effect_key: str
    kind: str
    keys: tuple[tuple[str, str], ...]
    case: str | None
    step: int
    number: int
    created_at: int
    line: int


ExportItem = (
    HeaderItem
    | CheckpointItem
    | RunItem
    | RecordItem
    | InboxItem
    | InboxCheckpointItem
    | EventItem
    | WaitItem
    | EndItem
)


@dataclass(frozen=True)
class InboxSummary:
    """What the verification of an export's inbox section checked: the inbox log rebuilt from
    the entries (``size``, ``root``), its kept checkpoints (signatures, roots, consistency),
    and the accounting — every event is ``live``, ``claimed`` or ``dead`` (they add up to
    ``size``); ``erased`` payloads (of any state); ``delivered`` events, each matched with the
    ``EventDelivered`` record of the run that claimed it; ``held`` claimed events not yet
    released; ``waits`` registered."""

    origin: str
    size: int
    root: bytes
    checkpoints: int
    checkpoint_sizes: tuple[int, ...]
    consistency_proofs: int
    cosignatures: dict[str, int]
    live: int
    claimed: int
    dead: int
    erased: int
    delivered: int
    held: int
    waits: int

    def to_json(self) -> dict[str, object]:
        return {
            "origin": self.origin,
            "size": self.size,
            "root": b64encode(self.root),
            "checkpoints": self.checkpoints,
            "checkpoint_sizes": list(self.checkpoint_sizes),
            "consistency_proofs": self.consistency_proofs,
            "live": self.live,
            "claimed": self.claimed,
            "dead": self.dead,
            "erased": self.erased,
            "delivered": self.delivered,
            "held": self.held,
            "waits": self.waits,
        }


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
    """The published sizes, in file order (strictly increasing)."""
    runs: int
    sealed_runs: int
    records: int
    signed_records: int
    log_size: int
    """The rebuilt log's size: the number of sealed runs."""
    log_root: bytes
    """The root of the log rebuilt from the sealed runs' heads."""
    consistency_proofs: int
    cosignatures: dict[str, int]
    last_checkpoint: bytes | None
    """The last checkpoint note's exact bytes (None: the export carries none)."""
    digest: bytes
    """SHA-256 of the bytes before the end line (as the end line states it)."""
    inbox: InboxSummary | None = None
    """The inbox section's verification (None: the export has no inbox section)."""


VerifiedRun = tuple[int, str, int, int, bytes | None, int]
"""A run the scanner verified (:class:`tlog.export.scan.RunScanner`, and the C accelerator's
``scan_runs``): (run line, run ID, record count, sealed position or -1, the leaf hash of its head
when sealed else None, line of its last record). A plain tuple: the C code builds millions."""
