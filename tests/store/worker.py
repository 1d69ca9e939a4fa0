"""A worker process for the journal store's fault and concurrency tests.

tests/store/test_faults.py runs this file as a separate OS process —
``sys.executable tests/store/worker.py MODE (--db PATH | --postgres CONNINFO) [options]`` — so
that races are between real processes, each with its own store handle and its own database
connection, and so that a writer can be killed with SIGKILL. It imports neither pytest nor
anything else from tests/, and keeps its imports few (start-up time is paid on every kill
cycle).

Options common to both modes:

``--db PATH`` / ``--postgres CONNINFO``
    The store (exactly one), already initialised by the test.
``--clock-file PATH``
    The store clock: whole Unix seconds read from this file on every call (:class:`FileClock`),
    so that every process shares one clock the test moves (lease expiry without sleeping).
    Without it the store's own clock is used.
``--key-file PATH``
    The log key (a ``PRIVATE+KEY+…`` line), needed to sign checkpoints.

Output: one JSON object per line on stdout. Each line is written with :func:`emit` — one
``os.write`` of the whole line — *after* the operation it reports has returned, so whatever a
line reports as written was committed. A line shorter than ``PIPE_BUF`` (4096 bytes) is written
atomically to a pipe, so a SIGKILL never leaves half of such a line.

Mode ``serve``: after opening the store the worker prints ``{"ready": pid}``, then reads one
JSON command per line from stdin and answers each with one or more lines; it exits at EOF or on
``{"op": "exit"}``. Every command may carry ``"at"``: a wall-clock time (``time.time()``) to
wait for before acting — the test sends the same ``at`` to every worker, so they start the
operation within about a millisecond of each other and really race. Commands:

``acquire {run, owner, ttl}``
    one :meth:`acquire`: ``{"lease": epoch, "expires_at": t}`` or an error line.
``append {run, epoch, records: [{kind, data?, effect_key?}]}``
    one atomic batch: ``{"records": [[seq, hash hex], …]}`` or an error line.
``hammer {run, epoch, tag, ok_limit, fenced_limit, timeout, seed}``
    append batches of 1-3 ``Note`` records (data ``{"w": tag, "a": attempt, "i": index}``)
    as fast as possible; a line per attempt, ``{"ok": attempt, "records": …}`` or
    ``{"fenced": attempt, "current": epoch}`` (or an error line with ``"attempt"``); stops
    after ``ok_limit`` successes or ``fenced_limit`` refusals (or the timeout) with
    ``{"done": true, "oks": n, "fenced": n, "attempts": n, "timed_out": bool}``.
``seal_runs {runs, owner, ttl, seed}``
    for each run in turn: acquire it, append one batch of 1-5 records, seal it (outcome
    ``ok``); a line per run, ``{"sealed": run, "position": p, "head": hex, "seq": n}`` (or an
    error line with ``"run"``), then ``{"done": true}``.
``checkpoints {until, sign_every, timeout}``
    take :meth:`checkpoint` in a loop until the log's size reaches ``until`` (every
    ``sign_every``-th round also :meth:`sign_checkpoint`; 0: never); then one line
    ``{"done": true, "pairs": [[size, root hex], …], "signed": [[size, root hex], …],
    "conflicts": [...], "decreases": n, "calls": n, "timed_out": bool}`` — ``pairs`` holds
    each distinct size seen with its root, ``conflicts`` every size seen with two roots, and
    ``decreases`` how often a checkpoint was smaller than the one before it.

Mode ``embedder`` (PostgreSQL; ``--prefix P --seed N``; the test made a table ``orders (run,
seq)``): on its own psycopg connection, in one transaction each time, appends 1-5 records to a
run ``P-<k mod 20>`` through the store's joined journal (:mod:`store.atomic`, epoch 1, no
lease) and inserts one ``orders`` row per record; prints ``{"op": "appended", "run": r,
"seqs": [...]}`` before its COMMIT (after a short random pause there) and ``{"op": "committed",
...}`` after it; loops until killed.

Mode ``deliver`` (``--batch N --timeout S [--once]``): the outbox's worker
(:class:`store.deliver.Deliverer`, polling every 20 ms when idle); prints ``{"ready": pid}``,
then ``{"op": "attempt", "sub", "run", "first", "last", "error", "acknowledged"}`` after each
request, and ``{"done": true}`` when ``--once`` found nothing due.

An error line is ``{"error": class name, "message": text, …}`` with the error's fields
(``owner``/``epoch`` of a LeaseHeldError, ``held``/``current`` of a FencedError,
``key``/``holder``/``run`` of a DuplicateAdmissionError).

Mode ``writer`` (the crash test; ``--prefix P --seed N [--ttl S] [--max-seconds S]``): loop
until killed (or ``--max-seconds``, a guard against strays). When it has no run it takes the
oldest abandoned run (``abandoned_runs``: its writer was killed) or else a new run
``P-<k>``, acquires it (TTL ``--ttl``, default 1 s of the shared clock, which the test moves
between cycles), and then, at random: appends a batch of 1-20 records (some of them
``EffectStarted`` with a fresh key), concludes and seals the run and releases its lease, or
signs a checkpoint. Before each operation it prints ``{"op": "begin", "what": …, "run": …}``
(so the test knows what a kill interrupted); after each commit::

    {"op": "acquired", "run": r, "epoch": e, "head": seq, "takeover": bool}
    {"op": "appended", "run": r, "epoch": e, "records": [[seq, hash hex], …]}
    {"op": "sealed", "run": r, "position": p, "head": hash hex}
    {"op": "released", "run": r}
    {"op": "checkpoint", "size": n, "root": hex}
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from store.api import Append, JournalStore
from store.errors import DuplicateAdmissionError, FencedError, LeaseHeldError, StoreError
from store.open import open_store
from tlog.checkpoint import Checkpoint
from tlog.errors import TlogError
from tlog.keys import SignerKey, parse_signer_key
from tlog.note import parse_note

Json = dict[str, Any]


class FileClock:
    """A store clock shared by processes: whole Unix seconds read from a file at every call.

    The test writes the file (:meth:`set`, an atomic rename, so a reader sees the old or the
    new time, never a torn one); every worker reads it. Requires: the file exists (``set``
    first).
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self) -> int:
        with open(self.path, "rb") as f:
            return int(f.read())

    def set(self, now: int) -> None:
        """Make ``now`` the time of every process reading this clock."""
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(str(now).encode())
        os.replace(tmp, self.path)

    def advance(self, seconds: int) -> int:
        """Move the clock forward by ``seconds``; return the new time."""
        now = self() + seconds
        self.set(now)
        return now


