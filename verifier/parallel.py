"""An export verified on several processes, with exactly the verdict of the one-pass verifier.

:func:`verify_export_parallel` checks an export file (``docs/export-format.md``) and returns the
:class:`tlog.export.ExportSummary` that :func:`tlog.export.verify_export` returns for the same
bytes. On an invalid file it raises what ``verify_export`` raises: the same exception class,
the same message (``"line N: …"``) and the same attributes (``line``, ``run``, ``seq``,
``name``, ``key_id``), for the first failure in ``verify_export``'s order, whatever the number
of processes and however they are scheduled.

How the work is split
=====================

1. **Prefix, in order.** :class:`tlog.export.ExportVerifier` itself reads the magic line, the
   header (and the trusted-key arguments), every checkpoint (signatures verified) and the first
   ``run`` line — and nothing more: it is left suspended there. A file with no run is verified
   by it to the end. So every error up to the first run line is the one-pass verifier's own.
2. **Chunks.** The rest of the file is cut into chunks of about ``chunk_bytes`` at line starts
   ``run `` (the byte after an LF followed by ``run ``), found with ``mmap.find``; each chunk
   is given its first byte offset, its first line number (the LFs before it are counted) and
   whether it runs to the end of the file. With several jobs the last chunks shrink (none
   longer than a quarter of what remains per job), so that the workers finish together. A
   "``run ``" line inside a run is not a run line: the verification of the chunk before it
   fails on it exactly as the one-pass reader does ("announced N records, the export holds
   M"), and that failure comes first. A run is never split, so the parallelism is over runs:
   one long run is one process's.
3. **Chunk verification** (by the calling thread and ``jobs - 1`` workers — threads when the C
   scan does the records, processes otherwise: :func:`_threads_suffice`; the file is
   memory-mapped in each process) goes run by run, re-implementing the one-pass
   reader's run loop step by step — line reads with their length and truncation checks, the
   one line of look-ahead after a record (its ``sig`` line, then the line after it), the run
   line's own grammar, every record's hash spelling, body, run and seq, the seal-record rule
   (a sealed run's last record is its seal record naming its outcome; no other), the chain link, the
   record signature, the "run or end line after the last record" rule — in the same order,
   raising the same errors (the helpers of :mod:`tlog.export` are called where they exist). It
   stops at its first failure, at the first line of the next chunk, or at a line that
   is not a ``run`` line where a run line is due (the ``end`` line, or a bad line). It
   returns, per run, (line, run ID, count, sealed position, leaf hash of the head, line of the
   last record), the number of signed records, the run whose records it was in when it failed
   (if any), and the failure (class, args and attributes, rebuilt identically in the
   coordinator).
4. **Coordinator, in order.** The results are consumed in file order (:class:`_Shared`: the
   pool is kept two chunks per worker ahead, and whenever the next result is not ready the
   calling process verifies the next chunk itself instead of waiting; a worker that dies
   raises ``BrokenProcessPool``). A chunk of sealed runs at consecutive positions comes back
   in columns and is merged at once (its run IDs new and distinct, its first position the
   next); any other is merged run by run: for each
   run the coordinator makes the checks that need what came before — a sealed run's position
   is the next one, no sealed run after an unsealed one, unsealed runs in ID order, no run ID
   twice — at the point where the one-pass reader makes them (after the run line's own
   grammar, before its records); after a sealed run's last record it appends the leaf to the
   rebuilt log and checks each checkpoint whose size the log reaches (root, then the RFC 6962
   consistency proof from the previous checkpoint), as the one-pass verifier does. The first
   chunk that failed raises its failure after the coordinator's checks that precede it, so the
   reported failure is the first in file order. At the stop line the coordinator does the
   ``end`` line's checks (grammar, counts, the digest, nothing after it, no checkpoint larger
   than the log) and builds the summary. On a failure the chunks not started are cancelled
   and the call returns once the running ones finish (no worker outlives it).
5. **Digest.** SHA-256 of every byte before the end line is computed by a thread of the
   coordinator while the chunks are verified (``hashlib`` releases the GIL, and so do the C
   scans while they hash), up to the start of the file's last line; if the stop line is
   elsewhere (an invalid file), the digest of the bytes before it is computed then.

Speed. Runs are first offered to the C scan of ``tlog/_speedups.c`` (``scan_runs``): it takes
the whole runs it is sure of — a run line in its common spelling, then records whose hash is
canonical base64, whose body is canonical JSON naming the run and seq and keeps the seal-record
rule, whose chain link holds, not signed, and the "run or end line" after the last — hashing
without the GIL, and stops at
the first run it is not sure of, which the Python loop below then does (a record at a time,
resuming the C scan for the rest of the run with ``scan_records``). What the C code takes, the
Python code would take with the same result (``tests/test_speedups.py``); so errors, and their
messages, always come from the Python code. Python's own fast paths accept exactly a subset of
what the one-pass code accepts and fall back to it whenever unsure: the hash by one strict
base64 round trip; the body by :func:`tlog.journal.body_names` (the one-pass verifier's own).
A ``sig`` line whose (key name, key ID) is a declared record key is read by the same base64
round trip; the signature is checked by the same :class:`tlog.note.Verifier` as the one-pass
verifier's. Without the C extension, the Python loop does every run.

Memory: the coordinator keeps the one-pass verifier's state (a set entry per sealed run, the
log's stored hashes) and the results of chunks not yet merged — each about 100 bytes per run —
so it grows with the runs, never with the records; a chunk's verification holds at most one
block (1 MiB) of lines and the result of its chunk (per run, not per record).

Workers. ``jobs == 1`` runs the same chunked code in the calling thread alone; ``jobs`` greater
than 1 adds ``jobs - 1`` workers: threads when the export declares no record key and signatures
are not required (the records are then the C scan's, which releases the GIL while it hashes and
parses), else processes. The processes' start method is ``fork`` when the calling process has
a single thread (fast; the caller's main module is not imported again), else ``forkserver``
where available, else ``spawn`` — with those two the caller's main module is imported again in
each worker and must be guarded by ``if __name__ == "__main__":``.

Progress: ``progress(done, total)`` is called with bytes: once after the prefix, then after
each chunk is merged, and ``(size, size)`` at the end.

This module depends on private helpers of :mod:`tlog.export` (``_Keys``, ``_check_header``,
``_check_body``, ``_check_seal_record``, ``_parse_sig_line``, ``_run_line``, ``_decimal``,
``_describe``, ``_keyword``) so
that its messages are the one-pass verifier's by construction; the messages written inline in
``tlog.export`` are copied here, and ``tests/test_verifier_parallel.py`` compares both
verifiers on hundreds of mutated files to catch any drift.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import mmap
import multiprocessing
import os
import re
import threading
from array import array
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, BinaryIO, cast

from tlog.errors import MalformedError, ProofError, TlogError, UsageError
from tlog.export import (
    HASH_TEXT_SIZE,
    MAX_LINE,
    CheckpointItem,
    EndItem,
    ExportChainError,
    ExportFormatError,
    ExportHeader,
    ExportProofError,
    ExportSignatureError,
    ExportSummary,
    ExportVerificationError,
    ExportVerifier,
    HeaderItem,
    RunItem,
    _check_body,
    _check_header,
    _check_seal_record,
    _decimal,
    _describe,
    _Keys,
    _keyword,
    _parse_sig_line,
)
from tlog.export import _run_line as _export_run_line
from tlog.journal import (
    GENESIS,
    RECORD_SIGNATURE_CONTEXT,
    body_names,
)
from tlog.merkle import MemoryHashStore, consistency_proof, leaf_hash
from tlog.merkle import verify_consistency as _verify_consistency
from tlog.note import Verifier

__all__ = ["DEFAULT_CHUNK_BYTES", "verify_export_parallel"]

DEFAULT_CHUNK_BYTES = 8 << 20
"""Largest default chunk; smaller files get smaller chunks (about 8 per process)."""

MIN_CHUNK_BYTES = 256 << 10
"""Smallest default chunk (an explicit ``chunk_bytes`` may be smaller, as tests do)."""

_DIGEST_BLOCK = 64 << 20
"""Bytes hashed per call (hashlib releases the GIL meanwhile): few calls, so the digest thread
seldom needs the GIL, which the C scans hold for a whole chunk."""
_BLOCK = 1 << 20
"""Bytes a worker reads at a time (less than MAX_LINE, so a block's lines need no length
check); a chunk's lines are never all held at once."""
assert _BLOCK <= MAX_LINE
_sha256 = hashlib.sha256
_Run = tuple[int, str, int, int, bytes | None, int]
"""A verified run: (run line, run ID, count, sealed position or -1, leaf or None, last line)."""

