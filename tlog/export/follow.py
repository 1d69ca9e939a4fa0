"""The log follower and the end-of-file check: what an export's runs must add up to.

:class:`LogFollower` holds what the verification of an export keeps from line to line: the log
rebuilt from the sealed runs' heads (:class:`tlog.merkle.MemoryHashStore`) and the published
checkpoints whose size it has not reached yet. Each checkpoint's signature lines are verified
when it is read (:meth:`LogFollower.checkpoint`); when the rebuilt log reaches a checkpoint's
size, its root must be the rebuilt root and, from the previous checkpoint of size > 0, the
RFC 6962 consistency proof (computed from the rebuilt tree) must verify
(:meth:`LogFollower.add_leaves`). The one-pass verifier (:class:`tlog.export.ExportVerifier`)
adds one leaf per sealed run; the parallel verifier adds them in batches, each ending where the
log reaches the next checkpoint's size, so every checkpoint is checked at its run either way.

:func:`check_end` is the ``end`` line's check — its grammar, its counts against those read, the
digest of the bytes before it, nothing after it, and no checkpoint larger than the log — for
every reader.

Memory: the rebuilt log's stored hashes (about two per sealed run) and one entry per checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable

from tlog.encoding import parse_hash
from tlog.errors import MalformedError, ProofError
from tlog.export.check import HeaderKeys, decimal, describe, keyword
from tlog.export.format import (
    EndItem,
    ExportFormatError,
    ExportHeader,
    ExportProofError,
    ExportSignatureError,
    ExportSummary,
    ExportVerificationError,
    InboxSummary,
    NoteItem,
)
from tlog.merkle import MemoryHashStore, consistency_proof, verify_consistency


class LogFollower:
    """The rebuilt log of an export and its checkpoints, followed run by run (see the module
    docstring). ``keys``: the checked header's (:func:`tlog.export.check.check_header`)."""

    def __init__(
        self, header: ExportHeader, keys: HeaderKeys, leaves: str = "the sealed runs"
    ) -> None:
        self.header = header
        self.leaves = leaves
        """What the leaves are, for messages (the inbox log's are its entries)."""
        self.keys = keys
        self.tree = MemoryHashStore()
        self.sizes: list[tuple[int, int]] = []
        """(size, line) of every checkpoint read."""
        self.cosignatures = dict.fromkeys(header.witness_keys, 0)
        self.consistency = 0
        self.last_note: bytes | None = None
        self._pending: list[tuple[int, bytes, int]] = []  # (size, root, line) not yet reached
        self._reached: tuple[int, bytes, int] | None = None  # the last checkpoint reached

    def checkpoint(self, item: NoteItem) -> None:
        """A checkpoint read by :func:`tlog.export.read_export`: verify its signature lines."""
        cp = item.checkpoint
        for j, sig in enumerate(item.signatures):
            v, vkey = self.keys.note_keys[(sig.name, sig.key_id)]
            if not v.verify(item.text, sig.sig):
                raise ExportSignatureError(
                    item.signature_line(j), sig.name, sig.key_id, f"checkpoint of size {cp.size}"
                )
            if vkey in self.cosignatures:
                self.cosignatures[vkey] += 1
        self._pending.append((cp.size, cp.root, item.line))
        self.sizes.append((cp.size, item.line))
        self.last_note = item.note

    def due(self) -> int:
        """How many leaves the log needs to reach the next checkpoint's size (-1: none due)."""
        return self._pending[0][0] - self.tree.size if self._pending else -1

    def add_leaves(self, leaves: list[bytes], at_line: int) -> None:
        """Sealed runs' heads (leaf hashes) enter the log, the last at line ``at_line``; check
        every checkpoint whose size the log then has.

        Requires: no pending checkpoint's size lies strictly between the log's size before and
        after (each is reached by the last leaf of a batch: see :meth:`due`).
        """
        if leaves:
            self.tree.extend(leaves)
        self.reach(at_line)

    def reach(self, at_line: int) -> None:
        """Check every checkpoint whose size the rebuilt log has now (at line ``at_line``)."""
        pending = self._pending
        tree = self.tree
        while pending and pending[0][0] == tree.size:
            cp = pending.pop(0)
            size, root, line = cp
            if tree.root() != root:
                raise ExportProofError(
                    line,
                    f"checkpoint of size {size}: its root is not the root of the log rebuilt "
                    f"from {self.leaves} (size {size} reached at line {at_line})",
                )
            reached = self._reached
            if reached is not None and reached[0] > 0:
                proof = consistency_proof(reached[0], size, tree)
                try:
                    verify_consistency(reached[0], size, reached[1], root, proof)
                except ProofError as e:  # pragma: no cover - both roots matched the tree
                    raise ExportProofError(line, str(e)) from None
                self.consistency += 1
            self._reached = cp

    def summary(
        self, end: EndItem, signed: int, inbox: InboxSummary | None = None
    ) -> ExportSummary:
        """What was verified, once the end line (``end``) was checked; ``signed``: the signed
        records (every one of which verified); ``inbox``: the inbox section's."""
        assert not self._pending, "check_end checked the sizes against the log"
        return ExportSummary(
            header=self.header,
            checkpoints=end.checkpoints,
            checkpoint_sizes=tuple(s for s, _ in self.sizes),
            runs=end.runs,
            sealed_runs=end.log_size,
            records=end.records,
            signed_records=signed,
            log_size=self.tree.size,
            log_root=self.tree.root(),
            consistency_proofs=self.consistency,
            cosignatures=self.cosignatures,
            last_checkpoint=self.last_note,
            digest=end.digest,
            inbox=inbox,
        )


