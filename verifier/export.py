"""``tlog-verify export``: an export checked, offline, against the auditor's policy.

:func:`verify_export_file` runs every check of ``docs/export-format.md`` §6 (through
:class:`tlog.export.ExportVerifier`, streaming) and adds what only the auditor can decide:

1. **The log key.** The export's ``log-key`` line must be one of the policy's logs (the caller
   adds ``--log-vkey`` to a policy that lists none). An export of another log fails at line 3.
2. **Record keys.** With trusted record keys (``record_keys``), every ``record-key`` line must
   be one of them (line 4 on); without, record signatures are checked against the keys the
   export declares, which proves only that they match those keys. ``require_record_signatures``
   makes an unsigned record a failure.
3. **The witness quorum of the last checkpoint** (:meth:`tlog.policy.Policy.evaluate`
   on each note). By default (``quorum_scope="last"``) it is required of the last checkpoint
   only: a checkpoint is cosigned after it is signed, so an export's earlier checkpoints may
   predate publishing; they are checked for their log signature (and every cosignature of a
   policy witness must still verify), and the consistency of the rebuilt log ties them to the
   last, whose quorum therefore covers them. ``quorum_scope="all"`` requires it of every one.
4. **Time rules** (:class:`tlog.policy.TimePolicy`): ``max_skew`` applies to every checkpoint
   (a cosignature from the future does not count), ``max_age`` to the last checkpoint only —
   it is the freshness of the export; earlier checkpoints are old by nature.
5. **An export without a checkpoint** (the format allows it: a log that never published)
   is judged like any other: nothing in it is signed by the log key, so every sealed run is
   "beyond the last checkpoint", and the report says so plainly — its first note, and
   ``uncovered_sealed_runs`` equal to ``sealed_runs``; no witness quorum is judged (there is
   no checkpoint to judge). With ``max_age`` (``--max-age``) the auditor requires a fresh
   checkpoint, so an export without one fails (``policy``).
6. **Since** (``since``: a checkpoint note the auditor kept from before). It must verify under
   one of the policy's logs and name the same origin and log key as the export (else
   :class:`~verifier.report.InputError`, or a ``consistency`` failure when the export is of
   another log). Then, against the log the export rebuilds: the same size must give the same
   root; a smaller size must give the kept root at that size and an RFC 6962 consistency proof
   (computed from the rebuilt tree, verified with RFC 9162 §2.1.4.2, and reported); a larger
   size is a rollback — the export holds less than the log had already published
   (:mod:`verifier.since`).

Order and determinism. The checks run in file order and the first failure is reported with
its line (and run, seq, checkpoint size where they apply); policy checks of a checkpoint run
as soon as its signatures verified, the last checkpoint's freshness when the first run line (or
the end line) is reached, and ``since`` after the end line verified. For a file of at least
:data:`PARALLEL_MIN_BYTES`, the header and checkpoints are read first (sequentially, with the
same policy checks), then the whole file is verified by
:func:`verifier.parallel.verify_export_parallel` — on ``jobs`` processes, or in this
process when ``jobs`` is 1 (its chunked record loop is about 1.45x the speed of the item-by-item
reader: bench/verify_bench.py) — which gives the same result as
:func:`tlog.export.verify_export`; ``since`` then reads the sealed heads in one more light pass,
bound to the verified bytes by the export digest. The report lists the checks that passed; on
a failure it lists only the checks of the header and checkpoints that completed before it, in
both modes, so that the same file gives the same report whatever ``jobs`` is.

Memory: the rebuilt log's stored hashes (inside ExportVerifier), one fact entry per published
checkpoint, and for ``since`` O(log n) hashes (:class:`Frontier`): it grows with the leaves,
never with the records.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal, cast

from tlog.encoding import b64decode, b64encode
from tlog.errors import (
    InvalidSignatureError,
    MalformedError,
    TlogError,
    UsageError,
    VerificationError,
)
from tlog.export import (
    MAX_LINE,
    CheckpointItem,
    EndItem,
    ExportHeader,
    ExportItem,
    ExportSummary,
    ExportVerifier,
    HeaderItem,
    RecordItem,
    RunItem,
)
from tlog.keys import format_vkey, parse_vkey
from tlog.merkle import (
    leaf_hash,
)
from tlog.note import MAX_NOTE_SIZE
from tlog.policy import Policy, PolicyResult, TimePolicy
from verifier.parallel import verify_export_parallel
from verifier.report import (
    InputError,
    LocatedError,
    Report,
    failure_from,
)
from verifier.since import Frontier, KeptCheckpoint, check_since, open_kept_checkpoint

Progress = Callable[[int, int], None]
"""A progress callback: (bytes read so far, total bytes or 0 when unknown)."""

QuorumScope = Literal["all", "last"]

PROGRESS_STEP = 1 << 20
"""Bytes read between two progress calls of the sequential pass."""

PARALLEL_MIN_BYTES = 8 << 20
"""Exports smaller than this are verified item by item in this process whatever ``jobs`` is:
starting processes (or chunking the file) costs more than it saves."""


# --- the audit of the header and checkpoints ---------------------------------------------


@dataclass
class _CheckpointFacts:
    line: int
    size: int
    root: bytes
    result: PolicyResult

    def to_json(self) -> dict[str, Any]:
        r = self.result
        return {
            "line": self.line,
            "size": self.size,
            "root": b64encode(self.root),
            "witnesses": [c.witness.name for c in r.cosignatures],
            "ignored": [
                {"witness": i.witness.name, "timestamp": i.timestamp, "reason": i.reason}
                for i in r.ignored
            ],
        }


class _Audit:
    """The auditor's checks over the items of an export, in file order (module docstring)."""

    def __init__(
        self,
        policy: Policy,
        time_policy: TimePolicy | None,
        scope: QuorumScope,
        record_keys: frozenset[str] | None,
        kept: KeptCheckpoint | None,
    ) -> None:
        self.policy = policy
        self.time_policy = time_policy
        self.history_time = (
            None if time_policy is None else TimePolicy(time_policy.now, None, time_policy.max_skew)
        )
        self.scope = scope
        self.record_keys = record_keys
        self.kept = kept
        self.tree = Frontier(kept.checkpoint.size) if kept is not None else None
        self.header: ExportHeader | None = None
        self.checkpoints: list[_CheckpointFacts] = []
        self._last_item: CheckpointItem | None = None
        self.signature_lines = 0
        self.prefix_done = False
        self.run: RunItem | None = None
        self.end: EndItem | None = None

    # header ---------------------------------------------------------------------------

    def on_header(self, item: HeaderItem) -> None:
        h = item.header
        logs = [log.vkey for log in self.policy.logs]
        if h.log_key not in logs:
            raise LocatedError(
                "untrusted-key",
                f"log-key {h.log_key} is not a log of the policy "
                f"(the policy's logs: {', '.join(logs)})",
                line=3,
            )
        if self.record_keys is not None:
            for i, k in enumerate(h.record_keys):
                if k not in self.record_keys:
                    raise LocatedError(
                        "untrusted-key",
                        f"record-key {k} is not one of the trusted record keys (--record-key)",
                        line=4 + i,
                    )
        if self.kept is not None:
            cp, log = self.kept.checkpoint, self.kept.log
            if cp.origin != h.origin:
                raise LocatedError(
                    "consistency",
                    f"the export is of origin {h.origin!r}, the kept checkpoint of {cp.origin!r}",
                    line=2,
                )
            if format_vkey(log) != h.log_key:
                raise LocatedError(
                    "consistency",
                    f"the export's log-key is not the key that signed the kept checkpoint "
                    f"({format_vkey(log)})",
                    line=3,
                )
        self.header = h

    # checkpoints ------------------------------------------------------------------------

    def _evaluate(self, item: CheckpointItem, time_policy: TimePolicy | None) -> PolicyResult:
        size = item.checkpoint.size
        try:
            return self.policy.evaluate(item.note, time_policy)
        except InvalidSignatureError as e:
            line = item.line
            for j, s in enumerate(item.signatures):
                if (s.name, s.key_id) == (e.name, e.key_id):
                    line = item.signature_line(j)
            raise LocatedError(
                "signature",
                f"checkpoint of size {size}: the signature line of {e.name}+{e.key_id:08x} "
                "does not verify under the policy's key",
                line=line,
                checkpoint_size=size,
            ) from None
        except VerificationError as e:
            raise LocatedError(
                "unverified",
                f"checkpoint of size {size}: {e}",
                line=item.line,
                checkpoint_size=size,
            ) from None

    def _require_quorum(self, item: CheckpointItem, result: PolicyResult) -> None:
        if not result.quorum_met:
            size = item.checkpoint.size
            raise LocatedError(
                "policy",
                f"checkpoint of size {size}: {result.describe_failure()}",
                line=item.line,
                checkpoint_size=size,
            )

    def on_checkpoint(self, item: CheckpointItem) -> None:
        result = self._evaluate(item, self.history_time)
        if self.scope == "all":
            self._require_quorum(item, result)
        cp = item.checkpoint
        self.checkpoints.append(_CheckpointFacts(item.line, cp.size, cp.root, result))
        self.signature_lines += len(item.signatures)
        self._last_item = item

    def finish_prefix(self, line: int) -> None:
        """The first run line or the end line (``line``) is reached: judge the last checkpoint
        with every time rule (its freshness); without a checkpoint, only ``max_age`` fails."""
        if self.prefix_done:
            return
        item = self._last_item
        if item is None:
            if self.time_policy is not None and self.time_policy.max_age is not None:
                raise LocatedError(
                    "policy",
                    "the export carries no checkpoint, so nothing shows that it is fresh "
                    "(--max-age needs a recently cosigned checkpoint)",
                    line=line,
                )
            self.prefix_done = True
            return
        result = self._evaluate(item, self.time_policy)
        self._require_quorum(item, result)
        self.checkpoints[-1].result = result
        self.prefix_done = True

    def prefix_checks(self, report: Report) -> None:
        """Add the checks the header and checkpoints passed."""
        if self.header is not None:
            report.check("log-key", "the export's log key is a log of the policy", 1, "keys")
        if not self.prefix_done:
            return
        n = len(self.checkpoints)
        report.check(
            "checkpoint-signatures",
            "checkpoint signature lines verify (log key and declared witnesses)",
            self.signature_lines,
            "signature lines",
        )
        if n == 0:
            return  # no checkpoint: no quorum and no time rule was judged
        # Under "last" (the default) only the newest checkpoint is judged; say so when there
        # were earlier ones, so the count of 1 is not read as "the export has one checkpoint".
        quorum = n if self.scope == "all" else 1
        which = " by the last checkpoint" if self.scope == "last" and n > 1 else ""
        report.check(
            "witness-quorum",
            f"witness quorum '{self.policy.quorum}' of the policy met{which}",
            quorum,
            "checkpoints",
        )
        if self.time_policy is not None:
            judged = sum(
                len(c.result.cosignatures) + len(c.result.ignored) for c in self.checkpoints
            )
            rules = [f"now {self.time_policy.now}"]
            if self.time_policy.max_skew is not None:
                rules.append(f"max-skew {self.time_policy.max_skew}s on every checkpoint")
            if self.time_policy.max_age is not None:
                rules.append(f"max-age {self.time_policy.max_age}s on the last")
            report.check(
                "time-rules",
                f"cosignature time rules ({', '.join(rules)})",
                judged,
                "cosignatures judged",
            )

    # runs and records (sequential pass only) ------------------------------------------

    def on_run(self, item: RunItem) -> None:
        self.run = item

    def on_record(self, item: RecordItem) -> None:
        run = self.run
        if (
            self.tree is not None
            and run is not None
            and run.seal is not None
            and item.record.seq == run.count
        ):
            self.tree.append(leaf_hash(item.record.hash), item.line)


