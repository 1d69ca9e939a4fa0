"""Merkle-tree benchmark: tlog.merkle against a plain-hashlib floor and against peer libraries.

Entries are 8-byte big-endian counters ``0, 1, ..., size-1``; the full run uses 1,000,000.

(a) Root. :func:`tlog.merkle.root_of_entries` against :func:`floor_root`, the most direct
    plain-hashlib loop (a list comprehension of leaf hashes, then each level paired with
    ``zip(it, it)`` and an odd last node carried up). Repetitions are interleaved, alternating
    which goes first, and the best of each is kept. Target: ours within 1.15x of the floor.
(b) Proofs from stored hashes. A :class:`tlog.merkle.MemoryHashStore` holding all leaf hashes
    answers :func:`tlog.merkle.inclusion_proof` for random indices and
    :func:`tlog.merkle.consistency_proof` for random old sizes against the full size; the
    figure is the best mean over passes. Target: at most 50 µs per proof.
(c) Peers. aics-tlog 0.2.1 and pymerkle (latest) run the same operations in ``.venv-peers``
    (see :mod:`bench.peers` and bench/peer_merkle.py) when a Python >= 3.12 is available; a
    peer's "root" is its build from entries to a known root, which also makes it proof-ready.
    Their roots and RFC-shaped proofs are compared with ours, so a wrong peer figure shows.

Every timing uses ``time.perf_counter`` with the garbage collector off (as :mod:`timeit`
does), on both sides. Ratios are ours / theirs: below 1 means ours is faster.
"""

from __future__ import annotations

import gc
import hashlib
import math
import platform
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any, TypeVar

from bench import peers
from bench.peer_merkle import time_ops  # the peer script's timer: both sides timed alike
from tlog import merkle

TITLE = "merkle"

ROOT_RATIO_TARGET = 1.15
PROOF_TARGET_S = 50e-6
TARGET_SIZE = 1_000_000

PEER_SCRIPT = Path(__file__).resolve().parent / "peer_merkle.py"

T = TypeVar("T")

Row = tuple[str, str, str, str, str]
"""Operation, ours, compared with, theirs, ratio (ours / theirs)."""


@dataclass(frozen=True)
class Config:
    """Sizes, repetitions and time budgets of one run."""

    size: int
    reps: int
    proofs: int
    """Random indices (and as many random old sizes) per proof pass."""
    proof_budget_s: float
    """Time allowed per proof operation, over all passes, for each implementation."""
    build_budget_s: float
    """A peer's builds stop repeating once this much time is spent."""
    peer_timeout_s: float
    samples: int = 3
    seed: int = 20240229


FULL = Config(
    size=TARGET_SIZE,
    reps=5,
    proofs=20_000,
    proof_budget_s=5.0,
    build_budget_s=40.0,
    peer_timeout_s=3600.0,
)
QUICK = Config(
    size=50_000,
    reps=3,
    proofs=2_000,
    proof_budget_s=1.0,
    build_budget_s=5.0,
    peer_timeout_s=900.0,
)


