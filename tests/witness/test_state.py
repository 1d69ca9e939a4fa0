"""Conformance battery of the witness state (:class:`witness.state.WitnessState`): what a
witness must persist, and atomically (C2SP tlog-witness, https://c2sp.org/tlog-witness;
docs/operator-guide.md §5 for PostgreSQL).

Every test taking ``backend`` runs on SQLite and on PostgreSQL (conftest.py: a fresh SQLite
file, or a fresh PostgreSQL schema; TLOG_REQUIRE_POSTGRES=1 turns a missing server into a
failure). Races are run both between threads (one handle each) and between real OS processes
started with the ``spawn`` context (module-level ``_worker``: each process imports this module
and opens its own handle and connection), synchronised by a barrier so that they really race.
The export format's parser is also tested without a database (Hypothesis round trips and
mutations).
"""

from __future__ import annotations

import fcntl
import hashlib
import multiprocessing
import os
import signal
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tlog.checkpoint import Checkpoint
from tlog.cosignature import TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1, CosignatureV1Signer
from tlog.encoding import b64encode
from tlog.errors import MalformedError, UnverifiedNoteError, UsageError
from tlog.keys import SignerKey, generate_key
from tlog.merkle import EMPTY_ROOT
from tlog.note import sign_note
from witness.open import open_state
from witness.pg_state import PostgresDialect
from witness.sqlite_state import SQLiteDialect
from witness.sqlstate import (
    MAX_ORIGIN_BYTES,
    STATE_HEADER,
    BackendError,
    CommitUnknownError,
    Dialect,
    SQLState,
    format_state,
    parse_state,
)
from witness.state import Cosigned, LogConfig, WitnessState

ORIGIN = "example.com/log"
OTHER = "example.org/other log ünïcode"  # spaces and non-ASCII: origins are opaque text
T0 = 1_700_000_000
DAY = 19_700

LOG_KEY = generate_key("example.com/log", seed=bytes(range(32)))
"""The log key every test log signs with (fixed seed: spawned processes derive the same)."""
LOG_KEY2 = generate_key("example.com/log-rotated", seed=bytes(range(1, 33)))
OTHER_KEY = generate_key("other-log-key", seed=bytes(range(2, 34)))
WITNESS = CosignatureV1Signer("witness.example/w1", bytes(range(3, 35)), clock=lambda: T0)

_MLDSA: list[SignerKey] = []


def mldsa_key() -> SignerKey:
    """An ML-DSA-44 log key (type 0x06), made once."""
    if not _MLDSA:
        _MLDSA.append(generate_key("example.com/pq-log", TYPE_SUBTREE_V1, seed=bytes(32)))
    return _MLDSA[0]


def root_of(origin: str, size: int, tag: object = 0) -> bytes:
    """A root for (origin, size, tag): the empty-tree root at size 0, else a fixed hash."""
    if size == 0:
        return EMPTY_ROOT
    return hashlib.sha256(f"{origin}\n{size}\n{tag}".encode()).digest()


def note_of(
    origin: str, size: int, root: bytes, key: SignerKey = LOG_KEY, cosign: bool = True
) -> bytes:
    """A checkpoint note signed by ``key``, cosigned by :data:`WITNESS` when ``cosign``."""
    text = Checkpoint(origin, size, root).format()
    signers: list[Any] = [key.signer()]
    if cosign:
        signers.append(WITNESS)
    return sign_note(text, signers)


def cos(
    origin: str, size: int, tag: object = 0, at: int = T0, key: SignerKey = LOG_KEY
) -> Cosigned:
    """A Cosigned state for (origin, size) whose root depends on ``tag``."""
    root = root_of(origin, size, tag)
    return Cosigned(origin, size, root, note_of(origin, size, root, key), at)


# --- fixtures ------------------------------------------------------------------------------------


class Opener:
    """Opens handles on the test's backend and closes them all at the end."""

    def __init__(self, db: str | None, postgres: str | None) -> None:
        self.db = db
        self.postgres = postgres
        self.handles: list[WitnessState] = []

    def __call__(self, create: bool = True) -> WitnessState:
        s = open_state(db=self.db, postgres=self.postgres, create=create)
        self.handles.append(s)
        return s

    def close(self) -> None:
        for h in self.handles:
            h.close()


@pytest.fixture
def opener(backend: Any) -> Iterator[Opener]:
    o = Opener(backend.db, backend.postgres)
    try:
        yield o
    finally:
        o.close()


@pytest.fixture
def state(opener: Opener) -> WitnessState:
    return opener()


@pytest.fixture
def sqlite_opener(tmp_path: Path) -> Iterator[Callable[[str], WitnessState]]:
    """Fresh SQLite states in tmp_path, by file name (the second end of a move)."""
    handles: list[WitnessState] = []

    def open_file(name: str) -> WitnessState:
        s = open_state(db=str(tmp_path / name))
        handles.append(s)
        return s

    try:
        yield open_file
    finally:
        for h in handles:
            h.close()


# --- processes -----------------------------------------------------------------------------------


def _worker(
    kind: str,
    db: str | None,
    postgres: str | None,
    wid: int,
    barrier: Any,
    out: Any,
    arg: int,
) -> None:
    """One racing process (spawned): opens its own handle, then plays its part of ``kind``.

    Every wait on ``barrier`` is matched by one in the parent (see :func:`run_processes`).
    """
    try:
        barrier.wait(60)  # everyone started: the opens below race
        s = open_state(db=db, postgres=postgres)
        barrier.wait(60)  # everyone opened; the parent now configures the log
        barrier.wait(60)
        result: Any
        if kind == "race":
            first = s.compare_and_swap(None, cos(ORIGIN, 1, tag=wid))
            barrier.wait(60)
            seen = s.latest(ORIGIN)
            barrier.wait(60)  # nobody writes before everyone has read: one expected state
            assert seen is not None
            second = s.compare_and_swap(seen, cos(ORIGIN, 2 + wid, tag=wid))
            result = (first, seen.root.hex(), second)
        elif kind == "chain":
            # What a server does per request: count it, read, swap from what it read.
            oks, counts = [], []
            for attempt in range(arg):
                counts.append(s.count_request(ORIGIN, DAY))
                cur = s.latest(ORIGIN)
                assert cur is not None
                new = cos(ORIGIN, cur.size + 1, tag=f"{wid}/{attempt}")
                if s.compare_and_swap(cur, new):
                    oks.append((new.size, new.root.hex()))
            result = (oks, counts)
        elif kind == "kill":
            # Report a True swap, then die at once: no close, no clean exit (edge case 16).
            new = cos(ORIGIN, 7 + wid, tag=wid)
            assert s.compare_and_swap(s.latest(ORIGIN), new)
            out.put((wid, "ok", new.root.hex()))
            out.close()
            out.join_thread()
            os.kill(os.getpid(), signal.SIGKILL)
        else:  # pragma: no cover - a test bug
            raise AssertionError(kind)
        s.close()
        out.put((wid, "ok", result))
    except BaseException as e:  # report, and free the others
        out.put((wid, "error", f"{type(e).__name__}: {e}"))
        barrier.abort()


def run_processes(
    kind: str,
    backend: Any,
    n: int,
    arg: int,
    configure: Callable[[], None],
    phases: int,
    exitcode: int = 0,
) -> list[Any]:
    """Run ``n`` spawned :func:`_worker` processes; ``configure`` runs once all have opened;
    ``phases`` is the number of barrier waits after configuration; each process must end with
    ``exitcode``. Returns results by wid."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(n + 1)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(kind, backend.db, backend.postgres, i, barrier, out, arg))
        for i in range(n)
    ]
    for p in procs:
        p.start()
    try:
        barrier.wait(60)
        barrier.wait(60)
        configure()
        for _ in range(1 + phases):
            barrier.wait(60)
    except threading.BrokenBarrierError:
        pass  # a worker failed: its report says why
    results: dict[int, Any] = {}
    errors = []
    for _ in range(n):
        wid, status, value = out.get(timeout=120)
        if status == "ok":
            results[wid] = value
        else:
            errors.append(f"worker {wid}: {value}")
    for p in procs:
        p.join(60)
        assert p.exitcode == exitcode
    assert not errors, errors
    return [results[i] for i in range(n)]


def run_threads(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run ``fn(i)`` in ``n`` threads; re-raise the first failure; results by i."""
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def main(i: int) -> None:
        try:
            results[i] = fn(i)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=main, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]
    return results


# --- configuration -------------------------------------------------------------------------------


