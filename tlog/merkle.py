"""RFC 6962 Merkle trees: hashing, stored hashes, proof generation and verification.

Hashing (RFC 6962 §2.1, RFC 9162 §2.1.1), SHA-256 throughout::

    MTH({})       = SHA-256("")                         the empty tree
    MTH({d})      = SHA-256(0x00 || d)                  a leaf
    MTH(D[0:n])   = SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n]))
                    for n > 1, k the largest power of two strictly less than n

Left subtrees are always perfect; the tree leans right.

Stored hashes. A log that keeps every hash of every *complete* subtree, once, can answer any
root, inclusion proof or consistency proof with O(log n) reads. The layout is the one of
golang.org/x/mod/sumdb/tlog (after Crosby and Wallach): the hash at height ``level`` with index
``n`` (covering leaves ``[n·2^level, (n+1)·2^level)``) is stored at position
``stored_hash_index(level, n)``, and appending leaf ``n`` appends exactly the leaf hash followed
by the hashes of the subtrees that leaf completes. Storage is append-only: a position, once
written, never changes. A store implements :class:`HashReader` over that array.

Proofs. Inclusion proofs are RFC 6962 ``PATH(m, D[0:n])`` and consistency proofs are
``PROOF(m, D[0:n])``, both ordered from the leaf end up to the root's child; they are checked
with the RFC 9162 §2.1.3.2 and §2.1.4.2 algorithms. Every hash must be 32 bytes, and a proof of
the wrong length is refused before any hashing, with a message that gives both lengths.

Subtrees. draft-ietf-plants-merkle-tree-certs-03 §4 (used by tlog-witness sign-subtree):
:func:`is_valid_subtree` and :func:`verify_subtree_consistency` (§4.4.3, step by step).

Size 0. RFC 9162 defines no consistency proof from an empty tree. tlog-witness does: old size
0 is accepted with an *empty* proof, and a size-0 checkpoint must carry ``SHA-256("")``. Those
rules are the separately named :func:`check_empty_tree_root` and
:func:`verify_witness_consistency`; the RFC verifiers refuse size 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from tlog import accel
from tlog.encoding import HASH_SIZE, MAX_INT63
from tlog.errors import ProofError, UsageError

__all__ = [
    "EMPTY_ROOT",
    "HashReader",
    "MemoryHashStore",
    "check_empty_tree_root",
    "consistency_proof",
    "consistency_proof_indexes",
    "consistency_proof_size",
    "fold_leaves",
    "inclusion_proof",
    "inclusion_proof_size",
    "is_valid_subtree",
    "leaf_hash",
    "node_hash",
    "proven_prefix_root",
    "proves_inconsistency",
    "right_edge",
    "root",
    "root_of_entries",
    "split_stored_hash_index",
    "stored_hash_count",
    "stored_hash_index",
    "stored_hashes_for_leaf",
    "stored_hashes_for_leaves",
    "tree_hash",
    "verify_consistency",
    "verify_inclusion",
    "verify_subtree_consistency",
    "verify_witness_consistency",
]


_sha256 = hashlib.sha256
# stored_hashes_for_leaves's loop in C (tlog/_speedups.c), or None: about 6x faster
_c_fold: Callable[[list[bytes], list[bytes], int], list[bytes]] | None = accel.fold_leaves

EMPTY_ROOT = _sha256(b"").digest()
"""MTH({}): the root of the empty tree, SHA-256 of the empty string."""


def leaf_hash(entry: bytes) -> bytes:
    """RFC 6962 leaf hash: SHA-256(0x00 || entry)."""
    return _sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 6962 interior node hash: SHA-256(0x01 || left || right)."""
    return _sha256(b"\x01" + left + right).digest()


def root(leaf_hashes: Sequence[bytes]) -> bytes:
    """The Merkle tree hash of a list of leaf hashes.

    Pairing each level from the left and carrying an odd last node up unchanged builds exactly
    the RFC 6962 tree: every left subtree it forms is perfect and as large as possible.
    """
    level = list(leaf_hashes)
    if not level:
        return EMPTY_ROOT
    sha = _sha256
    while len(level) > 1:
        odd = level[-1] if len(level) & 1 else None
        it = iter(level)
        level = [sha(b"\x01" + a + b).digest() for a, b in zip(it, it, strict=False)]
        if odd is not None:
            level.append(odd)
    return level[0]


def root_of_entries(entries: Iterable[bytes]) -> bytes:
    """The Merkle tree hash of a list of entries (leaf hashing included)."""
    sha = _sha256
    return root([sha(b"\x00" + e).digest() for e in entries])