def _drive(items: Iterator[ExportItem], audit: _Audit, *, stop_at_runs: bool) -> bool:
    """Feed the verified items to the audit; return True once the end item was handled.

    With ``stop_at_runs``, stop (returning False) at the first run line.
    """
    for item in items:
        if isinstance(item, HeaderItem):
            audit.on_header(item)
        elif isinstance(item, CheckpointItem):
            audit.on_checkpoint(item)
        elif isinstance(item, RunItem):
            audit.finish_prefix(item.line)
            if stop_at_runs:
                return False
            audit.on_run(item)
        elif isinstance(item, RecordItem):
            audit.on_record(item)
        elif isinstance(item, EndItem):
            audit.finish_prefix(item.line)
            audit.end = item
            return True
        else:  # the inbox section (a file without runs reaches it in the prefix)
            audit.finish_prefix(item.line)
    raise AssertionError("read_export ends with the end item")  # pragma: no cover


# --- reading ---------------------------------------------------------------------------------


class _CountingReader:
    """A binary stream's ``readline``/``read`` that reports progress every PROGRESS_STEP."""

    def __init__(self, stream: BinaryIO, total: int, progress: Progress) -> None:
        self._stream = stream
        self._total = total
        self._progress = progress
        self.done = 0
        self._next = PROGRESS_STEP

    def _count(self, data: bytes) -> bytes:
        self.done += len(data)
        if self.done >= self._next:
            self._next = self.done + PROGRESS_STEP
            self._progress(self.done, self._total)
        return data

    def readline(self, size: int = -1) -> bytes:
        return self._count(self._stream.readline(size))

    def read(self, size: int = -1) -> bytes:
        return self._count(self._stream.read(size))