def emit(obj: Json) -> None:
    """Write ``obj`` as one JSON line to stdout in one system call (see the module docstring)."""
    data = (json.dumps(obj, separators=(",", ":"), sort_keys=True) + "\n").encode()
    while data:
        n = os.write(1, data)
        data = data[n:]


def error_line(e: BaseException, **extra: Any) -> Json:
    """The error line reporting ``e`` (with the fields a test checks)."""
    out: Json = {"error": type(e).__name__, "message": str(e), **extra}
    if isinstance(e, LeaseHeldError):
        out.update(owner=e.owner, epoch=e.epoch)
    elif isinstance(e, FencedError):
        out.update(held=e.held, current=e.current)
    elif isinstance(e, DuplicateAdmissionError):
        out.update(key=e.key, holder=e.holder, run=e.run)
    return out


def wait_until(at: float | None) -> None:
    """Sleep until shortly before the wall-clock time ``at``, then spin to it (a start line
    for racing processes that is sharper than the scheduler's sleep granularity)."""
    if at is None:
        return
    left = at - time.time()
    if left > 0.003:
        time.sleep(left - 0.003)
    while time.time() < at:
        pass


def records_json(records: list[Any]) -> list[list[Any]]:
    """[[seq, hash hex], …] of appended records."""
    return [[r.seq, r.hash.hex()] for r in records]


