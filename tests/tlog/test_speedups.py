"""The C fast paths of ``tlog/_speedups.c`` against the Python code they stand in for.

Each C function is either exact (``count_lines``, ``fold_leaves``: the same result as the
Python code, always) or a sound subset (``scan_records``, ``scan_runs``: whatever they take, the
Python verifier takes too, with the same hashes; where they stop, the Python code decides).
``body_names`` has its own tests in ``tests/tlog/test_journal.py``. The extension must be built
(``make`` compiles it); these tests fail, not skip, without it. docs/auditor-guide.md §11 says
what the accelerator is for; the formats are docs/export-format.md's.
"""

from __future__ import annotations

import hashlib
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tlog import accel, merkle, tiles
from tlog.encoding import b64encode, parse_hash
from tlog.errors import MalformedError
from tlog.export import MAX_LINE
from tlog.journal import (
    GENESIS,
    KIND_RUN_SEALED,
    Body,
    chain_hash,
    decode_body,
    seal_body,
    seal_outcome,
)
from tlog.merkle import MemoryHashStore, leaf_hash, stored_hashes_for_leaves
from verifier import parallel

_speedups: Any
try:
    from tlog import _speedups
except ImportError:  # pragma: no cover - test_the_extension_is_built fails
    _speedups = None

needs_c = pytest.mark.skipif(_speedups is None, reason="tlog._speedups is not built")


def test_the_extension_is_built() -> None:
    assert _speedups is not None, "tlog._speedups is not built: see pyproject.toml"
    # and every fast path is wired to it
    assert merkle._c_fold is _speedups.fold_leaves
    assert accel.scan_records is _speedups.scan_records
    assert accel.scan_runs is _speedups.scan_runs
    assert accel.count_lines is _speedups.count_lines


# --- count_lines ----------------------------------------------------------------------------


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text("\nab", max_size=300).map(str.encode), st.data())
def test_count_lines_is_bytes_count(data: bytes, draw: st.DataObject) -> None:
    start = draw.draw(st.integers(0, len(data)))
    end = draw.draw(st.integers(start, len(data)))
    assert _speedups.count_lines(data, start, end) == data[start:end].count(b"\n")


@needs_c
def test_count_lines_refuses_bad_ranges() -> None:
    for start, end in ((-1, 2), (2, 1), (0, 4)):
        with pytest.raises(ValueError, match="count_lines"):
            _speedups.count_lines(b"a\nb", start, end)


# --- fold_leaves ----------------------------------------------------------------------------


def _python_fold(start: int, leaves: list[bytes], reader: MemoryHashStore) -> list[bytes]:
    saved = merkle._c_fold
    merkle._c_fold = None
    try:
        return stored_hashes_for_leaves(start, leaves, reader)
    finally:
        merkle._c_fold = saved


@needs_c
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 300), st.integers(0, 70))
def test_fold_leaves_is_the_python_fold(start: int, k: int) -> None:
    tree = MemoryHashStore()
    tree.extend([leaf_hash(b"%d" % i) for i in range(start)])
    leaves = [leaf_hash(b"new %d" % i) for i in range(k)]
    assert stored_hashes_for_leaves(start, leaves, tree) == _python_fold(start, leaves, tree)


@needs_c
def test_fold_leaves_edges() -> None:
    tree = MemoryHashStore()
    for n in range(40):  # extend (C) and append (Python) build the same array, one leaf at a time
        other = MemoryHashStore()
        other.hashes, other.size = list(tree.hashes), tree.size
        leaf = leaf_hash(b"%d" % n)
        tree.append(leaf)
        other.extend(iter([leaf]))  # an iterator, not a list
        assert other.hashes == tree.hashes and other.root() == tree.root()
    # A leaf that is not 32 bytes goes to the Python loop, which hashes it as it is.
    odd = [b"x" * 31, b"y" * 33]
    assert stored_hashes_for_leaves(5, odd, tree) == _python_fold(5, odd, tree)
    # The C function itself refuses what it cannot fold.
    with pytest.raises(ValueError, match="frontier"):
        _speedups.fold_leaves([], [bytes(32)], 1)
    with pytest.raises(ValueError, match="32 bytes"):
        _speedups.fold_leaves([b"short"], [bytes(32)], 1)
    frontier = [bytes(32)]
    with pytest.raises(ValueError, match="32 bytes"):
        _speedups.fold_leaves(frontier, [bytes(32), b"short"], 1)
    assert frontier == [bytes(32)], "a failed fold leaves the frontier as it was"


# --- scan_records ---------------------------------------------------------------------------