def test_config_round_trip(opener: Opener) -> None:
    s = opener()
    pq = mldsa_key().vkey()
    s.add_log(ORIGIN, (LOG_KEY2.vkey(), LOG_KEY.vkey(), pq), qpd=100)
    s.add_log(OTHER, (OTHER_KEY.vkey(),))
    want = LogConfig(ORIGIN, tuple(sorted((LOG_KEY.vkey(), LOG_KEY2.vkey(), pq))), 100, False)
    assert s.log(ORIGIN) == want
    assert s.log(OTHER) == LogConfig(OTHER, (OTHER_KEY.vkey(),), None, False)
    assert s.log("example.com/unknown") is None
    assert [c.origin for c in s.logs()] == sorted([ORIGIN, OTHER])
    s.set_qpd(ORIGIN, None)
    s.set_qpd(OTHER, 7)
    s.set_disabled(OTHER, True)
    s.close()
    again = opener(create=False)  # the configuration is durable
    assert again.log(ORIGIN) == LogConfig(ORIGIN, want.keys, None, False)
    assert again.log(OTHER) == LogConfig(OTHER, (OTHER_KEY.vkey(),), 7, True)
    assert again.logs() == [again.log(o) for o in sorted([ORIGIN, OTHER])]


def test_add_log_twice_refused(state: WitnessState) -> None:
    state.add_log(ORIGIN, (LOG_KEY.vkey(),), qpd=5)
    with pytest.raises(UsageError, match=r"log example\.com/log is already configured"):
        state.add_log(ORIGIN, (LOG_KEY2.vkey(),), qpd=9)
    state.set_disabled(ORIGIN, True)
    with pytest.raises(UsageError, match=r"disabled logs are never deleted"):
        state.add_log(ORIGIN, (LOG_KEY.vkey(),))
    # The refused calls changed nothing.
    assert state.log(ORIGIN) == LogConfig(ORIGIN, (LOG_KEY.vkey(),), 5, True)


def test_disabled_log_is_kept(state: WitnessState) -> None:
    state.add_log(ORIGIN, (LOG_KEY.vkey(),))
    c = cos(ORIGIN, 4)
    assert state.compare_and_swap(None, c)
    state.add_evidence(ORIGIN, "conflict", b"request", c.note, T0)
    state.set_disabled(ORIGIN, True)
    assert state.log(ORIGIN) == LogConfig(ORIGIN, (LOG_KEY.vkey(),), None, True)
    assert [x.origin for x in state.logs()] == [ORIGIN]
    assert state.latest(ORIGIN) == c
    assert state.all_latest() == [c]
    assert len(state.evidence(ORIGIN)) == 1
    state.set_disabled(ORIGIN, False)
    assert state.log(ORIGIN) == LogConfig(ORIGIN, (LOG_KEY.vkey(),), None, False)
    assert state.latest(ORIGIN) == c


def test_keys_added_idempotently(state: WitnessState) -> None:
    state.add_log(ORIGIN, (LOG_KEY.vkey(), LOG_KEY.vkey()))  # a repeat is kept once
    assert state.log(ORIGIN) == LogConfig(ORIGIN, (LOG_KEY.vkey(),))
    state.add_key(ORIGIN, LOG_KEY2.vkey())
    state.add_key(ORIGIN, LOG_KEY2.vkey())
    state.add_key(ORIGIN, LOG_KEY.vkey())
    cfg = state.log(ORIGIN)
    assert cfg is not None
    assert cfg.keys == tuple(sorted((LOG_KEY.vkey(), LOG_KEY2.vkey())))
    with pytest.raises(UsageError, match="not configured"):
        state.add_key("example.com/unknown", LOG_KEY.vkey())
    assert state.log("example.com/unknown") is None


def _vkey_of_type(key_type: int) -> str:
    return generate_key("some-key", key_type, seed=bytes(32)).vkey()


BAD_ORIGINS = [
    ("", "empty"),
    ("a\nb", "U\\+000A"),
    ("a\x00b", "U\\+0000"),
    ("tab\there", "U\\+0009"),
    ("del\x7f", "U\\+007F"),
    ("c1\x85", "U\\+0085"),
    ("\ud800", "not valid Unicode"),
    ("x" * (MAX_ORIGIN_BYTES + 1), "longer than"),
    ("é" * (MAX_ORIGIN_BYTES // 2 + 1), "longer than"),  # the limit counts UTF-8 bytes
]


@pytest.mark.parametrize(("origin", "message"), BAD_ORIGINS)
def test_bad_origins_refused(state: WitnessState, origin: str, message: str) -> None:
    with pytest.raises(MalformedError, match=message):
        state.add_log(origin, (LOG_KEY.vkey(),))
    writes: tuple[Callable[[], object], ...] = (
        lambda: state.add_key(origin, LOG_KEY.vkey()),
        lambda: state.set_disabled(origin, True),
        lambda: state.set_qpd(origin, 1),
        lambda: state.count_request(origin, DAY),
        lambda: state.add_evidence(origin, "r", b"", None, T0),
    )
    for write in writes:
        with pytest.raises(MalformedError):
            write()
    # A lookup of an origin that cannot be configured simply finds nothing (a 404).
    assert state.log(origin) is None
    assert state.latest(origin) is None
    assert state.evidence(origin) == []
    assert state.logs() == []


def test_bad_arguments_refused(state: WitnessState) -> None:
    cosigner = _vkey_of_type(TYPE_COSIGNATURE_V1)
    name, key_id, b64 = LOG_KEY.vkey().split("+", 2)
    wrong_id = f"{name}+{int(key_id, 16) ^ 1:08x}+{b64}"
    for keys, error, message in [
        ((cosigner,), UsageError, r"type 0x04.*a log signs with type 0x01"),
        (("not a vkey",), MalformedError, "does not have the form"),
        ((wrong_id,), MalformedError, "declares key ID"),
        ((LOG_KEY.vkey() + "=",), MalformedError, "base64"),
        ((), UsageError, "at least one key"),
        (LOG_KEY.vkey(), UsageError, "tuple"),
        ((b"bytes",), UsageError, "a vkey is a str"),
    ]:
        with pytest.raises(error, match=message):
            state.add_log(ORIGIN, keys)  # type: ignore[arg-type]
    for qpd in (0, -1, True, 1.5, "5", 1 << 63):
        with pytest.raises(UsageError, match="qpd"):
            state.add_log(ORIGIN, (LOG_KEY.vkey(),), qpd=qpd)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="an origin is a str"):
        state.add_log(b"example.com/log", (LOG_KEY.vkey(),))  # type: ignore[arg-type]
    assert state.logs() == []  # nothing above was written
    state.add_log(ORIGIN, (LOG_KEY.vkey(),), qpd=(1 << 63) - 1)
    with pytest.raises(UsageError):
        state.add_key(ORIGIN, cosigner)
    with pytest.raises(UsageError, match="disabled is a bool"):
        state.set_disabled(ORIGIN, 1)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="qpd"):
        state.set_qpd(ORIGIN, 0)
    unknowns: tuple[Callable[[], object], ...] = (
        lambda: state.set_disabled("example.com/unknown", True),
        lambda: state.set_qpd("example.com/unknown", 3),
        lambda: state.count_request("example.com/unknown", DAY),
        lambda: state.add_evidence("example.com/unknown", "r", b"", None, T0),
    )
    for unknown in unknowns:
        with pytest.raises(UsageError, match=r"log example\.com/unknown is not configured"):
            unknown()
    assert state.log(ORIGIN) == LogConfig(ORIGIN, (LOG_KEY.vkey(),), (1 << 63) - 1)


def test_limits_fit_both_backends(state: WitnessState) -> None:
    # The longest origin with the longest ML-DSA-44 vkey (a 255-byte key name) still fits
    # PostgreSQL's index-row limit for the (origin, vkey) key.
    origin = "o" * MAX_ORIGIN_BYTES
    long_name = generate_key("n" * 255, TYPE_SUBTREE_V1, seed=bytes(32)).vkey()
    state.add_log(origin, (long_name, LOG_KEY.vkey()))
    cfg = state.log(origin)
    assert cfg is not None and long_name in cfg.keys
    c = cos(origin, 1)
    assert state.compare_and_swap(None, c)
    assert state.latest(origin) == c


# --- compare-and-swap ----------------------------------------------------------------------------


def test_cas_first_insert_then_forward(state: WitnessState) -> None:
    state.add_log(ORIGIN, (LOG_KEY.vkey(),))
    state.add_log(OTHER, (LOG_KEY.vkey(),))
    assert state.latest(ORIGIN) is None
    assert state.all_latest() == []
    c0 = cos(ORIGIN, 0)
    assert state.compare_and_swap(None, c0)
    assert state.latest(ORIGIN) == c0
    assert not state.compare_and_swap(None, cos(ORIGIN, 3))  # something is stored now
    assert state.latest(ORIGIN) == c0
    c5 = cos(ORIGIN, 5, at=T0 + 1)
    assert state.compare_and_swap(c0, c5)
    assert state.latest(ORIGIN) == c5
    o1 = cos(OTHER, 1)
    assert state.compare_and_swap(None, o1)
    assert state.all_latest() == sorted([c5, o1], key=lambda c: c.origin)
    assert state.latest(OTHER) == o1


