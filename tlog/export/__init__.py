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

Inbox (docs/export-format.md §4.7; :mod:`tlog.export.inbox`). When the tenant's inbox holds
anything, an optional section follows the runs::

    inbox <inbox origin> <size> <waits> <wait counter>       origin = <origin>/inbox
    checkpoint <L> LF <L bytes>         0..n, the inbox log's notes (log key under the inbox name)
    event <canonical JSON>              exactly <size>, by position: entry, claim, dead letter
    [payload <canonical JSON>]          after an event whose payload is kept
    wait <canonical JSON>               exactly <waits>, by number

The inbox log is RFC 6962 over the entries' bytes; a kept payload hashes to its entry's
``payload_sha256``; every ``EventDelivered`` record of the runs names an event of the section
claimed by its run with its seq as ``delivered_seq``, and every such event has its record. An
empty inbox has no section: such an export is byte for byte what it was before inboxes.

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

Modules (each holds one concept; this package exports the public API):

* :mod:`tlog.export.format` — the constants, the items a reader yields, the summary, the errors.
* :mod:`tlog.export.check` — the rules of one element (header keys, a checkpoint note, a run
  line, a record's hash, body and seal record, a ``sig`` line), each with its one message.
* :mod:`tlog.export.scan` — the run scanner: lines of a stream or of a mapped chunk, one
  record read and verified, the order of runs, whole chunks of runs verified (C-accelerated).
* :mod:`tlog.export.follow` — the log follower (the rebuilt log, the checkpoints it must reach)
  and the end line's check.
* :mod:`tlog.export.inbox` — the inbox section and the tail after the runs (both verifiers').
* :mod:`tlog.export.reader` — :func:`read_export`, :class:`ExportVerifier`, :func:`verify_export`.
* :mod:`tlog.export.writer` — :class:`ExportWriter`, :func:`write_export`.
* :mod:`tlog.accel` (beside this subpackage, since tlog.merkle and tlog.journal use it too) — the
  one import point of the C accelerator (``tlog/_speedups.c``).

The one-pass reader and verifier, restore (``store.export``) and the parallel verifier
(``verifier.parallel``, which adds only chunking, scheduling and merging) all drive these.
"""

from tlog.export.format import (
    HASH_TEXT_SIZE,
    MAGIC,
    MAX_LINE,
    RECORD_SIGNATURE_SIZE,
    CheckpointItem,
    EndItem,
    EventItem,
    ExportChainError,
    ExportFormatError,
    ExportHeader,
    ExportItem,
    ExportProofError,
    ExportSignatureError,
    ExportSummary,
    ExportVerificationError,
    HeaderItem,
    InboxCheckpointItem,
    InboxItem,
    InboxSummary,
    NoteItem,
    RecordItem,
    RunItem,
    RunSeal,
    VerifiedRun,
    WaitItem,
)
from tlog.export.reader import ExportVerifier, read_export, verify_export
from tlog.export.writer import ExportWriter, write_export

__all__ = [
    "HASH_TEXT_SIZE",
    "MAGIC",
    "MAX_LINE",
    "RECORD_SIGNATURE_SIZE",
    "CheckpointItem",
    "EndItem",
    "EventItem",
    "ExportChainError",
    "ExportFormatError",
    "ExportHeader",
    "ExportItem",
    "ExportProofError",
    "ExportSignatureError",
    "ExportSummary",
    "ExportVerificationError",
    "ExportVerifier",
    "ExportWriter",
    "HeaderItem",
    "InboxCheckpointItem",
    "InboxItem",
    "InboxSummary",
    "NoteItem",
    "RecordItem",
    "RunItem",
    "RunSeal",
    "VerifiedRun",
    "WaitItem",
    "read_export",
    "verify_export",
    "write_export",
]
