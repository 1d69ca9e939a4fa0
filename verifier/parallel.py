"""An export verified on several processes, with exactly the verdict of the one-pass verifier.

:func:`verify_export_parallel` checks an export file (``docs/export-format.md``) and returns the
:class:`tlog.export.ExportSummary` that :func:`tlog.export.verify_export` returns for the same
bytes. On an invalid file it raises what ``verify_export`` raises: the same exception class,
the same message (``"line N: …"``) and the same attributes (``line``, ``run``, ``seq``,
``name``, ``key_id``), for the first failure in ``verify_export``'s order, whatever the number
of processes and however they are scheduled.

This module holds only the chunking, the scheduling and the merging. Every check is the export
checker's (:mod:`tlog.export`): the prefix is the one-pass verifier itself, a chunk's runs are
verified by :class:`tlog.export.scan.RunScanner` (the C accelerator included), their order by
:class:`tlog.export.scan.RunOrder`, the rebuilt log and its checkpoints by
:class:`tlog.export.follow.LogFollower`, the end line by :func:`tlog.export.follow.check_end` —
so its messages are the one-pass verifier's by construction (``tests/verifier/test_parallel.py``
compares both verifiers on hundreds of mutated files all the same).

How the work is split
=====================

1. **Prefix, in order.** :class:`tlog.export.ExportVerifier` itself reads the magic line, the
   header (and the trusted-key arguments), every checkpoint (signatures verified) and the first
   ``run`` line — and nothing more: it is left suspended there, and its log follower (the
   checkpoints still to reach) is taken over. A file with no run is verified by it to the end.
   So every error up to the first run line is the one-pass verifier's own.
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
   memory-mapped in each process) is :meth:`tlog.export.scan.RunScanner.scan` over the chunk's
   lines (:class:`tlog.export.scan.ChunkLines`). It stops at its first failure, at the first
   line of the next chunk, or at a line that is not a ``run`` line where a run line is due
   (the ``end`` line, or a bad line), and returns the verified runs, the number of signed
   records, the run whose records it was in when it failed (if any), and the failure (class,
   args and attributes, rebuilt identically in the coordinator).
4. **Coordinator, in order.** The results are consumed in file order (:class:`_Shared`: the
   pool is kept two chunks per worker ahead, and whenever the next result is not ready the
   calling process verifies the next chunk itself instead of waiting; a worker that dies
   raises ``BrokenProcessPool``). A chunk of sealed runs at consecutive positions comes back
   in columns and is merged at once (:meth:`tlog.export.scan.RunOrder.take_sealed`); any other
   is merged run by run (:meth:`tlog.export.scan.RunOrder.run_line`), at the point where the
   one-pass reader makes those checks. Sealed runs' leaves enter the rebuilt log in batches,
   each ending where the log reaches the next checkpoint's size, so each checkpoint is checked
   at its run. The first chunk that failed raises its failure after the coordinator's checks
   that precede it, so the reported failure is the first in file order. At the stop line the
   coordinator does the ``end`` line's checks and builds the summary. On a failure the chunks
   not started are cancelled and the call returns once the running ones finish (no worker
   outlives it).
5. **Digest.** SHA-256 of every byte before the end line is computed by a thread of the
   coordinator while the chunks are verified (``hashlib`` releases the GIL, and so do the C
   scans while they hash), up to the start of the file's last line; if the stop line is
   elsewhere (an invalid file), the digest of the bytes before it is computed then.

Memory: the coordinator keeps the one-pass verifier's state (a set entry per sealed run, the
log's stored hashes) and the results of chunks not yet merged — each about 100 bytes per run —
so it grows with the runs, never with the records; a chunk's verification holds at most one
block (1 MiB) of lines and the result of its chunk (per run, not per record).

Workers. ``jobs == 1`` runs the same chunked code in the calling thread alone; ``jobs`` greater
than 1 adds ``jobs - 1`` workers: threads when the export declares no record key and signatures
are not required (the records are then the C scan's, which releases the GIL while it hashes and
parses), else processes. The processes' start method is ``forkserver`` where available, else
``spawn``, never ``fork`` (see ``_start_method``): the caller's main module is imported again
in the forkserver or in each worker and must be guarded by ``if __name__ == "__main__":``.

Progress: ``progress(done, total)`` is called with bytes: once after the prefix, then after
each chunk is merged, and ``(size, size)`` at the end.
"""

from __future__ import annotations

import functools
import hashlib
import mmap
import multiprocessing
import os
import threading
from array import array
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, BinaryIO, cast