def test_cas_stale_expected_returns_false_and_writes_nothing(opener: Opener) -> None:
    s, other = opener(), opener()
    s.add_log(ORIGIN, (LOG_KEY.vkey(),))
    c3 = cos(ORIGIN, 3)
    assert s.compare_and_swap(None, c3)
    c5 = cos(ORIGIN, 5)
    assert other.compare_and_swap(c3, c5)  # another handle moved the state on
    assert not s.compare_and_swap(c3, cos(ORIGIN, 7))  # stale size
    assert not s.compare_and_swap(c3, cos(ORIGIN, 5, tag="fork"))  # stale, same new size
    fake = Cosigned(ORIGIN, 5, root_of(ORIGIN, 5, "other"), c5.note, c5.updated_at)
    assert not s.compare_and_swap(fake, cos(ORIGIN, 9))  # right size, wrong root
    assert s.latest(ORIGIN) == c5
    assert other.latest(ORIGIN) == c5
    # Only (size, root) of the expected state matter, not its note or time.
    loose = Cosigned(ORIGIN, 5, c5.root, b"whatever", 0)
    c6 = cos(ORIGIN, 6)
    assert s.compare_and_swap(loose, c6)
    assert other.latest(ORIGIN) == c6


def test_cas_same_checkpoint_again_gets_fresh_note(state: WitnessState) -> None:
    state.add_log(ORIGIN, (LOG_KEY.vkey(),))
    c = cos(ORIGIN, 8)
    assert state.compare_and_swap(None, c)
    fresh = Cosigned(ORIGIN, 8, c.root, note_of(ORIGIN, 8, c.root, cosign=False), T0 + 60)
    assert fresh.note != c.note
    assert state.compare_and_swap(c, fresh)
    assert state.latest(ORIGIN) == fresh


def test_cas_never_moves_backwards(state: WitnessState) -> None:
    state.add_log(ORIGIN, (LOG_KEY.vkey(),))
    state.add_log(OTHER, (LOG_KEY.vkey(),))
    c5 = cos(ORIGIN, 5)
    assert state.compare_and_swap(None, c5)
    with pytest.raises(UsageError, match="back from size 5 to 3"):
        state.compare_and_swap(c5, cos(ORIGIN, 3))
    with pytest.raises(UsageError, match="another root for size 5"):
        state.compare_and_swap(c5, cos(ORIGIN, 5, tag="fork"))
    with pytest.raises(UsageError, match="expected state of"):
        state.compare_and_swap(c5, cos(OTHER, 6))
    # The new note must be exactly the new checkpoint.
    c6 = cos(ORIGIN, 6)
    for bad in (
        Cosigned(ORIGIN, 6, c6.root, cos(ORIGIN, 7).note, T0),
        Cosigned(ORIGIN, 6, root_of(ORIGIN, 6, "x"), c6.note, T0),
        Cosigned(ORIGIN, 6, c6.root, b"not a note", T0),
        Cosigned(ORIGIN, 6, c6.root, Checkpoint(ORIGIN, 6, c6.root).format(), T0),
        Cosigned(ORIGIN, 6, c6.root[:31], c6.note, T0),
        Cosigned(ORIGIN, -1, c6.root, c6.note, T0),
        Cosigned(ORIGIN, 6, c6.root, c6.note, -1),
        Cosigned(ORIGIN, True, c6.root, c6.note, T0),
    ):
        with pytest.raises(UsageError):
            state.compare_and_swap(c5, bad)
    with pytest.raises(UsageError):
        state.compare_and_swap(c5, (6, c6.root))  # type: ignore[arg-type]
    assert state.latest(ORIGIN) == c5
    # A first checkpoint needs a configured log; a swap of an unknown one finds nothing.
    with pytest.raises(UsageError, match="not configured"):
        state.compare_and_swap(None, cos("example.com/unknown", 1))
    assert not state.compare_and_swap(cos("example.com/unknown", 1), cos("example.com/unknown", 2))
    assert state.latest("example.com/unknown") is None
    assert state.latest(OTHER) is None


def test_cas_first_insert_race_threads(opener: Opener) -> None:
    n = 8
    opener().add_log(ORIGIN, (LOG_KEY.vkey(),))
    handles = [opener() for _ in range(n)]
    barrier = threading.Barrier(n)

    def race(i: int) -> tuple[bool, bool]:
        barrier.wait(30)
        first = handles[i].compare_and_swap(None, cos(ORIGIN, 1, tag=i))
        barrier.wait(30)
        seen = handles[i].latest(ORIGIN)
        barrier.wait(30)
        assert seen is not None
        return first, handles[i].compare_and_swap(seen, cos(ORIGIN, 2 + i, tag=i))

    results = run_threads(n, race)
    firsts = [i for i, (f, _) in enumerate(results) if f]
    seconds = [i for i, (_, s) in enumerate(results) if s]
    assert len(firsts) == 1 and len(seconds) == 1
    assert handles[0].latest(ORIGIN) == cos(ORIGIN, 2 + seconds[0], tag=seconds[0])


def test_cas_shared_handle_threads(state: WitnessState) -> None:
    # One handle used by several threads at once (the server's thread pool).
    state.add_log(ORIGIN, (LOG_KEY.vkey(),))
    assert state.compare_and_swap(None, cos(ORIGIN, 0))
    n, rounds = 4, 15

    def climb(i: int) -> int:
        ok = 0
        for r in range(rounds):
            cur = state.latest(ORIGIN)
            assert cur is not None
            ok += state.compare_and_swap(cur, cos(ORIGIN, cur.size + 1, tag=(i, r)))
        return ok

    total = sum(run_threads(n, climb))
    final = state.latest(ORIGIN)
    assert final is not None and final.size == total > 0


def test_cas_race_processes(backend: Any, opener: Opener) -> None:
    """8 spawned processes open one fresh state at once (concurrent schema creation), race a
    first checkpoint, then race from one read expected state to 8 different larger ones."""
    n = 8
    results = run_processes(
        "race",
        backend,
        n,
        0,
        lambda: opener().add_log(ORIGIN, (LOG_KEY.vkey(),)),
        phases=2,
    )
    firsts = [i for i, (first, _, _) in enumerate(results) if first]
    assert len(firsts) == 1, results
    winner_root = root_of(ORIGIN, 1, firsts[0]).hex()
    assert all(seen == winner_root for _, seen, _ in results)  # all read the winner
    seconds = [i for i, (_, _, second) in enumerate(results) if second]
    assert len(seconds) == 1, results
    assert opener().latest(ORIGIN) == cos(ORIGIN, 2 + seconds[0], tag=seconds[0])


def test_edge_15_atomic_compare_and_swap(opener: Opener) -> None:
    """Stored N; swaps N -> N+5 and N -> N+9 fired together: exactly one wins and the size
    never decreases. Then the spec's rollback race: A checks against N, B moves to N+9 and is
    stored, A's swap from N then fails (it would have rolled the witness back to N+5)."""
    setup = opener()
    setup.add_log(ORIGIN, (LOG_KEY.vkey(),))
    assert setup.compare_and_swap(None, cos(ORIGIN, 10))
    a, b = opener(), opener()
    barrier = threading.Barrier(2)
    for _ in range(5):
        stored = setup.latest(ORIGIN)
        assert stored is not None

        def fire(i: int, stored: Cosigned = stored) -> bool:
            barrier.wait(30)
            return (a, b)[i].compare_and_swap(
                stored, cos(ORIGIN, stored.size + (5, 9)[i], tag="edge")
            )

        wins = run_threads(2, fire)
        assert wins.count(True) == 1
        after = setup.latest(ORIGIN)
        assert after is not None
        assert after.size == stored.size + (5, 9)[wins.index(True)]
    checked = a.latest(ORIGIN)  # A checks...
    assert checked is not None
    ahead = cos(ORIGIN, checked.size + 9)
    assert b.compare_and_swap(checked, ahead)  # ... B is checked and stored ...
    assert not a.compare_and_swap(checked, cos(ORIGIN, checked.size + 5))  # ... A must fail
    assert setup.latest(ORIGIN) == ahead


