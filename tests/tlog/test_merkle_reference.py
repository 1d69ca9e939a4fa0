"""tlog.merkle against a literal RFC 6962 §2.1 reference written here.

The reference is RFC 6962 §2.1 (https://www.rfc-editor.org/rfc/rfc6962) transcribed as
recursion, with no bit tricks and no tlog code:

* ``MTH``, ``PATH``, ``PROOF`` and ``SUBPROOF`` are the RFC's definitions over Python lists
  ``D`` of entries, slicing exactly as the RFC does. They are exponential in nothing but slow
  in everything (every call re-hashes its slice), so they serve small trees and serve as the
  definition that the memoised version is checked against.
* :class:`Reference` is the same recursion over ranges ``D[lo:hi]`` of one fixed list of
  entries, with ``MTH(D[lo:hi])`` memoised on ``(lo, hi)``: the hash of a subtree is computed
  once and shared by every tree size that contains it, so trees of ~100k leaves cost one pass.

The reference itself is anchored to the transparency-dev/merkle reference data (the standard
8-leaf tree, copied byte for byte into ``testdata/transparency-dev-merkle``).

What is checked: roots for every size 0..256 (four code paths), inclusion proofs for every
(index, size) with size <= 256, consistency proofs for every 1 <= m <= n <= 256, the proof-size
formulas, the stored-hash layout, and Hypothesis-drawn indexes and sizes in a ~100k-leaf tree.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.vectors import TESTDATA
from tlog.encoding import MAX_INT63
from tlog.errors import UsageError
from tlog.merkle import (
    EMPTY_ROOT,
    MemoryHashStore,
    consistency_proof,
    consistency_proof_size,
    inclusion_proof,
    inclusion_proof_size,
    leaf_hash,
    node_hash,
    root,
    root_of_entries,
    split_stored_hash_index,
    stored_hash_count,
    stored_hash_index,
    tree_hash,
    verify_consistency,
    verify_inclusion,
)

MERKLE_REFERENCE = TESTDATA / "transparency-dev-merkle" / "testonly_reference.json"

SMALL = 256
"""Every size, index and pair up to this size is checked exhaustively."""

BIG = 100_003
"""Leaves in the large tree that Hypothesis draws sizes and indexes from (not a power of 2)."""


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _k(n: int) -> int:
    """The largest power of two strictly less than n (RFC 6962 §2.1), for n > 1."""
    k = 1
    while 2 * k < n:
        k *= 2
    return k


# --- RFC 6962 §2.1, literally --------------------------------------------------------------


def MTH(D: Sequence[bytes]) -> bytes:
    """MTH(D[n]): the Merkle Tree Hash of the list of entries D."""
    n = len(D)
    if n == 0:
        return _sha256(b"")
    if n == 1:
        return _sha256(b"\x00" + D[0])
    k = _k(n)
    return _sha256(b"\x01" + MTH(D[0:k]) + MTH(D[k:n]))


def PATH(m: int, D: Sequence[bytes]) -> list[bytes]:
    """PATH(m, D[n]): the audit path of leaf m, from the leaf's sibling up."""
    n = len(D)
    if n == 1:
        return []
    k = _k(n)
    if m < k:
        return [*PATH(m, D[0:k]), MTH(D[k:n])]
    return [*PATH(m - k, D[k:n]), MTH(D[0:k])]


def PROOF(m: int, D: Sequence[bytes]) -> list[bytes]:
    """PROOF(m, D[n]): the consistency proof from the first m entries to all of D."""
    return SUBPROOF(m, D, True)


def SUBPROOF(m: int, D: Sequence[bytes], b: bool) -> list[bytes]:
    """SUBPROOF(m, D[n], b), RFC 6962 §2.1.2."""
    n = len(D)
    if m == n:
        return [] if b else [MTH(D)]
    k = _k(n)
    if m <= k:
        return [*SUBPROOF(m, D[0:k], b), MTH(D[k:n])]
    return [*SUBPROOF(m - k, D[k:n], False), MTH(D[0:k])]


# --- the same recursion over ranges, memoised ----------------------------------------------


class Reference:
    """RFC 6962 over ranges ``D[lo:hi]`` of fixed ``entries``; MTH memoised on (lo, hi).

    Each method is the function above with ``D`` replaced by ``(lo, hi)``; indexes and old
    sizes are relative to ``lo`` as in the RFC.
    """

    def __init__(self, entries: Sequence[bytes]) -> None:
        self.entries = entries
        self._mth: dict[tuple[int, int], bytes] = {}

    def leaf(self, i: int) -> bytes:
        return self.mth(i, i + 1)

    def mth(self, lo: int, hi: int) -> bytes:
        key = (lo, hi)
        h = self._mth.get(key)
        if h is None:
            n = hi - lo
            if n == 0:
                h = _sha256(b"")
            elif n == 1:
                h = _sha256(b"\x00" + self.entries[lo])
            else:
                k = _k(n)
                h = _sha256(b"\x01" + self.mth(lo, lo + k) + self.mth(lo + k, hi))
            self._mth[key] = h
        return h

    def path(self, m: int, lo: int, hi: int) -> list[bytes]:
        n = hi - lo
        if n == 1:
            return []
        k = _k(n)
        if m < k:
            return [*self.path(m, lo, lo + k), self.mth(lo + k, hi)]
        return [*self.path(m - k, lo + k, hi), self.mth(lo, lo + k)]

    def proof(self, m: int, n: int) -> list[bytes]:
        return self.subproof(m, 0, n, True)

    def subproof(self, m: int, lo: int, hi: int, b: bool) -> list[bytes]:
        n = hi - lo
        if m == n:
            return [] if b else [self.mth(lo, hi)]
        k = _k(n)
        if m <= k:
            return [*self.subproof(m, lo, lo + k, b), self.mth(lo + k, hi)]
        return [*self.subproof(m - k, lo + k, hi, False), self.mth(lo, lo + k)]