def _file_size(stream: BinaryIO) -> int:
    """The size of a regular file, else 0 (unknown: a pipe or a terminal)."""
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _open(path: str) -> BinaryIO:
    if path == "-":
        return sys.stdin.buffer
    return open(path, "rb")


def _scan_sealed_heads(path: str, tree: Frontier, summary: ExportSummary) -> None:
    """Feed the sealed heads of a verified export file into ``tree`` (one light pass).

    Only the framing is read (run lines, record hashes, checkpoint lengths); the pass is bound
    to the verified bytes by recomputing the digest and comparing it with the summary's.
    Raises :class:`~verifier.report.InputError` when the file is not the one verified.
    """
    changed = InputError("the export changed while it was being verified (read it again)")
    digest = hashlib.sha256()
    line = 0
    remaining = 0
    sealed = False
    with open(path, "rb") as f:
        while True:
            data = f.readline(MAX_LINE + 1)
            if not data.endswith(b"\n"):
                raise changed
            line += 1
            if data.startswith(b"end "):
                break
            digest.update(data)
            if data.startswith(b"checkpoint "):
                try:
                    size = int(data[len(b"checkpoint ") : -1])
                except ValueError:
                    raise changed from None
                if not 0 < size <= MAX_NOTE_SIZE:
                    raise changed
                note = f.read(size)
                digest.update(note)
                line += note.count(b"\n")
            elif data.startswith(b"run "):
                tokens = data[:-1].split(b" ")
                try:
                    remaining = int(tokens[2])
                except (IndexError, ValueError):
                    raise changed from None
                sealed = len(tokens) == 6
            elif remaining and not data.startswith(b"sig "):
                remaining -= 1
                if remaining == 0 and sealed:
                    try:
                        head = b64decode(data[:44], "record hash")
                    except MalformedError:
                        raise changed from None
                    tree.append(leaf_hash(head), line)
    if digest.digest() != summary.digest or tree.size != summary.log_size:
        raise changed


