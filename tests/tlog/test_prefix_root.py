""":func:`tlog.merkle.proven_prefix_root` and :func:`tlog.tiles.proven_prefix_from_tiles`: the
root a consistency proof proves the new tree to have at the old size, every old size
included — a power of two too, where the proof carries no root of its own and the tree's node
over its first leaves, read from the tiles, must be the one the proof folds from."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tlog.merkle import MemoryHashStore, consistency_proof, leaf_hash, proven_prefix_root
from tlog.tiles import (
    TileHashReader,
    consistency_tiles,
    prefix_tiles,
    proven_prefix_from_tiles,
    tiles_from_leaf_hashes,
)


def _leaves(size: int, salt: int = 0) -> list[bytes]:
    return [leaf_hash(b"%d/%d" % (salt, i)) for i in range(size)]


def _tree(size: int, salt: int = 0) -> MemoryHashStore:
    tree = MemoryHashStore()
    tree.extend(_leaves(size, salt))
    return tree


@given(st.integers(2, 600).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n - 1))))
def test_the_tree_s_own_prefix_root_every_old_size(sizes: tuple[int, int]) -> None:
    size, old = sizes
    tree = _tree(size)
    proof = consistency_proof(old, size, tree)
    power = old & (old - 1) == 0
    want = tree.root(old)
    if power:
        # The proof alone names no root at a power of two; the node read elsewhere does.
        assert proven_prefix_root(old, size, tree.root(size), proof) is None
        assert proven_prefix_root(old, size, tree.root(size), proof, node=want) == want
        wrong = bytes([want[0] ^ 1]) + want[1:]
        assert proven_prefix_root(old, size, tree.root(size), proof, node=wrong) is None
    else:
        assert proven_prefix_root(old, size, tree.root(size), proof) == want
    # From the tiles: the same root, reading at most the prefix tile beyond the proof's tiles.
    tiles = tiles_from_leaf_hashes(_leaves(size))
    read: list[object] = []

    def read_tile(t: object) -> bytes:
        read.append(t)
        return tiles[t]  # type: ignore[index]

    reader = TileHashReader(size, read_tile)
    assert proven_prefix_from_tiles(old, tree.root(size), proof, reader) == want
    assert set(read) <= set(consistency_tiles(old, size)) | set(prefix_tiles(old, size))
    assert bool(prefix_tiles(old, size)) == power


@given(
    st.integers(2, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n - 1))),
    st.data(),
)
def test_every_flipped_proof_byte_proves_nothing(
    sizes: tuple[int, int], data: st.DataObject
) -> None:
    size, old = sizes
    tree = _tree(size)
    proof = consistency_proof(old, size, tree)
    node = tree.root(old) if old & (old - 1) == 0 else None
    i = data.draw(st.integers(0, len(proof) - 1))
    j = data.draw(st.integers(0, 31))
    bad = list(proof)
    bad[i] = bad[i][:j] + bytes([bad[i][j] ^ 1]) + bad[i][j + 1 :]
    assert proven_prefix_root(old, size, tree.root(size), bad, node=node) is None


def test_a_fork_at_a_power_of_two_is_another_root() -> None:
    # The forked tree's node over its first 256 leaves is proven by its own proof: the root it
    # gives at 256 is not the honest one.
    honest, forked = _tree(256), _tree(300, salt=1)
    proof = consistency_proof(256, 300, forked)
    node = forked.root(256)
    got = proven_prefix_root(256, 300, forked.root(300), proof, node=node)
    assert got == node and got != honest.root(256)
