"""Export verification benchmark: one process and several, against a hashing floor.

The acceptance: export verification of 1,000,000 records (100,000 runs) against a floor
measured in the same run — the hashing plus the signature checks the work needs, in a tight
loop — at >= 70% of the floor's throughput on one core, and >= 1.6x faster on two.

The export. Built once per variant in a temporary directory, written directly (a record line is
``base64(hash) SP body``, so no store is needed): the header and checkpoints go through
:class:`tlog.export.ExportWriter` (which checks them), the run lines, records and end line are
formatted here, and the file is then verified by :func:`tlog.export.verify_export` — whose
summary must match what was built — so a wrong file cannot produce a figure. Each run has
``per_run`` records of a realistic shape (about 150-byte canonical bodies: a ``RunStarted``, tool
calls with a small ``data`` object, a ``RunConcluded``, then the seal record), all runs are
sealed, and four
checkpoints (at 1/4, 1/2, 3/4 and all of the log) are signed by the log key and cosigned by one
cosignature/v1 witness.

* **unsigned** (the acceptance size, 1,000,000 records in 100,000 runs): records carry no
  signature, as the store writes them by default. "The signature checks the work needs" are then
  the 8 checkpoint signatures.
* **signed** (every record signed by one record key; 100,000 records in 10,000 runs in the full
  run, to bound the time): one Ed25519 verification per record is added to the work and to the
  floor.

The floor (:func:`floor`), timed over the same file: read it; SHA-256 of the bytes before the
end line (the digest); split the runs section into lines; for each record line
``prev = SHA-256(prev || body)`` (GENESIS at each run line) — the chain hash, without decoding or
comparing the written hash —; for each ``sig`` line one libsodium Ed25519 verification of
``"tlog-toolkit/record/v1" LF || hash`` (signed variant); a leaf hash per run; the log's stored
hashes (:class:`tlog.merkle.MemoryHashStore`), the root at each checkpoint size compared with the
checkpoint's, the consistency proofs between successive checkpoints, and the checkpoint
signatures. It parses no JSON and no base64 hash: a lower bound on any verifier, not a target
one could reach without skipping checks.

Measured (``time.perf_counter``, garbage collector off, page cache warm, the file written
back to disk before the first measurement): the floor (best of :attr:`Config.floor_reps`) and
:func:`tlog.export.verify_export` (best of :attr:`Config.reps`) in this process;
:func:`verifier.parallel.verify_export_parallel` with ``jobs=1`` (its chunked code in one
process: what ``tlog-verify export`` runs on one core) and ``jobs=2`` (this process and one
worker) each in a fresh process (:mod:`bench.verify_probe`), as small as the command's — this
one holds the exports it built, which a fork would copy on write. Those take about half a second
on the unsigned export and are the best of :attr:`Config.parallel_reps` (a sub-second wall time
on a shared 2-CPU machine varies by 5-10% from run to run, the two-core one most); on the
signed one, of :attr:`Config.reps`. Every summary must equal the one-pass verifier's.

"One core" is enforced, not assumed: the floor, ``verify_export`` and ``jobs=1`` run pinned to
one CPU (``os.sched_setaffinity``), so the thread that hashes the file's digest beside the record
loop cannot borrow the second core; ``jobs=2`` runs on two. The targets: ``jobs=1`` (the tool on
one core) at >= 70% of the floor's throughput, and ``jobs=2`` >= 1.6x faster than ``jobs=1``.
CPU time (the process plus its reaped children) is reported beside wall time, and the load
average before and after: on a busy machine the wall times of the two-process runs are the
noisy ones.
"""

from __future__ import annotations

import binascii
import gc
import hashlib
import io
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import TypeVar

import nacl.signing

from bench.merkle_bench import Section, fmt_ratio, fmt_time
from tlog.checkpoint import Checkpoint
from tlog.cosignature import CosignatureV1Signer
from tlog.encoding import b64encode
from tlog.export import ExportHeader, ExportSummary, ExportWriter, verify_export
from tlog.journal import GENESIS, RECORD_SIGNATURE_CONTEXT, body_names, decode_body
from tlog.keys import format_vkey, verifier_for
from tlog.merkle import MemoryHashStore, consistency_proof, leaf_hash, verify_consistency
from tlog.note import Ed25519Signer, Verifier, open_note, sign_note

TITLE = "verify"

FLOOR_RATIO_TARGET = 0.70
SPEEDUP_TARGET = 1.6
TARGET_RECORDS = 1_000_000
JOBS = 2

T = TypeVar("T")


@dataclass(frozen=True)
class Variant:
    """One export to build and verify."""

    name: str
    runs: int
    per_run: int
    signed: bool

    @property
    def records(self) -> int:
        return self.runs * self.per_run


