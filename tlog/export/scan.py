"""The run scanner: an export's lines from the first run line on, turned into verified runs.

Every reader of the runs section drives the pieces here, so that each check, and its message,
exists once:

* **Lines.** :class:`StreamLines` reads a binary stream (the one-pass reader,
  :func:`tlog.export.read_export`); :class:`ChunkLines` reads a range of a mapped file in blocks
  (the parallel verifier's chunks). Both count lines, refuse a line longer than
  :data:`~tlog.export.format.MAX_LINE` or without its LF (:func:`line_error`), and hold one line
  of push-back — the look-ahead after a record.
* **A record** (:func:`read_record`): its line's grammar, hash spelling, body (naming the run and
  seq), the seal-record rule, its ``sig`` line, and the "run, inbox or end line after the last
  record" rule — everything the format checks without cryptography; then :func:`verify_record`: the
  chain link and the record signature.
* **Run order** (:class:`RunOrder`): the checks of a run line that depend on the runs before it
  (sealed positions in turn, sealed runs first, unsealed runs by ID, no ID twice).
* **The scanner** (:class:`RunScanner`): a chunk's runs, run by run, with the C accelerator
  (:mod:`tlog.accel`) taking the whole runs and records it is sure of and the Python code
  above doing the rest; it returns :data:`~tlog.export.format.VerifiedRun` tuples. The merge of
  runs into the rebuilt log is :class:`tlog.export.follow.LogFollower`'s.

Memory: a :class:`ChunkLines` holds one block (:data:`BLOCK` bytes); :class:`RunOrder` one set
entry per sealed run; a :class:`RunScan` one tuple per run.
"""

from __future__ import annotations

import hashlib
import mmap
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol

from tlog import accel
from tlog.export.check import (
    HeaderKeys,
    check_body,
    check_seal_record,
    describe,
    parse_sig_line,
    read_run_line,
    record_hash,
)
from tlog.export.format import (
    HASH_TEXT_SIZE,
    MAX_LINE,
    ExportChainError,
    ExportFormatError,
    ExportSignatureError,
    ExportVerificationError,
    VerifiedRun,
)
from tlog.journal import GENESIS, RECORD_SIGNATURE_CONTEXT, RecordSignature
from tlog.merkle import leaf_hash

BLOCK = 1 << 20
"""Bytes :class:`ChunkLines` reads at a time (less than MAX_LINE, so a block's lines need no
length check); a chunk's lines are never all held at once."""
assert BLOCK <= MAX_LINE

_sha256 = hashlib.sha256


class Lines(Protocol):
    """What the record checks read from: numbered lines with one line of push-back."""

    lineno: int
    """The number of the last line read."""

    def next(self) -> tuple[int, bytes] | None:
        """The next line (number, bytes without LF), or None at the end of the file."""

    def push_back(self, item: tuple[int, bytes]) -> None:
        """Make ``item`` (the last line read) the next line again."""


def line_error(lineno: int, length: int) -> ExportFormatError:
    """The error of line ``lineno``, which has no LF within :data:`MAX_LINE` + 1 bytes
    (``length``: the bytes left from its start)."""
    if length > MAX_LINE:
        return ExportFormatError(lineno, f"line is longer than {MAX_LINE} bytes")
    return ExportFormatError(lineno, "the export is truncated (last line has no LF)")


def expect(lines: Lines, what: str) -> tuple[int, bytes]:
    """The next line, which must exist (``what``: what it should be, for the message)."""
    got = lines.next()
    if got is None:
        raise ExportFormatError(lines.lineno + 1, f"the export is truncated: expected {what}")
    return got


class StreamLines:
    """LF-terminated lines of a byte stream, counted and hashed, with one line of push-back."""

    def __init__(self, stream: BinaryIO, *, offset: int = 0, lineno: int = 0) -> None:
        self._stream = stream
        self._digest = hashlib.sha256()
        self.before_end: bytes | None = None
        """SHA-256 of the bytes read before the last line read that starts with ``end ``."""
        self.lineno = lineno  # the number of the last line read
        self.offset = offset
        """The file offset of the next byte to read (``offset``: that of the stream's start)."""
        self.end_offset: int | None = None
        """The file offset of the last line read that starts with ``end ``."""
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
            raise line_error(self.lineno, len(data))
        if data.startswith(b"end "):
            self.before_end = self._digest.digest()
            self.end_offset = self.offset
        self._digest.update(data)
        self.offset += len(data)
        return self.lineno, data[:-1]

    def push_back(self, item: tuple[int, bytes]) -> None:
        """Make ``item`` (the last line read) the next line again."""
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
        self.offset += size
        if not note.endswith(b"\n"):
            raise ExportFormatError(line, f"checkpoint of {size} bytes does not end in LF")
        self.lineno += note.count(b"\n")
        return note

    def at_eof(self) -> bool:
        """Whether nothing follows the last line read."""
        return self._back is None and not self._stream.read(1)


