"""Witness benchmark: our tlog-witness server against aics-witness 0.1.0, under one load client.

Servers, each a separate process with a fresh state directory, measured one after the other:

* **ours**: this project's ``tlog-witness`` command, as an operator runs it: ``init --name``
  (a fresh Ed25519 cosignature/v1 key and the SQLite state; a second run adds ``--mldsa``, an
  ML-DSA-44 subtree/v1 key, and has its own rows), ``add-log`` per log, then
  ``serve --workers 2`` (:data:`OUR_WORKERS`): a supervisor process that forks that many
  worker processes, each running :func:`witness.server.make_app` on aiohttp on the same
  listening port (``SO_REUSEPORT``: the kernel spreads the client's connections over them) and
  the same state, in SQLite with WAL and ``synchronous = FULL`` (every compare-and-swap that
  changes the stored row is fsynced before the answer); one JSON log line per request on
  stderr (to a file here), aiohttp's access log off. Two workers because the operator guide
  says to set ``workers`` to the number of cores and the benchmark machine has 2: one process
  handles requests on one core at a time (the interpreter's global lock), so a single-process
  server would leave the second core to the client alone.
* **aics-witness 0.1.0** (Python >= 3.12, in ``.venv-peers``; bench/peer_witness.py): set up
  with its own ``init`` and ``add-log`` commands and run with ``serve`` — its standard-library
  threading HTTP server and its SQLite store (WAL, ``synchronous = FULL``, a passive WAL
  checkpoint after every commit that changed something), logging at its default INFO level
  to a file.

Both follow :data:`LOGS` logs, each with its own Ed25519 key (vkey type 0x01).

**Workload**, computed once before any timing (:func:`build_workload`): for each log, a
sequence of :attr:`Config.steps` add-checkpoint request bodies. Step ``k`` grows the log by 1
to 7 leaves (seeded), and carries ``old`` = the previous size, the RFC 6962 consistency proof
from it (none for the first step, ``old 0``) and the checkpoint note signed by the log's key.
Precomputing takes about 0.45 ms per step for all logs together (about 7 s for the full run's
16,000 steps, which the two-worker advance rate needs; the time grows with the steps).

**Load client** (``python -m bench.witness_bench client``, a separate process, the same for
every server): :data:`CONCURRENCY` workers on one asyncio loop, worker ``i`` with its own
keep-alive HTTP/1.1 connection and log ``i``. The HTTP client is a minimal
:class:`asyncio.Protocol` (the full request bytes are prebuilt; the response is parsed for its
status, ``Content-Length``, ``Content-Type`` and body), so that the client costs little CPU:
its own CPU time over each window is reported (and the server's, from ``/proc``). Each worker
sends its next request as soon as the previous answer is in (a closed loop). Scenarios, in this
order, on one server process:

* **advance**: each worker walks its log's sequence (every answer must be 200);
* **replay**: each worker re-submits its log's stored checkpoint: ``old`` = its size, no proof
  (every answer must be 200: a fresh cosignature);
* **stale**: each worker re-sends its log's last accepted advance request, whose ``old`` is now
  behind the stored size (every answer must be 409 with that size).

Each scenario runs :attr:`Config.warmup_s` untimed, then :attr:`Config.duration_s` measured: a
request counts when its answer arrives inside the window; requests/s is that count over the
window; p50 and p99 (nearest rank) are over the same requests, each timed from the write of
its request to the parse of its answer (``perf_counter``; the client's garbage collector is
off during a scenario). A worker that runs out of precomputed steps ends the advance window
for all (the report says so). After each scenario (untimed) every status is checked, every
409 body is parsed and compared, and a random sample of :attr:`Config.samples` 200 answers is
verified: each of the witness's keys must have exactly one valid cosignature on the
checkpoint sent, timestamped within a minute of the run. After the server stops, its database
is read back: each log's stored size must be that of the last checkpoint it accepted.

**Diagnostic peer run.** aics-witness is measured a second time with the client acknowledging
every segment at once (Linux ``TCP_QUICKACK``, re-armed after each read; see :class:`_Conn`):
its http.server handler writes a response as two ``send()`` calls on a socket without
``TCP_NODELAY``, so a client with the default delayed ACK waits about 40 ms per request. The
default-client rows are what ordinary clients get; the quick-ACK rows show its processing.

**The machine.** Both servers, the client and the disk are shared with whatever else runs, so
the report gives, before and after the runs, the load average and the latency of a durable
SQLite commit (WAL, ``synchronous = FULL``) in the benchmark's directory (a 200-commit probe):
the advance rate of a witness that fsyncs every accepted checkpoint, one at a time, depends on
it. Per server and scenario the notes give the server's CPU and the client's over the measured
window, as a share of one core (above 100% when the server keeps more than one core busy), and
the server's CPU time per request. The server's CPU is that of its whole process tree, read
from ``/proc`` at the window's start and end: the server process and every descendant (for
ours, the supervisor and its workers), each with all its threads (:func:`_tree_cpu`).

Targets (ours, Ed25519): advance >= 2,000 requests/s and replay >= 5,000 requests/s, each with
p99 <= 15 ms. Ratios are ours / theirs of requests per second: above 1, ours is faster.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import hashlib
import json
import math
import os
import pickle
import platform
import random
import resource
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import IO, Any

from bench import peers
from bench.merkle_bench import Section, fmt_time
from tlog import merkle
from tlog.checkpoint import Checkpoint
from tlog.cosignature import timestamp_of
from tlog.keys import cosigner_from_vkey, format_vkey
from tlog.note import Ed25519Signer, Verifier, parse_note, sign_note
from tlog.witnessproto import AddCheckpointRequest, parse_cosignature_response, parse_size_body

TITLE = "witness"

LOGS = 8
CONCURRENCY = 8
"""One worker, one connection and one log each."""
OUR_WORKERS = 2
"""``tlog-witness serve --workers``: the operator guide's setting, the number of cores, for the
2-core benchmark machine."""
ADVANCE_TARGET = 2_000.0
REPLAY_TARGET = 5_000.0
P99_TARGET_S = 15e-3
SCENARIOS = ("advance", "replay", "stale")
EXPECTED_STATUS = {"advance": 200, "replay": 200, "stale": 409}

WITNESS_NAME = "bench.example/witness"
PEER_REQUIREMENTS = ("aics-witness==0.1.0",)
PEER_SCRIPT = Path(__file__).resolve().parent / "peer_witness.py"
REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"

Row = tuple[str, str, str, str, str]


@dataclass(frozen=True)
class Config:
    """Durations, workload size and checks of one run."""

    duration_s: float
    """Measured seconds per scenario."""
    warmup_s: float
    """Untimed seconds before each measured window."""
    steps: int
    """Advance requests precomputed per log: enough for about steps * LOGS / (warmup +
    duration) requests per second, about 9,100/s in both configs (ours with two workers
    exhausted 8,000 steps in the full run); each costs about 0.45 ms of precomputing for all
    logs."""
    samples: int
    """200 answers whose cosignatures are verified, per scenario and server."""
    mldsa: bool
    """Also measure ours with an ML-DSA-44 key added."""
    start_timeout_s: float = 60.0
    seed: int = 20240229


FULL = Config(duration_s=12.0, warmup_s=2.0, steps=16_000, samples=300, mldsa=True)
QUICK = Config(duration_s=3.0, warmup_s=0.5, steps=4_000, samples=60, mldsa=True)


def _log(message: str) -> None:
    print(f"  [witness] {message}", file=sys.stderr, flush=True)


# --- the workload ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """What the client sends: per log, its origin, vkey, and ``(size, request body)`` steps."""

    origins: list[str]
    vkeys: list[str]
    steps: list[list[tuple[int, bytes]]]


def log_origin(i: int) -> str:
    return f"bench.example/log-{i}"


def build_workload(c: Config) -> Workload:
    """Every log's sequence of advance requests (see the module docstring)."""
    rng = random.Random(c.seed)
    origins, vkeys, steps = [], [], []
    for i in range(LOGS):
        origin = log_origin(i)
        seed = hashlib.sha256(f"bench log key {c.seed} {i}".encode()).digest()
        signer = Ed25519Signer(origin, seed)
        vkeys.append(format_vkey(signer.verifier()))
        origins.append(origin)
        tree = merkle.MemoryHashStore()
        seq: list[tuple[int, bytes]] = []
        for _ in range(c.steps):
            old = tree.size
            tree.extend(
                merkle.leaf_hash(f"{origin} entry {n}".encode())
                for n in range(old, old + rng.randint(1, 7))
            )
            size = tree.size
            text = Checkpoint(origin, size, tree.root()).format()
            proof = merkle.consistency_proof(old, size, tree) if old else []
            note = sign_note(text, [signer])
            seq.append((size, AddCheckpointRequest(old, tuple(proof), note).format()))
        steps.append(seq)
    return Workload(origins, vkeys, steps)