def _entry(i: int) -> bytes:
    # Distinct entries, the empty one (whose leaf hash is not the empty-tree hash) first.
    return b"" if i == 0 else b"entry %d" % i


@functools.cache
def _small() -> tuple[list[bytes], Reference, MemoryHashStore]:
    entries = [_entry(i) for i in range(SMALL)]
    store = MemoryHashStore()
    store.extend(_sha256(b"\x00" + e) for e in entries)
    return entries, Reference(entries), store


@functools.cache
def _big() -> tuple[Reference, MemoryHashStore]:
    entries = [_entry(i) for i in range(BIG)]
    store = MemoryHashStore()
    store.extend(_sha256(b"\x00" + e) for e in entries)
    return Reference(entries), store


# --- the reference, checked -----------------------------------------------------------------


def test_reference_matches_transparency_dev_merkle_data() -> None:
    data = json.loads(MERKLE_REFERENCE.read_text())
    entries = [bytes.fromhex(h) for h in data["leaf_inputs_hex"]]
    for size, want in enumerate(data["root_hashes_hex_by_size"]):
        assert MTH(entries[:size]).hex() == want
    for level, hashes in enumerate(data["node_hashes_hex_by_level"]):
        for n, want in enumerate(hashes):
            assert MTH(entries[n << level : (n + 1) << level]).hex() == want
    for case in data["inclusion_proofs"]:
        got = PATH(case["index"], entries[: case["size"]])
        assert [h.hex() for h in got] == case["proof_hex"]
    for case in data["consistency_proofs"]:
        got = PROOF(case["old_size"], entries[: case["size"]])
        assert [h.hex() for h in got] == case["proof_hex"]


def test_memoised_reference_equals_literal_reference() -> None:
    entries, ref, _ = _small()
    for n in range(65):
        assert ref.mth(0, n) == MTH(entries[:n])
        for m in range(n):
            assert ref.path(m, 0, n) == PATH(m, entries[:n])
            assert ref.proof(m + 1, n) == PROOF(m + 1, entries[:n])


def test_k_is_largest_power_of_two_below_n() -> None:
    for n in range(2, 5000):
        k = _k(n)
        assert k < n <= 2 * k
        assert k & (k - 1) == 0


# --- roots ----------------------------------------------------------------------------------


def test_roots_match_reference_every_size_0_to_256() -> None:
    entries, ref, store = _small()
    leaves = [_sha256(b"\x00" + e) for e in entries]
    growing = MemoryHashStore()
    assert growing.root() == EMPTY_ROOT == ref.mth(0, 0)
    for n in range(SMALL + 1):
        want = ref.mth(0, n)
        assert root(leaves[:n]) == want, n
        assert root_of_entries(entries[:n]) == want, n
        assert store.root(n) == want, n
        assert tree_hash(n, store) == want, n
        assert growing.root() == want, n
        if n < SMALL:
            growing.append(leaves[n])


def test_leaf_and_node_hash_match_reference() -> None:
    entries, ref, _ = _small()
    for i, e in enumerate(entries[:32]):
        assert leaf_hash(e) == ref.leaf(i)
    for lo in range(0, 32, 2):
        assert node_hash(ref.leaf(lo), ref.leaf(lo + 1)) == ref.mth(lo, lo + 2)


# --- proofs, exhaustive ---------------------------------------------------------------------


def test_inclusion_proofs_match_reference_every_index_every_size() -> None:
    _, ref, store = _small()
    for n in range(1, SMALL + 1):
        tree_root = ref.mth(0, n)
        for i in range(n):
            want = ref.path(i, 0, n)
            got = inclusion_proof(i, n, store)
            assert got == want, (i, n)
            assert inclusion_proof_size(i, n) == len(want), (i, n)
            verify_inclusion(i, n, ref.leaf(i), got, tree_root)


def test_consistency_proofs_match_reference_every_pair() -> None:
    _, ref, store = _small()
    for n in range(1, SMALL + 1):
        new_root = ref.mth(0, n)
        for m in range(1, n + 1):
            want = ref.proof(m, n)
            got = consistency_proof(m, n, store)
            assert got == want, (m, n)
            assert consistency_proof_size(m, n) == len(want), (m, n)
            verify_consistency(m, n, ref.mth(0, m), new_root, got)


