"""The auditor's kept checkpoint (``tlog-verify export --since``) against a rebuilt log.

A checkpoint note the auditor kept from before is opened under the policy's log keys
(:func:`open_kept_checkpoint`); the log an export rebuilds is followed in O(log n) memory
(:class:`Frontier`), and :func:`check_since` then requires the same root at the same size, or
the kept root at a smaller size and an RFC 6962 consistency proof to the rebuilt root; a larger
size is a rollback (the export holds less than the log had already published).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tlog.checkpoint import Checkpoint, open_checkpoint
from tlog.encoding import b64encode
from tlog.errors import (
    TlogError,
    UsageError,
    VerificationError,
)
from tlog.merkle import (
    EMPTY_ROOT,
    consistency_proof,
    node_hash,
    stored_hash_index,
    verify_consistency,
)
from tlog.note import Verifier
from tlog.policy import Policy
from verifier.report import (
    InputError,
    LocatedError,
)


@dataclass(frozen=True)
class KeptCheckpoint:
    """A checkpoint the auditor kept, opened under one of the policy's logs."""

    note: bytes
    checkpoint: Checkpoint
    log: Verifier


def open_kept_checkpoint(note: bytes, policy: Policy) -> KeptCheckpoint:
    """Open a kept checkpoint note under the policy's log keys (cosignatures are not needed).

    Raises :class:`~verifier.report.InputError` when it is malformed or no policy log signed
    it: a kept checkpoint that does not verify cannot be compared with anything.
    """
    if not policy.logs:
        raise UsageError("the policy lists no logs")
    try:
        signed = open_checkpoint(note, policy.log_verifiers)
    except TlogError as e:
        raise InputError(f"the kept checkpoint (--since) does not verify: {e}") from None
    by_key = {(v.name, v.key_id): v for v in policy.log_verifiers}
    log = next(by_key[(s.name, s.key_id)] for s in signed.note.sigs)
    return KeptCheckpoint(note, signed.checkpoint, log)


class Frontier:
    """An RFC 6962 tree kept in O(log n) memory, able to prove consistency from size ``old``.

    It holds the compact range (one perfect subtree per one bit of the size), a snapshot of
    that range when the size reaches ``old``, and the perfect subtrees that are right siblings
    of the ancestors of leaf ``old - 1``: every stored hash :func:`tlog.merkle.consistency_proof`
    reads for ``PROOF(old, D[0:n])`` at the final size n is one of these. It is a
    :class:`tlog.merkle.HashReader` for exactly those reads.
    """

    def __init__(self, old: int) -> None:
        self.old = old
        self.size = 0
        self._edge: list[tuple[int, int, bytes]] = []  # (level, index, hash), largest first
        self._kept: dict[int, bytes] = {}
        self.old_root: bytes | None = EMPTY_ROOT if old == 0 else None
        self.old_line: int | None = None

    def append(self, leaf: bytes, line: int | None = None) -> None:
        """Add the next leaf hash (``line``: where the export holds it, for messages)."""
        node = (0, self.size, leaf)
        self._keep(node)
        while self._edge and self._edge[-1][0] == node[0]:
            level, index, h = self._edge.pop()
            node = (level + 1, index >> 1, node_hash(h, node[2]))
            self._keep(node)
        self._edge.append(node)
        self.size += 1
        if self.size == self.old:
            for level, index, h in self._edge:
                self._kept[stored_hash_index(level, index)] = h
            self.old_root = self.root()
            self.old_line = line

    def _keep(self, node: tuple[int, int, bytes]) -> None:
        level, index, h = node
        if self.old > 0 and index & 1 and index ^ 1 == (self.old - 1) >> level:
            self._kept[stored_hash_index(level, index)] = h

    def root(self) -> bytes:
        """The root at the current size."""
        if not self._edge:
            return EMPTY_ROOT
        h = self._edge[-1][2]
        for _, _, left in reversed(self._edge[:-1]):
            h = node_hash(left, h)
        return h

    def read_hashes(self, indexes: Iterable[int]) -> list[bytes]:
        """The stored hashes at ``indexes`` (only those a consistency proof from ``old``
        reads at the current size are held; any other raises KeyError)."""
        have = dict(self._kept)
        have.update((stored_hash_index(lv, i), h) for lv, i, h in self._edge)
        return [have[i] for i in indexes]


def check_since(kept: KeptCheckpoint, tree: Frontier, end_line: int | None) -> list[bytes]:
    """Check the kept checkpoint against the rebuilt log; return the consistency proof.

    Raises :class:`~verifier.report.LocatedError` (kind ``consistency``) for a rollback (the
    kept size is larger than the log) or a fork (another root at the kept size).
    """
    m, n = kept.checkpoint.size, tree.size
    if m > n:
        raise LocatedError(
            "consistency",
            f"rollback: the kept checkpoint has size {m}, the export's log only {n} "
            "(the export holds less than the log had already published)",
            line=end_line,
            checkpoint_size=m,
        )
    if m == 0:
        return []
    if tree.old_root != kept.checkpoint.root:
        raise LocatedError(
            "consistency",
            f"fork: the export's log at size {m} has root {b64encode(tree.old_root or b'')}, "
            f"the kept checkpoint {b64encode(kept.checkpoint.root)} (the log was rewritten "
            "since the kept checkpoint was published)",
            line=tree.old_line,
            checkpoint_size=m,
        )
    proof = consistency_proof(m, n, tree) if m < n else []
    try:
        verify_consistency(m, n, kept.checkpoint.root, tree.root(), proof)
    except VerificationError as e:  # pragma: no cover - the roots matched the same tree
        raise LocatedError("consistency", str(e), line=end_line, checkpoint_size=m) from None
    return proof
