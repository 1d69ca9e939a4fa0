"""The export writer: an export written streaming, checked as the reader would check it.

:class:`ExportWriter` writes the items in the order the format requires (``docs/export-format.md``
§8 "Writing an export") and refuses, before writing it, anything the reader would refuse — with
the reader's own error and message (:mod:`tlog.export.check`), at the line the reader would name.
:func:`write_export` writes the items :func:`tlog.export.read_export` yields, byte for byte.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import BinaryIO

from tlog.encoding import b64encode
from tlog.errors import MalformedError, UsageError
from tlog.export.check import (
    HeaderKeys,
    check_body,
    check_header,
    check_record_signature,
    check_seal_record,
    parse_checkpoint,
    parse_note_item,
)
from tlog.export.follow import larger_than_log
from tlog.export.format import (
    MAGIC,
    CheckpointItem,
    EventItem,
    ExportChainError,
    ExportFormatError,
    ExportHeader,
    ExportItem,
    ExportProofError,
    ExportVerificationError,
    HeaderItem,
    InboxCheckpointItem,
    InboxItem,
    RecordItem,
    RunItem,
    RunSeal,
    WaitItem,
)
from tlog.export.inbox import (
    event_line,
    inbox_keys,
    parse_event_line,
    parse_inbox_line,
    parse_payload_line,
    parse_wait_line,
    wait_line,
)
from tlog.inbox import payload_hash
from tlog.journal import GENESIS, MAX_SEQ, Record, chain_hash, check_outcome, check_run_id
from tlog.note import MAX_NOTE_SIZE

_CONTROL_BYTE = re.compile(rb"[\x00-\x1f]")


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
        self._keys: HeaderKeys | None = None
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
        self._inbox: InboxItem | None = None
        self._inbox_keys: HeaderKeys | None = None
        self._inbox_checkpoints = 0
        self._inbox_size: int | None = None  # the last inbox checkpoint's size
        self._events = 0
        self._waits = 0
        self._wait_number = 0

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
        self._keys = check_header(h)
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
        item = parse_checkpoint(note, line, self._keys, self._origin, self._last_size)
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
        check_body(record.raw, record.run, seq, line, self._run_line)
        check_seal_record(
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
            check_record_signature(s, self._keys, line + 1, f"run {record.run} record {seq}")
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

    # --- the inbox section ------------------------------------------------------------------

    def inbox(self, origin: str, size: int, waits: int, wait_counter: int) -> None:
        """Open the inbox section (after the runs): the inbox log of ``origin`` (the header's
        origin + ``/inbox``) holds ``size`` events; ``waits`` wait lines follow them;
        ``wait_counter`` is the last wait number the store gave. Then :meth:`inbox_checkpoint`
        for each kept inbox checkpoint by increasing size, :meth:`event` for each event by
        position, :meth:`wait` for each wait by number, and :meth:`end`. A section that would
        hold nothing is refused at :meth:`end`: an empty inbox has no section."""
        if self._state not in ("checkpoints", "runs"):
            raise UsageError("the inbox section follows the runs, once")
        assert self._keys is not None
        self._finish_run()
        for value, what in ((size, "size"), (waits, "waits"), (wait_counter, "wait counter")):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQ:
                raise UsageError(f"inbox {what} {value!r} is not in 0..2^63-1")
        line = self._out.lines + 1
        text = b"inbox %s %d %d %d" % (origin.encode(), size, waits, wait_counter)
        item = parse_inbox_line(line, text, self._origin)
        self._inbox_keys = inbox_keys(self._keys, item.origin, line)
        self._out.write(text + b"\n")
        self._inbox = item
        self._run = None
        self._state = "inbox"

    def inbox_checkpoint(self, note: bytes) -> None:
        """Write one kept checkpoint note of the inbox log (sizes strictly increasing)."""
        if self._state != "inbox":
            raise UsageError("inbox checkpoints follow the inbox line and precede its events")
        assert self._inbox is not None and self._inbox_keys is not None
        line = self._out.lines + 1
        if not 1 <= len(note) <= MAX_NOTE_SIZE:
            raise ExportFormatError(line, f"checkpoint of {len(note)} bytes")
        origin = self._inbox.origin
        item = parse_note_item(
            note, line, self._inbox_keys, origin, self._inbox_size, InboxCheckpointItem
        )
        size = item.checkpoint.size
        if size > self._inbox.size:
            raise ExportProofError(
                line,
                f"inbox checkpoint of size {size} is larger than the inbox log "
                f"({self._inbox.size} events)",
            )
        self._out.write(b"checkpoint %d\n" % len(note) + note)
        self._inbox_size = size
        self._inbox_checkpoints += 1

    def event(self, item: EventItem) -> None:
        """Write the next event (by position) and its payload line; ``item.line`` is ignored.
        A payload whose hash is not the entry's is refused."""
        if self._state not in ("inbox", "events") or self._inbox is None:
            raise UsageError("events follow the inbox line and its checkpoints")
        if self._events == self._inbox.size:
            raise UsageError(f"the inbox announced {self._inbox.size} events")
        self._check_not_empty()
        line = self._out.lines + 1
        text = event_line(item)
        first, _, rest = text.partition(b"\n")
        got = parse_event_line(line, first, self._events, self._inbox)
        if got.entry_raw != item.entry_raw:
            raise UsageError(f"event {item.position}: the entry bytes are not canonical")
        if item.payload is not None:
            parse_payload_line(line + 1, rest[:-1], item.position)
            if payload_hash(item.payload) != got.entry.payload_sha256:
                raise ExportVerificationError(
                    line + 1,
                    f"event {item.position}: the payload's SHA-256 is not the entry's "
                    "payload_sha256",
                )
        self._out.write(text)
        self._events += 1
        self._state = "events"

    def wait(self, item: WaitItem) -> None:
        """Write the next wait (by number); ``item.line`` is ignored."""
        if self._state not in ("inbox", "events", "waits") or self._inbox is None:
            raise UsageError("waits follow the inbox's events")
        self._check_not_empty()
        if self._events != self._inbox.size:
            raise UsageError(
                f"the inbox announced {self._inbox.size} events, {self._events} were written"
            )
        if self._waits == self._inbox.waits:
            raise UsageError(f"the inbox announced {self._inbox.waits} waits")
        line = self._out.lines + 1
        text = wait_line(item)
        parse_wait_line(line, text[:-1], self._waits, self._inbox, self._wait_number)
        self._out.write(text)
        self._waits += 1
        self._wait_number = item.number
        self._state = "waits"

    def _check_not_empty(self) -> None:
        inbox = self._inbox
        assert inbox is not None
        if not (inbox.size or inbox.waits or self._inbox_checkpoints):
            raise ExportFormatError(
                inbox.line,
                "the inbox section is empty (no event, wait or checkpoint): an export of an "
                "empty inbox has no inbox section",
            )

    def _finish_inbox(self) -> None:
        inbox = self._inbox
        if inbox is None:
            return
        self._check_not_empty()
        if self._events != inbox.size or self._waits != inbox.waits:
            raise UsageError(
                f"the inbox announced {inbox.size} events and {inbox.waits} waits, "
                f"{self._events} and {self._waits} were written"
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
        elif isinstance(item, InboxItem):
            self.inbox(item.origin, item.size, item.waits, item.wait_counter)
        elif isinstance(item, InboxCheckpointItem):
            self.inbox_checkpoint(item.note)
        elif isinstance(item, EventItem):
            self.event(item)
        elif isinstance(item, WaitItem):
            self.wait(item)
        else:
            return self.end()
        return None

    def end(self) -> bytes:
        """Write the end line; return the digest. The export is complete."""
        if self._state not in ("checkpoints", "runs", "inbox", "events", "waits"):
            raise UsageError("end follows the header, the checkpoints and the runs, once")
        self._finish_run()
        self._finish_inbox()
        if self._max_size > self._position:
            raise larger_than_log(self._max_size_line, self._max_size, self._position)
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