# --- the load client -------------------------------------------------------------------------


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; one request in flight at a time.

    ``quickack``: acknowledge every segment received at once (Linux ``TCP_QUICKACK``, re-armed
    after each read, as the kernel clears it), instead of the default delayed ACK. A diagnostic:
    it shows what a server that writes one response in several small segments without
    ``TCP_NODELAY`` (Nagle) would do for a client that does not delay its ACKs.
    """

    def __init__(self, quickack: bool = False) -> None:
        self.quickack = quickack
        self.sock: Any = None
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[tuple[int, str, bytes]] | None = None
        self.head_end = -1
        self.need = -1
        self.status = 0
        self.ctype = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.quickack:
            self.sock = transport.get_extra_info("socket")
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError(f"connection lost: {exc}"))

    def data_received(self, data: bytes) -> None:
        if self.quickack:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        self.buf += data
        if self.need < 0:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            try:
                self._head(bytes(self.buf[:end]))
            except (ValueError, IndexError) as e:
                self._fail(f"unreadable response head: {e}")
                return
            self.head_end = end + 4
        if len(self.buf) >= self.need:
            body = bytes(self.buf[self.head_end : self.need])
            del self.buf[: self.need]
            self.need = -1
            waiter, self.waiter = self.waiter, None
            if waiter is not None:
                waiter.set_result((self.status, self.ctype, body))

    def _head(self, head: bytes) -> None:
        """Status, Content-Type and the end of the body, from the response head."""
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split(" ", 2)[1])
        length = -1
        self.ctype = ""
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "content-type":
                self.ctype = value.strip()
        if length < 0:
            raise ValueError("no Content-Length (this client reads no other framing)")
        self.need = len(head) + 4 + length

    def _fail(self, why: str) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionError(why))
        if self.transport is not None:
            self.transport.close()

    def request(self, data: bytes) -> asyncio.Future[tuple[int, str, bytes]]:
        if self.transport is None:
            raise ConnectionError("connection closed")
        waiter = asyncio.get_running_loop().create_future()
        self.waiter = waiter
        self.transport.write(data)
        return waiter


def _stat(pid: int) -> list[bytes]:
    """The fields of ``/proc/<pid>/stat`` after the command name (``[0]`` is the state, ``[1]``
    the parent's pid, ``[11]`` and ``[12]`` utime and stime in clock ticks, ``[19]`` the start
    time); OSError once the process is gone."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()