def batch_of(run: str, specs: list[Json]) -> list[Append]:
    """Append values from the JSON record specs ``{kind, data?, effect_key?}``."""
    out = []
    for s in specs:
        if "data" in s:
            out.append(Append(run, s["kind"], data=s["data"], effect_key=s.get("effect_key")))
        else:
            out.append(Append(run, s["kind"], effect_key=s.get("effect_key")))
    return out


def checkpoint_of(note: bytes) -> Checkpoint:
    """The checkpoint a signed note carries (the store signed it: not verified here)."""
    text, _ = parse_note(note)
    return Checkpoint.parse(text)


# --- serve mode ------------------------------------------------------------------------------


def hammer(store: JournalStore, cmd: Json) -> None:
    """The ``hammer`` command (module docstring): append until fenced or done."""
    rng = random.Random(cmd["seed"])
    run, epoch, tag = cmd["run"], cmd["epoch"], cmd["tag"]
    deadline = time.monotonic() + cmd["timeout"]
    oks = fenced = attempt = 0
    timed_out = False
    while oks < cmd["ok_limit"] and fenced < cmd["fenced_limit"]:
        if time.monotonic() > deadline:
            timed_out = True
            break
        batch = [
            Append(run, "Note", data={"w": tag, "a": attempt, "i": i})
            for i in range(rng.randint(1, 3))
        ]
        try:
            records = store.append(epoch, batch)
        except FencedError as e:
            fenced += 1
            emit({"fenced": attempt, "current": e.current})
        except TlogError as e:
            emit(error_line(e, attempt=attempt))
        else:
            oks += 1
            emit({"ok": attempt, "records": records_json(records)})
        attempt += 1
    emit({"done": True, "oks": oks, "fenced": fenced, "attempts": attempt, "timed_out": timed_out})


def seal_runs(store: JournalStore, cmd: Json) -> None:
    """The ``seal_runs`` command (module docstring): acquire, append, seal each run."""
    rng = random.Random(cmd["seed"])
    for run in cmd["runs"]:
        try:
            lease = store.acquire(run, cmd["owner"], cmd["ttl"])
            batch = [Append(run, "Note", data={"k": i}) for i in range(rng.randint(1, 5))]
            records = store.append(lease.epoch, batch)
            seal = store.seal(run, lease.epoch, "ok")
        except TlogError as e:
            emit(error_line(e, run=run))
            continue
        emit(
            {
                "sealed": run,
                "position": seal.position,
                "head": seal.head.hex(),
                "seq": records[-1].seq,
            }
        )
    emit({"done": True})


def checkpoints(store: JournalStore, cmd: Json) -> None:
    """The ``checkpoints`` command (module docstring): watch the log grow."""
    deadline = time.monotonic() + cmd["timeout"]
    sign_every: int = cmd["sign_every"]
    seen: dict[int, bytes] = {}
    signed: list[list[Any]] = []
    conflicts: list[list[Any]] = []
    last = -1
    decreases = calls = 0
    timed_out = False

    def keep(cp: Checkpoint) -> None:
        root = seen.setdefault(cp.size, cp.root)
        if root != cp.root:
            conflicts.append([cp.size, root.hex(), cp.root.hex()])

    while True:
        cp = store.checkpoint()
        calls += 1
        keep(cp)
        if cp.size < last:
            decreases += 1
        last = cp.size
        if sign_every and calls % sign_every == 0:
            kept = checkpoint_of(store.sign_checkpoint())
            keep(kept)
            signed.append([kept.size, kept.root.hex()])
        if cp.size >= cmd["until"]:
            break
        if time.monotonic() > deadline:
            timed_out = True
            break
    emit(
        {
            "done": True,
            "pairs": [[s, seen[s].hex()] for s in sorted(seen)],
            "signed": signed,
            "conflicts": conflicts,
            "decreases": decreases,
            "calls": calls,
            "timed_out": timed_out,
        }
    )