def test_edge_16_durability(backend: Any, opener: Opener) -> None:
    """A process killed (SIGKILL) right after a swap returned True: on reopening, the stored
    state is the one it swapped in."""

    def configure() -> None:
        s = opener()
        s.add_log(ORIGIN, (LOG_KEY.vkey(),))
        assert s.compare_and_swap(None, cos(ORIGIN, 3))

    (root,) = run_processes("kill", backend, 1, 0, configure, 0, exitcode=-signal.SIGKILL)
    assert opener(create=False).latest(ORIGIN) == cos(ORIGIN, 7, tag=0)
    assert root == root_of(ORIGIN, 7, 0).hex()


def test_sqlite_session_settings(tmp_path: Path) -> None:
    """Durability on SQLite rests on these settings of every connection."""
    conn = SQLiteDialect(str(tmp_path / "w.db"), create=True).connect()
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000
    finally:
        conn.close()


def _check_chains(final: Cosigned | None, oks: list[tuple[int, str]]) -> None:
    """Every successful swap advanced the size by one from what it read: the successes are
    exactly sizes 1..final (no size won twice, none lost), and the final root is the last
    winner's."""
    assert final is not None
    sizes = sorted(size for size, _ in oks)
    assert sizes == list(range(1, final.size + 1))
    assert dict(oks)[final.size] == final.root.hex()


def test_cas_chains_and_quota_processes(backend: Any, opener: Opener) -> None:
    """4 spawned processes each count a request, read and swap to size + 1, 25 times: no
    lost update (the wins are exactly sizes 1..final), and the counts are exactly 1..100."""
    n, attempts = 4, 25

    def configure() -> None:
        s = opener()
        s.add_log(ORIGIN, (LOG_KEY.vkey(),))
        assert s.compare_and_swap(None, cos(ORIGIN, 0))

    results = run_processes("chain", backend, n, attempts, configure, phases=0)
    oks = [tuple(x) for r, _ in results for x in r]
    # Each attempt of one process wins, or a win lands inside its own read-swap window.
    assert len(oks) >= attempts
    _check_chains(opener().latest(ORIGIN), oks)
    assert sorted(c for _, r in results for c in r) == list(range(1, n * attempts + 1))
    assert opener().count_request(ORIGIN, DAY) == n * attempts + 1


def test_cas_chains_threads(opener: Opener) -> None:
    n, attempts = 4, 20
    s0 = opener()
    s0.add_log(ORIGIN, (LOG_KEY.vkey(),))
    assert s0.compare_and_swap(None, cos(ORIGIN, 0))
    handles = [opener() for _ in range(n)]

    def chain(i: int) -> list[tuple[int, str]]:
        oks = []
        for a in range(attempts):
            cur = handles[i].latest(ORIGIN)
            assert cur is not None
            new = cos(ORIGIN, cur.size + 1, tag=(i, a))
            if handles[i].compare_and_swap(cur, new):
                oks.append((new.size, new.root.hex()))
        return oks

    oks = [x for r in run_threads(n, chain) for x in r]
    _check_chains(s0.latest(ORIGIN), oks)


_MODEL_LOGS = iter(range(1 << 30))


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["current", "none", "first", "wrong-root"]),
            st.integers(-2, 3),
            st.booleans(),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_cas_matches_model(state: WitnessState, ops: list[tuple[str, int, bool]]) -> None:
    """Random swaps behave like the obvious model: True exactly when the stored (size, root)
    is the expected one; a move back (smaller, or same size with another root) is a
    UsageError and writes nothing."""
    origin = f"example.com/model/{next(_MODEL_LOGS)}"
    state.add_log(origin, (LOG_KEY.vkey(),))
    model: Cosigned | None = None
    first: Cosigned | None = None
    for step, (which, delta, fork) in enumerate(ops):
        expected: Cosigned | None
        if which == "current":
            expected = model
        elif which == "none":
            expected = None
        elif which == "first":
            expected = first
        else:
            size = max(model.size if model else 0, 1)
            expected = Cosigned(origin, size, root_of(origin, size, "bogus"), b"", 0)
        size = max((expected.size if expected else 0) + delta, 0)
        if expected is not None and size == expected.size and not fork:
            root = expected.root
        else:
            root = root_of(origin, size, step)
        new = Cosigned(origin, size, root, note_of(origin, size, root), step)
        if expected is not None and (
            new.size < expected.size or (new.size == expected.size and new.root != expected.root)
        ):
            with pytest.raises(UsageError):
                state.compare_and_swap(expected, new)
        else:
            matches = (
                expected is None
                if model is None
                else expected is not None
                and (expected.size, expected.root) == (model.size, model.root)
            )
            assert state.compare_and_swap(expected, new) == matches
            if matches:
                model = new
                first = first or new
        assert state.latest(origin) == model


# --- compare-and-swap, batched (group commit) -----------------------------------------------------


def test_cas_many_empty(state: WitnessState) -> None:
    assert state.compare_and_swap_many([]) == []
    state.add_log(ORIGIN, (LOG_KEY.vkey(),))
    assert state.compare_and_swap_many([]) == []
    assert state.all_latest() == []


def test_cas_many_several_logs_in_one_call(opener: Opener) -> None:
    s, other = opener(), opener()
    origins = [ORIGIN, OTHER, "example.net/third"]
    for o in origins:
        s.add_log(o, (LOG_KEY.vkey(),))
    firsts = [cos(o, i + 1) for i, o in enumerate(origins)]
    assert s.compare_and_swap_many([(None, c) for c in firsts]) == [True, True, True]
    assert other.all_latest() == sorted(firsts, key=lambda c: c.origin)  # durable, visible
    nexts = [cos(c.origin, c.size + 4, at=T0 + 1) for c in firsts]
    assert s.compare_and_swap_many(list(zip(firsts, nexts, strict=True))) == [True] * 3
    for c in nexts:
        assert other.latest(c.origin) == c


def test_cas_many_stale_pair_false_others_land(opener: Opener) -> None:
    s, other = opener(), opener()
    s.add_log(ORIGIN, (LOG_KEY.vkey(),))
    s.add_log(OTHER, (LOG_KEY.vkey(),))
    a3, b3 = cos(ORIGIN, 3), cos(OTHER, 3)
    assert s.compare_and_swap_many([(None, a3), (None, b3)]) == [True, True]
    b5 = cos(OTHER, 5)
    assert other.compare_and_swap(b3, b5)  # another handle moves OTHER on
    a6, b6 = cos(ORIGIN, 6), cos(OTHER, 6)
    a_first = cos(ORIGIN, 1, tag="again")
    # OTHER's expected state is stale, and ORIGIN is no longer empty: both False, the rest lands.
    third = "example.net/third"
    s.add_log(third, (LOG_KEY.vkey(),))
    t1 = cos(third, 1)
    got = s.compare_and_swap_many([(a3, a6), (b3, b6), (None, a_first), (None, t1)])
    assert got == [True, False, False, True]
    assert other.latest(ORIGIN) == a6
    assert other.latest(OTHER) == b5
    assert other.latest(third) == t1


def test_cas_many_same_origin_in_order(state: WitnessState) -> None:
    state.add_log(ORIGIN, (LOG_KEY.vkey(),))
    c1, c4, c9 = cos(ORIGIN, 1), cos(ORIGIN, 4), cos(ORIGIN, 9)
    # The second pair expects what the first one stores: it sees it.
    assert state.compare_and_swap_many([(None, c1), (c1, c4)]) == [True, True]
    assert state.latest(ORIGIN) == c4
    # Two swaps from one expected state: the first wins, the second sees the moved state.
    c7 = cos(ORIGIN, 7)
    assert state.compare_and_swap_many([(c4, c9), (c4, c7)]) == [True, False]
    assert state.latest(ORIGIN) == c9
    # Two first checkpoints for one origin: the second finds the first.
    state.add_log(OTHER, (LOG_KEY.vkey(),))
    o1, o2 = cos(OTHER, 1), cos(OTHER, 2)
    assert state.compare_and_swap_many([(None, o1), (None, o2)]) == [True, False]
    assert state.latest(OTHER) == o1