@functools.cache
def _children_files() -> bool:
    """Whether this kernel has ``/proc/<pid>/task/<tid>/children`` (CONFIG_PROC_CHILDREN)."""
    return any(Path("/proc/self/task").glob("*/children"))


def _descendants(pid: int) -> list[int]:
    """The pids of process ``pid``'s children, their children and so on, from /proc: the
    ``children`` files of its threads where the kernel has them, else the parent pid of every
    process in ``/proc/*/stat``. A process that exits meanwhile is left out."""
    found: list[int] = []
    todo = [pid]
    if _children_files():
        while todo:
            for path in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
                try:
                    kids = [int(x) for x in path.read_bytes().split()]
                except OSError:  # the thread or process ended
                    continue
                found += kids
                todo += kids
        return found
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                children.setdefault(int(_stat(int(name))[1]), []).append(int(name))
            except (OSError, IndexError, ValueError):
                continue
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _tree_cpu(pid: int) -> tuple[float, int]:
    """CPU seconds (user + system) of process ``pid`` and all its descendants, each with all
    its threads, from /proc; and how many processes that is.

    A process's own utime and stime cover all its threads but none of its children (those reach
    its cutime and cstime only when it reaps them), so each process of the tree is read: for
    ours, the supervisor and its worker processes. A process that ends inside a window loses its
    CPU time from the figure; the process counts at both ends show it.
    """
    ticks = 0
    procs = 0
    for p in [pid, *_descendants(pid)]:
        try:
            fields = _stat(p)
        except OSError:  # ended between the listing and the read
            continue
        ticks += int(fields[11]) + int(fields[12])
        procs += 1
    return ticks / os.sysconf("SC_CLK_TCK"), procs


def _own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass
class _Window:
    """The measured window of one scenario and the CPU readings at its ends."""

    start: float
    end: float
    server_pid: int
    cpu: dict[str, float] = field(default_factory=dict)
    procs: dict[str, int] = field(default_factory=dict)
    """Processes in the server's tree at each end of the window."""
    exhausted: bool = False

    def sample(self, edge: str) -> None:
        if f"client_{edge}" in self.cpu:
            return
        self.cpu[f"client_{edge}"] = _own_cpu()
        self.cpu[f"server_{edge}"], self.procs[edge] = _tree_cpu(self.server_pid)
        if edge == "end":
            self.end = min(self.end, perf_counter())


@dataclass
class _Worker:
    sent: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)
    answers: list[tuple[int, str, bytes]] = field(default_factory=list)
    error: str | None = None


async def _drive(
    conn: _Conn, requests: Sequence[bytes], w: _Worker, window: _Window, chained: bool
) -> None:
    """Send ``requests`` in order until the window closes; ``chained``: each request depends on
    the one before being accepted (advance), so the first refusal ends the worker."""
    for req in requests:
        if perf_counter() >= window.end:
            return
        t0 = perf_counter()
        try:
            answer = await conn.request(req)
        except ConnectionError as e:
            w.error = str(e)
            return
        w.done.append(perf_counter())
        w.sent.append(t0)
        w.answers.append(answer)
        if chained and answer[0] != 200:
            w.error = f"status {answer[0]}: {answer[2][:200]!r}"
            return
    if perf_counter() < window.end:
        window.exhausted = True
        window.sample("end")


async def _scenario(
    port: int, server_pid: int, requests: list[list[bytes]], chained: bool, c: dict[str, Any]
) -> tuple[_Window, list[_Worker]]:
    loop = asyncio.get_running_loop()
    conns: list[_Conn] = []
    quickack = bool(c.get("quickack"))
    for _ in requests:
        _, proto = await loop.create_connection(lambda: _Conn(quickack), HOST, port)
        conns.append(proto)
    gc.collect()
    gc.disable()
    now = perf_counter()
    window = _Window(now + c["warmup_s"], now + c["warmup_s"] + c["duration_s"], server_pid)
    loop.call_later(c["warmup_s"], window.sample, "start")
    loop.call_later(c["warmup_s"] + c["duration_s"], window.sample, "end")
    workers = [_Worker() for _ in requests]
    try:
        await asyncio.gather(
            *(
                _drive(conn, reqs, w, window, chained)
                for conn, reqs, w in zip(conns, requests, workers, strict=True)
            )
        )
    finally:
        gc.enable()
    window.sample("start")  # a no-op unless every worker stopped before the warm-up ended
    window.sample("end")
    for conn in conns:
        if conn.transport is not None:
            conn.transport.close()
    return window, workers


def _nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    return sorted_values[max(math.ceil(q * len(sorted_values)) - 1, 0)]


def _verify(
    texts: list[bytes], answers: list[bytes], verifiers: list[Verifier], began: float
) -> str | None:
    """None when every answer carries one valid cosignature per witness key, timestamped
    within a minute of the run; else what is wrong with the first answer that does not."""
    now = time.time()
    for text, body in zip(texts, answers, strict=True):
        sigs = parse_cosignature_response(body)
        for v in verifiers:
            mine = [s for s in sigs if (s.name, s.key_id) == (v.name, v.key_id)]
            if len(mine) != 1:
                return f"{len(mine)} cosignatures from {v.name}+{v.key_id:08x} in {body!r}"
            if not v.verify(text, mine[0].sig):
                return f"cosignature from {v.name}+{v.key_id:08x} does not verify: {body!r}"
            ts = timestamp_of(mine[0])
            if not began - 60 <= ts <= now + 60:
                return f"cosignature timestamp {ts} is not within a minute of the run"
    return None