_scan: (
    Callable[[bytes, int, int, bytes, int, int, bytes, bytes | None], tuple[int, int, bytes]] | None
) = None
_scan_runs: Callable[[bytes | mmap.mmap, int, int, int], tuple[int, int, list[_Run]]] | None = None
_count_lines: Callable[[mmap.mmap, int, int], int] | None = None
try:  # the C scans (tlog/_speedups.c); without them _runs's own loop does every record
    from tlog._speedups import count_lines, scan_records, scan_runs
except ImportError:  # pragma: no cover - installed without a C compiler
    pass
else:
    _scan, _scan_runs, _count_lines = scan_records, scan_runs, count_lines
_a2b = binascii.a2b_base64
_b2a = binascii.b2a_base64


# --- failures across processes --------------------------------------------------------------

_Failure = tuple[type[BaseException], tuple[Any, ...], dict[str, Any]] | BaseException
"""A failure as it crosses processes. A :class:`~tlog.errors.TlogError` travels as class,
``args`` and attributes — the export errors' ``__init__`` is not ``__init__(*args)``, so they do
not unpickle — and is rebuilt identically; any other exception travels as itself."""


def _portable(e: BaseException) -> _Failure:
    if isinstance(e, TlogError):
        return type(e), e.args, dict(vars(e))
    return e


def _rebuild(failure: _Failure) -> BaseException:
    if isinstance(failure, BaseException):
        return failure
    cls, args, attrs = failure
    e = cls.__new__(cls, *args)
    e.args = args
    e.__dict__.update(attrs)
    return e


# --- the record fast paths ------------------------------------------------------------------


def _hash_of(text: bytes) -> bytes | None:
    """The 32 bytes of a canonical base64 hash, or None when not sure (then: parse_hash)."""
    try:
        h = _a2b(text, strict_mode=True)
    except binascii.Error:
        return None
    return h if len(h) == 32 and _b2a(h, newline=False) == text else None