def test_proofs_outside_the_tree_are_usage_errors() -> None:
    _, _, store = _small()
    for n in (1, 2, 7, 256):
        with pytest.raises(UsageError):
            inclusion_proof(n, n, store)
        with pytest.raises(UsageError):
            inclusion_proof(-1, n, store)
        with pytest.raises(UsageError):
            consistency_proof(0, n, store)
        with pytest.raises(UsageError):
            consistency_proof(n + 1, n, store)


# --- stored hashes --------------------------------------------------------------------------


def test_stored_hash_layout_matches_reference() -> None:
    """Every complete subtree's hash sits at stored_hash_index, and nothing else is stored."""
    _, ref, store = _small()
    seen = set()
    level = 0
    while (1 << level) <= SMALL:
        for n in range(SMALL >> level):
            index = stored_hash_index(level, n)
            assert store.hashes[index] == ref.mth(n << level, (n + 1) << level), (level, n)
            assert split_stored_hash_index(index) == (level, n)
            seen.add(index)
        level += 1
    assert seen == set(range(len(store.hashes)))


def test_split_stored_hash_index_inverts_every_small_index() -> None:
    for index in range(20_000):
        level, n = split_stored_hash_index(index)
        assert level >= 0
        assert n >= 0
        assert stored_hash_index(level, n) == index


@settings(max_examples=500, deadline=None)
@given(level=st.integers(0, 62), n=st.integers(0, MAX_INT63))
def test_stored_hash_index_and_split_are_inverse(level: int, n: int) -> None:
    if (n + 1) << level > MAX_INT63 + 1:
        n = ((MAX_INT63 + 1) >> level) - 1  # keep the subtree inside a tree of size <= 2^63
    assert split_stored_hash_index(stored_hash_index(level, n)) == (level, n)


@settings(max_examples=500, deadline=None)
@given(index=st.integers(0, 2 * MAX_INT63))
def test_split_then_stored_hash_index_is_identity(index: int) -> None:
    level, n = split_stored_hash_index(index)
    assert stored_hash_index(level, n) == index


def test_stored_hash_count_matches_store_length_every_size() -> None:
    store = MemoryHashStore()
    assert stored_hash_count(0) == len(store.hashes) == 0
    for size in range(1, 5000):
        store.append(_sha256(b"%d" % size))
        assert stored_hash_count(size) == len(store.hashes), size
    _, big = _big()
    assert stored_hash_count(BIG) == len(big.hashes)


@settings(max_examples=500, deadline=None)
@given(size=st.integers(0, MAX_INT63))
def test_stored_hash_count_counts_complete_subtrees(size: int) -> None:
    # A tree of `size` leaves has floor(size / 2^level) complete subtrees at each level.
    assert stored_hash_count(size) == sum(size >> level for level in range(64))


# --- a large tree, Hypothesis-drawn ---------------------------------------------------------


def _sizes(low: int) -> st.SearchStrategy[int]:
    """Sizes in [low, BIG], with powers of two and their neighbours drawn often."""
    near_powers = [
        s for k in range(18) for s in ((1 << k) - 1, 1 << k, (1 << k) + 1) if low <= s <= BIG
    ]
    return st.one_of(st.integers(low, BIG), st.sampled_from(near_powers), st.just(BIG))


@settings(max_examples=200, deadline=None)
@given(size=_sizes(0))
def test_large_tree_root_matches_reference(size: int) -> None:
    ref, store = _big()
    assert tree_hash(size, store) == ref.mth(0, size)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), size=_sizes(1))
def test_large_tree_inclusion_proof_matches_reference(data: st.DataObject, size: int) -> None:
    ref, store = _big()
    index = data.draw(st.one_of(st.integers(0, size - 1), st.sampled_from([0, size - 1])))
    want = ref.path(index, 0, size)
    got = inclusion_proof(index, size, store)
    assert got == want
    assert inclusion_proof_size(index, size) == len(want)
    verify_inclusion(index, size, ref.leaf(index), got, ref.mth(0, size))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), size=_sizes(1))
def test_large_tree_consistency_proof_matches_reference(data: st.DataObject, size: int) -> None:
    ref, store = _big()
    old = data.draw(st.one_of(st.integers(1, size), st.sampled_from([1, size])))
    want = ref.proof(old, size)
    got = consistency_proof(old, size, store)
    assert got == want
    assert consistency_proof_size(old, size) == len(want)
    verify_consistency(old, size, ref.mth(0, old), ref.mth(0, size), got)


@settings(max_examples=200, deadline=None)
@given(level=st.integers(0, 16), data=st.data())
def test_large_tree_stored_hashes_match_reference(level: int, data: st.DataObject) -> None:
    ref, store = _big()
    n = data.draw(st.integers(0, (BIG >> level) - 1))
    got = store.hashes[stored_hash_index(level, n)]
    assert got == ref.mth(n << level, (n + 1) << level)