# --- stored hashes -------------------------------------------------------------------------


def stored_hash_index(level: int, n: int) -> int:
    """Position in the stored-hash array of the hash at height ``level`` with index ``n``.

    Requires: level >= 0, n >= 0.

    The hash for ``(level, n)`` is written right after the leaf that completes its subtree,
    leaf ``m = (n+1)·2^level − 1``. Leaf ``m`` is preceded by ``sum_{i>=0} floor(m / 2^i)``
    stored hashes, which equals ``2m − popcount(m)``, and then by ``level`` hashes of the
    smaller subtrees it completes first.
    """
    m = ((n + 1) << level) - 1
    return 2 * m - m.bit_count() + level


def split_stored_hash_index(index: int) -> tuple[int, int]:
    """Inverse of :func:`stored_hash_index`: the ``(level, n)`` stored at ``index``.

    Requires: index >= 0.
    """
    # Find the leaf m whose hashes occupy [leaf_position(m), leaf_position(m+1)): the leaf
    # position 2m − popcount(m) is increasing in m, so estimate m and correct.
    m = index // 2
    while 2 * m - m.bit_count() > index:
        m -= 1
    while 2 * (m + 1) - (m + 1).bit_count() <= index:
        m += 1
    level = index - (2 * m - m.bit_count())
    return level, ((m + 1) >> level) - 1


def stored_hash_count(size: int) -> int:
    """Number of stored hashes a tree of ``size`` leaves has.

    Requires: size >= 0.
    """
    if size == 0:
        return 0
    # Leaf size-1 is stored at 2m − popcount(m), followed by one hash per subtree it
    # completes: its count of trailing one bits.
    m = size - 1
    trailing_ones = (~m & (m + 1)).bit_length() - 1
    return 2 * m - m.bit_count() + 1 + trailing_ones


class HashReader(Protocol):
    """Read access to a tree's stored hashes (see :func:`stored_hash_index`)."""

    def read_hashes(self, indexes: Sequence[int]) -> Sequence[bytes]:
        """Return the stored hashes at ``indexes``, in the same order.

        Must return exactly ``len(indexes)`` hashes or raise; callers rely on it.
        """
        ...


def stored_hashes_for_leaf(n: int, leaf: bytes, reader: HashReader) -> list[bytes]:
    """The hashes to append to the stored-hash array when leaf ``n`` (hash ``leaf``) is added.

    Requires: the array holds exactly ``stored_hash_count(n)`` hashes.

    The first is the leaf hash; each trailing one bit of ``n`` then completes a subtree whose
    left half was stored earlier.
    """
    m = ((n + 1) & -(n + 1)).bit_length() - 1  # trailing zeros of n+1
    if m == 0:
        return [leaf]
    indexes = [stored_hash_index(i, (n >> i) - 1) for i in range(m - 1, -1, -1)]
    old = reader.read_hashes(indexes)
    hashes = [leaf]
    h = leaf
    for i in range(m):
        h = node_hash(old[m - 1 - i], h)
        hashes.append(h)
    return hashes


def stored_hashes_for_leaves(
    start: int, leaves: Iterable[bytes], reader: HashReader
) -> list[bytes]:
    """The hashes to append to the stored-hash array when ``leaves`` are added at ``start``.

    Requires: the array holds exactly ``stored_hash_count(start)`` hashes. Equivalent to
    calling :func:`stored_hashes_for_leaf` for each leaf in turn, but reads the array once:
    the right edge of the tree (:func:`right_edge`) is kept in memory while the batch is
    folded in (:func:`fold_leaves`).
    """
    need = right_edge(start)
    frontier = list(reader.read_hashes(need)) if need else []
    return fold_leaves(start, frontier, leaves)


def right_edge(size: int) -> list[int]:
    """The stored-hash indexes of the right edge of a tree of ``size`` leaves: its maximal
    perfect subtrees, largest first (one per one bit of ``size``; the "compact range"). They
    are all that appending to the tree reads.

    Requires: size >= 0.
    """
    need: list[int] = []
    _sub_tree_index(0, size, need)
    return need


