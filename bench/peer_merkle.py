"""Times the peer Merkle-tree libraries. Run INSIDE ``.venv-peers`` by :mod:`bench.merkle_bench`.

Run, it needs Python >= 3.12 with aics-tlog and pymerkle installed, and only the standard
library besides (the peers are loaded with :func:`importlib.import_module` so that type
checking this file does not need them). The project imports only its timer,
:func:`time_ops`, into :mod:`bench.merkle_bench`, so that both sides are timed by one copy.

Input, one JSON object on stdin::

    {"size": 1000000,            tree size to build (entries are 8-byte big-endian counters)
     "reps": 5,                  repetitions: best of, for builds and for proof passes
     "build_budget_s": 40.0,     stop repeating a build once this much time is spent on it
     "build_limit_s": 120.0,     a single build estimated longer than this uses a smaller size
     "proof_budget_s": 5.0,      time allowed per proof operation per variant
     "inclusion": [i, ...],      leaf indices in [0, size)
     "consistency": [m, ...],    old sizes in [1, size]
     "samples": 3}               how many proofs to return for cross-checking

Output, one JSON object on stdout: ``{"python": "3.12.1", "packages": {...}, "variants":
[...]}``, one variant per way of using a peer, each with ``name``, ``size`` (smaller than the
requested size when the build would take too long; ``size_note`` then says why), ``root``
(hex), ``root_s`` (best build-to-root time), ``root_reps``, ``inclusion_s`` and
``consistency_s`` (best mean seconds per proof) with their op counts, ``*_samples`` (RFC 6962
proofs in hex, or null when the peer's proofs have another shape), ``self_check`` (the peer's
own verifier run on one proof of each kind) and ``error`` (null, or why the variant failed).
Progress goes to stderr.

Timing is the same as on our side (bench/merkle_bench.py): perf_counter, garbage collector off
while timing, best of ``reps``; a size that does not fit is remapped as ``i % size`` and
``(m - 1) % size + 1``, which the caller mirrors.
"""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import json
import math
import platform
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any


def _log(message: str) -> None:
    print(f"  [peer_merkle] {message}", file=sys.stderr, flush=True)


def time_ops(
    fn: Callable[[int], object], args: Sequence[int], reps: int, budget_s: float
) -> tuple[float, int]:
    """Best mean seconds per call of ``fn`` over up to ``reps`` passes over ``args``.

    Stops early once ``budget_s`` is spent in total (a pass may then be partial); the clock is
    read after every call, as some peers take a large part of a second per call, and that read
    (well under 1 µs) is part of every figure on both sides. Returns the best mean and the
    number of calls in that pass. bench/merkle_bench.py imports this one, so that both sides
    are timed by the same code.
    """
    best, best_ops, spent = math.inf, 0, 0.0
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(reps):
            n = 0
            start = perf_counter()
            for a in args:
                fn(a)
                n += 1
                if spent + perf_counter() - start > budget_s:
                    break
            elapsed = perf_counter() - start
            spent += elapsed
            if n and elapsed / n < best:
                best, best_ops = elapsed / n, n
            if spent > budget_s:
                break
    finally:
        if enabled:
            gc.enable()
    return best, best_ops


@dataclass(frozen=True)
class Variant:
    """One way of using a peer: how to build it from entries and ask it for proofs."""

    name: str
    build: Callable[[list[bytes]], Any]
    """Entries -> a state whose root is known (the timed "root of N entries" operation)."""
    root: Callable[[Any], bytes]
    inclusion: Callable[[Any, int, int], Any]
    """(state, 0-based index, size) -> proof, as the peer returns it."""
    consistency: Callable[[Any, int, int], Any]
    """(state, old size, size) -> proof, as the peer returns it."""
    rfc_inclusion: Callable[[Any], list[bytes] | None]
    rfc_consistency: Callable[[Any], list[bytes] | None]
    self_check: Callable[[Any, int, int, int], str]
    """(state, size, index, old size) -> what the peer's own verifiers said."""