def test_cas_many_one_bad_pair_writes_nothing(opener: Opener) -> None:
    s, other = opener(), opener()
    for o in (ORIGIN, OTHER):
        s.add_log(o, (LOG_KEY.vkey(),))
    a5, b2 = cos(ORIGIN, 5), cos(OTHER, 2)
    assert s.compare_and_swap_many([(None, a5), (None, b2)]) == [True, True]
    good = (b2, cos(OTHER, 8))  # a valid swap that would succeed alone
    c6 = cos(ORIGIN, 6)
    bad_pairs: list[tuple[Cosigned | None, Cosigned, str]] = [
        (a5, cos(ORIGIN, 3), "back from size 5 to 3"),
        (a5, cos(ORIGIN, 5, tag="fork"), "another root for size 5"),
        (a5, cos(OTHER, 6), "expected state of"),
        (a5, Cosigned(ORIGIN, 6, c6.root, b"not a note", T0), "not a signed checkpoint"),
        (a5, Cosigned(ORIGIN, 6, c6.root, cos(ORIGIN, 7).note, T0), "is not"),
        # Passes the checks up front; the database refuses it inside the transaction, after
        # the good swap ran: the rollback must undo that one too.
        (None, cos("example.com/unknown", 1), "not configured"),
    ]
    for expected, new, message in bad_pairs:
        for batch in ([good, (expected, new)], [(expected, new), good]):
            with pytest.raises(UsageError, match=message):
                s.compare_and_swap_many(batch)
            assert other.latest(OTHER) == b2, message
            assert other.latest(ORIGIN) == a5, message
            assert other.latest("example.com/unknown") is None
    # The handle is still usable and nothing was held: the good swap alone lands.
    assert s.compare_and_swap_many([good]) == [True]
    assert other.latest(OTHER) == good[1]


def test_cas_many_opposite_orders_race_threads(opener: Opener) -> None:
    """Two handles swap the same two logs from the same expected states, in opposite orders
    (on PostgreSQL their row locks may deadlock: the loser's transaction runs again). Per log
    exactly one swap wins, and the verdicts are what is stored."""
    setup = opener()
    for o in (ORIGIN, OTHER):
        setup.add_log(o, (LOG_KEY.vkey(),))
    a, b = opener(), opener()
    barrier = threading.Barrier(2)
    for rnd in range(3):
        cur = [setup.latest(o) for o in (ORIGIN, OTHER)]
        if rnd == 0:
            assert cur == [None, None]
        size = 1 if cur[0] is None else cur[0].size + 1
        batches = [
            [
                (cur[0], cos(ORIGIN, size, tag=("a", rnd))),
                (cur[1], cos(OTHER, size, tag=("a", rnd))),
            ],
            [
                (cur[1], cos(OTHER, size, tag=("b", rnd))),
                (cur[0], cos(ORIGIN, size, tag=("b", rnd))),
            ],
        ]

        def fire(
            i: int, batches: list[list[tuple[Cosigned | None, Cosigned]]] = batches
        ) -> list[bool]:
            barrier.wait(30)
            return (a, b)[i].compare_and_swap_many(batches[i])

        got = run_threads(2, fire)
        for origin in (ORIGIN, OTHER):
            wins = [
                new
                for i in range(2)
                for (_, new), ok in zip(batches[i], got[i], strict=True)
                if ok and new.origin == origin
            ]
            assert len(wins) == 1, (rnd, got)
            assert setup.latest(origin) == wins[0]