def fold_leaves(start: int, frontier: list[bytes], leaves: Iterable[bytes]) -> list[bytes]:
    """The hashes to append to the stored-hash array when ``leaves`` are added at ``start``,
    given its right edge ``frontier`` (the hashes at :func:`right_edge` of ``start``, in that
    order), which is updated in place to the right edge after ``leaves``.

    Requires: ``frontier`` is that edge (it is not checked: a wrong edge gives wrong hashes).
    """
    if _c_fold is not None:
        batch = leaves if isinstance(leaves, list) else list(leaves)
        try:
            return _c_fold(frontier, batch, start)
        except ValueError:  # a leaf that is not 32 bytes: the loop below hashes it as it is
            leaves = batch
    out: list[bytes] = []
    append = out.append
    sha = _sha256
    n = start
    for leaf in leaves:
        h = leaf
        append(h)
        m = n
        while m & 1:
            h = sha(b"\x01" + frontier.pop() + h).digest()
            append(h)
            m >>= 1
        frontier.append(h)
        n += 1
    return out


class MemoryHashStore:
    """An in-memory stored-hash array: a :class:`HashReader` that can grow.

    Used by the ``tlog`` command, tests and benchmarks; durable stores keep the same array on
    disk.
    """

    def __init__(self) -> None:
        self.hashes: list[bytes] = []
        self.size = 0

    def read_hashes(self, indexes: Sequence[int]) -> list[bytes]:
        h = self.hashes
        return [h[i] for i in indexes]

    def append(self, leaf: bytes) -> None:
        """Add one leaf hash to the tree."""
        self.hashes.extend(stored_hashes_for_leaf(self.size, leaf, self))
        self.size += 1

    def extend(self, leaves: Iterable[bytes]) -> None:
        """Add leaf hashes in order."""
        batch = list(leaves)
        self.hashes.extend(stored_hashes_for_leaves(self.size, batch, self))
        self.size += len(batch)

    def root(self, size: int | None = None) -> bytes:
        """Root at ``size`` (default: the current size)."""
        return tree_hash(self.size if size is None else size, self)


def _check_size(size: int, what: str) -> None:
    if not 0 <= size <= MAX_INT63:
        raise UsageError(f"{what} {size} is out of range [0, 2^63-1]")


def _sub_tree_index(lo: int, hi: int, need: list[int]) -> None:
    # Split [lo, hi) into maximal perfect subtrees, largest first; each is one stored hash.
    while lo < hi:
        level = (hi - lo).bit_length() - 1
        need.append(stored_hash_index(level, lo >> level))
        lo += 1 << level


def _sub_tree_count(lo: int, hi: int) -> int:
    # How many perfect subtrees _sub_tree_index splits [lo, hi) into. Since lo is a multiple
    # of the first (largest) one, the pieces are the one bits of hi - lo.
    return (hi - lo).bit_count()


def _sub_tree_hash(hashes: Sequence[bytes], pos: int, count: int) -> bytes:
    # Fold the perfect subtrees right to left into the hash of their concatenation.
    h = hashes[pos + count - 1]
    for i in range(pos + count - 2, pos - 1, -1):
        h = node_hash(hashes[i], h)
    return h


def tree_hash(size: int, reader: HashReader) -> bytes:
    """The root of the first ``size`` leaves, from stored hashes: O(log size) reads.

    Requires: 0 <= size <= the reader's tree size.
    """
    _check_size(size, "tree size")
    if size == 0:
        return EMPTY_ROOT
    need: list[int] = []
    _sub_tree_index(0, size, need)
    return _sub_tree_hash(reader.read_hashes(need), 0, len(need))


def _inclusion_plan(index: int, size: int) -> list[tuple[int, int]]:
    # The RFC 6962 PATH as a list of ranges [lo, hi), from the leaf's sibling up.
    plan: list[tuple[int, int]] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = 1 << ((hi - lo - 1).bit_length() - 1)  # largest power of two < hi - lo
        if index < lo + k:
            plan.append((lo + k, hi))
            hi = lo + k
        else:
            plan.append((lo, lo + k))
            lo = lo + k
    plan.reverse()
    return plan


def _consistency_plan(old: int, size: int) -> list[tuple[int, int]]:
    # The RFC 6962 PROOF(old, D[0:size]) as ranges [lo, hi), in proof order.
    plan: list[tuple[int, int]] = []
    lo, hi = 0, size
    while old != hi:
        k = 1 << ((hi - lo - 1).bit_length() - 1)
        if old <= lo + k:
            plan.append((lo + k, hi))
            hi = lo + k
        else:
            plan.append((lo, lo + k))
            lo = lo + k
    if lo != 0:
        # SUBPROOF with flag false at a complete old subtree: it contributes its own hash.
        plan.append((lo, hi))
    plan.reverse()
    return plan