class ChunkLines:
    """The lines of a mapped export file from offset ``start`` (line ``lineno + 1``).

    Lines before ``end`` are read in blocks of at most :data:`BLOCK` bytes, each cut after its
    last LF (``buf``; ``at`` is the offset in it of the next line, which the C record scans of
    :class:`RunScanner` may also advance); a line longer than a block, and every line at or
    after ``end`` (only the look-ahead at the end of a chunk, or a run that overruns it — a
    failure), is read alone from the map. Line numbers, the length limit and the truncation
    check are :class:`StreamLines`'s. One line of push-back.
    """

    def __init__(self, mm: mmap.mmap, size: int, start: int, end: int, lineno: int) -> None:
        self.mm = mm
        self.size = size
        self.end = end
        self.pos = start  # the offset of the first byte after buf
        self.buf = b""  # a block of whole lines (each ends in LF)
        self.at = 0  # the offset in buf of the next line
        self.block_start = start  # the file offset of buf[0]
        self.lineno = lineno  # the number of the last line read
        self.last = start  # the file offset of the last line read by next()
        self.last_in_buf = False  # whether that line came from buf
        self.back: tuple[int, bytes] | None = None

    def next(self) -> tuple[int, bytes] | None:
        """The next line (number, bytes without LF), or None at the end of the file."""
        back = self.back
        if back is not None:
            self.back = None
            return back
        at = self.at
        buf = self.buf
        if at < len(buf):
            lf = buf.index(b"\n", at)
            self.at = lf + 1
            self.lineno += 1
            self.last = self.block_start + at
            self.last_in_buf = True
            return self.lineno, buf[at:lf]
        return self._fill()

    def _fill(self) -> tuple[int, bytes] | None:
        off = self.pos
        self.buf = b""
        self.at = 0
        if off < self.end:
            buf = self.mm[off : min(off + BLOCK, self.end)]
            cut = buf.rfind(b"\n")
            if cut >= 0:
                # Lines of a block are shorter than BLOCK <= MAX_LINE: no length check.
                self.buf = buf[: cut + 1]
                self.block_start = off
                self.pos = off + cut + 1
                return self.next()
        if off >= self.size:
            return None
        self.lineno += 1
        lf = self.mm.find(b"\n", off, min(off + MAX_LINE + 1, self.size))
        if lf < 0:
            raise line_error(self.lineno, self.size - off)
        self.last = off
        self.last_in_buf = False
        self.pos = lf + 1
        return self.lineno, self.mm[off:lf]

    def push_back(self, item: tuple[int, bytes]) -> None:
        """Make ``item`` (the last line read) the next line again."""
        self.back = item

    def unread(self) -> bool:
        """Undo the push-back of a line that came from ``buf``: it is read again from there
        (so that the record scan can take it). False when there is nothing to undo."""
        if self.back is None or not self.last_in_buf:
            return False
        self.back = None
        self.at = self.last - self.block_start
        self.lineno -= 1
        return True

    def at_chunk_end(self) -> bool:
        """True when the next line to read starts at or after the chunk's end."""
        if self.back is not None:  # the pushed-back line is the last one read
            return self.last >= self.end
        return self.at >= len(self.buf) and self.pos >= self.end

    def offset_of_last(self) -> int:
        """The byte offset of the last line read by :meth:`next`."""
        return self.last


# --- one record -------------------------------------------------------------------------------