@dataclass
class Section:
    """What one benchmark module reports: a table, targets and notes."""

    title: str
    rows: list[Row] = field(default_factory=list)
    targets: list[tuple[str, bool]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _log(message: str) -> None:
    print(f"  [merkle] {message}", file=sys.stderr, flush=True)


def floor_root(entries: Sequence[bytes]) -> bytes:
    """The plain-hashlib floor: RFC 6962 root of ``entries`` by the most direct loop.

    Requires: entries is not empty.
    """
    sha = hashlib.sha256
    level = [sha(b"\x00" + e).digest() for e in entries]
    while len(level) > 1:
        odd = level[-1] if len(level) & 1 else None
        it = iter(level)
        level = [sha(b"\x01" + a + b).digest() for a, b in zip(it, it, strict=False)]
        if odd is not None:
            level.append(odd)
    return level[0]


def time_once(fn: Callable[[], T]) -> tuple[float, T]:
    """Seconds one call of ``fn`` takes with the garbage collector off, and its result."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = perf_counter()
        result = fn()
        elapsed = perf_counter() - start
    finally:
        if enabled:
            gc.enable()
    return elapsed, result


def fmt_time(seconds: float) -> str:
    """A duration with three significant figures in s, ms or µs."""
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.1f} µs"


def fmt_ratio(ours: float, theirs: float) -> str:
    """``ours / theirs`` as ``0.87x``; below 0.1 as ``1/2590x`` (ours 2590 times faster)."""
    if theirs <= 0 or ours <= 0:
        return "n/a"
    ratio = ours / theirs
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"1/{1 / ratio:.0f}x"


@dataclass
class Ours:
    """Our figures at one tree size."""

    size: int
    root_s: float
    fill_s: float
    inclusion_s: float
    inclusion_ops: int
    consistency_s: float
    consistency_ops: int


class OurSide:
    """Our measurements, made once per tree size a comparison needs."""

    def __init__(self, config: Config, entries: list[bytes], store: merkle.MemoryHashStore):
        self.config = config
        self.entries = entries
        self.store = store
        self.cache: dict[int, Ours] = {}

    def put(self, ours: Ours) -> None:
        self.cache[ours.size] = ours

    def at(self, size: int, inclusion: Sequence[int], consistency: Sequence[int]) -> Ours:
        """Our figures at ``size`` <= the full size, the indices remapped as the peers do."""
        if size in self.cache:
            return self.cache[size]
        _log(f"measuring ours again at {size:,} leaves to match a peer")
        c = self.config
        part = self.entries[:size]
        root_s = min(time_once(lambda: merkle.root_of_entries(part))[0] for _ in range(c.reps))
        fill_s = min(time_once(lambda: _fill(part))[0] for _ in range(min(c.reps, 3)))
        ours = Ours(
            size, root_s, fill_s, *_proof_times(self.store, size, inclusion, consistency, c)
        )
        self.cache[size] = ours
        return ours


def _fill(entries: Sequence[bytes]) -> merkle.MemoryHashStore:
    store = merkle.MemoryHashStore()
    store.extend(map(merkle.leaf_hash, entries))
    return store


def _proof_times(
    store: merkle.MemoryHashStore,
    size: int,
    inclusion: Sequence[int],
    consistency: Sequence[int],
    c: Config,
) -> tuple[float, int, float, int]:
    # The store may be larger than size: proofs for any smaller tree come from the same hashes.
    incl = [i % size for i in inclusion]
    cons = [(m - 1) % size + 1 for m in consistency]
    incl_s, incl_ops = time_ops(
        lambda i: merkle.inclusion_proof(i, size, store), incl, c.reps, c.proof_budget_s
    )
    cons_s, cons_ops = time_ops(
        lambda m: merkle.consistency_proof(m, size, store), cons, c.reps, c.proof_budget_s
    )
    return incl_s, incl_ops, cons_s, cons_ops


def _check_ours(store: merkle.MemoryHashStore, root: bytes, size: int, rng: random.Random) -> None:
    # The figures mean nothing if the proofs are wrong: verify a few (untimed).
    if store.root(size) != root:
        raise AssertionError("MemoryHashStore root differs from root_of_entries")
    for _ in range(20):
        i = rng.randrange(size)
        leaf = merkle.leaf_hash(i.to_bytes(8, "big"))
        merkle.verify_inclusion(i, size, leaf, merkle.inclusion_proof(i, size, store), root)
        m = rng.randrange(1, size + 1)
        proof = merkle.consistency_proof(m, size, store)
        merkle.verify_consistency(m, size, store.root(m), root, proof)


def _cross_check(variant: dict[str, Any], store: merkle.MemoryHashStore, ours_root: bytes) -> str:
    # Compare a peer's root and RFC-shaped proofs with ours; say what agreed.
    size: int = variant["size"]
    said = ["root identical" if variant["root"] == ours_root.hex() else "ROOT DIFFERS"]
    for key, prove in (
        ("inclusion_samples", merkle.inclusion_proof),
        ("consistency_samples", merkle.consistency_proof),
    ):
        samples = variant.get(key)
        if samples is None:
            continue
        same = all([h.hex() for h in prove(n, size, store)] == hexes for n, hexes in samples)
        kind = key.split("_")[0]
        said.append(
            f"{len(samples)} {kind} proofs identical to ours"
            if same
            else f"{kind.upper()} PROOFS DIFFER FROM OURS"
        )
    said.append(str(variant.get("self_check")))
    return "; ".join(said)


def run(*, quick: bool, peers_enabled: bool = True, peer_build_limit_s: float = 120.0) -> Section:
    """Run the Merkle benchmark and return its section of the report."""
    c = QUICK if quick else FULL
    n = c.size
    section = Section(title=f"merkle: RFC 6962 trees of {n:,} leaves (8-byte counters)")
    rng = random.Random(c.seed)
    inclusion = [rng.randrange(n) for _ in range(c.proofs)]
    consistency = [rng.randrange(1, n + 1) for _ in range(c.proofs)]
    entries = [i.to_bytes(8, "big") for i in range(n)]

    # (a) root against the floor, interleaved, alternating which runs first.
    _log(f"root of {n:,} entries: ours and the floor, best of {c.reps}, interleaved")
    ours_best = floor_best = math.inf
    roots: set[object] = set()
    for rep in range(c.reps):
        pair: list[tuple[str, Callable[[], object]]] = [
            ("ours", lambda: merkle.root_of_entries(entries)),
            ("floor", lambda: floor_root(entries)),
        ]
        for name, fn in pair if rep % 2 == 0 else reversed(pair):
            elapsed, result = time_once(fn)
            roots.add(result)
            if name == "ours":
                ours_best = min(ours_best, elapsed)
            else:
                floor_best = min(floor_best, elapsed)
    if len(roots) != 1:
        raise AssertionError("root_of_entries and the floor disagree")
    root = merkle.root_of_entries(entries)
    section.notes.append(f"root of {n:,} entries: {root.hex()}")
    root_ratio = ours_best / floor_best
    section.rows.append(
        (
            f"root, {n:,} entries",
            fmt_time(ours_best),
            "plain-hashlib floor",
            fmt_time(floor_best),
            fmt_ratio(ours_best, floor_best),
        )
    )

    # (b) proofs from stored hashes.
    _log(f"filling a MemoryHashStore with {n:,} leaf hashes, best of {min(c.reps, 3)}")
    fill_s = math.inf
    store: merkle.MemoryHashStore | None = None
    for _ in range(min(c.reps, 3)):
        store = None  # drop the previous store before building the next
        elapsed, store = time_once(lambda: _fill(entries))
        fill_s = min(fill_s, elapsed)
    assert store is not None  # c.reps >= 1
    _check_ours(store, root, n, rng)
    _log(f"proofs at {n:,}: {c.proofs:,} random inclusion and consistency proofs per pass")
    ours = Ours(n, ours_best, fill_s, *_proof_times(store, n, inclusion, consistency, c))
    side = OurSide(c, entries, store)
    side.put(ours)
    target = fmt_time(PROOF_TARGET_S)
    section.rows += [
        (f"proof-ready store, {n:,} entries", fmt_time(fill_s), "(no floor)", "", ""),
        (
            f"inclusion proof at {n:,}",
            fmt_time(ours.inclusion_s),
            "target",
            target,
            fmt_ratio(ours.inclusion_s, PROOF_TARGET_S),
        ),
        (
            f"consistency proof at {n:,}",
            fmt_time(ours.consistency_s),
            "target",
            target,
            fmt_ratio(ours.consistency_s, PROOF_TARGET_S),
        ),
    ]
    section.notes.append(
        f"ours: leaf hashes + MemoryHashStore.extend for the store; proofs are the best mean "
        f"over up to {c.reps} passes of {c.proofs:,} random indices / old sizes "
        f"(inclusion: {ours.inclusion_ops:,} ops, consistency: {ours.consistency_ops:,} ops "
        f"in the best pass)"
    )

    # (c) peers.
    peer_rows: dict[str, list[Row]] = {"root": [], "store": [], "incl": [], "cons": []}
    if peers_enabled:
        _run_peers(c, side, inclusion, consistency, root, peer_build_limit_s, peer_rows, section)
    else:
        section.notes.append("peers: skipped (--no-peers)")
    # Put each peer row after our own row of the same operation.
    rows = section.rows
    section.rows = (
        rows[:1]
        + peer_rows["root"]
        + rows[1:2]
        + peer_rows["store"]
        + rows[2:3]
        + peer_rows["incl"]
        + rows[3:4]
        + peer_rows["cons"]
    )

    where = f"at {n:,} leaves" + (
        "" if n == TARGET_SIZE else f" (quick run; the targets are set at {TARGET_SIZE:,})"
    )
    section.targets += [
        (
            f"root_of_entries within {ROOT_RATIO_TARGET}x of the plain-hashlib floor {where}: "
            f"{root_ratio:.3f}x",
            root_ratio <= ROOT_RATIO_TARGET,
        ),
        (
            f"inclusion proof <= {PROOF_TARGET_S * 1e6:.0f} µs {where}: "
            f"{ours.inclusion_s * 1e6:.1f} µs",
            ours.inclusion_s <= PROOF_TARGET_S,
        ),
        (
            f"consistency proof <= {PROOF_TARGET_S * 1e6:.0f} µs {where}: "
            f"{ours.consistency_s * 1e6:.1f} µs",
            ours.consistency_s <= PROOF_TARGET_S,
        ),
    ]
    return section


def _run_peers(
    c: Config,
    side: OurSide,
    inclusion: list[int],
    consistency: list[int],
    root: bytes,
    build_limit_s: float,
    peer_rows: dict[str, list[Row]],
    section: Section,
) -> None:
    try:
        env = peers.ensure_peer_env()
        _log(f"running {PEER_SCRIPT.name} in {env.python} (Python {env.version})")
        payload = {
            "size": c.size,
            "reps": c.reps,
            "build_budget_s": c.build_budget_s,
            "build_limit_s": build_limit_s,
            "proof_budget_s": c.proof_budget_s,
            "inclusion": inclusion,
            "consistency": consistency,
            "samples": c.samples,
        }
        result = peers.run_peer_script(env, PEER_SCRIPT, payload, c.peer_timeout_s)
    except peers.PeerUnavailable as e:
        message = f"peers NOT measured: {e}"
        _log(message)
        section.notes.append(message)
        return
    if not isinstance(result, dict) or not isinstance(result.get("variants"), list):
        section.notes.append("peers NOT measured: peer_merkle.py printed an unexpected JSON shape")
        return
    packages = ", ".join(f"{k} {v}" for k, v in result.get("packages", {}).items())
    section.notes.append(
        f"peers: {packages}, on Python {result.get('python')} in {env.python.parent.parent.name}"
        f" (ours on Python {platform.python_version()}); a peer's root is its build from "
        f"entries to a known root, which also leaves it proof-ready, so that figure appears "
        f"in both the root and the store rows"
    )
    section.notes.append(
        f"proof figures are the best pass within a {c.proof_budget_s:g} s budget per operation; "
        f"a peer whose best pass is short ran out of budget in its first pass, so its figure "
        f"includes first-use costs such as filling a cache"
    )
    for variant in result["variants"]:
        name = str(variant.get("name"))
        if variant.get("error"):
            section.notes.append(f"peer {name} FAILED: {variant['error']}")
            continue
        size: int = variant["size"]
        ours = side.at(size, inclusion, consistency)
        if variant.get("size_note"):
            section.notes.append(f"{name}: {variant['size_note']}")
        ours_root = root if size == c.size else side.store.root(size)
        section.notes.append(f"{name}: {_cross_check(variant, side.store, ours_root)}")
        section.notes.append(
            f"{name}: best of {variant['root_reps']} builds; proofs best pass "
            f"{variant['inclusion_ops']:,} inclusion / {variant['consistency_ops']:,} "
            f"consistency ops"
        )
        for key, label, mine, theirs in (
            ("root", f"root, {size:,} entries", ours.root_s, variant["root_s"]),
            ("store", f"proof-ready store, {size:,} entries", ours.fill_s, variant["root_s"]),
            ("incl", f"inclusion proof at {size:,}", ours.inclusion_s, variant["inclusion_s"]),
            (
                "cons",
                f"consistency proof at {size:,}",
                ours.consistency_s,
                variant["consistency_s"],
            ),
        ):
            peer_rows[key].append(
                (label, fmt_time(mine), name, fmt_time(theirs), fmt_ratio(mine, theirs))
            )