def _aics_variants() -> list[Variant]:
    tree_mod = importlib.import_module("aics_tlog.tree")
    tiles = importlib.import_module("aics_tlog.tiles")
    hashing = importlib.import_module("aics_tlog.hashing")

    def check(
        root_at: Callable[[Any, int], bytes],
        incl: Callable[[Any, int, int], Any],
        cons: Callable[[Any, int, int], Any],
    ) -> Callable[[Any, int, int, int], str]:
        def run(state: Any, size: int, i: int, m: int) -> str:
            new, old = root_at(state, size), root_at(state, m)
            leaf = hashing.leaf_hash(i.to_bytes(8, "big"))
            ok_i = bool(tree_mod.verify_inclusion(leaf, i, size, incl(state, i, size), new))
            ok_c = bool(tree_mod.verify_consistency(m, size, old, new, cons(state, m, size)))
            return f"aics_tlog verify_inclusion: {ok_i}, verify_consistency: {ok_c}"

        return run

    def mt_build(entries: list[bytes]) -> Any:
        tree = tree_mod.MerkleTree(entries)
        tree.root()  # builds and caches the hash levels of this size: the tree is proof-ready
        return tree

    def mt_root_at(tree: Any, size: int) -> bytes:
        return bytes(tree.root(size))

    def mt_incl(tree: Any, i: int, size: int) -> Any:
        return tree.inclusion_proof(i, size)

    def mt_cons(tree: Any, m: int, size: int) -> Any:
        return tree.consistency_proof(m, size)

    def tiles_build(entries: list[bytes]) -> Any:
        reader = tiles.TileWriter(entries).to_memory_reader()
        return (reader, len(entries), bytes(tiles.tree_root_from_tiles(reader, len(entries))))

    def tiles_root_at(state: Any, size: int) -> bytes:
        return bytes(tiles.tree_root_from_tiles(state[0], size, state[1]))

    def tiles_incl(state: Any, i: int, size: int) -> Any:
        return tiles.inclusion_proof_from_tiles(state[0], i, size)

    def tiles_cons(state: Any, m: int, size: int) -> Any:
        return tiles.consistency_proof_from_tiles(state[0], m, size)

    def as_list(proof: Any) -> list[bytes]:
        return [bytes(h) for h in proof]

    return [
        Variant(
            name="aics-tlog MerkleTree (in memory, hash levels cached)",
            build=mt_build,
            root=lambda tree: bytes(tree.root()),
            inclusion=mt_incl,
            consistency=mt_cons,
            rfc_inclusion=as_list,
            rfc_consistency=as_list,
            self_check=check(mt_root_at, mt_incl, mt_cons),
        ),
        Variant(
            name="aics-tlog tiles (materialise_tiles, MemoryTileReader)",
            build=tiles_build,
            root=lambda state: bytes(state[2]),
            inclusion=tiles_incl,
            consistency=tiles_cons,
            rfc_inclusion=as_list,
            rfc_consistency=as_list,
            self_check=check(tiles_root_at, tiles_incl, tiles_cons),
        ),
    ]


def _pymerkle_variants() -> list[Variant]:
    pymerkle = importlib.import_module("pymerkle")

    def inmem_build(entries: list[bytes]) -> Any:
        return pymerkle.InmemoryTree.init_from_entries(entries)

    def sqlite_build(entries: list[bytes]) -> Any:
        tree = pymerkle.SqliteTree(":memory:")
        tree.append_entries(entries)
        tree.get_root()  # fills the subroot cache the proofs then read
        return tree

    # pymerkle counts leaves from one; its inclusion path starts with the leaf hash itself,
    # then follows RFC 6962 PATH order. Its consistency path has its own shape (rule, subset).
    def incl(tree: Any, i: int, size: int) -> Any:
        return tree.prove_inclusion(i + 1, size)

    def cons(tree: Any, m: int, size: int) -> Any:
        return tree.prove_consistency(m, size)

    def rfc_incl(proof: Any) -> list[bytes]:
        return [bytes(h) for h in proof.path[1:]]

    def check(tree: Any, size: int, i: int, m: int) -> str:
        new = tree.get_root(size)
        old = tree.get_root(m)
        try:
            pymerkle.verify_inclusion(tree.get_leaf(i + 1), new, incl(tree, i, size))
            ok_i = True
        except pymerkle.InvalidProof:
            ok_i = False
        try:
            pymerkle.verify_consistency(old, new, cons(tree, m, size))
            ok_c = True
        except pymerkle.InvalidProof:
            ok_c = False
        return f"pymerkle verify_inclusion: {ok_i}, verify_consistency: {ok_c}"

    builds = (("InmemoryTree", inmem_build), ("SqliteTree(':memory:')", sqlite_build))
    return [
        Variant(
            name=f"pymerkle {pymerkle.__version__} {kind}",
            build=build,
            root=lambda tree: bytes(tree.get_root()),
            inclusion=incl,
            consistency=cons,
            rfc_inclusion=rfc_incl,
            rfc_consistency=lambda proof: None,
            self_check=check,
        )
        for kind, build in builds
    ]