def read_record(
    lines: Lines,
    keys: HeaderKeys,
    run: str,
    seq: int,
    count: int,
    run_line: int,
    sealed_as: str | None,
) -> tuple[int, bytes, bytes, RecordSignature | None]:
    """Read record ``seq`` of the ``count`` of ``run`` (whose run line is ``run_line``;
    ``sealed_as``: its outcome when sealed) and its ``sig`` line, and check all but the
    cryptography; return (its line, the hash it spells, its body, its signature or None).

    The line after the record (and its ``sig`` line) is read and pushed back: after the last
    record of the run it must be a run, inbox or end line.
    """
    n, data = expect(lines, f"record {seq} of run {run} ({count} announced)")
    if data.startswith((b"run ", b"end ", b"inbox ")):
        raise ExportFormatError(
            n,
            f"run {run} (line {run_line}) announced {count} records, the export holds {seq - 1}",
        )
    if len(data) < HASH_TEXT_SIZE + 2 or data[HASH_TEXT_SIZE] != 0x20:
        raise ExportFormatError(
            n, f"expected record {seq} of run {run} ('<hash> <body>'): {describe(data)}"
        )
    h = record_hash(data[:HASH_TEXT_SIZE], n, run, seq)
    raw = data[HASH_TEXT_SIZE + 1 :]
    check_body(raw, run, seq, n, run_line)
    check_seal_record(raw, run, seq, n, run_line, sealed_as if seq == count else None)
    signature: RecordSignature | None = None
    nxt = lines.next()
    if nxt is not None and nxt[1].startswith(b"sig "):
        signature = parse_sig_line(nxt[1], nxt[0], keys, f"run {run} record {seq}")
        nxt = lines.next()
    if nxt is not None:
        lines.push_back(nxt)
        # The run must end here before its last record is handed on: a verifier enters a
        # sealed run's head into the log on the last record.
        if seq == count and not nxt[1].startswith((b"run ", b"end ", b"inbox ")):
            raise ExportFormatError(
                nxt[0],
                f"run {run} (line {run_line}) announced {count} records; expected a run, inbox "
                f"or end line after its last, found {describe(nxt[1])}",
            )
    return n, h, raw, signature


def verify_record(
    keys: HeaderKeys,
    line: int,
    run: str,
    seq: int,
    prev: bytes,
    h: bytes,
    raw: bytes,
    signature: RecordSignature | None,
    require_signature: bool,
) -> None:
    """The cryptography of a record :func:`read_record` read at ``line``: its hash is
    SHA-256(``prev`` || body), its signature (a declared record key's) verifies, and it is
    signed when ``require_signature``."""
    if _sha256(prev + raw).digest() != h:
        raise ExportChainError(
            line, run, seq, "hash does not cover the body and the previous record's hash"
        )
    if signature is not None:
        v = keys.record_keys[(signature.name, signature.key_id)]
        if not v.verify(RECORD_SIGNATURE_CONTEXT + h, signature.sig):
            raise ExportSignatureError(
                line + 1, signature.name, signature.key_id, f"run {run} record {seq}"
            )
    elif require_signature:
        raise ExportVerificationError(line, f"run {run} record {seq} is not signed")


# --- the order of runs ----------------------------------------------------------------------


class RunOrder:
    """The checks of run lines that depend on the runs before them, and the run counts."""

    def __init__(self) -> None:
        self.sealed_ids: set[str] = set()
        self.position = 0  # the next sealed position; also the log size so far
        self.last_unsealed: str | None = None
        self.runs = 0

    def run_line(self, n: int, run: str, pos: int) -> None:
        """Run line ``n`` of ``run``, sealed at ``pos`` (-1: unsealed), comes next."""
        if pos >= 0:
            if self.last_unsealed is not None:
                raise ExportFormatError(n, f"sealed run {run} follows an unsealed run")
            if pos != self.position:
                raise ExportFormatError(
                    n,
                    f"run {run} is sealed at position {pos}, the next position is {self.position}",
                )
            if run in self.sealed_ids:
                raise ExportFormatError(n, f"run {run} appears twice")
            self.sealed_ids.add(run)
            self.position += 1
        else:
            if self.last_unsealed is not None and run <= self.last_unsealed:
                raise ExportFormatError(
                    n, f"unsealed run {run} does not follow {self.last_unsealed} in run ID order"
                )
            if run in self.sealed_ids:
                raise ExportFormatError(n, f"run {run} appears twice (sealed and unsealed)")
            self.last_unsealed = run
        self.runs += 1

    def take_sealed(self, first: int, ids: set[str], count: int) -> bool:
        """``count`` sealed runs at positions ``first``, ``first + 1``, … with IDs ``ids``
        come next: when every check of :meth:`run_line` holds for each of them (the positions
        are the next ones, after no unsealed run; the IDs new and distinct), count them and
        return True; else change nothing and return False (then: :meth:`run_line` for each)."""
        if (
            self.last_unsealed is not None
            or first != self.position
            or len(ids) != count
            or not self.sealed_ids.isdisjoint(ids)
        ):
            return False
        self.sealed_ids |= ids
        self.position += count
        self.runs += count
        return True