# --- the verb ------------------------------------------------------------------------------


def verify_export_file(
    path: str,
    *,
    policy: Policy,
    since: bytes | None = None,
    time_policy: TimePolicy | None = None,
    jobs: int = 1,
    progress: Progress | None = None,
    record_keys: Iterable[str] | None = None,
    require_record_signatures: bool = False,
    quorum_scope: QuorumScope = "last",
    parallel_min_bytes: int = PARALLEL_MIN_BYTES,
) -> Report:
    """Verify the export at ``path`` (``-``: standard input) under ``policy``; see the module
    docstring for every check. Returns the report (status 0 valid, 1 invalid).

    Files of at least ``parallel_min_bytes`` go through :mod:`verifier.parallel`, on ``jobs``
    processes (1: in this one). Requires: ``policy`` lists at least one log; ``jobs >= 1``;
    ``record_keys`` vkeys.
    Raises :class:`~tlog.errors.UsageError` (:class:`~verifier.report.InputError` for an
    unusable ``since`` or record key) and :class:`OSError` (unreadable file) — status 2.
    """
    trusted = _check_arguments(policy, jobs, quorum_scope, record_keys)
    kept = open_kept_checkpoint(since, policy) if since is not None else None

    report = Report("export", {"export": path})
    audit = _Audit(policy, time_policy, quorum_scope, trusted, kept)
    parallel = path != "-" and _path_size(path) >= parallel_min_bytes
    lines = 0  # the end line's number: the export's line count
    try:
        if parallel:
            summary = _verify_in_chunks(path, audit, jobs, progress, require_record_signatures)
        else:
            summary = _verify_streaming(path, audit, progress, require_record_signatures)
        lines = audit.end.line if audit.end is not None else _count_lines(path)
        proof: list[bytes] = []
        if kept is not None:
            assert audit.tree is not None
            proof = check_since(kept, audit.tree, lines)
    except UsageError:
        raise
    except (TlogError, UnicodeError) as e:
        audit.prefix_checks(report)
        report.fail(failure_from(e, "export"))
        _prefix_facts(report, audit)
        return report
    if progress is not None:
        size = _path_size(path)
        progress(size, size)
    _success(report, audit, summary, lines, kept, proof, trusted is not None)
    return report