def _summarise(
    name: str,
    window: _Window,
    workers: list[_Worker],
    body_of: Callable[[int, int], bytes],
    expect_409: list[int],
    verifiers: list[Verifier],
    c: dict[str, Any],
    began: float,
) -> dict[str, Any]:
    """A scenario's figures and checks; ``body_of(log, k)`` is the body of worker ``log``'s
    ``k``-th request (for the checkpoint text a cosignature must sign)."""
    ok = EXPECTED_STATUS[name]
    lat: list[float] = []
    statuses: dict[str, int] = {}
    problems: list[str] = []
    good: list[tuple[int, int]] = []
    for i, w in enumerate(workers):
        if w.error:
            problems.append(f"log {i}: {w.error}")
        for k, (t0, t1, (status, ctype, body)) in enumerate(
            zip(w.sent, w.done, w.answers, strict=True)
        ):
            statuses[str(status)] = statuses.get(str(status), 0) + 1
            if window.start <= t1 <= window.end:
                lat.append(t1 - t0)
            if status != ok:
                if len(problems) < 5:
                    problems.append(f"log {i}: status {status}, {body[:120]!r}")
            elif ok == 409:
                size = parse_size_body(body, ctype)
                if size != expect_409[i] and len(problems) < 5:
                    problems.append(f"log {i}: 409 names size {size}, expected {expect_409[i]}")
            else:
                good.append((i, k))
    verified = 0
    if ok == 200 and good:
        sample = random.Random(len(good)).sample(good, min(c["samples"], len(good)))
        texts = [_note_text(body_of(i, k)) for i, k in sample]
        answers = [workers[i].answers[k][2] for i, k in sample]
        why = _verify(texts, answers, verifiers, began)
        if why is None:
            verified = len(sample)
        else:
            problems.append(f"cosignature check FAILED: {why}")
    lat.sort()
    span = window.end - window.start
    cpu = window.cpu
    return {
        "n": len(lat),
        "rate": len(lat) / span if span > 0 else 0.0,
        "p50": _nearest_rank(lat, 0.5) if lat else math.inf,
        "p99": _nearest_rank(lat, 0.99) if lat else math.inf,
        "window_s": span,
        "client_cpu": (cpu["client_end"] - cpu["client_start"]) / span if span > 0 else 0.0,
        "server_cpu": (cpu["server_end"] - cpu["server_start"]) / span if span > 0 else 0.0,
        "server_procs": [window.procs["start"], window.procs["end"]],
        "statuses": statuses,
        "verified": verified,
        "problems": problems,
        "exhausted": window.exhausted,
    }