@dataclass(frozen=True)
class Config:
    unsigned: Variant
    signed: Variant
    reps: int
    floor_reps: int
    parallel_reps: int  # for the unsigned variant's verifier.parallel runs


FULL = Config(
    unsigned=Variant("unsigned", 100_000, 10, signed=False),
    signed=Variant("signed", 10_000, 10, signed=True),
    reps=2,
    floor_reps=3,
    parallel_reps=15,
)
QUICK = Config(
    unsigned=Variant("unsigned", 2_000, 5, signed=False),
    signed=Variant("signed", 400, 5, signed=True),
    reps=1,
    floor_reps=2,
    parallel_reps=2,
)


def _log(message: str) -> None:
    print(f"  [verify] {message}", file=sys.stderr, flush=True)


def _seed(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


ORIGIN = "bench.example/journal"
LOG = Ed25519Signer(ORIGIN, _seed("bench log key"))
RECORDS = Ed25519Signer("records.bench.example", _seed("bench record key"))
WITNESS = CosignatureV1Signer("witness.bench.example", _seed("bench witness"), clock=lambda: T0)
T0 = 1_760_000_000


def _vkey(signer: Ed25519Signer) -> str:
    return format_vkey(verifier_for(signer.name, signer.key_type, signer.public_key))


# --- building -------------------------------------------------------------------------------


def body(run: int, seq: int, per_run: int) -> bytes:
    """Record ``seq`` of run ``run``: canonical JSON by construction (keys sorted, plain text)."""
    if seq == per_run:  # the seal record (tlog.journal.seal_body): no case
        return (
            b'{"data":{"outcome":"succeeded"},"epoch":1,"kind":"RunSealed","run":"run-%07d",'
            b'"seq":%d,"v":1}' % (run, seq)
        )
    if seq == 1:
        kind, data = b"RunStarted", b'{"agent":"planner","input":"order-%d"}' % run
    elif seq == per_run - 1:
        kind, data = b"RunConcluded", b'{"outcome":"succeeded","steps":%d}' % per_run
    else:
        kind = b"ToolCall"
        data = b'{"args":{"item":"sku-%d","qty":%d},"tool":"inventory.lookup"}' % (
            run * 31 + seq,
            seq,
        )
    return b'{"case":"case-%d","data":%s,"epoch":1,"kind":"%s","run":"run-%07d","seq":%d,"v":1}' % (
        run % 1000,
        data,
        kind,
        run,
        seq,
    )


@dataclass(frozen=True)
class Built:
    """A built export and what its summary must say."""

    path: Path
    variant: Variant
    size: int
    sizes: tuple[int, ...]
    notes: tuple[bytes, ...]
    root: bytes
    seconds: float


def build(path: Path, v: Variant) -> Built:
    """Write the export of ``v`` to ``path`` (see the module docstring)."""
    start = perf_counter()
    for seq in (1, 2, v.per_run):  # the bodies are canonical: decode_body re-encodes them
        decode_body(body(0, seq, v.per_run))
    sha = hashlib.sha256
    # Pass 1: the heads, for the checkpoints that precede the runs.
    leaves = []
    for run in range(v.runs):
        prev = GENESIS
        for seq in range(1, v.per_run + 1):
            prev = sha(prev + body(run, seq, v.per_run)).digest()
        leaves.append(leaf_hash(prev))
    tree = MemoryHashStore()
    tree.extend(leaves)
    sizes = tuple(sorted({max(1, v.runs * k // 4) for k in (1, 2, 3, 4)}))
    notes = tuple(
        sign_note(Checkpoint(ORIGIN, s, tree.root(s)).format(), [LOG, WITNESS]) for s in sizes
    )
    prefix = io.BytesIO()
    w = ExportWriter(prefix)
    w.header(
        ExportHeader(
            ORIGIN,
            _vkey(LOG),
            (_vkey(RECORDS),) if v.signed else (),
            (_vkey(WITNESS),),
        )
    )
    for note in notes:
        w.checkpoint(note)
    # Pass 2: the file.
    digest = sha(prefix.getvalue())
    sig_prefix = b"sig %s %08x " % (RECORDS.name.encode(), RECORDS.key_id)
    with path.open("wb") as f:
        f.write(prefix.getvalue())
        for run in range(v.runs):
            out = [b"run run-%07d %d sealed %d succeeded" % (run, v.per_run, run)]
            prev = GENESIS
            for seq in range(1, v.per_run + 1):
                raw = body(run, seq, v.per_run)
                prev = sha(prev + raw).digest()
                out.append(binascii.b2a_base64(prev, newline=False) + b" " + raw)
                if v.signed:
                    sig = RECORDS.sign(RECORD_SIGNATURE_CONTEXT + prev)
                    out.append(sig_prefix + binascii.b2a_base64(sig, newline=False))
            chunk = b"\n".join(out) + b"\n"
            digest.update(chunk)
            f.write(chunk)
        f.write(
            b"end %d %d %d %d %s\n"
            % (len(notes), v.runs, v.records, v.runs, b64encode(digest.digest()).encode())
        )
        # Written back now, not by the kernel's flusher in the middle of a measurement.
        f.flush()
        os.fsync(f.fileno())
    return Built(path, v, path.stat().st_size, sizes, notes, tree.root(), perf_counter() - start)


# --- the floor ------------------------------------------------------------------------------


def floor(b: Built, *, bodies: bool = False) -> bytes:
    """The hashing and signature checks the verification needs, in a tight loop; the root.

    ``bodies``: also the one per-record check the format adds to hashing, that the body is the
    canonical JSON of a valid body naming its run and seq (:func:`tlog.journal.body_names`,
    the verifiers' own fast path) — information for the target's discussion, not the target.
    """
    data = b.path.read_bytes()
    end = data.rindex(b"\nend ") + 1
    digest = hashlib.sha256(memoryview(data)[:end]).digest()
    runs_at = data.index(b"\nrun ") + 1
    sha = hashlib.sha256
    verify = nacl.signing.VerifyKey(RECORDS.public_key).verify
    context = RECORD_SIGNATURE_CONTEXT
    a2b = binascii.a2b_base64
    prev = GENESIS
    leaves: list[bytes] = []
    started = False
    if bodies:
        prev = _records_and_bodies(data[runs_at:end], leaves, verify)
    else:
        for line in data[runs_at:end].split(b"\n"):
            if line[44:45] == b" ":
                prev = sha(prev + line[45:]).digest()
            elif line[:4] == b"run ":
                if started:
                    leaves.append(sha(b"\x00" + prev).digest())
                started = True
                prev = GENESIS
            elif line[:4] == b"sig ":
                verify(context + prev, a2b(line[-88:]))
    leaves.append(sha(b"\x00" + prev).digest())
    tree = MemoryHashStore()
    tree.extend(leaves)
    verifiers: dict[str, Verifier] = {
        LOG.name: LOG.verifier(),
        WITNESS.name: verifier_for(WITNESS.name, WITNESS.key_type, WITNESS.public_key),
    }
    previous: Checkpoint | None = None
    for note in b.notes:
        opened = open_note(note, list(verifiers.values()))  # verifies each signature
        if len(opened.sigs) != 2:
            raise AssertionError("the floor did not verify both checkpoint signatures")
        cp = Checkpoint.parse(opened.text)
        if tree.root(cp.size) != cp.root:
            raise AssertionError("the floor's tree disagrees with a checkpoint")
        if previous is not None:
            proof = consistency_proof(previous.size, cp.size, tree)
            verify_consistency(previous.size, cp.size, previous.root, cp.root, proof)
        previous = cp
    if digest != a2b(data[end:].split(b" ")[5].strip()):
        raise AssertionError("the floor's digest differs from the end line's")
    return tree.root()


def _records_and_bodies(
    runs: bytes, leaves: list[bytes], verify: Callable[[bytes, bytes], bytes]
) -> bytes:
    """The floor's record loop with the body check: appends the leaves of all runs but the
    last to ``leaves`` and returns the last run's head, as the floor's own loop leaves them."""
    sha = hashlib.sha256
    check = body_names
    context = RECORD_SIGNATURE_CONTEXT
    a2b = binascii.a2b_base64
    prev = GENESIS
    run = ""
    seq = 0
    started = False
    for line in runs.split(b"\n"):
        if line[44:45] == b" ":
            raw = line[45:]
            prev = sha(prev + raw).digest()
            seq += 1
            if not check(raw, run, seq):
                raise AssertionError("a built body is not canonical")
        elif line[:4] == b"run ":
            if started:
                leaves.append(sha(b"\x00" + prev).digest())
            started = True
            run = line[4 : line.index(b" ", 4)].decode()
            prev = GENESIS
            seq = 0
        elif line[:4] == b"sig ":
            verify(context + prev, a2b(line[-88:]))
    return prev


# --- timing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timed:
    wall: float
    cpu: float  # this process and its reaped children


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def one_core(fn: Callable[[], T]) -> Callable[[], T]:
    """``fn`` run with this process (and the threads it starts) pinned to one CPU."""

    def pinned() -> T:
        cpus = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(cpus)})
        try:
            return fn()
        finally:
            os.sched_setaffinity(0, cpus)

    return pinned


def timed(fn: Callable[[], T], reps: int) -> tuple[Timed, T]:
    """Best wall time of ``reps`` calls (garbage collector off), its CPU time, a result."""
    best = Timed(math.inf, math.inf)
    result: T | None = None
    for _ in range(reps):
        gc.collect()
        enabled = gc.isenabled()
        gc.disable()
        try:
            cpu, start = _cpu(), perf_counter()
            result = fn()
            wall, cpu = perf_counter() - start, _cpu() - cpu
        finally:
            if enabled:
                gc.enable()
        if wall < best.wall:
            best = Timed(wall, cpu)
    assert result is not None
    return best, result


def _rate(records: int, seconds: float) -> str:
    return f"{records / seconds:,.0f} records/s"


@dataclass(frozen=True)
class Figures:
    floor: Timed
    single: Timed
    jobs1: Timed
    jobs2: Timed
    floor_bodies: Timed | None = None

    @property
    def floor_ratio(self) -> float:
        """The tool's one-core throughput as a fraction of the floor's (the target's measure)."""
        return self.floor.wall / self.jobs1.wall

    @property
    def floor_ratio_cpu(self) -> float:
        """The same in CPU time: what one core gives when the machine is shared."""
        return self.floor.cpu / self.jobs1.cpu

    @property
    def speedup(self) -> float:
        """Two cores against one (the target's measure)."""
        return self.jobs1.wall / self.jobs2.wall


def probe(path: Path, jobs: int, reps: int) -> tuple[Timed, str]:
    """verifier.parallel timed by bench/verify_probe.py in a fresh process (jobs=1 pinned to
    one CPU): the best of ``reps`` and the SHA-256 of the summary's repr."""
    argv = [sys.executable, "-m", "bench.verify_probe", str(path), str(jobs), str(reps)]
    done = subprocess.run(
        [*argv, "--one-core"] if jobs == 1 else argv,
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    out = json.loads(done.stdout)
    return Timed(out["wall"], out["cpu"]), str(out["summary"])


def measure(b: Built, c: Config) -> Figures:
    v = b.variant
    _log(f"{v.name}: floor, best of {c.floor_reps}")
    floor_t, root = timed(one_core(lambda: floor(b)), c.floor_reps)
    if root != b.root:
        raise AssertionError("the floor's root is not the built log's")
    _log(f"{v.name}: tlog.export.verify_export, one process, best of {c.reps}")

    def single() -> ExportSummary:
        with b.path.open("rb") as f:
            return verify_export(f)

    single_t, want = timed(one_core(single), c.reps)
    if (want.records, want.log_size, want.log_root) != (v.records, v.runs, b.root):
        raise AssertionError(f"the built export does not verify as built: {want}")
    if want.signed_records != (v.records if v.signed else 0):
        raise AssertionError("the signed records were not all counted")
    out: list[Timed] = []
    for jobs in (1, JOBS):
        reps = c.reps if v.signed else c.parallel_reps
        _log(f"{v.name}: verifier.parallel, jobs={jobs}, best of {reps}, in a fresh process")
        t, got = probe(b.path, jobs, reps)
        if got != hashlib.sha256(repr(want).encode()).hexdigest():
            raise AssertionError(f"verify_export_parallel(jobs={jobs}) differs from verify_export")
        out.append(t)
    bodies = None
    if not v.signed:
        _log(f"{v.name}: floor with the body check, best of {c.floor_reps}")
        bodies, root = timed(one_core(lambda: floor(b, bodies=True)), c.floor_reps)
        if root != b.root:
            raise AssertionError("the floor with bodies disagrees with the built log")
    return Figures(floor_t, single_t, out[0], out[1], bodies)


def _rows(section: Section, b: Built, f: Figures) -> None:
    v = b.variant
    n = v.records
    what = f"{n:,} {v.name} records ({v.runs:,} runs)"
    section.rows += [
        (f"floor, {what}, 1 core", fmt_time(f.floor.wall), "(hashing + signatures)", "", ""),
        (
            "  tlog-verify's path (verifier.parallel jobs=1), 1 core",
            fmt_time(f.jobs1.wall),
            "floor",
            fmt_time(f.floor.wall),
            fmt_ratio(f.jobs1.wall, f.floor.wall),
        ),
        (
            f"  verifier.parallel jobs={JOBS}, {JOBS} cores",
            fmt_time(f.jobs2.wall),
            "jobs=1, 1 core",
            fmt_time(f.jobs1.wall),
            fmt_ratio(f.jobs2.wall, f.jobs1.wall),
        ),
        (
            "  tlog.export.verify_export (item by item), 1 core",
            fmt_time(f.single.wall),
            "floor",
            fmt_time(f.floor.wall),
            fmt_ratio(f.single.wall, f.floor.wall),
        ),
    ]
    section.notes.append(
        f"{v.name}: {b.size / 1e6:,.1f} MB, built in {b.seconds:.1f} s; throughput: floor "
        f"{_rate(n, f.floor.wall)}, tlog-verify on 1 core (verifier.parallel jobs=1) "
        f"{_rate(n, f.jobs1.wall)} ({f.floor_ratio:.3f} of the floor), on {JOBS} cores "
        f"{_rate(n, f.jobs2.wall)} ({f.speedup:.2f}x 1 core); tlog.export.verify_export, the "
        f"item-by-item API that a restore replays, {_rate(n, f.single.wall)} "
        f"({f.floor.wall / f.single.wall:.3f} of the floor)"
    )
    if f.floor_bodies is not None:
        fb = f.floor_bodies.wall
        section.rows.append(
            (
                "  floor + canonical-body check per record, 1 core",
                fmt_time(fb),
                "floor",
                fmt_time(f.floor.wall),
                fmt_ratio(fb, f.floor.wall),
            )
        )
        section.notes.append(
            f"{v.name}: against a floor that also checks every body's canonical JSON "
            f"(tlog.journal.body_names, {(fb - f.floor.wall) / n * 1e6:.2f} µs a record): "
            f"tlog-verify on 1 core {fb / f.jobs1.wall:.3f} of it"
        )
    section.notes.append(
        f"{v.name}: CPU seconds (all processes): floor {f.floor.cpu:.2f}, jobs=1 "
        f"{f.jobs1.cpu:.2f}, jobs={JOBS} {f.jobs2.cpu:.2f}, verify_export {f.single.cpu:.2f}"
    )


def run(*, quick: bool, peers_enabled: bool = True, peer_build_limit_s: float = 120.0) -> Section:
    """Run the export verification benchmark and return its section of the report."""
    del peers_enabled, peer_build_limit_s  # no peer verifies this format
    c = QUICK if quick else FULL
    section = Section(
        title=f"verify: exports of {c.unsigned.records:,} unsigned and {c.signed.records:,} "
        f"signed records"
    )
    load_before = os.getloadavg()
    figures: dict[str, tuple[Built, Figures]] = {}
    with tempfile.TemporaryDirectory(prefix="tlog-verify-bench-") as tmp:
        for v in (c.unsigned, c.signed):
            _log(f"{v.name}: building {v.records:,} records in {v.runs:,} runs")
            b = build(Path(tmp) / f"{v.name}.export", v)
            figures[v.name] = (b, measure(b, c))
            b.path.unlink()
    load_after = os.getloadavg()
    for b, f in figures.values():
        _rows(section, b, f)
    section.notes.append(
        f"load average (1 min) {load_before[0]:.1f} before, {load_after[0]:.1f} after, on "
        f"{os.cpu_count()} CPUs (wall times of a shared machine are noisy, the two-process ones "
        f"most; CPU times are the steadier measure of one core's work); the floor is the best "
        f"of {c.floor_reps}, verify_export the best of {c.reps}, verifier.parallel the best of "
        f"{c.parallel_reps} (unsigned) and {c.reps} (signed)"
    )
    section.notes.append(
        "floor: digest + chain SHA-256 per record + leaf per run + tree, checkpoint roots and "
        "consistency + 8 checkpoint signatures (+ one libsodium Ed25519 verify per signed "
        "record); no JSON, no base64 decoding (see bench/verify_bench.py)"
    )
    for name, (b, f) in figures.items():
        n = b.variant.records
        where = f"{n:,} {name} records" + (
            ""
            if n == TARGET_RECORDS or name == "signed"
            else f" (quick run; the target is set at {TARGET_RECORDS:,})"
        )
        section.targets += [
            (
                f"tlog-verify on 1 core (verifier.parallel jobs=1) >= {FLOOR_RATIO_TARGET:.0%} "
                f"of the floor's throughput, {where}: {f.floor_ratio:.3f} (in CPU time: "
                f"{f.floor_ratio_cpu:.3f})",
                f.floor_ratio >= FLOOR_RATIO_TARGET,
            ),
            (
                f"tlog-verify on {JOBS} cores (jobs={JOBS}) >= {SPEEDUP_TARGET}x faster than on "
                f"1 core, {where}: {f.speedup:.2f}x",
                f.speedup >= SPEEDUP_TARGET,
            ),
        ]
    return section