# A run line as the one-pass reader accepts it, in its common spelling: a run ID, a count of at
# most 18 digits, and for a sealed run a position of at most 18 digits and an outcome (18 digits
# stay below 2^63, so no bound needs checking; a sealed run's count of 1 is refused by
# _run_line). Anything else goes through _run_line.
_RUN_LINE = re.compile(
    rb"run ([A-Za-z0-9][A-Za-z0-9._:@-]{0,127}) ([1-9][0-9]{0,17})"
    rb"(?: sealed (0|[1-9][0-9]{0,17}) ([A-Za-z][A-Za-z0-9_.-]{0,63}))?"
)


# --- reading lines of a chunk ---------------------------------------------------------------


class _Reader:
    """The one-pass reader's lines (``tlog.export._Lines``) from ``start`` of a mapped file.

    Lines before ``end`` are read in blocks of at most :data:`_BLOCK` bytes, each cut after its
    last LF (``buf``; ``at`` is the offset in it of the next line, which the record scan of
    :func:`_runs` may also advance); a line longer than a block, and every line at or after
    ``end`` (only the look-ahead at the end of a chunk, or a run that overruns it — a failure),
    is read alone from the map. Line numbers, the length limit and the truncation check are the
    one-pass reader's. One line of push-back.
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
            buf = self.mm[off : min(off + _BLOCK, self.end)]
            cut = buf.rfind(b"\n")
            if cut >= 0:
                # Lines of a block are shorter than _BLOCK <= MAX_LINE: no length check.
                self.buf = buf[: cut + 1]
                self.block_start = off
                self.pos = off + cut + 1
                return self.next()
        if off >= self.size:
            return None
        self.lineno += 1
        lf = self.mm.find(b"\n", off, min(off + MAX_LINE + 1, self.size))
        if lf < 0:
            if self.size - off > MAX_LINE:
                raise ExportFormatError(self.lineno, f"line is longer than {MAX_LINE} bytes")
            raise ExportFormatError(self.lineno, "the export is truncated (last line has no LF)")
        if lf - off > MAX_LINE:  # pragma: no cover - the find is bounded to MAX_LINE + 1 bytes
            raise ExportFormatError(self.lineno, f"line is longer than {MAX_LINE} bytes")
        self.last = off
        self.last_in_buf = False
        self.pos = lf + 1
        return self.lineno, self.mm[off:lf]

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


# --- the worker -----------------------------------------------------------------------------


@dataclass
class _ChunkResult:
    """What a worker found in one chunk (see the module docstring, step 3)."""

    runs: list[_Run] = field(default_factory=list)
    signed: int = 0
    partial: tuple[int, str, int] | None = None
    """(line, run ID, sealed position or -1) of the run whose records held the failure."""
    failure: _Failure | None = None
    stop: tuple[int, int, bytes] | None = None
    """(line, offset, bytes) of a line that is not a run line where a run line is due."""
    end: int = 0
    """The chunk's end offset (for progress)."""
    sealed: _SealedRuns | None = None
    """``runs`` in columns, when they are all sealed at consecutive positions (then ``runs``
    is empty): a few large objects cross processes much faster than a tuple per run."""


@dataclass
class _SealedRuns:
    """Runs sealed at positions ``first``, ``first + 1``, …, by column."""

    first: int
    ids: str  # the run IDs, joined by LF (no run ID holds one)
    leaves: bytes  # the leaf hashes, 32 bytes each
    lines: array[int]  # the run lines
    counts: array[int]
    last_lines: array[int]  # the lines of their last records

    @classmethod
    def of(cls, runs: list[_Run]) -> _SealedRuns | None:
        first = runs[0][3]
        if first < 0 or [r[3] for r in runs] != list(range(first, first + len(runs))):
            return None
        return cls(
            first,
            "\n".join([r[1] for r in runs]),
            b"".join([cast(bytes, r[4]) for r in runs]),
            array("q", [r[0] for r in runs]),
            array("q", [r[2] for r in runs]),
            array("q", [r[5] for r in runs]),
        )

    def runs(self) -> list[_Run]:
        leaves = self.leaf_list()
        ids = self.ids.split("\n")
        return [
            (n, run, count, self.first + i, leaves[i], last)
            for i, (n, run, count, last) in enumerate(
                zip(self.lines, ids, self.counts, self.last_lines, strict=True)
            )
        ]

    def leaf_list(self) -> list[bytes]:
        blob = self.leaves
        return [blob[i : i + 32] for i in range(0, len(blob), 32)]


@dataclass
class _Context:
    """A process's view of the file and of the header's record keys."""

    mm: mmap.mmap
    size: int
    record_keys: dict[tuple[str, int], Verifier]
    fast_keys: dict[tuple[bytes, bytes], Verifier]
    require_signatures: bool
    keys: _Keys  # for _parse_sig_line

    @classmethod
    def open(
        cls, path: str, header: ExportHeader, require_signatures: bool, mm: mmap.mmap | None = None
    ) -> _Context:
        """The context of a worker process, or (``mm``: the caller's map) of the caller."""
        keys = _check_header(header)
        if mm is None:
            with open(path, "rb") as f:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        fast = {
            (name.encode("utf-8"), b"%08x" % key_id): v
            for (name, key_id), v in keys.record_keys.items()
        }
        return cls(mm, len(mm), keys.record_keys, fast, require_signatures, keys)


_WORKER: _Context | None = None


def _init_worker(path: str, header: ExportHeader, require_signatures: bool) -> None:
    global _WORKER  # noqa: PLW0603 - one context per worker process
    _WORKER = _Context.open(path, header, require_signatures)