def _http_request(port: int, body: bytes) -> bytes:
    head = (
        f"POST /add-checkpoint HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode("ascii")
    return head + body


def _note_text(body: bytes) -> bytes:
    """The checkpoint text of an add-checkpoint request body."""
    return parse_note(AddCheckpointRequest.parse(body).checkpoint)[0]


async def _client(job: dict[str, Any]) -> dict[str, Any]:
    with open(job["workload"], "rb") as f:
        workload: Workload = pickle.load(f)  # our own file, written by the benchmark
    gc.collect()
    gc.freeze()
    port, pid = job["port"], job["server_pid"]
    verifiers = [cosigner_from_vkey(v) for v in job["witness_vkeys"]]
    results: dict[str, Any] = {}
    began = time.time()
    steps = workload.steps

    # advance: each log's precomputed sequence
    reqs = [[_http_request(port, body) for _, body in seq] for seq in steps]
    window, workers = await _scenario(port, pid, reqs, True, job)
    del reqs
    results["advance"] = _summarise(
        "advance", window, workers, lambda i, k: steps[i][k][1], [], verifiers, job, began
    )
    # A worker stops at its first refusal, so its 200s are exactly its first steps.
    last = [sum(1 for a in w.answers if a[0] == 200) - 1 for w in workers]
    del workers
    if min(last) < 0:
        results["error"] = "a log accepted no advance: replay and stale not run"
        return results
    sizes = [steps[i][k][0] for i, k in enumerate(last)]
    results["final_sizes"] = sizes
    results["steps_used"] = [k + 1 for k in last]

    # replay: the stored checkpoint again, old = its size, no proof
    bodies = [
        AddCheckpointRequest(
            sizes[i], (), AddCheckpointRequest.parse(steps[i][k][1]).checkpoint
        ).format()
        for i, k in enumerate(last)
    ]
    # Enough copies for 20,000 requests/s per connection.
    repeat = int(job["warmup_s"] + job["duration_s"] + 5) * 20_000
    reqs = [[_http_request(port, b)] * repeat for b in bodies]
    window, workers = await _scenario(port, pid, reqs, False, job)
    results["replay"] = _summarise(
        "replay", window, workers, lambda i, k: bodies[i], [], verifiers, job, began
    )
    del workers

    # stale: each log's last accepted advance again; its old size is now behind
    stale = [steps[i][k][1] for i, k in enumerate(last)]
    reqs = [[_http_request(port, b)] * repeat for b in stale]
    window, workers = await _scenario(port, pid, reqs, False, job)
    results["stale"] = _summarise(
        "stale", window, workers, lambda i, k: stale[i], sizes, verifiers, job, began
    )
    return results


def client_main(job_path: str) -> int:
    """The load client's process: the job JSON in, the results JSON on stdout."""
    with open(job_path) as f:
        job = json.load(f)
    results = asyncio.run(_client(job))
    print(json.dumps(results))
    return 0


# --- running one server under the client ---------------------------------------------------------


@dataclass
class ServerRun:
    """One server's figures (or why there are none)."""

    label: str
    scenarios: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _read_until(proc: subprocess.Popen[bytes], prefix: bytes | None, timeout_s: float) -> list[str]:
    """The server's stdout lines up to the first that starts with ``prefix`` (None: the first
    line); RuntimeError if it exits or is silent too long."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    data = b""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = data.split(b"\n")[:-1]
        for n, line in enumerate(lines):
            if prefix is None or line.startswith(prefix):
                return [x.decode("utf-8", "replace") for x in lines[: n + 1]]
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"not ready within {timeout_s:.0f} s (stdout: {data[:200]!r})")
        readable, _, _ = select.select([fd], [], [], min(left, 0.5))
        if readable:
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the server exited (status {proc.wait()})")
            data += chunk


def _drain(stream: IO[bytes], sink: IO[bytes]) -> None:
    for chunk in iter(lambda: stream.read(4096), b""):
        sink.write(chunk)


def _wait_listening(proc: subprocess.Popen[bytes], port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited (status {proc.returncode})")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on port {port} after {timeout_s:.0f} s")
        time.sleep(0.05)


def _tail(path: Path, lines: int = 5) -> str:
    """The last ``lines`` lines of a server's log, without ours' per-request lines (which
    would hide why it stopped)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    kept = [
        line for line in text.splitlines() if line.strip() and not line.startswith('{"endpoint"')
    ][-lines:]
    return " | ".join(kept) if kept else "(empty log)"


def run_server(
    label: str,
    argv: list[str],
    stdin: bytes | None,
    port: int,
    log_path: Path,
    workload_path: Path,
    c: Config,
    *,
    ready_prefix: bytes | None,
    witness_vkeys: Callable[[list[str]], list[str]],
    quickack: bool = False,
) -> tuple[ServerRun, dict[str, Any]]:
    """Start a server, run the client against it, stop it.

    The server is ready once it printed a line starting with ``ready_prefix`` (None: any line)
    and accepts connections; ``witness_vkeys`` finds the witness's vkeys in the lines it
    printed until then. Returns the run and ``{"lines": those lines, "final_sizes": each log's
    last accepted size, "steps": advance requests accepted per log}``.

    The server's descendants (ours: its worker processes) are listed once it is ready and again
    before it is stopped; any of them still running once the server itself has exited is
    killed (SIGKILL), so that none outlives its run, keeps a core busy or writes to the
    database read back afterwards.
    """
    run = ServerRun(label)
    ready: dict[str, Any] = {}
    drain: threading.Thread | None = None
    tree: dict[int, bytes] = {}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=REPO_ROOT,
        )
        try:
            if stdin is not None:
                assert proc.stdin is not None
                proc.stdin.write(stdin)
                proc.stdin.close()
            try:
                ready["lines"] = _read_until(proc, ready_prefix, c.start_timeout_s)
                vkeys = witness_vkeys(ready["lines"])
                _wait_listening(proc, port, c.start_timeout_s)
            except (RuntimeError, ValueError, KeyError) as e:
                run.error = f"{label} did not start: {e}; its log: {_tail(log_path)}"
                return run, ready
            tree.update(_identities(proc.pid))
            assert proc.stdout is not None
            drain = threading.Thread(target=_drain, args=(proc.stdout, log), daemon=True)
            drain.start()
            job = {
                "port": port,
                "server_pid": proc.pid,
                "workload": str(workload_path),
                "witness_vkeys": vkeys,
                "warmup_s": c.warmup_s,
                "duration_s": c.duration_s,
                "samples": c.samples,
                "quickack": quickack,
            }
            job_path = log_path.with_suffix(".job.json")
            job_path.write_text(json.dumps(job))
            _log(
                f"{label}: {', '.join(SCENARIOS)}, {c.warmup_s:g} s warm-up + "
                f"{c.duration_s:g} s each"
            )
            timeout = 3 * (c.warmup_s + c.duration_s) + 300
            done = subprocess.run(
                [sys.executable, "-m", "bench.witness_bench", "client", str(job_path)],
                stdout=subprocess.PIPE,
                cwd=REPO_ROOT,
                timeout=timeout,
                check=False,
            )
            if done.returncode != 0:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=2)  # a server that failed has usually exited by now
                server = (
                    "was still running"
                    if proc.returncode is None
                    else f"had exited with status {proc.returncode}"
                )
                run.error = (
                    f"the load client failed (status {done.returncode}) on {label}; the "
                    f"server {server}; its log: {_tail(log_path)}"
                )
                return run, ready
            out = json.loads(done.stdout)
        finally:
            if proc.poll() is None:
                tree.update(_identities(proc.pid))
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            status = proc.returncode
            killed = _kill_leftovers(tree)
            if killed:
                run.notes.append(
                    f"{label}: {killed} of the server's {len(tree)} descendant processes were "
                    f"still running after it exited: killed"
                )
            if drain is not None:
                drain.join(timeout=5)
    if status not in (0, -signal.SIGTERM):
        run.notes.append(f"{label}: the server exited with status {status}: {_tail(log_path)}")
    if out.get("error"):
        run.error = f"{label}: {out['error']}"
    for name in SCENARIOS:
        if name in out:
            run.scenarios[name] = out[name]
    run.notes.append(_describe(label, out))
    return run, {**ready, "final_sizes": out.get("final_sizes"), "steps": out.get("steps_used")}