def _check_arguments(
    policy: Policy, jobs: int, quorum_scope: str, record_keys: Iterable[str] | None
) -> frozenset[str] | None:
    """Refuse unusable arguments; return the trusted record keys, canonical (None: none)."""
    if not policy.logs:
        raise UsageError("the policy lists no logs: give --log-vkey")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise UsageError(f"jobs must be a positive integer, not {jobs!r}")
    if quorum_scope not in ("all", "last"):
        raise UsageError(f"quorum scope {quorum_scope!r} is not 'all' or 'last'")
    if record_keys is None:
        return None
    keys = set()
    for k in record_keys:
        try:
            keys.add(format_vkey(parse_vkey(k)))
        except MalformedError as e:
            raise InputError(f"record key {k[:60]!r}: {e}") from None
    return frozenset(keys)


def _verify_streaming(
    path: str, audit: _Audit, progress: Progress | None, require_signatures: bool
) -> ExportSummary:
    """The whole export, item by item, in this process (``path`` may be ``-``)."""
    stream = _open(path)
    try:
        reader: Any = stream
        if progress is not None:
            reader = _CountingReader(stream, _file_size(stream), progress)
        v = ExportVerifier(None, None, require_signatures)
        _drive(v.items(cast(BinaryIO, reader)), audit, stop_at_runs=False)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    assert v.summary is not None
    return v.summary


def _verify_in_chunks(
    path: str, audit: _Audit, jobs: int, progress: Progress | None, require_signatures: bool
) -> ExportSummary:
    """The header and checkpoints item by item (with the audit's policy checks), then the whole
    file by :func:`verifier.parallel.verify_export_parallel`, then the light ``since`` pass."""
    summary: ExportSummary | None = None
    with open(path, "rb") as f:
        v = ExportVerifier(None, None, require_signatures)
        if _drive(v.items(f), audit, stop_at_runs=True):
            summary = v.summary
    if summary is None:
        summary = verify_export_parallel(
            path, jobs=jobs, require_record_signatures=require_signatures, progress=progress
        )
        _check_same_prefix(summary, audit)
    if audit.tree is not None:
        _scan_sealed_heads(path, audit.tree, summary)
    return summary


def _count_lines(path: str) -> int:
    """The number of LF-terminated lines of a file (the parallel pass does not say)."""
    count = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            count += chunk.count(b"\n")
    return count