def _prove(plan: list[tuple[int, int]], reader: HashReader) -> list[bytes]:
    need: list[int] = []
    for lo, hi in plan:
        _sub_tree_index(lo, hi, need)
    if not need:
        return []
    hashes = reader.read_hashes(need)
    proof = []
    pos = 0
    for lo, hi in plan:
        count = _sub_tree_count(lo, hi)
        proof.append(hashes[pos] if count == 1 else _sub_tree_hash(hashes, pos, count))
        pos += count
    return proof


def inclusion_proof(index: int, size: int, reader: HashReader) -> list[bytes]:
    """RFC 6962 inclusion proof PATH(index, D[0:size]), from stored hashes.

    Requires: 0 <= index < size <= the reader's tree size. O(log size) reads.
    """
    _check_size(size, "tree size")
    if not 0 <= index < size:
        raise UsageError(f"index {index} is not in a tree of size {size}")
    return _prove(_inclusion_plan(index, size), reader)


def consistency_proof(old: int, size: int, reader: HashReader) -> list[bytes]:
    """RFC 6962 consistency proof PROOF(old, D[0:size]), from stored hashes.

    Requires: 0 < old <= size <= the reader's tree size. O(log size) reads. There is no
    consistency proof from size 0 (see :func:`verify_witness_consistency`), and an old size
    beyond the tree is an error, never an empty proof.
    """
    _check_size(size, "tree size")
    if not 0 < old <= size:
        raise UsageError(f"no consistency proof from size {old} to size {size}")
    return _prove(_consistency_plan(old, size), reader)


def consistency_proof_indexes(old: int, size: int) -> list[int]:
    """The stored-hash indexes :func:`consistency_proof` reads for ``PROOF(old, D[0:size])``,
    in the order it reads them: what a client that fetches hashes (tiles) must have first.

    Requires: 0 < old <= size.
    """
    _check_size(size, "tree size")
    if not 0 < old <= size:
        raise UsageError(f"no consistency proof from size {old} to size {size}")
    need: list[int] = []
    for lo, hi in _consistency_plan(old, size):
        _sub_tree_index(lo, hi, need)
    return need


# --- verification (RFC 9162) ---------------------------------------------------------------


def inclusion_proof_size(index: int, size: int) -> int:
    """Number of hashes in the inclusion proof of ``index`` in a tree of ``size``.

    Requires: 0 <= index < size.
    """
    inner = (index ^ (size - 1)).bit_length()
    return inner + (index >> inner).bit_count()


def consistency_proof_size(old: int, size: int) -> int:
    """Number of hashes in the consistency proof from ``old`` to ``size``.

    Requires: 0 < old <= size.
    """
    if old == size:
        return 0
    inner = ((old - 1) ^ (size - 1)).bit_length()
    border = ((old - 1) >> inner).bit_count()
    shift = (old & -old).bit_length() - 1
    return (0 if old & (old - 1) == 0 else 1) + (inner - shift) + border


def _check_hashes(proof: Sequence[bytes], what: str) -> None:
    for i, h in enumerate(proof):
        if len(h) != HASH_SIZE:
            raise ProofError(f"{what} hash {i} is {len(h)} bytes, not 32")


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root_hash: bytes
) -> None:
    """Check that ``leaf`` is at ``index`` in the tree of ``size`` with root ``root_hash``.

    RFC 9162 §2.1.3.2. Raises :class:`ProofError` naming the defect; returns None on success.
    """
    if type(index) is not int or type(size) is not int or not 0 <= index < size <= MAX_INT63:
        raise ProofError(f"index {index!r} is not in a tree of size {size!r}")
    if len(leaf) != HASH_SIZE or len(root_hash) != HASH_SIZE:
        raise ProofError("leaf hash and root must be 32 bytes")
    want = inclusion_proof_size(index, size)
    if len(proof) != want:
        raise ProofError(
            f"inclusion proof has {len(proof)} hashes, index {index} in a tree of {size} "
            f"needs {want}"
        )
    _check_hashes(proof, "inclusion proof")
    sha = _sha256
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if fn & 1 or fn == sn:
            r = sha(b"\x01" + p + r).digest()
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = sha(b"\x01" + r + p).digest()
        fn >>= 1
        sn >>= 1
    if sn != 0:  # pragma: no cover - excluded by the length check above
        raise ProofError("inclusion proof is too short")
    if r != root_hash:
        raise ProofError(f"inclusion proof of index {index} does not lead to the tree's root")