def _identities(pid: int) -> dict[int, bytes]:
    """Process ``pid``'s descendants, each pid with its start time (so that a pid the system
    has reused since is not mistaken for one of them)."""
    out: dict[int, bytes] = {}
    for p in _descendants(pid):
        with contextlib.suppress(OSError, IndexError):
            out[p] = _stat(p)[19]
    return out


def _kill_leftovers(tree: dict[int, bytes], timeout_s: float = 10.0) -> int:
    """SIGKILL every process of ``tree`` (see :func:`_identities`) still running, and wait until
    each has ended (or is a zombie, awaiting its new parent); how many were killed."""

    def alive(p: int) -> bool:
        try:
            fields = _stat(p)
        except OSError:
            return False
        return fields[19] == tree[p] and fields[0] != b"Z"

    left = [p for p in tree if alive(p)]
    for p in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in left) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(left)


def _describe(label: str, out: dict[str, Any]) -> str:
    parts = []
    for name in SCENARIOS:
        s = out.get(name)
        if s is None:
            continue
        statuses = ", ".join(f"{k}: {v:,}" for k, v in sorted(s["statuses"].items()))
        per = s["server_cpu"] * s["window_s"] / s["n"] if s["n"] else math.inf
        start, end = s["server_procs"]
        procs = f"{end}" if start == end else f"{start} at the start, {end} at the end"
        text = (
            f"{name}: {s['n']:,} in {s['window_s']:.1f} s (all answers {statuses}); CPU as a "
            f"share of one core: server {s['server_cpu']:.0%} ({procs} processes; "
            f"{fmt_time(per)} per request), client {s['client_cpu']:.0%}"
        )
        if s["verified"]:
            text += f"; {s['verified']} cosignature answers verified"
        if s["exhausted"]:
            text += "; SEQUENCE EXHAUSTED (window cut short)"
        if s["problems"]:
            text += "; PROBLEMS: " + " / ".join(s["problems"])
        parts.append(text)
    return f"{label}: " + "; ".join(parts)


def _stored_sizes_ours(db: Path, origins: list[str]) -> list[int | None]:
    from witness.open import open_state

    state = open_state(db=str(db), create=False)
    try:
        out: list[int | None] = []
        for origin in origins:
            latest = state.latest(origin)
            out.append(None if latest is None else latest.size)
        return out
    finally:
        state.close()


def _stored_sizes_peer(db: Path, origins: list[str]) -> list[int | None]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = dict(conn.execute("SELECT origin, last_size FROM logs").fetchall())
    finally:
        conn.close()
    return [rows.get(origin) for origin in origins]


def _durable_note(label: str, stored: list[int | None], expected: list[int] | None) -> str:
    if expected is None:
        return f"{label}: stored sizes not checked (no advance completed)"
    if stored == expected:
        return (
            f"{label}: after the server stopped, its database holds, for each of the {LOGS} "
            f"logs, the size of the last checkpoint it accepted ({min(expected):,} to "
            f"{max(expected):,} leaves)"
        )
    return f"{label}: STORED SIZES DIFFER from the last accepted: {stored} != {expected}"


# --- the report --------------------------------------------------------------------------------


def _fmt(s: dict[str, Any] | None) -> str:
    if s is None:
        return "n/a"
    return f"{s['rate']:,.0f} req/s, p50 {fmt_time(s['p50'])}, p99 {fmt_time(s['p99'])}"


def _ratio(ours: dict[str, Any] | None, theirs: dict[str, Any] | None) -> str:
    if ours is None or theirs is None or theirs["rate"] <= 0:
        return ""
    return f"{ours['rate'] / theirs['rate']:.2f}x"


def run(*, quick: bool, peers_enabled: bool = True, peer_build_limit_s: float = 120.0) -> Section:
    """Run the witness benchmark and return its section of the report."""
    c = QUICK if quick else FULL
    section = Section(
        title=f"witness: add-checkpoint, {LOGS} logs, concurrency {CONCURRENCY}, durable "
        f"state; {c.warmup_s:g} s warm-up + {c.duration_s:g} s per scenario"
    )
    _log(f"precomputing {c.steps:,} signed checkpoints with proofs for each of {LOGS} logs")
    began = perf_counter()
    workload = build_workload(c)
    built_s = perf_counter() - began
    runs: list[ServerRun] = []
    peer_reason: str | None = None
    with tempfile.TemporaryDirectory(prefix="tlog-witness-bench-") as tmp:
        directory = Path(tmp)
        machine = [f"before: {_machine_state(directory)}"]
        workload_path = directory / "workload.pickle"
        with open(workload_path, "wb") as f:
            pickle.dump(workload, f, protocol=pickle.HIGHEST_PROTOCOL)
        logs = [[o, v] for o, v in zip(workload.origins, workload.vkeys, strict=True)]
        variants = [("ours", False)] + ([(MLDSA_LABEL, True)] if c.mldsa else [])
        for label, mldsa in variants:
            try:
                runs.append(_run_ours(directory, label, mldsa, logs, workload, workload_path, c))
            except Exception as e:  # report it and go on with the other servers
                traceback.print_exc(file=sys.stderr)
                runs.append(ServerRun(label, error=f"{label} FAILED: {type(e).__name__}: {e}"))
        if peers_enabled:
            try:
                env = peers.ensure_peer_env(requirements=PEER_REQUIREMENTS)
                for quickack in (False, True):
                    runs.append(
                        _run_peer(directory, env, quickack, logs, workload, workload_path, c)
                    )
            except peers.PeerUnavailable as e:
                peer_reason = str(e)
            except Exception as e:  # a peer failing mid-run: report it, keep our figures
                traceback.print_exc(file=sys.stderr)
                peer_reason = f"FAILED: {type(e).__name__}: {e}"
        else:
            peer_reason = "skipped (--no-peers)"
        machine.append(f"after: {_machine_state(directory)}")

    _report(section, c, runs, peer_reason, built_s, machine)
    return section