def serve(store: JournalStore) -> None:
    """The ``serve`` mode: answer commands from stdin until EOF or ``exit``."""
    emit({"ready": os.getpid()})
    for line in sys.stdin:
        cmd: Json = json.loads(line)
        op = cmd["op"]
        if op == "exit":
            return
        wait_until(cmd.get("at"))
        if op == "hammer":
            hammer(store, cmd)
        elif op == "seal_runs":
            seal_runs(store, cmd)
        elif op == "checkpoints":
            checkpoints(store, cmd)
        elif op == "acquire":
            try:
                lease = store.acquire(cmd["run"], cmd["owner"], cmd["ttl"])
            except TlogError as e:
                emit(error_line(e))
            else:
                emit({"lease": lease.epoch, "expires_at": lease.expires_at})
        elif op == "append":
            try:
                records = store.append(cmd["epoch"], batch_of(cmd["run"], cmd["records"]))
            except TlogError as e:
                emit(error_line(e))
            else:
                emit({"records": records_json(records)})
        else:
            emit({"error": "UnknownCommand", "message": op})


# --- writer mode -----------------------------------------------------------------------------


class Writer:
    """The crash-test writer (module docstring, mode ``writer``)."""

    def __init__(self, store: JournalStore, prefix: str, seed: int, ttl: int) -> None:
        self.store = store
        self.prefix = prefix
        self.rng = random.Random(seed)
        self.ttl = ttl
        self.owner = f"writer-{prefix}"
        self.next_run = 0
        self.counter = 0
        self.run: str | None = None
        self.epoch = 0
        self.seq = 0

    def begin(self, what: str, run: str | None = None) -> None:
        emit({"op": "begin", "what": what, "run": run})

    def take_run(self) -> None:
        """Take over the oldest abandoned run, else start a new one."""
        self.begin("abandoned")
        abandoned = self.store.abandoned_runs(1)
        takeover = bool(abandoned)
        if takeover:
            run = abandoned[0]
        else:
            run = f"{self.prefix}-{self.next_run}"
            self.next_run += 1
        self.begin("acquire", run)
        lease = self.store.acquire(run, self.owner, self.ttl)
        head = self.store.head(run)
        emit(
            {
                "op": "acquired",
                "run": run,
                "epoch": lease.epoch,
                "head": head.seq,
                "takeover": takeover,
            }
        )
        if self.store.sealed(run) is not None:
            # Killed between its seal and its release: nothing left to write.
            self.release(run, lease.epoch)
            return
        self.run, self.epoch, self.seq = run, lease.epoch, head.seq

    def release(self, run: str, epoch: int) -> None:
        self.begin("release", run)
        self.store.release(run, epoch)
        emit({"op": "released", "run": run})

    def append(self, batch: list[Append]) -> None:
        assert self.run is not None
        self.begin("append", self.run)
        records = self.store.append(self.epoch, batch)
        self.seq = records[-1].seq
        emit(
            {
                "op": "appended",
                "run": self.run,
                "epoch": self.epoch,
                "records": records_json(records),
            }
        )

    def random_batch(self, run: str) -> list[Append]:
        batch = []
        for _ in range(self.rng.randint(1, 20)):
            self.counter += 1
            data = {"n": self.counter, "pad": "x" * self.rng.randint(0, 40)}
            if self.rng.random() < 0.05:
                batch.append(
                    Append(
                        run,
                        "EffectStarted",
                        data=data,
                        effect_key=f"fx-{self.prefix}-{self.counter}",
                    )
                )
            else:
                batch.append(Append(run, "Note", data=data))
        return batch

    def seal(self) -> None:
        run = self.run
        assert run is not None
        self.append([Append(run, "RunConcluded", data={"outcome": "ok"})])
        self.begin("seal", run)
        seal = self.store.seal(run, self.epoch, "ok")
        emit({"op": "sealed", "run": run, "position": seal.position, "head": seal.head.hex()})
        self.run = None
        self.release(run, self.epoch)

    def checkpoint(self) -> None:
        self.begin("checkpoint")
        cp = checkpoint_of(self.store.sign_checkpoint())
        emit({"op": "checkpoint", "size": cp.size, "root": cp.root.hex()})

    def loop(self, max_seconds: float) -> None:
        deadline = time.monotonic() + max_seconds
        while time.monotonic() < deadline:
            if self.run is None:
                self.take_run()
                continue
            r = self.rng.random()
            if r < 0.25 and self.seq > 0:
                self.seal()
            elif r < 0.35:
                self.checkpoint()
            else:
                self.append(self.random_batch(self.run))