def _work(task: tuple[int, int, int, bool]) -> _ChunkResult:
    assert _WORKER is not None, "the pool initializer sets the context"
    return verify_chunk(_WORKER, *task)


def verify_chunk(ctx: _Context, start: int, end: int, line: int, last: bool) -> _ChunkResult:
    """Verify the runs from offset ``start`` (line ``line``, a run line) to ``end``.

    Requires: ``start`` is a line start; ``end`` is a line start or the file size; ``last``
    is True exactly when ``end`` is the file size. Never raises for the file's content: the
    first failure is returned in the result.
    """
    result = _ChunkResult(end=end)
    rd = _Reader(ctx.mm, ctx.size, start, end, line - 1)
    try:
        _runs(ctx, rd, result, last)
    except Exception as e:
        result.failure = _portable(e)
    if result.runs and result.failure is None:
        result.sealed = _SealedRuns.of(result.runs)
        if result.sealed is not None:
            result.runs = []
    return result


def _runs(ctx: _Context, rd: _Reader, result: _ChunkResult, last: bool) -> None:
    """The one-pass reader's run loop and the verifier's record checks (tlog.export)."""
    runs = result.runs
    record_keys = ctx.fast_keys
    require = ctx.require_signatures
    sha = _sha256
    scan_runs = _scan_runs if not require else None  # it takes unsigned records only
    while True:
        if not last and rd.at_chunk_end():
            return
        if scan_runs is not None and rd.back is None:
            # The C scan takes whole runs it is sure of, up to the end of the block (or of the
            # chunk, read from the map without a copy) or to a run it is not sure of (a signed
            # record, a failure, a run that ends at the chunk's end), which the code below does.
            found = None
            if rd.at < len(rd.buf):
                rd.at, rd.lineno, found = scan_runs(rd.buf, rd.at, len(rd.buf), rd.lineno)
            elif rd.pos < rd.end:
                rd.pos, rd.lineno, found = scan_runs(rd.mm, rd.pos, rd.end, rd.lineno)
            if found:
                runs += found
                continue
        got = rd.next()
        if got is None:
            raise ExportFormatError(
                rd.lineno + 1, "the export is truncated: expected a run or end line"
            )
        n, data = got
        plain = _RUN_LINE.fullmatch(data)
        if plain is not None and (plain[3] is None or plain[2] != b"1"):
            # The common spelling, whose values need no further check.
            run_id = plain[1]
            run = run_id.decode("ascii")
            count = int(plain[2])
            pos = -1 if plain[3] is None else int(plain[3])
            outcome: bytes | None = plain[4]
        else:
            run_id, run, count, pos, outcome = _run_line(n, data)
            if not run_id:
                result.stop = (n, rd.offset_of_last(), data)
                return
        sealed_as = None if outcome is None else outcome.decode("ascii")
        run_line = n
        result.partial = (run_line, run, pos)

        prev = GENESIS
        seq = 0
        scan = _scan if not require else None  # it takes unsigned records only
        while seq < count:
            if scan is not None and (rd.back is None or rd.unread()) and rd.at < len(rd.buf):
                # The C scan takes the plain records it is sure of, then the loop below does
                # one record (the verdict, or a signed record) and the scan resumes. A scan
                # that takes nothing is not tried again in this run (signed records).
                at, taken, prev = scan(
                    rd.buf, rd.at, len(rd.buf), run_id, seq + 1, count, prev, outcome
                )
                if taken:
                    rd.at = at
                    rd.lineno += taken
                    seq += taken
                    if seq == count:
                        n = rd.lineno
                        break
                else:
                    scan = None
            seq += 1
            got = rd.next()
            if got is None:
                raise ExportFormatError(
                    rd.lineno + 1,
                    f"the export is truncated: expected record {seq} of run {run} "
                    f"({count} announced)",
                )
            n, data = got
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
            h = _hash_of(data[:HASH_TEXT_SIZE])
            if h is None:
                h = _slow_hash(data[:HASH_TEXT_SIZE], n, run, seq)
            raw = data[HASH_TEXT_SIZE + 1 :]
            if not body_names(raw, run, seq):
                _check_body(raw, run, seq, n, run_line)
            _check_seal_record(raw, run, seq, n, run_line, sealed_as if seq == count else None)
            verifier: Verifier | None = None
            sig = b""
            nxt = rd.next()
            if nxt is not None and nxt[1].startswith(b"sig "):
                verifier, sig = _sig(ctx, record_keys, nxt, run, seq)
                nxt = rd.next()
            if nxt is not None:
                rd.back = nxt
                if seq == count and not nxt[1].startswith((b"run ", b"end ")):
                    raise ExportFormatError(
                        nxt[0],
                        f"run {run} (line {run_line}) announced {count} records; expected a "
                        f"run or end line after its last, found {_describe(nxt[1])}",
                    )
            # The one-pass verifier's checks of the record (tlog.export.ExportVerifier.items).
            if sha(prev + raw).digest() != h:
                raise ExportChainError(
                    n, run, seq, "hash does not cover the body and the previous record's hash"
                )
            if verifier is not None:
                result.signed += 1
                if not verifier.verify(RECORD_SIGNATURE_CONTEXT + h, sig):
                    raise ExportSignatureError(
                        n + 1, verifier.name, verifier.key_id, f"run {run} record {seq}"
                    )
            elif require:
                raise ExportVerificationError(n, f"run {run} record {seq} is not signed")
            prev = h
        result.partial = None
        runs.append((run_line, run, count, pos, leaf_hash(prev) if pos >= 0 else None, n))


