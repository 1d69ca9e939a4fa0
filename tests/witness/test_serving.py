"""Tests of ``tlog-witness serve --workers N`` (witness/serving.py): a supervisor and N worker
processes on one state, as real processes on 127.0.0.1.

Every server here is ``python -m witness.cli serve --workers 2 --listen 127.0.0.1:0`` on a
SQLite state (the race also on a PostgreSQL schema) made by
:func:`tests.witness.helpers.configure_state`, signing with the fixed-seed witness key of
tests/witness/helpers.py (so that :func:`tests.witness.helpers.check_cosignatures` checks its
answers). Each request goes out on a new TCP connection (or, in the race, on its own
connection of a pool), which the kernel hands to one of the workers (``SO_REUSEPORT``).

* Two workers, one state (:func:`test_two_workers_serve_one_state`): the supervisor prints the
  vkey and exactly one ``listening on`` line; it has exactly two children, the pids its
  ``worker-start`` events name; :data:`ADVANCES` sequential add-checkpoint requests move one
  log forward, each 200 with valid cosignatures, and the monitoring endpoint (another
  connection, perhaps another worker) serves each newly cosigned note at once; /metrics shows
  two processes, each counting only its own requests, which together are all of them;
  SIGTERM → exit 0, both workers gone, a ``worker-stop`` event for each and a final ``stop``.
* SIGKILL of one worker → the supervisor stops the other and exits 1, naming the dead worker.
* SIGKILL of the supervisor → the workers stop (``PR_SET_PDEATHSIG``) and free the port.
* The two-fork race of tests/witness/test_faults.py (:func:`tests.witness.test_faults.race_rounds`)
  through one two-worker server: zero split views; both workers answered race requests
  (/metrics), and on SQLite some compare-and-swaps were lost from one worker to the other.
* ``serve --check`` prints ``workers N`` (flag, file, default); a bad ``--workers`` exits 2
  with one line.

Linux only: the process tree is read from /proc. ``serve --workers`` is docs/operator-guide.md
§3; the protocol C2SP tlog-witness (https://c2sp.org/tlog-witness).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.clirunner import clean_env_fixture, read_until_listening
from tests.witness.helpers import (
    ED_SEED,
    WITNESS,
    ForkLog,
    check_cosignatures,
    configure_state,
    witness_verifiers,
)
from tests.witness.test_cli import ENV_VARS, check_settings, cli, cli_env, fails
from tests.witness.test_faults import BASE, RACE_REQUESTS, race_rounds
from tlog.cosignature import TYPE_COSIGNATURE_V1
from tlog.keys import format_vkey, generate_key
from tlog.witnessproto import monitoring_path
from witness.open import open_state
from witness.state import WitnessState

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the process tree from /proc"
)

WORKERS = 2
ADVANCES = 31
"""Sequential add-checkpoint requests in the two-worker test. Odd: the two workers' counts of
them always differ, which tells their /metrics pages apart."""

SCRAPES = 20
"""/metrics requests in the two-worker test."""

RACE_ROUNDS = 100
"""Rounds of the two-fork race (each with a fresh origin), as in tests/witness/test_faults.py."""

VKEY = format_vkey(witness_verifiers()[0])
"""The witness's vkey (tests/witness/helpers.py's fixed Ed25519 seed)."""


_clean_env = clean_env_fixture(ENV_VARS)


# --- the state, the server, the process tree ------------------------------------------------------


@dataclass(frozen=True)
class State:
    """A witness state (a SQLite file or a PostgreSQL schema) and the witness's key file."""

    args: list[str]
    """serve's ``--db``/``--postgres`` and ``--key`` arguments."""
    db: str | None
    postgres: str | None
    key: str

    def open(self) -> WitnessState:
        return open_state(db=self.db, postgres=self.postgres, create=False)


def witness_state(tmp_path: Path, logs: Sequence[ForkLog], postgres: str | None = None) -> State:
    """A state following ``logs`` (SQLite in ``tmp_path`` unless ``postgres`` is given) and
    the witness's key file."""
    db = None if postgres is not None else str(tmp_path / "witness.db")
    configure_state(db=db, postgres=postgres, logs=logs)
    key = tmp_path / "witness.key"
    key.write_text(generate_key(WITNESS, TYPE_COSIGNATURE_V1, ED_SEED).format() + "\n")
    key.chmod(0o600)
    where = ["--db", db] if db is not None else ["--postgres", str(postgres)]
    return State([*where, "--key", str(key)], db, postgres, str(key))