MLDSA_LABEL = "ours, Ed25519 + ML-DSA-44"
QUICKACK_SUFFIX = ", client ACKs at once"


def _tlog_witness() -> list[str]:
    """How to run this project's ``tlog-witness`` command: its console script next to this
    interpreter, else its entry point through this interpreter."""
    script = Path(sys.executable).parent / "tlog-witness"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from witness.cli import main; sys.exit(main())"]


def _setup(argv: list[str]) -> str:
    """Run one setup command; its stdout. RuntimeError with its message if it fails."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[-3:])} failed: {done.stderr.strip()[:300]}")
    return done.stdout


def _run_ours(
    directory: Path,
    label: str,
    mldsa: bool,
    logs: list[list[str]],
    workload: Workload,
    workload_path: Path,
    c: Config,
) -> ServerRun:
    """Ours as an operator runs it: ``tlog-witness init`` (fresh keys, the SQLite state),
    ``add-log`` per log, ``serve``."""
    sub = directory / ("ours-mldsa" if mldsa else "ours")
    sub.mkdir()
    tw = _tlog_witness()
    _setup(
        [*tw, "init", "--name", WITNESS_NAME, "--dir", str(sub), *(["--mldsa"] if mldsa else [])]
    )
    config = str(sub / "witness.toml")
    for origin, vkey in logs:
        _setup([*tw, "add-log", "--config", config, origin, "--key", vkey])
    port = _free_port()
    argv = [
        *tw,
        "serve",
        "--config",
        config,
        "--listen",
        f"{HOST}:{port}",
        "--workers",
        str(OUR_WORKERS),
    ]
    result, info = run_server(
        label,
        argv,
        None,
        port,
        sub / "server.log",
        workload_path,
        c,
        ready_prefix=b"listening on ",
        witness_vkeys=lambda lines: [x[len("vkey ") :] for x in lines if x.startswith("vkey ")],
    )
    stored = functools.partial(_stored_sizes_ours, sub / "witness.db", workload.origins)
    return _finish(result, info, c, label, stored)


def _run_peer(
    directory: Path,
    env: peers.PeerEnv,
    quickack: bool,
    logs: list[list[str]],
    workload: Workload,
    workload_path: Path,
    c: Config,
) -> ServerRun:
    """aics-witness through bench/peer_witness.py (its init, add-log and serve)."""
    sub = directory / ("aics-quickack" if quickack else "aics")
    sub.mkdir()
    port = _free_port()
    job = {"dir": str(sub), "name": WITNESS_NAME, "listen": f"{HOST}:{port}", "logs": logs}
    label = f"aics-witness {env.packages.get('aics-witness', '?')}"
    if quickack:
        label += QUICKACK_SUFFIX
    argv = [str(env.python), "-I", str(PEER_SCRIPT)]
    result, info = run_server(
        label,
        argv,
        json.dumps(job).encode(),
        port,
        sub / "server.log",
        workload_path,
        c,
        ready_prefix=None,
        witness_vkeys=lambda lines: [json.loads(lines[0])["vkey"]],
        quickack=quickack,
    )
    if info.get("lines") and not quickack:
        ready = json.loads(info["lines"][0])
        result.notes.insert(
            0,
            f"peer: aics-witness {ready.get('aics_witness')} with aics-tlog "
            f"{ready.get('aics_tlog')} on Python {ready.get('python')} in "
            f"{env.python.parent.parent.name} (ours on Python {platform.python_version()}); "
            f"its witness vkey {ready.get('vkey')}",
        )
    if not (sub / "witness.db").exists():
        return _finish(result, info, c, label, None)
    stored = functools.partial(_stored_sizes_peer, sub / "witness.db", workload.origins)
    return _finish(result, info, c, label, stored)


def _machine_state(directory: Path, commits: int = 200) -> str:
    """The load average and what a durable SQLite commit costs in ``directory`` right now
    (WAL, synchronous=FULL, one 600-byte row rewritten per commit): the servers share both."""
    path = directory / "fsync-probe.db"
    conn = sqlite3.connect(path, isolation_level=None)
    times: list[float] = []
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v BLOB)")
        conn.execute("INSERT OR REPLACE INTO t VALUES (1, x'00')")
        for n in range(commits):
            start = perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE t SET v = ? WHERE k = 1", (n.to_bytes(4, "big") * 150,))
            conn.execute("COMMIT")
            times.append(perf_counter() - start)
    finally:
        conn.close()
    times.sort()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"load average {load}; SQLite commit with fsync p50 "
        f"{fmt_time(_nearest_rank(times, 0.5))}, p99 {fmt_time(_nearest_rank(times, 0.99))}"
    )


def _finish(
    result: ServerRun,
    info: dict[str, Any],
    c: Config,
    label: str,
    stored: Callable[[], list[int | None]] | None,
) -> ServerRun:
    """Add the run's notes to ``result``: the durability check (the sizes ``stored`` reads back
    against the final sizes the client saw; none without a database to read) and the steps."""
    if info.get("final_sizes") and stored is not None:
        result.notes.append(_durable_note(label, stored(), info["final_sizes"]))
    _note_steps(result, info, c)
    return result


def _note_steps(result: ServerRun, info: dict[str, Any], c: Config) -> None:
    steps = info.get("steps")
    if steps:
        result.notes.append(
            f"{result.label}: advance used {min(steps):,} to {max(steps):,} of the {c.steps:,} "
            f"precomputed steps per log"
        )


def _report(
    section: Section,
    c: Config,
    runs: list[ServerRun],
    peer_reason: str | None,
    built_s: float,
    machine: list[str],
) -> None:
    ours = next((r for r in runs if r.label == "ours"), None)
    mldsa = next((r for r in runs if r.label == MLDSA_LABEL), None)
    peer = next(
        (r for r in runs if r.label.startswith("aics") and QUICKACK_SUFFIX not in r.label), None
    )
    quick = next((r for r in runs if QUICKACK_SUFFIX in r.label), None)
    what = {
        "advance": "advance (1-7 leaves, with proof)",
        "replay": "replay (old = size, no proof)",
        "stale": "stale (old behind: 409)",
    }
    for name in SCENARIOS:
        mine = ours.scenarios.get(name) if ours else None
        others: list[ServerRun | None] = [r for r in (peer, quick) if r is not None]
        for other in others or [None]:
            theirs = other.scenarios.get(name) if other else None
            section.rows.append(
                (
                    what[name],
                    _fmt(mine),
                    other.label if other else "(peer not measured)",
                    _fmt(theirs) if other else "",
                    _ratio(mine, theirs),
                )
            )
    if mldsa is not None:
        for name in SCENARIOS:
            mine = mldsa.scenarios.get(name)
            theirs = ours.scenarios.get(name) if ours else None
            section.rows.append(
                (
                    f"{name}, ours with Ed25519 + ML-DSA-44 keys",
                    _fmt(mine),
                    "ours, Ed25519 only",
                    _fmt(theirs),
                    _ratio(mine, theirs),
                )
            )
    section.notes.append(
        f"workload: {c.steps:,} advance requests per log precomputed in {built_s:.1f} s (each "
        f"signed by its log's Ed25519 key, with its consistency proof); one load client "
        f"process (Python {platform.python_version()}, asyncio, a minimal HTTP/1.1 "
        f"protocol), {CONCURRENCY} workers, each with one keep-alive connection and one log; "
        f"closed loop; rates count answers inside the measured window; p50/p99 nearest rank; "
        f"ratio = ours / theirs in requests/s (above 1: ours is faster)"
    )
    section.notes.append("machine " + "; ".join(machine))
    section.notes.append(
        f"ours runs as tlog-witness serve --workers {OUR_WORKERS}: a supervisor and "
        f"{OUR_WORKERS} worker processes on one port (SO_REUSEPORT) and one state, as the "
        f"operator guide says (workers = cores; this machine: {os.cpu_count()} cores). Server "
        f"CPU is that of the whole process tree, all threads; as a share of one core it can "
        f"exceed 100%"
    )
    section.notes.append(
        "durability: ours SQLite WAL + synchronous=FULL (every compare-and-swap that changes "
        "the row is fsynced before the answer); aics-witness the same (its only mode) plus a "
        "passive WAL checkpoint after each commit that changed something. Logging at INFO to "
        "a file on both (ours: one JSON line per request; aics-witness: one line per "
        "cosignature or refusal)"
    )
    section.notes.append(
        "replay: both witnesses write nothing to disk for most replays: within the second of "
        "the stored cosignatures, both answer a replay with them (ours: no signing, no "
        "compare-and-swap; with an ML-DSA-44 key too, its stored subtree/v1 line being as "
        "valid as a fresh one); the first replay in a new second signs anew and writes"
    )
    if quick is not None:
        section.notes.append(
            "'client ACKs at once' is a diagnostic run of the same client with Linux "
            "TCP_QUICKACK re-armed after every read. aics-witness (http.server) writes each "
            "response as two send() calls, headers then body, on a socket without TCP_NODELAY: "
            "Nagle holds the body until the client ACKs the headers, which a client with "
            "delayed ACKs (the Linux default, as in Go or curl clients) does after about "
            "40 ms. Its default-client figures are what such clients get; the quick-ACK ones "
            "show its processing"
        )
    for r in runs:
        if r.error:
            section.notes.append(r.error)
        section.notes.extend(r.notes)
    if peer_reason is not None:
        section.notes.append(f"peer NOT measured: {peer_reason}")

    def target(name: str, floor: float) -> None:
        s = ours.scenarios.get(name) if ours else None
        if s is None:
            section.targets.append((f"{name} >= {floor:,.0f} req/s: not measured", False))
            return
        met = s["rate"] >= floor and s["p99"] <= P99_TARGET_S and not s["problems"]
        section.targets.append(
            (
                f"{name} >= {floor:,.0f} requests/s with p99 <= {P99_TARGET_S * 1e3:g} ms "
                f"(ours, Ed25519, {OUR_WORKERS} workers, {CONCURRENCY} connections, {LOGS} "
                f"logs): "
                f"{s['rate']:,.0f} requests/s, p99 {fmt_time(s['p99'])}",
                met,
            )
        )

    target("advance", ADVANCE_TARGET)
    target("replay", REPLAY_TARGET)


# --- entry points for the subprocesses ---------------------------------------------------------


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.witness_bench",
        description="The witness benchmark's load client (run by python -m bench witness).",
    )
    parser.add_argument("role", choices=("client",))
    parser.add_argument("job", help="the JSON job file written by the benchmark")
    args = parser.parse_args(argv)
    return client_main(args.job)


if __name__ == "__main__":
    sys.exit(_main())