def check_end(
    n: int,
    data: bytes,
    counted: tuple[int, int, int, int],
    before_end: Callable[[], bytes | None],
    at_eof: Callable[[], bool],
    sizes: list[tuple[int, int]],
) -> EndItem:
    """Check line ``n`` (``data``), where the end line is due, and return it.

    ``counted``: the checkpoints, runs, records and sealed runs read; ``before_end()``: the
    SHA-256 of the bytes before line ``n``; ``at_eof()``: whether nothing follows it;
    ``sizes``: (size, line) of each checkpoint.
    """
    checkpoints, runs, records, log_size = counted
    rest = keyword(data, b"end")
    if rest is None:
        expected = "a run or end line"
        if not runs:
            expected = "a checkpoint, run or end line"
            if not checkpoints:
                expected = "a key, checkpoint, run or end line"
        raise ExportFormatError(n, f"expected {expected}, found {describe(data)}")
    tokens = rest.split(b" ")
    if len(tokens) != 5:
        raise ExportFormatError(
            n, "expected 'end <checkpoints> <runs> <records> <log size> <digest>'"
        )
    for token, what, have in zip(
        tokens, ("checkpoints", "runs", "records", "log size"), counted, strict=False
    ):
        declared = decimal(token, n, f"end {what}")
        if declared != have:
            raise ExportFormatError(
                n, f"the end line counts {declared} {what}, the export holds {have}"
            )
    try:
        digest = parse_hash(tokens[4], "end digest")
    except MalformedError as e:
        raise ExportFormatError(n, str(e)) from None
    if digest != before_end():
        raise ExportVerificationError(
            n,
            "the digest does not match the bytes before the end line: the export was changed "
            "or damaged",
        )
    if not at_eof():
        raise ExportFormatError(n + 1, "data after the end line")
    for size, line in sizes:
        if size > log_size:
            raise larger_than_log(line, size, log_size)
    return EndItem(checkpoints, runs, records, log_size, digest, n)


def larger_than_log(line: int, size: int, log_size: int) -> ExportProofError:
    """The error of a checkpoint (at ``line``) of a size the log of ``log_size`` lacks."""
    return ExportProofError(
        line, f"checkpoint of size {size} is larger than the log ({log_size} sealed runs)"
    )