@dataclass
class Supervisor:
    """A running ``serve --workers`` process and what it printed so far."""

    proc: subprocess.Popen[bytes]
    url: str
    stderr: Path
    printed: list[str] = field(default_factory=list)
    """stdout lines (all of them once :meth:`rest_of_stdout` has run)."""

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def lines(self) -> list[str]:
        return self.stderr.read_text(encoding="utf-8").splitlines()

    def events(self) -> list[dict[str, Any]]:
        """The JSON lines of stderr: events and request lines of all processes."""
        return [json.loads(line) for line in self.lines() if line.startswith("{")]

    def messages(self) -> list[str]:
        """The stderr lines that are not JSON."""
        return [line for line in self.lines() if not line.startswith("{")]

    def workers(self) -> dict[int, int]:
        """Worker index → pid, from the ``worker-start`` events."""
        return {e["worker"]: e["pid"] for e in self.events() if e.get("event") == "worker-start"}

    def rest_of_stdout(self) -> None:
        """Once every process has exited: read what else was printed."""
        assert self.proc.stdout is not None
        self.printed += self.proc.stdout.read().decode().splitlines()


@contextlib.contextmanager
def supervisor(*args: str, stderr: Path, timeout: float = 30.0) -> Iterator[Supervisor]:
    """Start ``serve --workers 2 --listen 127.0.0.1:0 ARGS`` and wait for its ``listening on``
    line. Afterwards, SIGKILL whatever of it (supervisor or worker) still runs."""
    argv = [sys.executable, "-m", "witness.cli", "serve", "--listen", "127.0.0.1:0"]
    argv += ["--workers", str(WORKERS), *args]
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=cli_env())
    sup: Supervisor | None = None
    try:
        printed, pending = read_until_listening(proc, stderr, timeout)
        url = next(p for p in printed if p.startswith("listening on ")).removeprefix(
            "listening on "
        )
        assert pending == b"", pending
        sup = Supervisor(proc, url, stderr, printed)
        yield sup
    finally:
        leftovers = [] if sup is None else list(sup.workers().values())
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in leftovers:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.stdout is not None:
            proc.stdout.close()


def children(pid: int) -> set[int]:
    """The child processes of ``pid`` (Linux: /proc/PID/task/TID/children)."""
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        out.update(int(c) for c in (task / "children").read_text().split())
    return out


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def wait_until_gone(pids: Sequence[int], timeout: float) -> float:
    """Seconds until none of ``pids`` runs; AssertionError after ``timeout``."""
    started = time.monotonic()
    while any(running(p) for p in pids):
        if time.monotonic() - started > timeout:
            raise AssertionError(f"still running after {timeout} s: {pids}")
        time.sleep(0.02)
    return time.monotonic() - started


# --- HTTP, one new connection per request ---------------------------------------------------------