from tlog import accel
from tlog.errors import TlogError, UsageError
from tlog.export import (
    EndItem,
    ExportHeader,
    ExportSummary,
    ExportVerifier,
    RunItem,
    VerifiedRun,
)
from tlog.export.check import check_header
from tlog.export.follow import LogFollower
from tlog.export.format import HASH_TEXT_SIZE
from tlog.export.inbox import DELIVERED_TEXT, InboxVerifier, read_tail
from tlog.export.scan import BLOCK, ChunkLines, RunOrder, RunScan, RunScanner, StreamLines

__all__ = ["DEFAULT_CHUNK_BYTES", "verify_export_parallel"]

DEFAULT_CHUNK_BYTES = 8 << 20
"""Largest default chunk; smaller files get smaller chunks (about 8 per process)."""

MIN_CHUNK_BYTES = 256 << 10
"""Smallest default chunk (an explicit ``chunk_bytes`` may be smaller, as tests do)."""

_DIGEST_BLOCK = 64 << 20
"""Bytes hashed per call (hashlib releases the GIL meanwhile): few calls, so the digest thread
seldom needs the GIL, which the C scans hold for a whole chunk."""
_sha256 = hashlib.sha256

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


# --- the worker -----------------------------------------------------------------------------


@dataclass
class _ChunkResult(RunScan):
    """What a worker found in one chunk (see the module docstring, step 3)."""

    failure: _Failure | None = None
    end: int = 0
    """The chunk's end offset (for progress)."""
    sealed: _SealedRuns | None = None
    """``runs`` in columns, when they are all sealed at consecutive positions (then ``runs``
    is empty): a few large objects cross processes much faster than a tuple per run."""
    deliveries: list[tuple[int, bytes]] = field(default_factory=list)
    """(line, body) of each record of ``runs`` that may be an ``EventDelivered`` record
    (:class:`tlog.export.inbox.Deliveries`), in file order."""


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
    def of(cls, runs: list[VerifiedRun]) -> _SealedRuns | None:
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

    def runs(self) -> list[VerifiedRun]:
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
    """A process's view of the file, and its run scanner."""

    mm: mmap.mmap
    size: int
    scanner: RunScanner

    @classmethod
    def open(
        cls, path: str, header: ExportHeader, require_signatures: bool, mm: mmap.mmap | None = None
    ) -> _Context:
        """The context of a worker process, or (``mm``: the caller's map) of the caller."""
        keys = check_header(header)
        if mm is None:
            with open(path, "rb") as f:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return cls(mm, len(mm), RunScanner(keys, require_signatures))


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
    lines = ChunkLines(ctx.mm, ctx.size, start, end, line - 1)
    try:
        ctx.scanner.scan(lines, result, last)
    except Exception as e:
        result.failure = _portable(e)
    if result.failure is None:
        _find_deliveries(ctx, start, end if result.stop is None else result.stop[1], line, result)
    if result.runs and result.failure is None:
        result.sealed = _SealedRuns.of(result.runs)
        if result.sealed is not None:
            result.runs = []
    return result


def _find_deliveries(ctx: _Context, start: int, end: int, line: int, out: _ChunkResult) -> None:
    """The records between offsets ``start`` (line ``line``) and ``end`` — verified runs: run,
    record and sig lines — whose body holds :data:`~tlog.export.inbox.DELIVERED_TEXT` (which
    no run or sig line can hold), as the one-pass verifier notes them."""
    mm = ctx.mm
    at = mm.find(DELIVERED_TEXT, start, end)
    counted, lineno = start, line
    while at >= 0:
        first = max(mm.rfind(b"\n", start, at) + 1, start)  # the line's start
        lf = mm.find(b"\n", at, end)
        count_lines = accel.count_lines
        if count_lines is not None:
            lineno += count_lines(mm, counted, first)
        else:  # pragma: no cover - installed without a C compiler
            lineno += mm[counted:first].count(b"\n")
        counted = first
        out.deliveries.append((lineno, mm[first + HASH_TEXT_SIZE + 1 : lf]))
        at = mm.find(DELIVERED_TEXT, lf + 1, end)