def test_sqlite_writer_lock_file(tmp_path: Path) -> None:
    """Every SQLite write first takes an exclusive flock on ``<db>-writer.lock`` beside the
    database: a writer waits while another holds it, readers do not, and two handles on one
    file (each with its own descriptor) still both write."""
    db = str(tmp_path / "w.db")
    lock_path = Path(db + "-writer.lock")
    s1 = open_state(db=db)
    s2 = open_state(db=db)
    try:
        s1.add_log(ORIGIN, (LOG_KEY.vkey(),))
        assert lock_path.is_file()
        c1 = cos(ORIGIN, 1)
        assert s1.compare_and_swap_many([(None, c1)]) == [True]
        c2 = cos(ORIGIN, 2)
        assert s2.compare_and_swap(c1, c2)
        assert s1.latest(ORIGIN) == c2
        # Someone else holds the writer lock: a write waits for it, a read does not.
        fd = os.open(lock_path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            c3 = cos(ORIGIN, 3)
            results: list[list[bool]] = []
            writer = threading.Thread(
                target=lambda: results.append(s1.compare_and_swap_many([(c2, c3)])), daemon=True
            )
            writer.start()
            writer.join(0.3)
            assert writer.is_alive()  # queued on the flock
            assert s2.latest(ORIGIN) == c2
            fcntl.flock(fd, fcntl.LOCK_UN)
            writer.join(10)
            assert not writer.is_alive() and results == [[True]]
        finally:
            os.close(fd)
        assert s2.latest(ORIGIN) == c3
        # A write that fails inside its transaction releases the lock: the other handle writes.
        with pytest.raises(UsageError, match="not configured"):
            s1.compare_and_swap_many([(c3, cos(ORIGIN, 4)), (None, cos("example.com/x", 1))])
        done: list[bool] = []
        t = threading.Thread(
            target=lambda: done.append(s2.compare_and_swap(c3, cos(ORIGIN, 5))), daemon=True
        )
        t.start()
        t.join(10)
        assert done == [True]

        # Two handles racing in threads: each win advanced the size by one from what it read.
        def chain(i: int) -> list[tuple[int, str]]:
            h = (s1, s2)[i]
            oks = []
            for k in range(15):
                cur = h.latest(ORIGIN)
                assert cur is not None
                new = cos(ORIGIN, cur.size + 1, tag=(i, k))
                if h.compare_and_swap_many([(cur, new)]) == [True]:
                    oks.append((new.size, new.root.hex()))
            return oks

        oks = [x for r in run_threads(2, chain) for x in r]
        final = s1.latest(ORIGIN)
        assert final is not None
        assert sorted(size for size, _ in oks) == list(range(6, final.size + 1))
    finally:
        s1.close()
        s2.close()
    # Closing released the descriptors: a fresh handle writes at once.
    s3 = open_state(db=db, create=False)
    try:
        s3.set_qpd(ORIGIN, 9)
    finally:
        s3.close()


# --- evidence ------------------------------------------------------------------------------------


def test_evidence_kept_newest_first(state: WitnessState) -> None:
    state.add_log(ORIGIN, (LOG_KEY.vkey(),))
    state.add_log(OTHER, (LOG_KEY.vkey(),))
    stored = cos(ORIGIN, 3).note
    ids = [
        state.add_evidence(ORIGIN, "same size, another root", b"req-1", stored, T0),
        state.add_evidence(OTHER, "inconsistent proof", b"req-2", None, T0 - 100),
        state.add_evidence(ORIGIN, "old size ahead", b"\x00\xff binary", stored, T0 + 5),
    ]
    assert None not in ids
    assert ids == sorted(i for i in ids if i is not None) and len(set(ids)) == 3
    every = state.evidence()
    assert [e.id for e in every] == ids[::-1]
    first = every[-1]
    assert (first.origin, first.reason, first.request, first.stored_note, first.received_at) == (
        ORIGIN,
        "same size, another root",
        b"req-1",
        stored,
        T0,
    )
    assert every[1].stored_note is None and every[1].received_at == T0 - 100
    assert [e.id for e in state.evidence(ORIGIN)] == [ids[2], ids[0]]
    assert [e.id for e in state.evidence(ORIGIN, limit=1)] == [ids[2]]
    assert [e.id for e in state.evidence(limit=2)] == [ids[2], ids[1]]
    assert state.evidence("example.com/unknown") == []
    for bad in (
        lambda: state.evidence(limit=0),
        lambda: state.add_evidence(ORIGIN, "", b"", None, T0),
        lambda: state.add_evidence(ORIGIN, "a\nb", b"", None, T0),
        lambda: state.add_evidence(ORIGIN, "x" * 1025, b"", None, T0),
        lambda: state.add_evidence(ORIGIN, "r", "text", None, T0),  # type: ignore[arg-type]
        lambda: state.add_evidence(ORIGIN, "r", b"", "note", T0),  # type: ignore[arg-type]
        lambda: state.add_evidence(ORIGIN, "r", b"", None, -1),
    ):
        with pytest.raises(UsageError):
            bad()
    assert len(state.evidence()) == 3


# --- quota ---------------------------------------------------------------------------------------


def test_quota_counts(state: WitnessState) -> None:
    state.add_log(ORIGIN, (LOG_KEY.vkey(),))
    state.add_log(OTHER, (LOG_KEY.vkey(),))
    assert [state.count_request(ORIGIN, DAY) for _ in range(3)] == [1, 2, 3]
    assert state.count_request(ORIGIN, DAY + 1) == 1  # a new day starts from 1
    assert state.count_request(OTHER, DAY) == 1  # per log
    assert state.count_request(ORIGIN, DAY) == 4
    for day in (-1, True, 1.0):
        with pytest.raises(UsageError, match="day"):
            state.count_request(ORIGIN, day)  # type: ignore[arg-type]


def test_quota_exact_under_concurrency_threads(opener: Opener) -> None:
    opener().add_log(ORIGIN, (LOG_KEY.vkey(),))
    n, each = 6, 20
    handles = [opener() for _ in range(n)]
    counts = run_threads(n, lambda i: [handles[i].count_request(ORIGIN, DAY) for _ in range(each)])
    assert sorted(c for r in counts for c in r) == list(range(1, n * each + 1))


# --- opening -------------------------------------------------------------------------------------


def test_open_rules(backend: Any, opener: Opener, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="exactly one"):
        open_state()
    with pytest.raises(UsageError, match="exactly one"):
        open_state(db=str(tmp_path / "a.db"), postgres="postgresql://x")
    with pytest.raises(UsageError, match="no witness state"):
        open_state(db=str(tmp_path / "missing.db"), create=False)
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(UsageError, match="file path"):
        open_state(db=":memory:")
    if backend.postgres is not None:
        with pytest.raises(UsageError, match="no witness state"):
            opener(create=False)  # the fresh schema has no tables yet
    s = opener()
    s.add_log(ORIGIN, (LOG_KEY.vkey(),))
    opener()  # opening again is idempotent
    assert opener(create=False).log(ORIGIN) is not None
    s.close()
    with pytest.raises(UsageError, match="closed"):
        s.logs()


def test_concurrent_opens_threads(opener: Opener) -> None:
    barrier = threading.Barrier(6)

    def open_one(i: int) -> None:
        barrier.wait(30)
        opener().logs()

    run_threads(6, open_one)


def _raw_execute(backend: Any, sql: str) -> None:
    if backend.db is not None:
        with sqlite3.connect(backend.db) as conn:
            conn.execute(sql)
        conn.close()
    else:
        with psycopg.connect(backend.postgres, autocommit=True) as pg:
            pg.execute(sql)


def test_other_schema_version_refused(backend: Any, opener: Opener) -> None:
    opener()
    _raw_execute(backend, "UPDATE witness_meta SET schema_version = 99")
    with pytest.raises(UsageError, match="schema version is 99"):
        opener()


def test_a_version_1_state_is_upgraded_and_keeps_its_evidence(backend: Any, opener: Opener) -> None:
    """A state written before evidence named what it proves (schema 1) is upgraded when
    opened, even read-only by ``serve``: the column and the unique index are added, old rows
    stay (with nothing proved named, so never a duplicate), and new rows dedupe."""
    s = opener()
    s.add_log(ORIGIN, (LOG_KEY.vkey(),))
    for stmt in (
        "DROP INDEX evidence_proves",
        "ALTER TABLE evidence DROP COLUMN proves",
        "ALTER TABLE logs DROP COLUMN tiles",
        "UPDATE witness_meta SET schema_version = 1",
    ):
        _raw_execute(backend, stmt)
    blob = "X'78'" if backend.db is not None else "'\\x78'::bytea"
    _raw_execute(
        backend,
        "INSERT INTO evidence (origin, reason, request, stored_note, received_at)"
        f" VALUES ('{ORIGIN}', 'from version 1', {blob}, NULL, {T0})",
    )
    for _ in range(2):  # the second open finds nothing to do
        s2 = opener(create=False)
    [old] = s2.evidence(ORIGIN)
    assert old.reason == "from version 1"
    first = s2.add_evidence(ORIGIN, "fork", b"r", None, T0, proves=b"p" * 32)
    assert first is not None
    assert s2.add_evidence(ORIGIN, "fork", b"r2", None, T0, proves=b"p" * 32) is None
    assert len(s2.evidence(ORIGIN)) == 2


def test_a_version_2_state_is_upgraded_and_its_logs_have_no_tiles_url(
    backend: Any, opener: Opener
) -> None:
    """A state written before logs named a tiles URL (schema 2) gains the column, NULL."""
    s = opener()
    s.add_log(ORIGIN, (LOG_KEY.vkey(),), qpd=3)
    for stmt in (
        "ALTER TABLE logs DROP COLUMN tiles",
        "UPDATE witness_meta SET schema_version = 2",
    ):
        _raw_execute(backend, stmt)
    for _ in range(2):
        s2 = opener(create=False)
    assert s2.log(ORIGIN) == LogConfig(ORIGIN, (LOG_KEY.vkey(),), 3, False, None)
    s2.set_tiles(ORIGIN, "https://example.com/log")
    assert s2.log(ORIGIN) == LogConfig(
        ORIGIN, (LOG_KEY.vkey(),), 3, False, "https://example.com/log/"
    )


def test_a_logs_tiles_url_is_set_checked_and_cleared(state: WitnessState) -> None:
    state.add_log(ORIGIN, (LOG_KEY.vkey(),), tiles="http://127.0.0.1:8080/journal/acme")
    assert state.log(ORIGIN) == LogConfig(
        ORIGIN, (LOG_KEY.vkey(),), tiles="http://127.0.0.1:8080/journal/acme/"
    )
    state.add_log(OTHER, (OTHER_KEY.vkey(),))
    assert {c.origin: c.tiles for c in state.logs()} == {
        ORIGIN: "http://127.0.0.1:8080/journal/acme/",
        OTHER: None,
    }
    for bad in (
        "ftp://x/",
        "https://",
        "https://x/ y",
        "https://x/?a=1",
        "https://é/",
        "https://x/\n",
    ):
        with pytest.raises(MalformedError):
            state.set_tiles(ORIGIN, bad)
    with pytest.raises(UsageError, match="not configured"):
        state.set_tiles("nobody.example/log", "https://x/")
    state.set_tiles(ORIGIN, None)
    assert state.log(ORIGIN) == LogConfig(ORIGIN, (LOG_KEY.vkey(),))


def test_evidence_is_kept_once_per_thing_proved_and_bounded_per_log(state: WitnessState) -> None:
    from witness.sqlstate import MAX_EVIDENCE_BYTES_PER_LOG, MAX_EVIDENCE_PER_LOG

    state.add_log(ORIGIN, (LOG_KEY.vkey(),))
    state.add_log(OTHER, (LOG_KEY.vkey(),))
    one = state.add_evidence(ORIGIN, "fork", b"req", None, T0, proves=b"\x01" * 32)
    assert one is not None
    assert state.add_evidence(ORIGIN, "fork again", b"req2", None, T0, proves=b"\x01" * 32) is None
    # The same thing proved for another log is that log's own evidence.
    assert state.add_evidence(OTHER, "fork", b"req", None, T0, proves=b"\x01" * 32) is not None
    # The count bound: rows beyond it are not kept, whatever they prove.
    for i in range(1, MAX_EVIDENCE_PER_LOG):
        assert state.add_evidence(ORIGIN, "f", b"r", None, T0, proves=b"%d" % i) is not None
    assert state.add_evidence(ORIGIN, "f", b"r", None, T0, proves=b"past the count") is None
    assert len(state.evidence(ORIGIN, 1000)) == MAX_EVIDENCE_PER_LOG
    # The byte bound, on another log: a row that would pass it is not kept.
    half = b"x" * (MAX_EVIDENCE_BYTES_PER_LOG // 2)
    assert state.add_evidence(OTHER, "big", half, None, T0, proves=b"big 1") is not None
    assert state.add_evidence(OTHER, "big", half, b"y", T0, proves=b"big 2") is None
    assert state.add_evidence(OTHER, "small", b"z", None, T0, proves=b"small") is not None
    with pytest.raises(UsageError, match="1-64 bytes"):
        state.add_evidence(ORIGIN, "f", b"r", None, T0, proves=b"")


def test_evidence_of_one_fork_from_racing_handles_is_one_row(opener: Opener) -> None:
    """Several handles (processes, on PostgreSQL) keep the same proven fork at once: one row."""
    first = opener()
    first.add_log(ORIGIN, (LOG_KEY.vkey(),))
    handles = [opener(create=False) for _ in range(4)]
    barrier = threading.Barrier(8)
    got: list[int | None] = []

    def keep(i: int) -> None:
        barrier.wait(30)
        got.append(handles[i % 4].add_evidence(ORIGIN, "fork", b"req", None, T0, proves=b"f" * 32))

    run_threads(8, keep)
    assert sum(1 for g in got if g is not None) == 1
    assert len(first.evidence(ORIGIN)) == 1


# --- commit verdicts and retries ----------------------------------------------------------------


class _Fault:
    """Raise ``error`` the next time a statement starting with ``prefix`` runs."""

    def __init__(self) -> None:
        self.plan: list[tuple[str, Exception]] = []

    def check(self, sql: str) -> None:
        for i, (prefix, error) in enumerate(self.plan):
            if sql.lstrip().startswith(prefix):
                del self.plan[i]
                raise error


class _Cursor:
    def __init__(self, cur: Any, fault: _Fault) -> None:
        self._cur = cur
        self._fault = fault

    def execute(self, sql: str, params: Any = ()) -> Any:
        self._fault.check(sql)
        return self._cur.execute(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


class _Conn:
    def __init__(self, conn: Any, fault: _Fault) -> None:
        self._conn = conn
        self._fault = fault

    def cursor(self) -> _Cursor:
        return _Cursor(self._conn.cursor(), self._fault)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _faulty_state(db: str | None, postgres: str | None) -> tuple[SQLState, _Fault]:
    """A state whose connections raise the errors planted in the returned :class:`_Fault`."""
    fault = _Fault()
    dialect: Dialect
    if db is not None:

        class FaultySQLite(SQLiteDialect):
            def connect(self) -> Any:
                return _Conn(super().connect(), fault)

        dialect = FaultySQLite(db, create=True)
    else:

        class FaultyPostgres(PostgresDialect):
            def connect(self) -> Any:
                return _Conn(super().connect(), fault)

        assert postgres is not None
        dialect = FaultyPostgres(postgres)
    return SQLState(dialect), fault


def _no_verdict(backend: Any) -> Exception:
    """The error each driver raises when the connection dies after COMMIT was sent."""
    if backend.db is not None:
        e = sqlite3.OperationalError("disk I/O error")
        e.sqlite_errorname = "SQLITE_IOERR_FSYNC"
        return e
    return psycopg.OperationalError("server closed the connection unexpectedly")


def test_commit_without_verdict_is_commit_unknown(backend: Any, opener: Opener) -> None:
    s, fault = _faulty_state(backend.db, backend.postgres)
    try:
        s.add_log(ORIGIN, (LOG_KEY.vkey(),))
        fault.plan.append(("COMMIT", _no_verdict(backend)))
        with pytest.raises(CommitUnknownError, match="re-read"):
            s.compare_and_swap(None, cos(ORIGIN, 1))
        # Here the fault struck before the COMMIT reached the database: nothing landed, and
        # a re-read (what the caller must do) says so; the handle keeps working.
        assert opener().latest(ORIGIN) is None
        assert s.compare_and_swap(None, cos(ORIGIN, 1))
        # A read's COMMIT failing is not "unknown": nothing was written.
        fault.plan.append(("COMMIT", _no_verdict(backend)))
        with pytest.raises(BackendError):
            s.latest(ORIGIN)
        # A driver error inside the transaction rolls it back: BackendError, nothing written.
        err: Exception = (
            sqlite3.OperationalError("boom")
            if backend.db is not None
            else psycopg.errors.DataCorrupted("boom")
        )
        fault.plan.append(("UPDATE latest", err))
        with pytest.raises(BackendError, match="boom"):
            s.compare_and_swap(cos(ORIGIN, 1), cos(ORIGIN, 2))
        assert opener().latest(ORIGIN) == cos(ORIGIN, 1)
    finally:
        s.close()


def test_retryable_error_runs_the_transaction_again(pg_schema: Any) -> None:
    # PostgreSQL only: SQLite has no retryable errors (BEGIN IMMEDIATE waits for the lock).
    s, fault = _faulty_state(None, pg_schema.conninfo)
    try:
        s.add_log(ORIGIN, (LOG_KEY.vkey(),))
        fault.plan.append(("INSERT INTO latest", psycopg.errors.SerializationFailure("retry")))
        fault.plan.append(("INSERT INTO latest", psycopg.errors.DeadlockDetected("retry")))
        assert s.compare_and_swap(None, cos(ORIGIN, 1))
        assert not fault.plan
        assert s.latest(ORIGIN) == cos(ORIGIN, 1)
    finally:
        s.close()


# --- export and import ---------------------------------------------------------------------------


def _populate(s: WitnessState) -> None:
    """Logs of every shape: several keys and a quota, disabled, never cosigned, odd origin."""
    s.add_log(ORIGIN, (LOG_KEY.vkey(), LOG_KEY2.vkey(), mldsa_key().vkey()), qpd=1000)
    s.add_log(OTHER, (OTHER_KEY.vkey(),))
    s.add_log("example.com/never-cosigned", (LOG_KEY.vkey(),), qpd=1)
    s.add_log("example.com/disabled", (LOG_KEY.vkey(),))
    assert s.compare_and_swap(None, cos(ORIGIN, 42))
    assert s.compare_and_swap(None, cos(OTHER, 0, key=OTHER_KEY))
    assert s.compare_and_swap(None, cos("example.com/disabled", 7))
    s.set_disabled("example.com/disabled", True)
    s.add_evidence(ORIGIN, "conflict", b"request", None, T0)  # not exported
    s.count_request(ORIGIN, DAY)


def test_export_import_round_trip(
    opener: Opener, sqlite_opener: Callable[[str], WitnessState]
) -> None:
    source = sqlite_opener("source.db")
    _populate(source)
    exported = source.export_state()
    assert exported.startswith(f"{STATE_HEADER}\n".encode())
    assert exported.endswith(b"end 4\n")
    target = opener()  # the backend under test, fresh
    target.import_state(exported)
    assert target.export_state() == exported
    assert target.logs() == source.logs()
    assert target.all_latest() == source.all_latest()
    assert target.evidence() == []
    assert target.count_request(ORIGIN, DAY) == 1  # request counts stay behind
    target.import_state(exported)  # importing again changes nothing
    assert target.export_state() == exported
    # ... and the backend's export moves on again, byte for byte.
    onward = sqlite_opener("onward.db")
    onward.import_state(target.export_state())
    assert onward.export_state() == exported
    empty = sqlite_opener("empty.db")
    assert empty.export_state() == f"{STATE_HEADER}\nend 0\n".encode()
    target.import_state(empty.export_state())
    assert target.export_state() == exported


def test_import_merges_configuration(state: WitnessState) -> None:
    state.add_log(ORIGIN, (LOG_KEY.vkey(),), qpd=10)
    state.add_log(OTHER, (OTHER_KEY.vkey(),))
    state.set_disabled(OTHER, True)
    c5 = cos(ORIGIN, 5)
    assert state.compare_and_swap(None, c5)
    c9 = cos(ORIGIN, 9, at=T0 + 9, key=LOG_KEY2)  # signed by the file's key
    data = format_state(
        [
            (LogConfig(ORIGIN, (LOG_KEY2.vkey(),), None, True), c9),
            (LogConfig(OTHER, (LOG_KEY.vkey(),), 3, False), None),
        ]
    )
    state.import_state(data)
    assert state.log(ORIGIN) == LogConfig(
        ORIGIN, tuple(sorted((LOG_KEY.vkey(), LOG_KEY2.vkey()))), None, True
    )
    # Keys are only added, the file's qpd replaces, and disabled stays disabled.
    assert state.log(OTHER) == LogConfig(
        OTHER, tuple(sorted((OTHER_KEY.vkey(), LOG_KEY.vkey()))), 3, True
    )
    assert state.latest(ORIGIN) == c9  # moved forward
    # Same size and root: the stored note stays.
    other_note = Cosigned(ORIGIN, 9, c9.root, note_of(ORIGIN, 9, c9.root, cosign=False), 1)
    state.import_state(format_state([(LogConfig(ORIGIN, (LOG_KEY.vkey(),)), other_note)]))
    assert state.latest(ORIGIN) == c9


def test_import_refuses_backwards_moves(state: WitnessState) -> None:
    state.add_log(ORIGIN, (LOG_KEY.vkey(),))
    state.add_log(OTHER, (LOG_KEY.vkey(),), qpd=10)
    c10 = cos(ORIGIN, 10)
    o4 = cos(OTHER, 4)
    assert state.compare_and_swap(None, c10)
    assert state.compare_and_swap(None, o4)
    before = state.export_state()
    newcomer = "example.com/new"
    older = [
        (LogConfig(ORIGIN, (LOG_KEY.vkey(), LOG_KEY2.vkey()), 5, True), cos(ORIGIN, 9)),
        (LogConfig(newcomer, (LOG_KEY.vkey(),)), cos(newcomer, 1)),
        (LogConfig(OTHER, (LOG_KEY.vkey(),)), cos(OTHER, 4, tag="fork")),
    ]
    with pytest.raises(UsageError) as info:
        state.import_state(format_state(older))
    message = str(info.value)
    assert "nothing was written" in message
    assert f"log {ORIGIN}: the file's checkpoint (size 9) is older" in message
    assert f"log {OTHER}: the file's checkpoint of size 4 has another root" in message
    assert newcomer not in message
    assert state.export_state() == before  # no config change, no new log, no move
    assert state.log(newcomer) is None
    # One refused origin is enough to refuse all.
    with pytest.raises(UsageError, match=f"log {OTHER}"):
        state.import_state(format_state([older[1], older[2]]))
    assert state.export_state() == before


def test_import_refuses_bad_files(state: WitnessState) -> None:
    state.add_log(ORIGIN, (LOG_KEY.vkey(),))
    before = state.export_state()
    forged = Cosigned(ORIGIN, 3, root_of(ORIGIN, 3), note_of(ORIGIN, 3, root_of(ORIGIN, 3)), 0)
    wrong_key = format_state([(LogConfig(ORIGIN, (OTHER_KEY.vkey(),)), forged)])
    with pytest.raises(UnverifiedNoteError, match=r"state line 4: log example\.com/log"):
        state.import_state(wrong_key)
    with pytest.raises(MalformedError, match="state line 1"):
        state.import_state(b"tlog-witness-state v2\nend 0\n")
    with pytest.raises(UsageError):
        state.import_state("text")  # type: ignore[arg-type]
    assert state.export_state() == before


# --- the export format, without a database -------------------------------------------------------

_FORMAT_KEYS = [LOG_KEY, LOG_KEY2, OTHER_KEY]

origins = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=30).filter(
    lambda o: len(o.encode()) <= MAX_ORIGIN_BYTES
)


@st.composite
def entries(draw: st.DrawFn) -> list[tuple[LogConfig, Cosigned | None]]:
    out = []
    for origin in sorted(draw(st.sets(origins, max_size=4))):
        keys = draw(st.sets(st.sampled_from(_FORMAT_KEYS), min_size=1))
        vkeys = tuple(sorted(k.vkey() for k in keys))
        qpd = draw(st.none() | st.integers(1, (1 << 63) - 1))
        cfg = LogConfig(origin, vkeys, qpd, draw(st.booleans()))
        c = None
        if draw(st.booleans()):
            size = draw(st.integers(0, (1 << 63) - 1))
            key = sorted(keys, key=lambda k: k.vkey())[0]
            at = draw(st.integers(0, (1 << 63) - 1))
            c = cos(origin, size, tag=draw(st.integers(0, 3)), at=at, key=key)
        out.append((cfg, c))
    return out


@settings(max_examples=60, deadline=None)
@given(entries())
def test_state_format_round_trip(es: list[tuple[LogConfig, Cosigned | None]]) -> None:
    data = format_state(es)
    assert parse_state(data) == es
    assert format_state(parse_state(data)) == data


@settings(max_examples=100, deadline=None)
@given(entries().filter(bool), st.data())
def test_state_format_mutations(es: list[tuple[LogConfig, Cosigned | None]], data: Any) -> None:
    """Any one-byte change is refused, or gives a file that formats back to itself (one
    state, one spelling)."""
    raw = bytearray(format_state(es))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] = data.draw(st.integers(0, 255).filter(lambda b: b != raw[i]))
    try:
        parsed = parse_state(bytes(raw))
    except (MalformedError, UnverifiedNoteError):
        return
    assert format_state(parsed) == bytes(raw)


def _file(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


_K1, _K2 = sorted((LOG_KEY.vkey(), LOG_KEY2.vkey()))
_GOOD_NOTE = b64encode(cos(ORIGIN, 3).note)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "does not end in a newline"),
        (_file(STATE_HEADER, "end 0")[:-1], "does not end in a newline"),
        (b"\xff\n", "not valid UTF-8"),
        (_file(STATE_HEADER + " "), "state line 1: expected the header"),
        (_file(STATE_HEADER), "state line 2: missing the final 'end'"),
        (_file(STATE_HEADER, "end 1"), "state line 2: 'end' counts 1 logs"),
        (_file(STATE_HEADER, "end 00"), "state line 2: .*leading zero"),
        (_file(STATE_HEADER, "end 0", ""), "state line 3: text after the 'end'"),
        (_file(STATE_HEADER, "end 0\r"), "state line 2: .*not a canonical decimal"),
        (_file(STATE_HEADER, "log a", "end 1"), "state line 3: log a has no 'key' line"),
        (_file(STATE_HEADER, "log ", f"key {_K1}", "end 1"), "state line 2: the origin is empty"),
        (_file(STATE_HEADER, "log a\r", f"key {_K1}", "end 1"), "state line 2: .*U\\+000D"),
        (
            _file(STATE_HEADER, "log b", f"key {_K1}", "log a", f"key {_K1}", "end 2"),
            "state line 4: log a is out of order",
        ),
        (
            _file(STATE_HEADER, "log a", f"key {_K1}", "log a", f"key {_K1}", "end 2"),
            "state line 4: log a is out of order or repeated",
        ),
        (
            _file(STATE_HEADER, "log a", f"key {_K2}", f"key {_K1}", "end 1"),
            "state line 4: keys are out of order",
        ),
        (
            _file(STATE_HEADER, "log a", f"key {_K1}", f"key {_K1}", "end 1"),
            "state line 4: keys are out of order or repeated",
        ),
        (
            _file(STATE_HEADER, "log a", f"key {_vkey_of_type(TYPE_COSIGNATURE_V1)}", "end 1"),
            "state line 3: .*type 0x04",
        ),
        (_file(STATE_HEADER, "log a", "key x", "end 1"), "state line 3: log key 'x'"),
        (_file(STATE_HEADER, "log a", f"key {_K1}", "qpd 0", "end 1"), "state line 4: qpd"),
        (_file(STATE_HEADER, "log a", f"key {_K1}", "qpd 07", "end 1"), "leading zero"),
        (
            _file(STATE_HEADER, "log a", f"key {_K1}", "disabled", "qpd 5", "end 1"),
            "state line 5: expected 'log <origin>' or 'end <count>'",
        ),
        (
            _file(STATE_HEADER, "log a", f"key {_K1}", "disabled", "disabled", "end 1"),
            "state line 5: expected 'log",
        ),
        (
            _file(STATE_HEADER, "log a", f"key {_K1}", f"cosigned 1 {_GOOD_NOTE}", "end 1"),
            f"state line 4: the cosigned note is a checkpoint of {ORIGIN}, not of a",
        ),
        (
            _file(STATE_HEADER, f"log {ORIGIN}", f"key {_K1}", f"cosigned  {_GOOD_NOTE}", "end 1"),
            "state line 4: .*update time",
        ),
        (
            _file(
                STATE_HEADER,
                f"log {ORIGIN}",
                f"key {_K1}",
                f"cosigned 1 {_GOOD_NOTE} ",
                "end 1",
            ),
            "state line 4: expected 'cosigned <updated_at> <base64 note>'",
        ),
        (
            _file(STATE_HEADER, f"log {ORIGIN}", f"key {_K1}", "cosigned 1 bm90ZQ==", "end 1"),
            "state line 4: .*note",
        ),
    ],
)
def test_state_format_refuses(data: bytes, message: str) -> None:
    with pytest.raises(MalformedError, match=message):
        parse_state(data)