# --- the scanner --------------------------------------------------------------------------


@dataclass
class RunScan:
    """What :meth:`RunScanner.scan` found, filled as it goes (so a failure leaves the runs
    before it)."""

    runs: list[VerifiedRun] = field(default_factory=list)
    signed: int = 0
    """The signed records of ``runs`` (and of ``partial``)."""
    partial: tuple[int, str, int] | None = None
    """(run line, run ID, sealed position or -1) of the run whose records the scan was in when
    it raised."""
    stop: tuple[int, int, bytes] | None = None
    """(line, offset, bytes) of a line that is not a run line where a run line is due (the end
    line, or a bad line: the end-of-file check decides)."""


class RunScanner:
    """The runs of a chunk of an export, each with its records read and verified.

    ``keys``: the header's; ``require_signatures``: every record must be signed. The C
    accelerator (:mod:`tlog.accel`) takes the plain runs and records it is sure of; the
    Python code does the rest with :func:`read_record` and :func:`verify_record`.
    """

    def __init__(self, keys: HeaderKeys, require_signatures: bool) -> None:
        self.keys = keys
        self.require_signatures = require_signatures

    def scan(self, lines: ChunkLines, out: RunScan, last: bool) -> None:
        """Verify runs from ``lines`` (positioned at a run line) into ``out``.

        Stops at the chunk's end (unless ``last``: the chunk runs to the end of the file), or
        at a line that is not a run line where one is due (``out.stop``). Raises the first
        failure (``out.partial`` then names the run it was in, if any). The checks that need
        the runs before the chunk (:class:`RunOrder`) are the caller's.
        """
        runs = out.runs
        # The C scan takes unsigned records only; a required signature is checked in Python.
        c_runs = accel.scan_runs if not self.require_signatures else None
        while True:
            if not last and lines.at_chunk_end():
                return
            if c_runs is not None and lines.back is None:
                # The C scan takes whole runs it is sure of, up to the end of the block (or of
                # the chunk, read from the map without a copy) or to a run it is not sure of (a
                # signed record, a failure, a run that ends at the chunk's end), which the code
                # below does.
                found = None
                if lines.at < len(lines.buf):
                    lines.at, lines.lineno, found = c_runs(
                        lines.buf, lines.at, len(lines.buf), lines.lineno
                    )
                elif lines.pos < lines.end:
                    lines.pos, lines.lineno, found = c_runs(
                        lines.mm, lines.pos, lines.end, lines.lineno
                    )
                if found:
                    runs += found
                    continue
            n, data = expect(lines, "a run or end line")
            fields = read_run_line(n, data)
            if fields is None:
                out.stop = (n, lines.offset_of_last(), data)
                return
            out.partial = (n, fields[1], fields[3])
            head, last_line = self._records(lines, out, n, fields)
            out.partial = None
            pos = fields[3]
            runs.append(
                (n, fields[1], fields[2], pos, leaf_hash(head) if pos >= 0 else None, last_line)
            )

    def _records(
        self,
        lines: ChunkLines,
        out: RunScan,
        run_line: int,
        fields: tuple[bytes, str, int, int, bytes | None],
    ) -> tuple[bytes, int]:
        """The records of the run of ``fields`` (line ``run_line``): (its head, its last line)."""
        run_id, run, count, _, outcome = fields
        sealed_as = None if outcome is None else outcome.decode("ascii")
        keys = self.keys
        require = self.require_signatures
        prev = GENESIS
        seq = 0
        n = run_line
        c_records = accel.scan_records if not require else None
        while seq < count:
            if (
                c_records is not None
                and (lines.back is None or lines.unread())
                and lines.at < len(lines.buf)
            ):
                # The C scan takes the plain records it is sure of, then the code below does
                # one record (the verdict, or a signed record) and the scan resumes. A scan
                # that takes nothing is not tried again in this run (signed records).
                at, taken, prev = c_records(
                    lines.buf, lines.at, len(lines.buf), run_id, seq + 1, count, prev, outcome
                )
                if taken:
                    lines.at = at
                    lines.lineno += taken
                    seq += taken
                    if seq == count:
                        return prev, lines.lineno
                else:
                    c_records = None
            seq += 1
            n, h, raw, signature = read_record(lines, keys, run, seq, count, run_line, sealed_as)
            if signature is not None:
                out.signed += 1
            verify_record(keys, n, run, seq, prev, h, raw, signature, require)
            prev = h
        return prev, n