def _path_size(path: str) -> int:
    try:
        return 0 if path == "-" else os.path.getsize(path)
    except OSError:
        return 0


def _check_same_prefix(summary: ExportSummary, audit: _Audit) -> None:
    """The parallel pass must have read the header and checkpoints the audit judged."""
    sizes = tuple(c.size for c in audit.checkpoints)
    last = audit._last_item.note if audit._last_item is not None else None
    if (
        summary.header != audit.header
        or summary.checkpoint_sizes != sizes
        or (summary.last_checkpoint != last)
    ):
        raise InputError("the export changed while it was being verified (read it again)")


def _prefix_facts(report: Report, audit: _Audit) -> None:
    h = audit.header
    if h is not None:
        report.facts["origin"] = h.origin
        report.facts["log_key"] = h.log_key


def _success(
    report: Report,
    audit: _Audit,
    s: ExportSummary,
    lines: int,
    kept: KeptCheckpoint | None,
    proof: list[bytes],
    records_trusted: bool,
) -> None:
    """The report of an export that verified: its checks, its facts and its notes."""
    _success_checks(report, audit, s, lines, records_trusted)
    _success_facts(report, audit, s, lines, records_trusted)
    if kept is not None:
        _since_result(report, kept, proof)
    short = [c.size for c in audit.checkpoints[:-1] if not c.result.quorum_met]
    _success_notes(report, s, kept, records_trusted, short)


def _success_checks(
    report: Report, audit: _Audit, s: ExportSummary, lines: int, records_trusted: bool
) -> None:
    report.check(
        "export-format",
        "export format: grammar, canonical spelling, order, counts and digest",
        lines,
        "lines",
    )
    audit.prefix_checks(report)
    report.check(
        "record-chain",
        "record hashes and chain links",
        s.records,
        "records",
    )
    trust = "trusted keys" if records_trusted else "keys the export declares"
    report.check(
        "record-signatures",
        f"record signatures verify ({trust})",
        s.signed_records,
        "signed records",
    )
    report.check("sealed-heads", "sealed runs' heads are the log's leaves", s.sealed_runs, "leaves")
    report.check(
        "checkpoint-roots",
        "checkpoint roots equal the log rebuilt from the sealed runs",
        s.checkpoints,
        "checkpoints",
    )
    report.check(
        "checkpoint-consistency",
        "consistency proofs between successive checkpoints",
        s.consistency_proofs,
        "proofs",
    )
    i = s.inbox
    if i is not None:
        report.check(
            "inbox-log",
            "inbox checkpoints verify and their roots equal the inbox log rebuilt from the entries",
            i.checkpoints,
            "inbox checkpoints",
        )
        report.check(
            "inbox-accounting",
            f"every inbox event is live ({i.live}), claimed ({i.claimed}) or dead ({i.dead}); "
            f"kept payloads match their entries ({i.size - i.erased}, {i.erased} erased)",
            i.size,
            "events",
        )
        report.check(
            "inbox-deliveries",
            "every EventDelivered record names an event its run claimed, and every delivered "
            "event has its record",
            i.delivered,
            "deliveries",
        )


def _success_facts(
    report: Report, audit: _Audit, s: ExportSummary, lines: int, records_trusted: bool
) -> None:
    covered = max(s.checkpoint_sizes, default=0)
    report.facts.update(
        {
            "origin": s.header.origin,
            "log_key": s.header.log_key,
            "log_size": s.log_size,
            "log_root": b64encode(s.log_root),
            "runs": s.runs,
            "sealed_runs": s.sealed_runs,
            "unsealed_runs": s.runs - s.sealed_runs,
            "uncovered_sealed_runs": s.sealed_runs - covered,
            "records": s.records,
            "signed_records": s.signed_records,
            "unsigned_records": s.records - s.signed_records,
            "record_keys_trusted": records_trusted,
            "digest": b64encode(s.digest),
            "lines": lines,
            "consistency_proofs": s.consistency_proofs,
            "checkpoints": [c.to_json() for c in audit.checkpoints],
        }
    )
    if s.inbox is not None:
        report.facts["inbox"] = s.inbox.to_json()