def _reference_take(
    buf: bytes,
    at: int,
    end: int,
    run: bytes,
    seq: int,
    count: int,
    prev: bytes,
    outcome: bytes | None = None,
) -> tuple[list[tuple[int, bytes]], list[bytes]]:
    """What scan_records may take, decided by the Python verifier's own functions: (offset,
    prev) before and after each record taken, and the bodies taken. ``outcome``: the run
    line's, for a sealed run (its last record must be the seal record naming it)."""
    taken = 0
    steps = [(at, prev)]
    bodies = []
    while seq + taken <= count:
        lf = buf.find(b"\n", at, end)
        if lf < 0:
            break
        line = buf[at:lf]
        if len(line) < 46 or line[44] != 0x20:
            break
        nxt = lf + 1
        ahead = buf[nxt : min(nxt + 4, end)]
        if seq + taken < count:
            if nxt >= end or ahead == b"sig ":
                break
        elif (
            ahead not in (b"run ", b"end ")
            or buf.find(b"\n", nxt, min(end, nxt + MAX_LINE + 1)) < 0
        ):
            # the reader reads that line whole (LF, length) before it hands on the last record
            break
        try:
            h = parse_hash(line[:44], "hash")
            body = decode_body(line[45:])
        except (MalformedError, UnicodeError):
            break
        if body.run != run.decode() or body.seq != seq + taken:
            break
        if outcome is not None and seq + taken == count:
            if seal_outcome(body) != outcome.decode():
                break
        elif body.kind == KIND_RUN_SEALED:
            break
        if chain_hash(prev, line[45:]) != h:
            break
        bodies.append(line[45:])
        prev, at, taken = h, nxt, taken + 1
        steps.append((at, prev))
    return steps, bodies


TEXT = st.text(st.characters(codec="utf-8"), max_size=6) | st.sampled_from(['a"b', "\\", "\x01"])
DATA = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)


@st.composite
def run_lines(draw: st.DrawFn) -> tuple[bytes, int, bytes, int, int, bytes | None]:
    """(buffer, its end, run ID, first seq, count, outcome) for one run's record lines, then
    one more line; some records signed, some bodies of the other paths (escaped keys, 16
    digits), some seal records (last or not, naming the run line's outcome or another)."""
    run = draw(st.sampled_from(["r", "run-0001", "a.b:c@d-e_f"]))
    n = draw(st.integers(1, 6))
    outcome = draw(st.sampled_from([None, b"ok", b"Failed.v2-x"]))
    prev = GENESIS
    lines = []
    for seq in range(1, n + 1):
        epoch = draw(st.integers(1, 2**63 - 1))
        if draw(st.integers(0, 3)) == 0 or (outcome is not None and seq == n):
            named = draw(st.sampled_from(["ok", "Failed.v2-x", "ok2"]))
            raw = seal_body(run, seq, epoch, named)
            if draw(st.integers(0, 5)) == 0:  # a RunSealed kind that is no seal record
                extra = {"outcome": named, "x": 1}
                raw = Body(run, seq, epoch, KIND_RUN_SEALED, data=extra, has_data=True)
        else:
            data: Any = draw(DATA.filter(lambda v: v is not None))  # "data": null is refused
            raw = Body(run, seq, epoch, "K", data=data, has_data=True)
        body = raw.encode()
        prev = hashlib.sha256(prev + body).digest()
        lines.append(b64encode(prev).encode() + b" " + body)
        if draw(st.integers(0, 9)) == 0:
            lines.append(b"sig k 01234567 " + b64encode(bytes(64)).encode())
    lines.append(draw(st.sampled_from([b"run next 1", b"end 0 1 1 0 x", b"junk", b"sig x"])))
    buf = b"\n".join(lines) + b"\n"
    count = n if draw(st.booleans()) else draw(st.integers(1, 8))
    return buf, len(buf), run.encode(), 1, count, outcome


@needs_c
@settings(max_examples=600, deadline=None)
@given(run_lines(), st.integers(0, 2**32), st.sampled_from([0, 0, 1, 2]))
@example(  # the line after the last record cut by the block's end (found by Hypothesis)
    (
        b"tT6WITeQCEwjXYNY73nERw3KD1IlZJ4fp8wnzEY46YI= "
        b'{"data":[],"epoch":1000,"kind":"K","run":"run-0001","seq":1,"v":1}\nrun next 1\n',
        123,
        b"run-0001",
        1,
        1,
        None,
    ),
    2,
    1,
)
def test_scan_records_takes_only_what_python_takes(
    case: tuple[bytes, int, bytes, int, int, bytes | None], seed: int, flips: int
) -> None:
    buf, end, run, seq, count, outcome = case
    rng = random.Random(seed)
    data = bytearray(buf)
    for _ in range(flips):  # flipped, not random, bytes: every one is a change
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)
    buf = bytes(data)
    end = rng.choice([end, end, rng.randrange(end + 1)])  # a block that ends anywhere
    at, taken, prev = _speedups.scan_records(buf, 0, end, run, seq, count, GENESIS, outcome)
    steps, bodies = _reference_take(buf, 0, end, run, seq, count, GENESIS, outcome)
    assert taken < len(steps)
    assert (at, prev) == steps[taken]
    if taken < len(bodies):  # stopped at a body the Python verifier takes: one it leaves to it
        assert not _speedups.body_names(bodies[taken], run, seq + taken)