def _timed_build(variant: Variant, entries: list[bytes]) -> tuple[float, Any, bytes]:
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = perf_counter()
        state = variant.build(entries)
        root = variant.root(state)
        elapsed = perf_counter() - start
    finally:
        if enabled:
            gc.enable()
    return elapsed, state, root


def _choose_size(variant: Variant, size: int, limit_s: float) -> tuple[int, str]:
    # Time a build at 1/16 of the size and extrapolate as n log n; a build estimated beyond the
    # limit is replaced by the largest round size that fits, and the report says so.
    probe = max(size // 16, 2)
    if probe >= size:
        return size, ""
    elapsed, _, _ = _timed_build(variant, [n.to_bytes(8, "big") for n in range(probe)])
    estimate = elapsed * (size / probe) * math.log2(size) / math.log2(probe)
    if estimate <= limit_s:
        return size, ""
    fit = int(size * limit_s / estimate)
    digits = max(len(str(fit)) - 2, 0)
    fit = max(fit // 10**digits * 10**digits, probe)
    note = (
        f"built at {fit:,} leaves, not {size:,}: a build at {size:,} was estimated at "
        f"{estimate:.3g} s, over the {limit_s:g} s limit"
    )
    return fit, note


def measure(variant: Variant, config: dict[str, Any]) -> dict[str, Any]:
    """Every measurement of one variant, as the JSON object described in the module docstring."""
    requested: int = config["size"]
    reps: int = config["reps"]
    out: dict[str, Any] = {"name": variant.name, "error": None}
    size, note = _choose_size(variant, requested, float(config["build_limit_s"]))
    out["size"], out["size_note"] = size, note
    entries = [n.to_bytes(8, "big") for n in range(size)]
    best, spent, done = math.inf, 0.0, 0
    state: Any = None
    root = b""
    for _ in range(reps):
        state = None  # let the previous build go before making the next one
        elapsed, state, root = _timed_build(variant, entries)
        best, spent, done = min(best, elapsed), spent + elapsed, done + 1
        _log(f"{variant.name}: build + root of {size:,} entries in {elapsed:.3f} s")
        if spent > float(config["build_budget_s"]):
            break
    out["root"], out["root_s"], out["root_reps"] = root.hex(), best, done
    incl_args = [i % size for i in config["inclusion"]]
    cons_args = [(m - 1) % size + 1 for m in config["consistency"]]
    budget = float(config["proof_budget_s"])
    out["inclusion_s"], out["inclusion_ops"] = time_ops(
        lambda i: variant.inclusion(state, i, size), incl_args, reps, budget
    )
    out["consistency_s"], out["consistency_ops"] = time_ops(
        lambda m: variant.consistency(state, m, size), cons_args, reps, budget
    )
    _log(
        f"{variant.name}: inclusion {out['inclusion_s'] * 1e6:.1f} µs "
        f"({out['inclusion_ops']} ops), consistency {out['consistency_s'] * 1e6:.1f} µs "
        f"({out['consistency_ops']} ops)"
    )
    samples: int = config["samples"]
    incl_samples: list[object] = []
    for i in incl_args[:samples]:
        proof = variant.rfc_inclusion(variant.inclusion(state, i, size))
        incl_samples.append(None if proof is None else [i, [h.hex() for h in proof]])
    cons_samples: list[object] = []
    for m in cons_args[:samples]:
        proof = variant.rfc_consistency(variant.consistency(state, m, size))
        cons_samples.append(None if proof is None else [m, [h.hex() for h in proof]])
    out["inclusion_samples"] = incl_samples if None not in incl_samples else None
    out["consistency_samples"] = cons_samples if None not in cons_samples else None
    out["self_check"] = variant.self_check(state, size, incl_args[0], cons_args[0])
    return out


def main() -> None:
    config: dict[str, Any] = json.load(sys.stdin)
    packages = {}
    for name in ("aics-tlog", "pymerkle"):
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            packages[name] = "not installed"
    variants: list[dict[str, Any]] = []
    for loader in (_aics_variants, _pymerkle_variants):
        try:
            found = loader()
        except Exception as e:  # a peer that does not import is reported, the others still run
            variants.append({"name": loader.__name__, "error": f"{type(e).__name__}: {e}"})
            continue
        for variant in found:
            try:
                variants.append(measure(variant, config))
            except Exception as e:  # one failing variant must not hide the others
                traceback.print_exc(file=sys.stderr)
                variants.append({"name": variant.name, "error": f"{type(e).__name__}: {e}"})
            gc.collect()
    json.dump(
        {"python": platform.python_version(), "packages": packages, "variants": variants},
        sys.stdout,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