# --- embedder mode ---------------------------------------------------------------------------


def embedder(
    store: JournalStore, conninfo: str, prefix: str, seed: int, max_seconds: float
) -> None:
    """The ``embedder`` mode (module docstring): business rows and records in one transaction."""
    import psycopg  # only this mode needs the driver itself

    from store.atomic import require_atomic

    rng = random.Random(seed)
    journal_of = require_atomic(store)
    deadline = time.monotonic() + max_seconds
    with psycopg.connect(conninfo) as conn:
        journal = journal_of.join(conn)
        k = 0
        while time.monotonic() < deadline:
            run = f"{prefix}-{k % 20}"
            k += 1
            with conn.transaction():
                n = rng.randint(1, 5)
                recs = journal.append(1, [Append(run, "Ordered", data={"i": i}) for i in range(n)])
                for r in recs:
                    conn.execute("INSERT INTO orders VALUES (%s, %s)", (run, r.seq))
                seqs = [r.seq for r in recs]
                emit({"op": "appended", "run": run, "seqs": seqs})
                time.sleep(rng.random() * 0.01)  # the window between the append and COMMIT
            emit({"op": "committed", "run": run, "seqs": seqs})


# --- deliver mode ----------------------------------------------------------------------------


def deliver(store: JournalStore, batch: int, timeout: int, once: bool) -> None:
    """The ``deliver`` mode (module docstring): the outbox's worker, a line per request."""
    from store.deliver import Deliverer

    with Deliverer(store, batch=batch, timeout=timeout) as worker:
        # Names this process in every request, for the receiver of tests/store/test_outbox.py.
        worker._http.headers["X-Test-Worker"] = str(os.getpid())
        emit({"ready": os.getpid()})
        worker.run(
            once=once,
            poll=0.02,
            report=lambda a: emit(
                {
                    "op": "attempt",
                    "sub": a.subscription,
                    "run": a.run,
                    "first": a.first,
                    "last": a.last,
                    "error": a.error,
                    "acknowledged": a.acknowledged,
                }
            ),
        )
    emit({"done": True})


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("mode", choices=["serve", "writer", "embedder", "deliver"])
    p.add_argument("--batch", type=int, default=3)
    p.add_argument("--timeout", type=int, default=2)
    p.add_argument("--once", action="store_true")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--db")
    where.add_argument("--postgres")
    p.add_argument("--clock-file")
    p.add_argument("--key-file")
    p.add_argument("--prefix", default="w")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ttl", type=int, default=1)
    p.add_argument("--max-seconds", type=float, default=20.0)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    clock: Callable[[], int] | None = FileClock(args.clock_file) if args.clock_file else None
    key: SignerKey | None = None
    if args.key_file:
        with open(args.key_file, encoding="utf-8") as f:
            key = parse_signer_key(f.read())
    store = open_store(db=args.db, postgres=args.postgres, key=key, clock=clock)
    try:
        if args.mode == "serve":
            serve(store)
        elif args.mode == "deliver":
            deliver(store, args.batch, args.timeout, args.once)
        elif args.mode == "embedder":
            embedder(store, args.postgres, args.prefix, args.seed, args.max_seconds)
        else:
            Writer(store, args.prefix, args.seed, args.ttl).loop(args.max_seconds)
    except StoreError as e:  # pragma: no cover - reported to the test through stderr
        print(f"store_worker: {type(e).__name__}: {e}", file=sys.stderr)
        raise
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