@needs_c
def test_scan_records_keeps_the_seal_record_rule() -> None:
    def line(body: Body, prev: bytes) -> tuple[bytes, bytes]:
        raw = body.encode()
        h = chain_hash(prev, raw)
        return b64encode(h).encode() + b" " + raw + b"\n", h

    l1, h1 = line(Body("r", 1, 1, "K"), GENESIS)
    l2, h2 = line(seal_body("r", 2, 1, "ok"), h1)
    buf = l1 + l2 + b"end 0 1 2 1 x\n"
    end = len(buf)
    # Sealed with "ok": both taken; with another outcome, or unsealed: record 1 only.
    assert _speedups.scan_records(buf, 0, end, b"r", 1, 2, GENESIS, b"ok")[1:] == (2, h2)
    assert _speedups.scan_records(buf, 0, end, b"r", 1, 2, GENESIS, b"o")[1:] == (1, h1)
    assert _speedups.scan_records(buf, 0, end, b"r", 1, 2, GENESIS, b"oka")[1:] == (1, h1)
    assert _speedups.scan_records(buf, 0, end, b"r", 1, 2, GENESIS, None)[1:] == (1, h1)
    # A sealed run whose last record is not a seal record: not taken.
    l2b, _ = line(Body("r", 2, 1, "K", data={"outcome": "ok"}, has_data=True), h1)
    buf2 = l1 + l2b + b"end 0 1 2 1 x\n"
    assert _speedups.scan_records(buf2, 0, len(buf2), b"r", 1, 2, GENESIS, b"ok")[1] == 1


@needs_c
def test_scan_records_arguments() -> None:
    with pytest.raises(ValueError, match="scan_records"):
        _speedups.scan_records(b"", 0, 0, b"r", 1, 1, b"short", None)
    with pytest.raises(ValueError, match="scan_records"):
        _speedups.scan_records(b"", 0, 1, b"r", 1, 1, GENESIS, None)
    with pytest.raises(ValueError, match="scan_records"):
        _speedups.scan_records(b"", 0, 0, b"r", 0, 1, GENESIS, None)
    assert _speedups.scan_records(b"", 0, 0, b"r", 1, 1, GENESIS, None) == (0, 0, GENESIS)
    assert _speedups.scan_records(b"", 0, 0, b"r", 1, 1, GENESIS, b"ok") == (0, 0, GENESIS)
    with pytest.raises(OverflowError):  # not silently taken modulo 2**64
        _speedups.scan_records(b"", 0, 0, b"r", 2**64 + 1, 1, GENESIS, None)
    with pytest.raises(ValueError, match="size"):
        _speedups.fold_leaves([], [], -1)
    with pytest.raises(OverflowError):
        _speedups.fold_leaves([], [], 2**64)


# --- scan_runs, inside the verifier ---------------------------------------------------------


def _export(tmp_path: Path, runs: int, per_run: int) -> Path:
    from tests.verifier.test_parallel import Run, make_run, write

    path = tmp_path / "unsigned.export"
    data = write([Run(f"r{p:04d}", make_run(f"r{p:04d}", per_run), p) for p in range(runs)])
    path.write_bytes(data)
    return path