def test_state_format_example() -> None:
    """The documented layout, line by line."""
    c = cos(ORIGIN, 3, at=12)
    data = format_state(
        [
            (LogConfig(ORIGIN, (_K2, _K1), 50, True), c),
            (LogConfig("a b", (_K1,)), None),
        ]
    )
    assert data == _file(
        STATE_HEADER,
        "log a b",
        f"key {_K1}",
        f"log {ORIGIN}",
        f"key {_K1}",
        f"key {_K2}",
        "qpd 50",
        "disabled",
        f"cosigned 12 {b64encode(c.note)}",
        "end 2",
    )
    # The witness's own cosignature line rides along; the log's key verifies the note.
    _, cosigned = parse_state(data)[1]
    assert cosigned == c


def test_postgres_commits_are_synchronous_whatever_the_default(pg_schema: Any) -> None:
    """A database, role or connection string may default to synchronous_commit = off, where a
    COMMIT returns before the WAL is flushed and a crash can undo a swap already answered: the
    state's sessions set it on."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    options = conninfo_to_dict(pg_schema.conninfo).get("options", "")
    lax = make_conninfo(pg_schema.conninfo, options=f"{options} -c synchronous_commit=off")
    with psycopg.connect(lax) as probe:  # the default this test sets up is really off
        assert probe.execute("SHOW synchronous_commit").fetchone() == ("off",)
    s = open_state(postgres=lax)
    try:
        s.add_log(ORIGIN, (LOG_KEY.vkey(),))
        assert s.compare_and_swap(None, cos(ORIGIN, 1))
        # The session's own connection (private: there is no other way to ask it).
        conn = s._session._conn  # type: ignore[attr-defined]
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
    finally:
        s.close()