def fetch(url: str, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    """One request on a new TCP connection (so that the kernel picks a worker for it)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def counter(page: str, endpoint: str, code: int) -> int:
    """``witness_http_requests_total`` of one endpoint and status on a /metrics page."""
    m = re.search(
        rf'^witness_http_requests_total{{worker="\d+",endpoint="{endpoint}",code="{code}"}} (\d+)$',
        page,
        re.MULTILINE,
    )
    return 0 if m is None else int(m.group(1))


def worker_label(page: str) -> str:
    """The one ``worker`` label that every sample of a /metrics page carries."""
    samples = [line for line in page.splitlines() if line and not line.startswith("#")]
    labels = {m.group(1) if (m := re.search(r'[{,]worker="(\d+)"', x)) else None for x in samples}
    assert len(labels) == 1 and None not in labels, labels
    return str(labels.pop())


def endpoint_total(page: str, endpoint: str) -> int:
    """``witness_http_requests_total`` of one endpoint, all statuses, on a /metrics page."""
    pattern = (
        rf'^witness_http_requests_total{{worker="\d+",endpoint="{endpoint}",code="\d+"}} (\d+)$'
    )
    return sum(int(n) for n in re.findall(pattern, page, re.MULTILINE))


# --- two workers on one state ---------------------------------------------------------------------


def test_two_workers_serve_one_state(tmp_path: Path) -> None:
    log = ForkLog("serving.example/log").grow(ADVANCES)
    state = witness_state(tmp_path, [log])
    with supervisor(*state.args, stderr=tmp_path / "err") as srv:
        # The process tree: exactly the two workers the events name, indexes 0 and 1.
        workers = srv.workers()
        assert sorted(workers) == list(range(WORKERS)), srv.lines()
        assert len(set(workers.values())) == WORKERS
        assert children(srv.proc.pid) == set(workers.values())

        # One log moved forward one leaf at a time. Each request may reach either worker, whose
        # kept copy of the stored checkpoint may be behind the other's writes: still a 200 each
        # time, and the note the monitoring endpoint serves right after is the one just cosigned.
        mon = monitoring_path("", log.origin)
        for size in range(1, ADVANCES + 1):
            status, body = fetch(srv.url, "POST", "/add-checkpoint", log.request(size - 1, size))
            assert status == 200, (size, body)
            check_cosignatures(body, log.text(size))
            status, served = fetch(srv.url, "GET", mon)
            assert status == 200, (size, served)
            assert served == log.note(size) + body, size
        handle = state.open()
        try:
            stored = handle.latest(log.origin)
        finally:
            handle.close()
        assert stored is not None and stored.size == ADVANCES
        assert stored.root == log.root(ADVANCES)

        # /metrics counts the requests of the worker that answers. A page's add-checkpoint
        # count tells the two workers apart (ADVANCES is odd: their counts differ); each
        # worker's pages count its own earlier scrapes, 0, 1, 2, ...; the two counts of
        # add-checkpoint requests add up to all of them.
        scrapes: dict[int, list[int]] = {}
        labels_by_count: dict[int, set[str]] = {}
        for _ in range(SCRAPES):
            status, page = fetch(srv.url, "GET", "/metrics")
            assert status == 200
            text = page.decode()
            count = counter(text, "add-checkpoint", 200)
            scrapes.setdefault(count, []).append(counter(text, "metrics", 200))
            labels_by_count.setdefault(count, set()).add(worker_label(text))
        assert len(scrapes) == WORKERS, scrapes
        # Every sample names its worker: one label per worker, the two different.
        named = sorted(x for labels in labels_by_count.values() for x in labels)
        assert named == ["0", "1"], labels_by_count
        assert sum(scrapes) == ADVANCES and min(scrapes) > 0, scrapes
        for seen in scrapes.values():
            assert seen == list(range(len(seen))), scrapes

        assert srv.proc.poll() is None
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(timeout=20) == 0, srv.lines()
        srv.rest_of_stdout()

    # Gone: the supervisor waited for both before it exited.
    assert not any(running(p) for p in workers.values())
    assert srv.printed == [f"vkey {VKEY}", f"listening on {srv.url}"]
    assert srv.messages() == []
    events = srv.events()
    lifecycle = [e for e in events if "event" in e]
    started = [{"event": "worker-start", "worker": i, "pid": p} for i, p in workers.items()]
    stopped = [{"event": "worker-stop", "worker": i, "pid": p} for i, p in workers.items()]
    start = {"event": "start", "listen": [srv.url], "vkeys": [VKEY], "workers": WORKERS}
    assert sorted(lifecycle[:WORKERS], key=str) == sorted(started, key=str), lifecycle
    assert lifecycle[WORKERS] == start, lifecycle
    assert sorted(lifecycle[WORKERS + 1 : -1], key=str) == sorted(stopped, key=str), lifecycle
    assert lifecycle[-1] == events[-1] == {"event": "stop"}
    # Every worker logged its own request lines, whole, to the one stderr.
    answered = [(e["endpoint"], e["status"]) for e in events if "endpoint" in e]
    assert sorted(answered) == sorted(
        [("add-checkpoint", 200)] * ADVANCES
        + [("monitoring", 200)] * ADVANCES
        + [("metrics", 200)] * SCRAPES
    )
    assert not any(e.get("lost_race") for e in events)  # sequential: nobody raced


def test_sigkill_of_a_worker_stops_the_supervisor_with_status_1(tmp_path: Path) -> None:
    state = witness_state(tmp_path, [])
    with supervisor(*state.args, stderr=tmp_path / "err") as srv:
        workers = srv.workers()
        assert children(srv.proc.pid) == set(workers.values())
        killed, survivor = workers[1], workers[0]
        started = time.monotonic()
        os.kill(killed, signal.SIGKILL)
        assert srv.proc.wait(timeout=20) == 1, srv.lines()
        elapsed = time.monotonic() - started
        srv.rest_of_stdout()
    assert elapsed < 5, elapsed
    assert not running(survivor) and not running(killed)
    assert srv.messages() == [
        f"tlog-witness: worker 1 (pid {killed}) exited with signal 9; stopping"
    ]
    events = [e for e in srv.events() if "event" in e]
    assert [e for e in events if e["event"] == "worker-stop"] == [
        {"event": "worker-stop", "worker": 0, "pid": survivor}
    ]
    assert events[-1] == {"event": "stop"}
    assert srv.printed == [f"vkey {VKEY}", f"listening on {srv.url}"]


def test_sigterm_to_a_worker_stops_the_witness_with_status_0(tmp_path: Path) -> None:
    """systemd's default KillMode signals every process of the unit at once: a worker that
    stops gracefully on its own SIGTERM is a stop, not a crash — the supervisor stops the other
    one and exits 0, with no error line."""
    state = witness_state(tmp_path, [])
    with supervisor(*state.args, stderr=tmp_path / "err") as srv:
        workers = srv.workers()
        os.kill(workers[0], signal.SIGTERM)
        assert srv.proc.wait(timeout=20) == 0, srv.lines()
        srv.rest_of_stdout()
    assert not any(running(pid) for pid in workers.values())
    assert srv.messages() == []
    stops = [e for e in srv.events() if e.get("event") == "worker-stop"]
    assert sorted(e["worker"] for e in stops) == [0, 1]
    assert srv.events()[-1] == {"event": "stop"}


def test_sigterm_to_the_workers_then_the_supervisor_exits_0(tmp_path: Path) -> None:
    """The workers stop on their own SIGTERM; the supervisor's own SIGTERM, arriving while it
    stops or exits, must not kill it with status 143 instead of its 0 (five tries: the race
    is in the timing)."""
    state = witness_state(tmp_path, [])
    for attempt in range(5):
        with supervisor(*state.args, stderr=tmp_path / f"err{attempt}") as srv:
            workers = srv.workers()
            for pid in workers.values():
                os.kill(pid, signal.SIGTERM)
            time.sleep(0.02 * attempt)
            with contextlib.suppress(ProcessLookupError):
                os.kill(srv.proc.pid, signal.SIGTERM)
            assert srv.proc.wait(timeout=20) == 0, (attempt, srv.lines())
            srv.rest_of_stdout()
        assert srv.messages() == []


@pytest.mark.parametrize("workers", [1, 2])
def test_a_second_witness_cannot_share_the_port(tmp_path: Path, workers: int) -> None:
    """The workers listen with SO_REUSEPORT, which would let another process of the same user
    join their port and take half of the connections with its own key and state: a second
    serve on that port is refused (exit 2, one line), whatever its number of workers."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = witness_state(tmp_path / "a", [])
    second = witness_state(tmp_path / "b", [])
    with supervisor(*first.args, stderr=tmp_path / "err") as srv:
        listen = f"127.0.0.1:{srv.port}"
        proc = cli("serve", *second.args, "--listen", listen, "--workers", str(workers))
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.decode() == (
            f"tlog-witness: serve: cannot listen on {listen}: Address already in use\n"
        )
        assert proc.stdout == b""
        assert srv.proc.poll() is None  # the first one still serves


def test_sigkill_of_the_supervisor_stops_the_workers_and_frees_the_port(tmp_path: Path) -> None:
    state = witness_state(tmp_path, [])
    with supervisor(*state.args, stderr=tmp_path / "err") as srv:
        workers = srv.workers()
        assert children(srv.proc.pid) == set(workers.values())
        srv.proc.kill()
        srv.proc.wait(timeout=20)
        # Each worker gets SIGTERM from the kernel (PR_SET_PDEATHSIG) and stops gracefully.
        wait_until_gone(list(workers.values()), timeout=3.0)
    stopped = [e for e in srv.events() if e.get("event") == "worker-stop"]
    assert sorted(e["pid"] for e in stopped) == sorted(workers.values()), srv.lines()
    assert {"event": "stop"} not in srv.events()  # the supervisor never got that far
    # Nothing holds the port any more: a socket without SO_REUSEPORT (or SO_REUSEADDR) binds.
    with socket.socket() as s:
        s.bind(("127.0.0.1", srv.port))
        s.listen()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_two_fork_race_through_two_workers_zero_split_views(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Each round, RACE_REQUESTS (32) concurrent requests along two conflicting forks of one
    log, on as many connections, which the kernel spreads over the two workers: only one fork
    is ever cosigned, and its store is the largest cosigned checkpoint (race_rounds checks)."""
    postgres = None if backend == "sqlite" else request.getfixturevalue("pg_schema").conninfo
    forks = [ForkLog.forks(f"race.example/workers/{t}", BASE, 10) for t in range(RACE_ROUNDS)]
    state = witness_state(tmp_path, [a for a, _ in forks], postgres)
    with supervisor(*state.args, stderr=tmp_path / "err") as srv:
        handle = state.open()
        try:
            report = asyncio.run(race_rounds([srv.url], handle, forks))
        finally:
            handle.close()
        # Both workers answered add-checkpoint requests, and together all of them (the first
        # checkpoint and the racing requests of each round): each /metrics page shows the
        # count of the worker that serves it.
        sent = RACE_ROUNDS * (1 + RACE_REQUESTS)
        totals: set[int] = set()
        for _ in range(SCRAPES):
            status, page = fetch(srv.url, "GET", "/metrics")
            assert status == 200
            totals.add(endpoint_total(page.decode(), "add-checkpoint"))
        assert sum(totals) == sent or totals == {sent // 2}, (totals, sent)
        assert 0 not in totals and sent not in totals, (totals, sent)
        assert srv.proc.poll() is None, srv.lines()
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(timeout=20) == 0, srv.lines()
    events = srv.events()
    lost = sum(bool(e.get("lost_race")) for e in events)
    summary = (
        f"{report.rounds} rounds, {report.split_views} split views,"
        f" statuses {dict(sorted(report.statuses.items()))}, {lost} lost across workers"
    )
    print(summary)
    assert report.rounds == RACE_ROUNDS, summary
    assert report.split_views == 0, summary
    assert report.statuses[409] > 0, summary
    assert not any(e.get("status", 0) >= 500 for e in events), summary
    if backend == "sqlite":
        # Only another process can move a log between a worker's read and its
        # compare-and-swap (one process serialises a log's requests): the workers did race
        # each other. (About 40 a run on SQLite; on PostgreSQL a few, sometimes 1: too few to
        # insist on, and the /metrics check above shows both workers took part there.)
        assert lost > 0, summary
    assert srv.messages() == []


# --- the setting ----------------------------------------------------------------------------------


def test_serve_check_prints_workers(tmp_path: Path) -> None:
    state = witness_state(tmp_path, [])
    args = state.args
    assert check_settings(*args)["workers"] == ["1"]
    assert check_settings(*args, "--workers", "3")["workers"] == ["3"]
    config = tmp_path / "witness.toml"
    config.write_text(
        f"db = {json.dumps(state.db)}\nkeys = [{json.dumps(state.key)}]\nworkers = 4\n"
    )
    assert check_settings("--config", str(config))["workers"] == ["4"]
    assert check_settings("--config", str(config), "--workers", "256")["workers"] == ["256"]
    err = fails(2, "serve", "--check", *args, "--workers", "0")
    assert "--workers must be from 1 to 256" in err, err


def test_serve_refuses_zero_workers_before_starting(tmp_path: Path) -> None:
    args = witness_state(tmp_path, []).args
    proc = cli("serve", *args, "--listen", "127.0.0.1:0", "--workers", "0")
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert err.startswith("tlog-witness: serve: ") and err.count("\n") == 1, err
    assert "--workers must be from 1 to 256" in err and "Traceback" not in err
    assert proc.stdout == b""