# --- the coordinator ------------------------------------------------------------------------


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

    def __init__(self, follow: LogFollower) -> None:
        self.follow = follow  # the prefix's: its checkpoints, a size-0 one already reached
        self.order = RunOrder()
        self.records = 0
        self.signed = 0
        self.tail = InboxVerifier(follow.header, follow.keys)

    def chunk(self, result: _ChunkResult) -> None:
        """Merge one chunk's result, in file order; raise its first failure at its place."""
        self.tail.deliveries.found += result.deliveries
        sealed = result.sealed
        if sealed is not None:
            if self.order.take_sealed(
                sealed.first, set(sealed.ids.split("\n")), len(sealed.counts)
            ):
                # Sealed runs at the next positions, with new and distinct IDs: only the counts
                # and leaves merge.
                self._sealed(sealed)
                self.signed += result.signed
                return
            result.runs = sealed.runs()  # one of them fails a check: run by run
        # Leaves are added in batches (MemoryHashStore.extend is several times faster per leaf
        # than append), each ending where the log reaches the next checkpoint's size, so each
        # checkpoint is checked at its run, as the one-pass verifier checks it.
        follow = self.follow
        batch: list[bytes] = []
        due = follow.due()
        last_line = 0
        for n, run, count, pos, leaf, last_line in result.runs:
            self.order.run_line(n, run, pos)
            self.records += count
            if leaf is not None:
                batch.append(leaf)
                if len(batch) == due:
                    follow.add_leaves(batch, last_line)
                    batch = []
                    due = follow.due()
        if batch:
            follow.add_leaves(batch, last_line)
        if result.partial is not None:
            self.order.run_line(*result.partial)
        if result.failure is not None:
            raise _rebuild(result.failure) from None
        self.signed += result.signed

    def _sealed(self, sealed: _SealedRuns) -> None:
        k = len(sealed.counts)
        self.records += sum(sealed.counts)
        leaves = sealed.leaf_list()
        i = 0
        while i < k:
            # A batch ends where the log reaches the next checkpoint's size (see chunk).
            due = self.follow.due()
            j = i + due if 0 < due <= k - i else k
            self.follow.add_leaves(leaves[i:j], sealed.last_lines[j - 1])
            i = j

    def end(self, path: str, n: int, offset: int, digest: _Digest) -> ExportSummary:
        """What follows the runs, from line ``n`` at ``offset`` — the inbox section if any, then
        the end line — read and verified by the one-pass verifier's code
        (:func:`tlog.export.inbox.read_tail`, :class:`tlog.export.inbox.InboxVerifier`), in this
        process; and the summary."""
        follow = self.follow
        counted = (len(follow.sizes), self.order.runs, self.records, self.order.position)
        with open(path, "rb") as f:
            f.seek(offset)
            lines = StreamLines(f, offset=offset, lineno=n - 1)
            got = lines.next()
            assert got is not None and got[0] == n
            for item in read_tail(
                lines,
                follow.keys,
                follow.header,
                n,
                got[1],
                counted,
                lambda: None if lines.end_offset is None else digest.before(lines.end_offset),
                follow.sizes,
            ):
                if isinstance(item, EndItem):
                    return follow.summary(item, self.signed, self.tail.end(item))
                self.tail.item(item)
        raise AssertionError("read_tail ends with the end item or raises")  # pragma: no cover


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
        count_lines = accel.count_lines
        if count_lines is not None:
            line += count_lines(mm, start, end)
        else:  # pragma: no cover - installed without a C compiler
            for at in range(start, end, BLOCK):
                line += mm[at : min(at + BLOCK, end)].count(b"\n")
        start = end


def _prefix(stream: BinaryIO, verifier: ExportVerifier) -> ExportSummary | RunItem:
    """Run the one-pass verifier up to and including the first run line (then: that run
    item; ``verifier.follower`` holds the header's keys and the checkpoints), or to the end
    (then: the summary)."""
    items = cast(Generator[Any, None, None], verifier.items(stream))
    try:
        for item in items:
            if isinstance(item, RunItem):
                return item
            if isinstance(item, EndItem):
                for _ in items:  # pragma: no cover - nothing follows the end item
                    pass
                assert verifier.summary is not None
                return verifier.summary
    finally:
        items.close()
    raise AssertionError("ExportVerifier.items ends with an end item or raises")


def _start_method(requested: str | None) -> str:
    if requested is not None:
        return requested
    methods = multiprocessing.get_all_start_methods()
    # Never fork by default: a fork copies the locks other threads hold, and "other threads"
    # includes ones Python cannot see (a library's C threads, a pool's manager thread), so a
    # thread count cannot make it safe; Python 3.12+ warns of exactly this and 3.14 no longer
    # forks by default. The forkserver forks each worker from a clean single-threaded server
    # that has imported this module (set_forkserver_preload), so a worker starts in
    # milliseconds all the same.
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
    multiprocessing start method (default ``forkserver`` where available, else ``spawn``;
    never ``fork``, which is unsafe in a process that has threads).
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
        first_run = _prefix(f, verifier)
        if isinstance(first_run, ExportSummary):
            if progress is not None:
                size = os.fstat(f.fileno()).st_size
                progress(size, size)
            return first_run
        assert verifier.follower is not None
        after_run_line = f.tell()
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return _verify_runs(
            path,
            mm,
            verifier.follower,
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
    return accel.scan_runs is not None and not header.record_keys and not require_signatures


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
    follow: LogFollower,
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
    header = follow.header
    merge = _Merge(follow)
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
                summary = merge.end(path, result.stop[0], result.stop[1], digest)
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