def _run_line(n: int, data: bytes) -> tuple[bytes, str, int, int, bytes | None]:
    """A run line (line ``n``) by the one-pass reader's own grammar (tlog.export._run_line):
    (run ID bytes, run ID, count, sealed position or -1, outcome or None); ``b""`` when
    ``data`` is not a ``run`` line. The checks that depend on the runs before it are the
    coordinator's."""
    rest = _keyword(data, b"run")
    if rest is None:
        return b"", "", 0, -1, None
    run, count, pos, outcome = _export_run_line(rest, n)
    return run.encode("ascii"), run, count, pos, outcome.encode("ascii") if pos >= 0 else None


def _slow_hash(text: bytes, line: int, run: str, seq: int) -> bytes:
    from tlog.encoding import parse_hash  # noqa: PLC0415 - the rare path

    try:
        return parse_hash(text, f"hash of run {run} record {seq}")
    except MalformedError as e:
        raise ExportFormatError(line, str(e)) from None


def _sig(
    ctx: _Context,
    fast_keys: dict[tuple[bytes, bytes], Verifier],
    got: tuple[int, bytes],
    run: str,
    seq: int,
) -> tuple[Verifier, bytes]:
    """A ``sig`` line's verifier and signature (tlog.export._parse_sig_line's verdict)."""
    tokens = got[1].split(b" ")
    if len(tokens) == 4:
        v = fast_keys.get((tokens[1], tokens[2]))
        if v is not None:
            try:
                sig = _a2b(tokens[3], strict_mode=True)
            except binascii.Error:
                sig = b""
            if len(sig) == 64 and _b2a(sig, newline=False) == tokens[3]:
                return v, sig
    s = _parse_sig_line(got[1], got[0], ctx.keys, f"run {run} record {seq}")
    return ctx.record_keys[(s.name, s.key_id)], s.sig


# --- the coordinator ------------------------------------------------------------------------


@dataclass
class _Pending:
    size: int
    root: bytes
    line: int