def verify_consistency(
    old: int, size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree (``old``, ``old_root``) is a prefix of (``size``, ``new_root``).

    RFC 9162 §2.1.4.2, for 0 < old <= size; equal sizes need an empty proof and equal roots.
    Raises :class:`ProofError` naming the defect; returns None on success.
    """
    if type(old) is not int or type(size) is not int or not 0 < old <= size <= MAX_INT63:
        raise ProofError(f"no consistency proof exists from size {old!r} to size {size!r}")
    if len(old_root) != HASH_SIZE or len(new_root) != HASH_SIZE:
        raise ProofError("roots must be 32 bytes")
    want = consistency_proof_size(old, size)
    if len(proof) != want:
        raise ProofError(
            f"consistency proof has {len(proof)} hashes, from size {old} to {size} needs {want}"
        )
    _check_hashes(proof, "consistency proof")
    if old == size:
        if old_root != new_root:
            raise ProofError(f"two different roots for the same size {size}")
        return
    fr, sr = _consistency_roots(old, size, old_root, proof)
    if fr != old_root:
        raise ProofError(f"consistency proof does not lead to the root of size {old}")
    if sr != new_root:
        raise ProofError(f"consistency proof does not lead to the root of size {size}")


def proves_inconsistency(
    old: int, size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """True when ``proof`` shows that the tree (``size``, ``new_root``) does NOT extend
    (``old``, ``old_root``): :func:`proven_prefix_root` gives a root other than ``old_root``."""
    prefix = proven_prefix_root(old, size, new_root, proof)
    return prefix is not None and prefix != old_root


def proven_prefix_root(
    old: int, size: int, new_root: bytes, proof: Sequence[bytes], *, node: bytes | None = None
) -> bytes | None:
    """The root at size ``old`` of the tree (``size``, ``new_root``), as ``proof`` proves it;
    None when it proves none.

    ``proof`` proves one when it is a well-formed RFC 9162 consistency proof from ``old`` to
    ``size`` whose hashes fold to ``new_root`` exactly: that binds them to the tree (a
    collision of SHA-256 aside), so the root they give at ``old`` is the tree's own prefix root.
    A third party can then check it with :func:`verify_consistency` (``tlog check
    consistency``) from that root. When ``old`` is a power of two the proof carries no root
    of its own for ``old`` (RFC 9162 prepends the verifier's old root, which is the tree's
    node over its first ``old`` leaves): ``node``, that node as read from the tree's tiles, is
    the root when the proof folds from it to ``new_root``; without ``node``, None. None too
    unless 0 < ``old`` < ``size``.
    """
    if not 0 < old < size or size > MAX_INT63 or len(new_root) != HASH_SIZE:
        return None
    if len(proof) != consistency_proof_size(old, size) or any(len(h) != HASH_SIZE for h in proof):
        return None
    if old & (old - 1) == 0:
        if node is None or len(node) != HASH_SIZE:
            return None
        _, sr = _consistency_roots(old, size, node, proof)
        return node if sr == new_root else None
    fr, sr = _consistency_roots(old, size, b"", proof)
    return fr if sr == new_root else None


def _consistency_roots(
    old: int, size: int, old_root: bytes, proof: Sequence[bytes]
) -> tuple[bytes, bytes]:
    """RFC 9162 §2.1.4.2's fold of a consistency proof of the right length (0 < old < size):
    the roots it gives at sizes ``old`` and ``size``."""
    sha = _sha256
    path = list(proof)
    if old & (old - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old - 1, size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:  # pragma: no cover - excluded by the length check above
            raise ProofError("consistency proof is too long")
        if fn & 1 or fn == sn:
            fr = sha(b"\x01" + c + fr).digest()
            sr = sha(b"\x01" + c + sr).digest()
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = sha(b"\x01" + sr + c).digest()
        fn >>= 1
        sn >>= 1
    if sn != 0:  # pragma: no cover - excluded by the length check of the callers
        raise ProofError(f"consistency proof does not lead to the root of size {size}")
    return fr, sr


# --- subtrees (draft-ietf-plants-merkle-tree-certs-03 §4; tlog-witness sign-subtree) ------


def is_valid_subtree(start: int, end: int) -> bool:
    """draft-ietf-plants-merkle-tree-certs-03 §4.1: ``0 <= start < end`` and ``start`` a
    multiple of BIT_CEIL(end - start), the smallest power of two >= the subtree's size.

    Python integers do not overflow, so BIT_CEIL is exact even above 2^63.
    """
    if not 0 <= start < end:
        return False
    bit_ceil = 1 << (end - start - 1).bit_length()
    return start % bit_ceil == 0


def verify_subtree_consistency(
    start: int,
    end: int,
    size: int,
    proof: Sequence[bytes],
    subtree_hash: bytes,
    root_hash: bytes,
) -> None:
    """Check that ``subtree_hash`` = MTH(D[start:end]) is consistent with the tree of ``size``
    whose root is ``root_hash``, by the subtree consistency proof ``proof``.

    draft-ietf-plants-merkle-tree-certs-03 §4.4.3, step by step, plus the 32-byte rule for
    every hash. Raises :class:`~tlog.errors.ProofError` when the proof does not verify —
    including an invalid subtree, the empty subtree ``[x, x)`` (draft-03 requires start < end;
    transparency-dev/merkle accepts it) or ``end`` > ``size``; returns None on success.
    """
    # Step 1. The checks imply 0 <= start < end <= size.
    if not is_valid_subtree(start, end) or end > size:
        raise ProofError(f"[{start}, {end}) is not a valid subtree of a tree of size {size}")
    if len(subtree_hash) != HASH_SIZE or len(root_hash) != HASH_SIZE:
        raise ProofError("subtree hash and root must be 32 bytes")
    for i, h in enumerate(proof):
        if len(h) != HASH_SIZE:
            raise ProofError(f"subtree consistency proof hash {i} is {len(h)} bytes, not 32")
    node = node_hash
    # Step 2.
    fn, sn, tn = start, end - 1, size - 1
    if sn == tn:
        # Step 3: the subtree ends on the tree's right edge; climb to its root.
        while fn != sn:
            fn, sn, tn = fn >> 1, sn >> 1, tn >> 1
    else:
        # Step 4: climb while the last leaf's node is a right child inside the subtree.
        while fn != sn and sn & 1:
            fn, sn, tn = fn >> 1, sn >> 1, tn >> 1
    path = list(proof)
    # Steps 5 and 6: the seed is the subtree hash itself when the climb reached its root.
    if fn == sn:
        fr = sr = subtree_hash
    else:
        if not path:
            raise ProofError("subtree consistency proof is empty")
        fr = sr = path.pop(0)
    # Step 7. fr rebuilds the subtree hash, sr the tree root.
    for c in path:
        if tn == 0:
            raise ProofError("subtree consistency proof is too long")
        if sn & 1 or sn == tn:
            if fn < sn:
                fr = node(c, fr)
            sr = node(c, sr)
            # "Until LSB(sn) is set": sn > 0 here (sn = tn = 0 stopped above), so this ends.
            while sn and not sn & 1:
                fn, sn, tn = fn >> 1, sn >> 1, tn >> 1
        else:
            sr = node(sr, c)
        fn, sn, tn = fn >> 1, sn >> 1, tn >> 1
    # Step 8.
    if tn != 0:
        raise ProofError("subtree consistency proof is too short")
    if fr != subtree_hash:
        raise ProofError(f"subtree consistency proof does not lead to the hash of [{start}, {end})")
    if sr != root_hash:
        raise ProofError(f"subtree consistency proof does not lead to the root of size {size}")


# --- tlog-witness size-0 rules --------------------------------------------------------------


def check_empty_tree_root(size: int, root_hash: bytes) -> None:
    """tlog-witness: a checkpoint of size 0 must carry SHA-256("") as its root.

    Raises :class:`ProofError` (a witness answers 422) otherwise; any other size passes.
    """
    if size == 0 and root_hash != EMPTY_ROOT:
        raise ProofError('a size-0 checkpoint must carry the empty-tree root SHA-256("")')


def verify_witness_consistency(
    old: int, old_root: bytes | None, size: int, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """tlog-witness: check an update from the stored (``old``, ``old_root``) to a new tree.

    * old = 0: trust on first use from the empty tree; the proof must be empty.
    * old = size: the proof must be empty and the roots identical.
    * otherwise: an RFC 6962 consistency proof.

    Requires: old <= size (the caller answers 400 otherwise) and ``old_root`` given when
    old > 0. Raises :class:`ProofError` (422) when the update is not provably consistent.
    """
    if old > size:
        raise UsageError(f"old size {old} is larger than the new size {size}")
    check_empty_tree_root(size, new_root)
    if old == 0:
        if proof:
            raise ProofError(f"an update from size 0 takes no proof, got {len(proof)} hashes")
        return
    if old_root is None:
        raise UsageError("old_root is required when old > 0")
    verify_consistency(old, size, old_root, new_root, proof)