def _since_result(report: Report, kept: KeptCheckpoint, proof: list[bytes]) -> None:
    """The ``since`` check that passed, and its facts (the kept size and root, the proof)."""
    m = kept.checkpoint.size
    report.check(
        "since",
        f"consistent with the kept checkpoint of size {m} (--since)",
        1,
        "checkpoints",
    )
    report.facts["since"] = {
        "size": m,
        "root": b64encode(kept.checkpoint.root),
        "proof": [b64encode(h) for h in proof],
    }


def _success_notes(
    report: Report,
    s: ExportSummary,
    kept: KeptCheckpoint | None,
    records_trusted: bool,
    short_of_quorum: list[int],
) -> None:
    """The notes of a valid export; ``short_of_quorum``: the sizes of the earlier checkpoints
    that do not meet the quorum (accepted only under ``quorum_scope="last"``)."""
    covered = max(s.checkpoint_sizes, default=0)
    if not s.checkpoints:
        report.note(
            "the export carries no checkpoint: nothing in it is signed by the log key, and no "
            "witness has seen it; its runs, records and outcomes are protected only by their "
            "hash chains and by the record signatures they carry"
        )
    unsealed = s.runs - s.sealed_runs
    if unsealed:
        report.note(
            f"{unsealed} unsealed run{'s are' if unsealed != 1 else ' is'} in no log: only "
            + (
                "their hash chains (and record signatures) protect them"
                if unsealed != 1
                else "its hash chain (and record signatures) protects it"
            )
            + ", and a complete rewrite of one, with the digest recomputed, would not be detected"
        )
    if s.sealed_runs > covered:
        n = s.sealed_runs - covered
        one = n == 1
        report.note(
            f"{n} sealed run{' is' if one else 's are'} beyond the last checkpoint "
            f"(size {covered}): no signature of the log covers {'its' if one else 'their'} "
            f"records or outcome{'' if one else 's'} yet — only the hash chain and the record "
            f"signatures {'it carries' if one else 'they carry'} (the seal record's included); "
            f"a complete rewrite of {'it' if one else 'one'}, with the digest recomputed, "
            "would not be detected"
        )
    unsigned = s.records - s.signed_records
    if unsigned and s.signed_records:
        report.note(
            f"{unsigned} record{'s are' if unsigned != 1 else ' is'} not signed: only the hash "
            "chain (and, for a covered sealed run, the checkpoint) protects "
            f"{'them' if unsigned != 1 else 'it'}; --require-record-signatures refuses that"
        )
    if not records_trusted and s.signed_records:
        report.note(
            "record signatures were checked against the keys the export itself declares; "
            "give --record-key to check them against keys you trust"
        )
    if short_of_quorum:
        n = len(short_of_quorum)
        sizes = ", ".join(str(size) for size in short_of_quorum)
        report.note(
            f"{n} earlier checkpoint{'s' if n != 1 else ''} (size {sizes}) "
            f"{'do' if n != 1 else 'does'} not meet the witness quorum: the quorum was "
            "required of the last checkpoint only, which covers the earlier ones by "
            "consistency; --quorum-scope all refuses such an export"
        )
    i = s.inbox
    if i is not None:
        covered_events = max(i.checkpoint_sizes, default=0)
        if i.size > covered_events:
            n = i.size - covered_events
            report.note(
                f"{n} inbox event{'s are' if n != 1 else ' is'} beyond the last inbox "
                f"checkpoint (size {covered_events}): no signature of the log covers "
                f"{'their entries' if n != 1 else 'its entry'}"
            )
        report.note(
            "the inbox's entries are signed (by the inbox checkpoints) and each delivery is in "
            "its run's hash chain; the other inbox fields — claims, dead letters, times, held "
            "flags, waits — are the store's account, signed by nothing"
        )
    if kept is None:
        report.note(
            "freshness and rollback: without --since, nothing shows that this export is not "
            "an older state of the log than one you saw before"
        )