class _Digest:
    """SHA-256 of the file's first ``upto`` bytes, computed by a thread."""

    def __init__(self, mm: mmap.mmap, upto: int) -> None:
        self.upto = upto
        self._mm = mm
        self._stop = threading.Event()
        self._digest: bytes | None = None
        self._thread = threading.Thread(target=self._run, name="export-digest", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._digest = self._hash(self.upto, self._stop)

    def _hash(self, upto: int, stop: threading.Event | None = None) -> bytes | None:
        h = _sha256()
        with memoryview(self._mm) as view:
            for at in range(0, upto, _DIGEST_BLOCK):
                if stop is not None and stop.is_set():
                    return None
                h.update(view[at : min(at + _DIGEST_BLOCK, upto)])
        return h.digest()

    def before(self, offset: int) -> bytes:
        """SHA-256 of the bytes before ``offset``."""
        self._thread.join()
        if offset == self.upto and self._digest is not None:
            return self._digest
        digest = self._hash(offset)
        assert digest is not None
        return digest

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class _Merge:
    """The one-pass verifier's state after the first run line, advanced chunk by chunk."""

    def __init__(self, header: ExportHeader, checkpoints: list[CheckpointItem]) -> None:
        self.header = header
        self.sizes = [(c.checkpoint.size, c.line) for c in checkpoints]
        self.last_note = checkpoints[-1].note if checkpoints else None
        keys = _check_header(header)
        self.cosignatures = dict.fromkeys(header.witness_keys, 0)
        for c in checkpoints:
            for sig in c.signatures:
                vkey = keys.note_keys[(sig.name, sig.key_id)][1]
                if vkey in self.cosignatures:
                    self.cosignatures[vkey] += 1
        pending = [_Pending(c.checkpoint.size, c.checkpoint.root, c.line) for c in checkpoints]
        # At the first run line the one-pass verifier checked a size-0 checkpoint (the first, if
        # any) against the empty log.
        self.reached: _Pending | None = None
        if pending and pending[0].size == 0:
            self.reached = pending.pop(0)
        self.pending = pending
        self.tree = MemoryHashStore()
        self.consistency = 0
        self.sealed_ids: set[str] = set()
        self.position = 0
        self.last_unsealed: str | None = None
        self.runs = 0
        self.records = 0
        self.signed = 0

    def run_line(self, n: int, run: str, pos: int) -> None:
        """The run line's checks that depend on the runs before it (tlog.export.read_export)."""
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

    def add_leaves(self, leaves: list[bytes], at_line: int) -> None:
        """Sealed runs' heads enter the log; check the checkpoints of the size they reach.

        Requires: no pending checkpoint's size lies strictly between the log's size before and
        after (each is reached by the last of a batch: :meth:`chunk` cuts them so).
        """
        tree = self.tree
        tree.extend(leaves)
        pending = self.pending
        while pending and pending[0].size == tree.size:
            cp = pending.pop(0)
            if tree.root() != cp.root:
                raise ExportProofError(
                    cp.line,
                    f"checkpoint of size {cp.size}: its root is not the root of the log "
                    f"rebuilt from the sealed runs (size {cp.size} reached at line {at_line})",
                )
            reached = self.reached
            if reached is not None and reached.size > 0:
                proof = consistency_proof(reached.size, cp.size, tree)
                try:
                    _verify_consistency(reached.size, cp.size, reached.root, cp.root, proof)
                except ProofError as e:  # pragma: no cover - both roots matched the tree
                    raise ExportProofError(cp.line, str(e)) from None
                self.consistency += 1
            self.reached = cp

    def chunk(self, result: _ChunkResult) -> None:
        """Merge one chunk's result, in file order; raise its first failure at its place."""
        sealed = result.sealed
        if sealed is not None:
            ids = set(sealed.ids.split("\n"))
            if (
                self.last_unsealed is None
                and sealed.first == self.position
                and len(ids) == len(sealed.counts)
                and self.sealed_ids.isdisjoint(ids)
            ):
                # Sealed runs at the next positions, with new and distinct IDs: every check
                # of run_line holds for each of them, so only the counts and leaves merge.
                self._sealed(sealed, ids)
                self.signed += result.signed
                return
            result.runs = sealed.runs()  # one of them fails a check: run by run
        # Leaves are added in batches (MemoryHashStore.extend is several times faster per leaf
        # than append), each ending where the log reaches the next checkpoint's size, so each
        # checkpoint is checked at its run, as the one-pass verifier checks it.
        batch: list[bytes] = []
        due = self.pending[0].size - self.tree.size if self.pending else -1
        last_line = 0
        for n, run, count, pos, leaf, last_line in result.runs:
            self.run_line(n, run, pos)
            self.records += count
            if leaf is not None:
                batch.append(leaf)
                if len(batch) == due:
                    self.add_leaves(batch, last_line)
                    batch = []
                    due = self.pending[0].size - self.tree.size if self.pending else -1
        if batch:
            self.add_leaves(batch, last_line)
        if result.partial is not None:
            self.run_line(*result.partial)
        if result.failure is not None:
            raise _rebuild(result.failure) from None
        self.signed += result.signed

    def _sealed(self, sealed: _SealedRuns, ids: set[str]) -> None:
        k = len(sealed.counts)
        self.sealed_ids |= ids
        self.position += k
        self.runs += k
        self.records += sum(sealed.counts)
        leaves = sealed.leaf_list()
        i = 0
        while i < k:
            # A batch ends where the log reaches the next checkpoint's size (see chunk).
            due = self.pending[0].size - self.tree.size if self.pending else 0
            j = i + due if 0 < due <= k - i else k
            self.add_leaves(leaves[i:j], sealed.last_lines[j - 1])
            i = j

    def end(self, n: int, offset: int, data: bytes, size: int, digest: _Digest) -> ExportSummary:
        """The end line's checks (tlog.export.read_export) and the summary."""
        rest = _keyword(data, b"end")
        if rest is None:
            expected = "a run or end line"
            if not self.runs:  # pragma: no cover - the first run line was read in the prefix
                expected = "a checkpoint, run or end line"
            raise ExportFormatError(n, f"expected {expected}, found {_describe(data)}")
        tokens = rest.split(b" ")
        if len(tokens) != 5:
            raise ExportFormatError(
                n, "expected 'end <checkpoints> <runs> <records> <log size> <digest>'"
            )
        counted = {
            "checkpoints": len(self.sizes),
            "runs": self.runs,
            "records": self.records,
            "log size": self.position,
        }
        for token, (what, have) in zip(tokens, counted.items(), strict=False):
            declared = _decimal(token, n, f"end {what}")
            if declared != have:
                raise ExportFormatError(
                    n, f"the end line counts {declared} {what}, the export holds {have}"
                )
        try:
            from tlog.encoding import parse_hash  # noqa: PLC0415

            end_digest = parse_hash(tokens[4], "end digest")
        except MalformedError as e:
            raise ExportFormatError(n, str(e)) from None
        if end_digest != digest.before(offset):
            raise ExportVerificationError(
                n,
                "the digest does not match the bytes before the end line: the export was changed "
                "or damaged",
            )
        if offset + len(data) + 1 != size:
            raise ExportFormatError(n + 1, "data after the end line")
        for cp_size, line in self.sizes:
            if cp_size > self.position:
                raise ExportProofError(
                    line,
                    f"checkpoint of size {cp_size} is larger than the log "
                    f"({self.position} sealed runs)",
                )
        assert not self.pending, "the sizes were checked against the log size"
        return ExportSummary(
            header=self.header,
            checkpoints=len(self.sizes),
            checkpoint_sizes=tuple(s for s, _ in self.sizes),
            runs=self.runs,
            sealed_runs=self.position,
            records=self.records,
            signed_records=self.signed,
            log_size=self.tree.size,
            log_root=self.tree.root(),
            consistency_proofs=self.consistency,
            cosignatures=self.cosignatures,
            last_checkpoint=self.last_note,
            digest=end_digest,
        )


def _chunks(
    mm: mmap.mmap, size: int, start: int, line: int, chunk_bytes: int, tail: int = 1
) -> Iterator[tuple[int, int, int, bool]]:
    """(start, end, first line, is last) of each chunk, cut before ``run `` line starts.

    Chunks are ``chunk_bytes`` long, but no longer than 1/``tail`` of what remains (and not
    shorter than :data:`MIN_CHUNK_BYTES` for that reason): the last chunks shrink, so that the
    processes finish together rather than one waiting for another's last large chunk.
    """
    while True:
        step = min(chunk_bytes, max(MIN_CHUNK_BYTES, (size - start) // tail))
        cut = mm.find(b"\nrun ", start + step - 1) if start + step < size else -1
        if cut < 0:
            yield start, size, line, True
            return
        end = cut + 1
        yield start, end, line, False
        if _count_lines is not None:
            line += _count_lines(mm, start, end)
        else:  # pragma: no cover - installed without a C compiler
            for at in range(start, end, _BLOCK):
                line += mm[at : min(at + _BLOCK, end)].count(b"\n")
        start = end


def _prefix(
    stream: BinaryIO, verifier: ExportVerifier
) -> tuple[ExportSummary | None, HeaderItem | None, list[CheckpointItem], RunItem | None]:
    """Run the one-pass verifier up to and including the first run line (or to the end)."""
    header: HeaderItem | None = None
    checkpoints: list[CheckpointItem] = []
    items = cast(Generator[Any, None, None], verifier.items(stream))
    try:
        for item in items:
            if isinstance(item, HeaderItem):
                header = item
            elif isinstance(item, CheckpointItem):
                checkpoints.append(item)
            elif isinstance(item, RunItem):
                return None, header, checkpoints, item
            elif isinstance(item, EndItem):
                for _ in items:  # pragma: no cover - nothing follows the end item
                    pass
                assert verifier.summary is not None
                return verifier.summary, header, checkpoints, None
    finally:
        items.close()
    raise AssertionError("ExportVerifier.items ends with an end item or raises")


def _start_method(requested: str | None) -> str:
    if requested is not None:
        return requested
    methods = multiprocessing.get_all_start_methods()
    # fork: fast, and the caller's main module is not imported again; safe only while this
    # process has a single thread (a forked lock held by another thread would never be
    # released). Otherwise forkserver (the workers fork from a clean server that has imported
    # this module), else spawn; both import the caller's main module again, which must then
    # be guarded by ``if __name__ == "__main__":``.
    if "fork" in methods and threading.active_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def verify_export_parallel(
    path: str | os.PathLike[str],
    *,
    log_key: str | None = None,
    record_keys: Iterable[str] | None = None,
    require_record_signatures: bool = False,
    jobs: int,
    progress: Callable[[int, int], None] | None = None,
    chunk_bytes: int | None = None,
    start_method: str | None = None,
) -> ExportSummary:
    """Verify the export file at ``path`` with ``jobs`` workers (this thread and ``jobs - 1``
    worker threads or processes); see the module docstring.

    Returns exactly the :class:`~tlog.export.ExportSummary` of
    :func:`tlog.export.verify_export` with the same options, and raises exactly its exception
    (class, message, attributes) for the first failure in file order. ``jobs == 1`` runs the
    same chunked code in this process (no pool). ``chunk_bytes`` overrides the chunk size
    (default: the file size / (8 · jobs), within 256 KiB..8 MiB); ``start_method`` the
    multiprocessing start method (default ``fork`` when this process has one thread,
    else ``forkserver`` where available, else ``spawn``).
    ``progress(done, total)`` receives byte counts.

    Requires: ``path`` names a regular file that does not change while it is verified;
    ``jobs >= 1``. Raises :class:`~tlog.errors.UsageError` for a bad ``jobs`` or
    ``chunk_bytes`` (and, as ``verify_export`` does, for an unparsable trusted key), and
    :class:`OSError` when the file cannot be read.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise UsageError(f"jobs must be a positive integer, not {jobs!r}")
    if chunk_bytes is not None and (
        isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes < 1
    ):
        raise UsageError(f"chunk_bytes must be a positive integer, not {chunk_bytes!r}")
    path = os.fspath(path)
    verifier = ExportVerifier(log_key, record_keys, require_record_signatures)
    with open(path, "rb") as f:
        done, header_item, checkpoints, first_run = _prefix(f, verifier)
        if done is not None:
            if progress is not None:
                size = os.fstat(f.fileno()).st_size
                progress(size, size)
            return done
        assert header_item is not None and first_run is not None
        after_run_line = f.tell()
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return _verify_runs(
            path,
            mm,
            header_item.header,
            checkpoints,
            first_run,
            after_run_line,
            require_record_signatures,
            jobs,
            progress,
            chunk_bytes,
            start_method,
        )
    finally:
        mm.close()


def _threads_suffice(header: ExportHeader, require_signatures: bool) -> bool:
    """Whether worker threads, rather than processes, can share the chunks.

    They can when the C scan (``scan_runs``) does the records: it hashes and parses with the
    GIL released, so threads run it side by side, without what processes cost — a fork, a
    second map of the file and its page faults, the transfer of every result (measured on 2
    CPUs: about 8% faster). That is when the export declares no record key (so no record is
    signed: a ``sig`` line would need a declared key) and signatures are not required (a
    required signature is checked in Python). Otherwise the records go through the Python loop,
    which holds the GIL: processes.
    """
    return _scan_runs is not None and not header.record_keys and not require_signatures


def _work_here(own: _Context, task: tuple[int, int, int, bool]) -> _ChunkResult:
    """A worker thread's task: the chunk, verified with the calling process's context."""
    return verify_chunk(own, *task)


class _Shared:
    """Chunk results in file order, the chunks verified by a pool and by this process.

    The pool is kept ``ahead`` chunks in flight (two per worker, so that a worker never waits
    for this process to hand it the next one); whenever the next result in file order is not
    ready, this process verifies the next chunk not yet handed out instead of waiting. So the
    coordinator is one of the jobs: no process sits idle, and no extra process pays for the
    pages of the map and the transfer of results. A worker that dies makes the iteration raise
    BrokenProcessPool instead of waiting forever.
    """

    def __init__(
        self,
        executor: Executor,
        work: Callable[[tuple[int, int, int, bool]], _ChunkResult],
        own: _Context,
        tasks: Iterator[tuple[int, int, int, bool]],
        ahead: int,
    ) -> None:
        self.executor = executor
        self.work = work
        self.own = own
        self.tasks = tasks
        self.ahead = ahead
        self.order: deque[Future[_ChunkResult] | _ChunkResult] = deque()  # file order
        self.exhausted = False
        self.closer: threading.Thread | None = None
        """Shuts the pool down (waiting for its processes) once every chunk is handed out."""

    def _next_task(self) -> tuple[int, int, int, bool] | None:
        if not self.exhausted:
            task = next(self.tasks, None)
            if task is not None:
                return task
            self.exhausted = True
            # Nothing more for the pool: it is shut down (waiting for the chunks it holds, then
            # for its processes to exit) by a thread, while this process goes on.
            self.closer = threading.Thread(
                target=self.executor.shutdown, name="export-pool-close", daemon=True
            )
            self.closer.start()
        return None

    def feed(self) -> None:
        """Hand the pool chunks until ``ahead`` are in flight."""
        busy = sum(1 for x in self.order if isinstance(x, Future) and not x.done())
        while busy < self.ahead:
            task = self._next_task()
            if task is None:
                return
            self.order.append(self.executor.submit(self.work, task))
            busy += 1

    def __iter__(self) -> Iterator[_ChunkResult]:
        order = self.order
        while True:
            self.feed()
            if order:
                head = order[0]
                if not isinstance(head, Future):
                    yield order.popleft()  # type: ignore[misc]
                    continue
                if head.done():
                    order.popleft()
                    yield head.result()
                    continue
            task = self._next_task()
            if task is not None:
                order.append(verify_chunk(self.own, *task))
                continue
            if order:
                yield cast("Future[_ChunkResult]", order.popleft()).result()  # waits
            else:
                return


def _verify_runs(
    path: str,
    mm: mmap.mmap,
    header: ExportHeader,
    checkpoints: list[CheckpointItem],
    first_run: RunItem,
    after_run_line: int,
    require_signatures: bool,
    jobs: int,
    progress: Callable[[int, int], None] | None,
    chunk_bytes: int | None,
    start_method: str | None,
) -> ExportSummary:
    size = len(mm)
    start = mm.rfind(b"\n", 0, after_run_line - 1) + 1  # the first run line's offset
    default = chunk_bytes is None  # an explicit size is kept to the end (tests rely on it)
    if chunk_bytes is None:
        chunk_bytes = min(DEFAULT_CHUNK_BYTES, max(MIN_CHUNK_BYTES, size // (8 * jobs)))
    merge = _Merge(header, checkpoints)
    if progress is not None:
        progress(start, size)
    tasks = _chunks(
        mm, size, start, first_run.line, chunk_bytes, 4 * jobs if default and jobs > 1 else 1
    )
    executor: Executor | None = None
    shared: _Shared | None = None
    digest: _Digest | None = None
    try:
        results: Iterator[_ChunkResult]
        own = _Context.open(path, header, require_signatures, mm)  # one map: pages once
        work: Callable[[tuple[int, int, int, bool]], _ChunkResult]
        if jobs == 1:
            results = (verify_chunk(own, *task) for task in tasks)
        elif _threads_suffice(header, require_signatures):
            # jobs - 1 worker threads beside this one (see _threads_suffice).
            executor = ThreadPoolExecutor(jobs - 1, thread_name_prefix="export-chunk")
            work = functools.partial(_work_here, own)
            shared = _Shared(executor, work, own, tasks, ahead=2 * (jobs - 1))
            results = iter(shared)
        else:
            mp = multiprocessing.get_context(_start_method(start_method))
            if mp.get_start_method() == "forkserver":
                cast(Any, mp).set_forkserver_preload([__name__])
            # jobs - 1 worker processes; this process is the last of the jobs (see _Shared).
            executor = ProcessPoolExecutor(
                jobs - 1,
                mp_context=mp,
                initializer=_init_worker,
                initargs=(path, header, require_signatures),
            )
            shared = _Shared(executor, _work, own, tasks, ahead=2 * (jobs - 1))
            shared.feed()  # the workers start now, before this process has a second thread
            results = iter(shared)
        # Started after the workers: with fork, no thread of ours is forked.
        digest = _Digest(mm, mm.rfind(b"\n", 0, max(size - 1, 0)) + 1)
        for result in results:
            merge.chunk(result)
            if result.stop is not None:
                summary = merge.end(*result.stop, size, digest)
                if progress is not None:
                    progress(size, size)
                return summary
            if progress is not None:
                progress(result.end, size)
        raise AssertionError("the last chunk ends with an end line or a failure")
    finally:
        if digest is not None:
            digest.stop()
        if shared is not None and shared.closer is not None:
            shared.closer.join()
        if executor is not None:
            # On a failure the chunks not started are cancelled; those running finish (at most
            # two chunks per worker), so that no process outlives the call.
            executor.shutdown(wait=True, cancel_futures=True)
