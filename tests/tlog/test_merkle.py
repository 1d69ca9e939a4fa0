"""Tests for tlog.merkle's proof verification on the transparency-dev/merkle vectors: the
RFC 6962 Merkle tree (https://www.rfc-editor.org/rfc/rfc6962, §2.1) and its consistency and
inclusion proofs as RFC 9162 verifies them (https://www.rfc-editor.org/rfc/rfc9162, §2.1.3-4).

The edge cases: the power-of-two prepend of consistency verification, the inner shift loop of
both verifications (every vector, and exhaustively in small trees), and the empty tree's root
against the empty leaf's hash. The vectors are testdata/transparency-dev-merkle (its README.md
gives the provenance). tests/tlog/test_merkle_reference.py checks tlog.merkle against a
literal transcription of the RFC. Test names keep the case numbers of tests/tlog/__init__.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tlog.helpers import (
    EMPTY_LEAF_B64,
    EMPTY_ROOT_B64,
    as_int,
    merkle_vector,
    verify_consistency_vector,
    verify_inclusion_vector,
)
from tlog.checkpoint import Checkpoint
from tlog.encoding import b64encode
from tlog.errors import ProofError
from tlog.merkle import (
    EMPTY_ROOT,
    MemoryHashStore,
    consistency_proof,
    fold_leaves,
    inclusion_proof,
    leaf_hash,
    right_edge,
    root,
    root_of_entries,
    stored_hash_count,
    verify_consistency,
    verify_inclusion,
)
from tlog.tiles import tile_root


def _check_consistency_vector(relpath: str) -> tuple[int, int]:
    vector = merkle_vector(relpath)
    assert vector["wantErr"] is False
    verify_consistency_vector(vector)
    return as_int(vector["size1"]), as_int(vector["size2"])


def test_edge_20_power_of_two_prepend() -> None:
    # transparency-dev/merkle testdata/consistency/{1,3,2}/happy-path.json
    # (testdata/transparency-dev-merkle/README.md).
    assert _check_consistency_vector("consistency/1/happy-path.json") == (1, 8)
    assert _check_consistency_vector("consistency/3/happy-path.json") == (2, 5)
    assert _check_consistency_vector("consistency/2/happy-path.json") == (6, 8)
    # Every power-of-two old size (where the old root is prepended) in small trees.
    store = MemoryHashStore()
    store.extend(leaf_hash(bytes([i])) for i in range(33))
    for size in range(1, 34):
        for old in (1, 2, 4, 8, 16, 32):
            if old <= size:
                proof = consistency_proof(old, size, store)
                verify_consistency(old, size, store.root(old), store.root(size), proof)
                with pytest.raises(ProofError):
                    verify_consistency(
                        old, size, store.root(old), store.root(size), [*proof, EMPTY_ROOT]
                    )


def test_edge_21_inner_shift_loop() -> None:
    # transparency-dev/merkle testdata/inclusion/{0..4}/happy-path.json; inclusion/3
    # (leaf 2 of 3) takes the shift loop: fn = sn = 2 is even after a left-side hash.
    for d in range(5):
        vector = merkle_vector(f"inclusion/{d}/happy-path.json")
        assert vector["wantErr"] is False
        verify_inclusion_vector(vector)
    assert _check_consistency_vector("consistency/4/happy-path.json") == (6, 7)
    assert _check_consistency_vector("consistency/0/happy-path.json") == (1, 1)
    # Exhaustively in small trees (every shape of the loops, e.g. consistency 5 → 6 shifts
    # after a left-side hash): every proof verifies, and fails at every other index.
    store = MemoryHashStore()
    store.extend(leaf_hash(bytes([i])) for i in range(24))
    for size in range(1, 25):
        r = store.root(size)
        for index in range(size):
            proof = inclusion_proof(index, size, store)
            verify_inclusion(index, size, leaf_hash(bytes([index])), proof, r)
            for other in range(size):
                if other != index and len(inclusion_proof(other, size, store)) == len(proof):
                    with pytest.raises(ProofError):
                        verify_inclusion(other, size, leaf_hash(bytes([index])), proof, r)
        for old in range(1, size + 1):
            proof = consistency_proof(old, size, store)
            verify_consistency(old, size, store.root(old), r, proof)


def test_edge_27_empty_tree_vs_empty_leaf() -> None:
    assert b64encode(EMPTY_ROOT) == EMPTY_ROOT_B64
    assert b64encode(leaf_hash(b"")) == EMPTY_LEAF_B64
    assert leaf_hash(b"") != EMPTY_ROOT
    assert root([]) == EMPTY_ROOT == tile_root(0, lambda t: b"")
    assert root_of_entries([]) == EMPTY_ROOT
    assert root_of_entries([b""]) == leaf_hash(b"")
    assert Checkpoint.parse(f"o\n0\n{EMPTY_ROOT_B64}\n".encode()).root == EMPTY_ROOT
    with pytest.raises(ProofError):
        Checkpoint.parse(f"o\n0\n{EMPTY_LEAF_B64}\n".encode())
    assert Checkpoint.parse(f"o\n1\n{EMPTY_LEAF_B64}\n".encode()).size == 1


# --- the right edge: what an append reads, and how a fold moves it --------------------------


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 600), st.integers(0, 40))
def test_fold_leaves_moves_the_right_edge_to_the_new_trees(start: int, k: int) -> None:
    tree = MemoryHashStore()
    tree.extend([leaf_hash(b"%d" % i) for i in range(start)])
    edge = right_edge(start)
    assert len(edge) == start.bit_count() and edge == sorted(edge)
    frontier = tree.read_hashes(edge)
    leaves = [leaf_hash(b"new %d" % i) for i in range(k)]
    added = fold_leaves(start, frontier, leaves)
    tree.extend(leaves)
    # The stored hashes are the array's new tail, and the frontier became the new tree's edge.
    assert added == tree.hashes[stored_hash_count(start) :]
    assert frontier == tree.read_hashes(right_edge(start + k))