@needs_c
def test_scan_runs_takes_the_plain_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _export(tmp_path, 300, 4)
    taken: list[int] = []
    real = accel.scan_runs
    assert real is not None

    def counting(buf: Any, at: int, end: int, lineno: int) -> Any:
        out = real(buf, at, end, lineno)
        taken.append(len(out[2]))
        return out

    monkeypatch.setattr(accel, "scan_runs", counting)
    summary = parallel.verify_export_parallel(path, jobs=1, chunk_bytes=20_000)
    assert summary.sealed_runs == 300
    chunks = -(-path.stat().st_size // 20_000)
    # Every run but at most the last of each chunk (its look-ahead is past the chunk's end).
    assert sum(taken) >= 300 - chunks - 1, (sum(taken), chunks)
    # And with the scans off (the pure-Python loop) the summary is the same.
    monkeypatch.setattr(accel, "scan_runs", None)
    monkeypatch.setattr(accel, "scan_records", None)
    assert parallel.verify_export_parallel(path, jobs=1, chunk_bytes=20_000) == summary


@needs_c
def test_scan_runs_arguments() -> None:
    with pytest.raises(ValueError, match="scan_runs"):
        _speedups.scan_runs(b"abc", 2, 1, 0)
    assert _speedups.scan_runs(b"run a 1\n", 0, 8, 7) == (0, 7, [])


# --- leaf_hashes ----------------------------------------------------------------------------


@needs_c
@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 40), st.integers(1, 50), st.integers(0, 40))
def test_leaf_hashes_is_the_python_loop(buf: bytes, offset: int, stride: int, length: int) -> None:
    count = max(0, (len(buf) - offset - length) // stride + 1) if len(buf) >= offset + length else 0
    want = b"".join(
        leaf_hash(buf[offset + i * stride : offset + i * stride + length]) for i in range(count)
    )
    assert tiles.leaf_hashes(buf, offset, stride, length, count) == want
    saved = accel.leaf_hashes
    accel.leaf_hashes = None
    try:
        assert tiles.leaf_hashes(buf, offset, stride, length, count) == want
    finally:
        accel.leaf_hashes = saved
    # One entry more than the buffer holds is refused, by both paths, never read past its end.
    with pytest.raises(ValueError, match="not all in the buffer"):
        tiles.leaf_hashes(buf, offset, stride, length, count + 1)
    with pytest.raises(ValueError, match="not all in the buffer"):
        _speedups.leaf_hashes(buf, offset, stride, length, count + 1)


@needs_c
def test_leaf_hashes_refuses_negative_arguments() -> None:
    for args in ((-1, 1, 1, 1), (0, -1, 1, 1), (0, 1, -1, 1), (0, 1, 1, -1)):
        with pytest.raises(ValueError, match="leaf_hashes"):
            _speedups.leaf_hashes(b"abc", *args)
    assert _speedups.leaf_hashes(b"", 0, 0, 0, 0) == b""


_BIG = (1 << 63) - 1


@needs_c
@pytest.mark.parametrize(
    "args",
    [
        (1, 2, _BIG, 1),  # offset + length overflows
        (_BIG, 1, 1, 1),  # offset far past the end
        (0, _BIG, 1, 2),  # the second entry's offset overflows
        (1, _BIG, 2, 3),
        (0, 1, 1, _BIG),  # count * 32 overflows
        (3, 0, 1, 1),  # an entry that starts at the end
    ],
)
def test_leaf_hashes_refuses_overflowing_arguments(args: tuple[int, int, int, int]) -> None:
    # The first case crashed the interpreter (a bounds check that overflowed); each runs in a
    # child process so that a crash fails this test rather than the whole run.
    code = (
        "from tlog import _speedups\n"
        "try:\n"
        f"    _speedups.leaf_hashes(b'abc', *{args!r})\n"
        "except (ValueError, MemoryError, OverflowError) as e:\n"
        "    print(type(e).__name__)\n"
        "else:\n"
        "    print('accepted')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ValueError", done.stdout
    # The wrapper refuses them too, by the same rule, with the C function or without it.
    for fast in (accel.leaf_hashes, None):
        saved = accel.leaf_hashes
        accel.leaf_hashes = fast
        try:
            with pytest.raises(ValueError, match="not all in the buffer"):
                tiles.leaf_hashes(b"abc", *args)
        finally:
            accel.leaf_hashes = saved


@needs_c
@pytest.mark.parametrize(
    "args",
    [
        (0, 0, 1, 3),
        (1, 0, 2, 2),
        (0, 0, 0, 0),
        (2, 0, 1, 1),
        (-1, 1, 1, 0),
        (0, -1, 1, 0),
        (0, 1, -1, 0),
        (0, 1, 1, -1),
        (4, 1, 0, 0),
        (3, 0, 0, 2),
    ],
)
def test_leaf_hashes_python_and_c_agree(args: tuple[int, int, int, int]) -> None:
    """Stride 0 (one entry hashed ``count`` times), negative arguments with nothing to hash:
    the Python fallback gives the C function's verdict."""

    def run(fast: Any) -> bytes | str:
        saved = accel.leaf_hashes
        accel.leaf_hashes = fast
        try:
            return tiles.leaf_hashes(b"abc", *args)
        except ValueError as e:
            return str(e)
        finally:
            accel.leaf_hashes = saved

    try:
        direct: bytes | str = _speedups.leaf_hashes(b"abc", *args)
    except ValueError as e:
        direct = str(e)
    assert run(None) == run(accel.leaf_hashes) == direct
