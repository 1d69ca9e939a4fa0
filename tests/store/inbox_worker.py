"""Worker processes for the inbox's fault and concurrency tests (tests/store/test_inbox_faults.py).

``sys.executable tests/store/inbox_worker.py (--db PATH | --postgres CONNINFO) --clock-file PATH
--key-file PATH`` starts a *zygote*: it imports everything once and then forks a child per
request, so that the many short-lived processes of the tests (a racer, or a writer that is
about to be SIGKILLed) do not each pay Python's start-up. The zygote opens no store and starts
no thread: each child opens its own store handle (its own database connection) after the fork.
It imports neither pytest nor anything of tests/ but :mod:`tests.store.worker`.

The zygote reads one JSON command per line from stdin and answers each with one line on stdout:

``{"op": "spawn", "mode": "race" | "crash", "out": PATH, "args": {…}}``
    fork a child running ``mode`` with ``args``, writing its lines to the file ``out``;
    answers ``{"pid": pid}``.
``{"op": "reap", "pid": pid}``
    wait for that child to end; answers ``{"pid": pid, "signal": n | null, "exit": n | null}``.

A child writes one JSON object per line to its ``out`` file, each with one ``os.write`` on an
``O_APPEND`` descriptor *after* the operation it reports returned, so a line reports a commit
and a SIGKILL never tears a line. Its first line is ``{"ready": time, "pid": os pid,
"backend": PostgreSQL backend pid | null}`` (the test waits for that backend to be gone before
it looks at the store after a kill: a COMMIT the killed child had sent may still land). A
transaction the engine re-runs after a retryable error (on PostgreSQL a deadlock) is reported
by a line ``{"retry": class, "message": text}`` (:func:`report_retries`).

Mode ``race`` (``args``: ``at``, a wall-clock start time shared by all racers, and ``ops``): at
``at``, run ``ops`` in order as fast as possible (an op with its own ``at`` waits for that
instant first); each op is one of

``{"t": "wait", "run", "effect", "kind", "keys", "via": "wait" | "claim"}``
    ``wait``: :meth:`Inbox.wait`; ``claim``: :meth:`Inbox.claim`, then, when nothing was
    claimed, :meth:`Inbox.wait`. A line ``{"t": "wait", "run", "effect", "via", "claimed":
    [source, id] | null, "recovered": bool, "by": "claim" | "wait" | null}``.
``{"t": "event", "source", "id", "kind", "keys", "payload", "via": "buffer" | "split"}``
    ``buffer``: :meth:`Inbox.buffer` with ``match=True``; ``split``: ``match=False``, then
    :meth:`Inbox.match`. A line ``{"t": "event", "source", "id", "via", "position",
    "duplicate", "matched": [run, effect] | null}``.
``{"t": "events", "events": [{source, id, kind, keys, payload}, …], "via": "batch"}``
    :meth:`Inbox.buffer_many` with ``match=True``: a line as above per event.

Each line also carries ``t0`` and ``t1``, the wall-clock times the op began and returned (the
test counts ops of different racers that overlapped).

then ``{"done": true}``. An error is a line ``{"error": class, "message": text, "op": op}``
(and the racer goes on).

Mode ``crash`` (``args``: ``prefix``, ``seed``, ``ttl``, ``max_seconds``): the crash writer
(:class:`InboxWriter`), which loops until killed. Before each operation it writes ``{"op":
"begin", "what": …, …}`` naming what it is about to do (so the test knows what a kill
interrupted, and which payloads it may have erased on purpose), after each one the
acknowledgement described at each method.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
import zlib
from collections.abc import Callable
from typing import Any

from store.api import Append, JournalStore
from store.errors import LeaseHeldError
from store.inbox import Wait, make_wait
from store.inbox.core import Inbox
from store.open import open_store
from store.sql import SQLStore
from tests.store.worker import FileClock, checkpoint_of, wait_until
from tlog.errors import TlogError
from tlog.inbox import KIND_EVENT_DELIVERED, delivery_of, make_event
from tlog.keys import parse_signer_key

Json = dict[str, Any]

WAITED_KIND = "paid"
"""The kind every crash writer's run waits for."""
OTHER_KIND = "note"
"""A kind nobody waits for: such events stay live until a sweep dead-letters them."""
KEY_POOL = [("order", v) for v in "ABCDEF"]
"""The correlation keys of the crash writer's events and waits (few, so they overlap)."""
SWEEP_AGE = 12
"""A crash writer sweeps events older than this many seconds of the shared clock."""


class Out:
    """A child's output file: one ``os.write`` per line, appended."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def emit(self, obj: Json) -> None:
        data = (json.dumps(obj, separators=(",", ":"), sort_keys=True) + "\n").encode()
        while data:
            n = os.write(self.fd, data)
            data = data[n:]


def inbox_of(store: JournalStore) -> Inbox:
    """The inbox of a SQL store's handle (every store these tests open is one)."""
    assert isinstance(store, SQLStore), type(store)
    return store.inbox


def backend_pid(store: JournalStore) -> int | None:
    """The PostgreSQL backend pid of ``store``'s connection (None on SQLite)."""
    if not store.is_shared():
        return None
    hooks: Any = store
    rows = hooks._execute_for_test("SELECT pg_backend_pid()")
    return int(rows[0][0])


def error_line(e: BaseException, **extra: Any) -> Json:
    return {"error": type(e).__name__, "message": str(e)[:500], **extra}


# --- race mode -----------------------------------------------------------------------------------


def race_wait(inbox: Inbox, op: Json) -> list[Json]:
    """A ``wait`` op of the race (module docstring)."""
    w = make_wait(op["run"], op["effect"], op["kind"], op["keys"])
    by = None
    got = None
    if op["via"] == "claim":
        got = inbox.claim(w)
        by = "claim" if got is not None else None
    if got is None:
        got = inbox.wait(w)
        by = "wait" if got is not None else None
    return [
        {
            "t": "wait",
            "run": op["run"],
            "effect": op["effect"],
            "via": op["via"],
            "claimed": None if got is None else [got.event.source, got.event.id],
            "recovered": False if got is None else got.recovered,
            "by": by,
        }
    ]


def race_events(inbox: Inbox, op: Json) -> list[Json]:
    """An ``event`` or ``events`` op of the race (module docstring)."""
    specs = op["events"] if op["t"] == "events" else [op]
    events = [make_event(x["source"], x["id"], x["kind"], x["keys"], x["payload"]) for x in specs]
    via = op["via"]
    if via == "batch":
        got = inbox.buffer_many(events, match=True)
    else:
        got = [inbox.buffer(events[0], match=via == "buffer")]
    out = []
    for e, b in zip(events, got, strict=True):
        matched = b.matched
        if via == "split" and not b.duplicate:
            matched = inbox.match(e.source, e.id)
        out.append(
            {
                "t": "event",
                "source": e.source,
                "id": e.id,
                "via": via,
                "position": b.position,
                "duplicate": b.duplicate,
                "matched": None if matched is None else [matched.run, matched.effect_key],
            }
        )
    return out


def race(store: JournalStore, out: Out, args: Json) -> None:
    """The ``race`` mode (module docstring)."""
    inbox = inbox_of(store)
    ops: list[Json] = args["ops"]
    wait_until(args["at"])
    for op in ops:
        wait_until(op.get("at"))
        t0 = time.time()
        try:
            lines = race_wait(inbox, op) if op["t"] == "wait" else race_events(inbox, op)
        except TlogError as e:
            out.emit(error_line(e, op=op))
            continue
        t1 = time.time()
        for x in lines:
            out.emit({**x, "t0": t0, "t1": t1})
    out.emit({"done": True})


# --- crash mode ----------------------------------------------------------------------------------


def wait_of(run: str) -> Wait:
    """The one wait of crash-writer run ``run``: effect ``fx-<run>``, kind :data:`WAITED_KIND`,
    1-3 keys of :data:`KEY_POOL` derived from the run's name (so whoever takes the run over
    waits for the same thing)."""
    rng = random.Random(zlib.crc32(run.encode()))
    keys = rng.sample(KEY_POOL, rng.randint(1, 3))
    return make_wait(run, f"fx-{run}", WAITED_KIND, keys)


def delivered_records(store: JournalStore, run: str) -> list[tuple[int, str, str]]:
    """(seq, source, id) of every ``EventDelivered`` record of ``run``."""
    out = []
    for r in store.read(run):
        body = r.body()
        if body.kind == KIND_EVENT_DELIVERED:
            source, id_, *_ = delivery_of(body.data)
            out.append((r.seq, source, id_))
    return out


class InboxWriter:
    """The crash writer. At random: start a run or take over an abandoned one (a killed
    writer's: its lease lapsed), buffer events (some duplicates; most claimed on arrival, some
    buffered unmatched and then matched), step a run (wait or claim; journal the delivery of
    the claimed event under the run's lease epoch; unsubscribe; conclude and release), sign an
    inbox checkpoint, erase a payload, sweep old unclaimed events.

    Acknowledgements (after the operation returned)::

        {"op": "acquired", "run", "epoch", "takeover"}
        {"op": "busy", "run"}               (another writer acquired the run first)
        {"op": "buffered", "source", "id", "position", "sha", "duplicate", "matched": run|null}
        {"op": "matched", "source", "id", "run": run|null}
        {"op": "claimed", "run", "event": [source, id]|null, "recovered", "via"}
        {"op": "delivered", "run", "source", "id", "seq"}
        {"op": "unsubscribed", "run", "waits", "shed"}
        {"op": "released", "run"}
        {"op": "checkpoint", "size", "root"}
        {"op": "erased", "source", "id", "existed"}
        {"op": "swept", "n"}
    """

    def __init__(self, store: JournalStore, out: Out, args: Json, clock: FileClock) -> None:
        self.store = store
        self.clock = clock
        self.inbox = inbox_of(store)
        self.out = out
        self.prefix: str = args["prefix"]
        self.rng = random.Random(args["seed"])
        self.ttl: int = args["ttl"]
        self.owner = f"writer-{self.prefix}"
        self.active: dict[str, int] = {}
        self.next_run = 0
        self.next_event = 0
        self.mine: list[tuple[str, str]] = []

    def linger(self) -> None:
        """Sometimes pause up to 2 ms between a commit and its acknowledgement: the window in
        which a kill leaves a write landed but unacknowledged, which is otherwise a few
        microseconds wide and rarely hit."""
        if self.rng.random() < 0.3:
            time.sleep(self.rng.uniform(0, 0.002))

    def begin(self, what: str, **fields: Any) -> None:
        self.out.emit({"op": "begin", "what": what, **fields})

    def take_run(self) -> None:
        self.begin("abandoned")
        abandoned = [r for r in self.store.abandoned_runs(10) if r not in self.active]
        takeover = bool(abandoned)
        if takeover:
            run = abandoned[0]
        else:
            run = f"{self.prefix}-r{self.next_run}"
            self.next_run += 1
        self.begin("acquire", run=run)
        try:
            lease = self.store.acquire(run, self.owner, self.ttl)
        except LeaseHeldError:
            # Another writer took it over first.
            self.out.emit({"op": "busy", "run": run})
            return
        self.active[run] = lease.epoch
        self.out.emit({"op": "acquired", "run": run, "epoch": lease.epoch, "takeover": takeover})

    def new_event(self) -> Any:
        self.next_event += 1
        source = self.rng.choice(["bank", "shop", "post"])
        kind = WAITED_KIND if self.rng.random() < 0.85 else OTHER_KIND
        keys = self.rng.sample(KEY_POOL, self.rng.randint(1, 3))
        payload = {"n": self.next_event, "w": self.prefix, "pad": "x" * self.rng.randint(0, 60)}
        return make_event(source, f"{self.prefix}-e{self.next_event}", kind, keys, payload)

    def buffer(self) -> None:
        if self.mine and self.rng.random() < 0.05:
            # A sender's retry of an event this writer buffered: a duplicate, nothing changes.
            source, id_ = self.rng.choice(self.mine)
            e = make_event(source, id_, OTHER_KIND, [("order", "A")], {"retry": True})
        else:
            e = self.new_event()
        split = self.rng.random() < 0.2
        self.begin("buffer", source=e.source, id=e.id, match=not split)
        b = self.inbox.buffer(e, match=not split)
        self.linger()
        self.mine.append((e.source, e.id))
        self.out.emit(
            {
                "op": "buffered",
                "source": e.source,
                "id": e.id,
                "position": b.position,
                "sha": e.payload_sha256.hex(),
                "duplicate": b.duplicate,
                "matched": None if b.matched is None else b.matched.run,
            }
        )
        if split and not b.duplicate and self.rng.random() < 0.8:
            self.begin("match", source=e.source, id=e.id)
            w = self.inbox.match(e.source, e.id)
            self.out.emit({"op": "matched", "source": e.source, "id": e.id, "run": w and w.run})

    def step(self, run: str) -> None:
        """One step of ``run``: the next thing it has to do, found from the store."""
        epoch = self.active[run]
        self.begin("read", run=run)
        if delivered_records(self.store, run):
            # Resumed already (by this writer or one that was killed): let go of the payload
            # and finish.
            self.begin("unsubscribe", run=run)
            waits, shed = self.inbox.unsubscribe(run)
            self.out.emit({"op": "unsubscribed", "run": run, "waits": waits, "shed": shed})
            self.begin("conclude", run=run)
            if not any(r.body().kind == "RunConcluded" for r in self.store.read(run)):
                self.store.append(epoch, [Append(run, "RunConcluded", data={"outcome": "ok"})])
            self.store.release(run, epoch)
            del self.active[run]
            self.out.emit({"op": "released", "run": run})
            return
        w = wait_of(run)
        via = "claim" if self.rng.random() < 0.25 else "wait"
        self.begin(via, run=run)
        got = self.inbox.claim(w) if via == "claim" else self.inbox.wait(w)
        self.out.emit(
            {
                "op": "claimed",
                "run": run,
                "event": None if got is None else [got.event.source, got.event.id],
                "recovered": got is not None and got.recovered,
                "via": via,
            }
        )
        if got is None:
            return
        self.begin("deliver", run=run, source=got.event.source, id=got.event.id)
        rec = self.inbox.journal_delivery(run, epoch, got.event.source, got.event.id)
        self.linger()
        self.out.emit(
            {
                "op": "delivered",
                "run": run,
                "source": got.event.source,
                "id": got.event.id,
                "seq": rec.seq,
            }
        )

    def sign(self) -> None:
        self.begin("sign")
        cp = checkpoint_of(self.inbox.sign_checkpoint())
        self.out.emit({"op": "checkpoint", "size": cp.size, "root": cp.root.hex()})

    def erase(self) -> None:
        size = self.inbox.checkpoint().size
        if size == 0:
            return
        page = self.inbox.events(self.rng.randrange(size) - 1, 1)
        if not page:
            return
        ev = page[0]
        self.begin("erase", source=ev.source, id=ev.id)
        existed = self.inbox.erase(ev.source, ev.id)
        self.out.emit({"op": "erased", "source": ev.source, "id": ev.id, "existed": existed})

    def sweep(self) -> None:
        self.begin("sweep")
        n = self.inbox.sweep(max(0, self.clock() - SWEEP_AGE), "expired")
        self.out.emit({"op": "swept", "n": n})

    def loop(self, max_seconds: float) -> None:
        deadline = time.monotonic() + max_seconds
        while time.monotonic() < deadline:
            r = self.rng.random()
            if r < 0.15 and len(self.active) < 2:
                self.take_run()
            elif r < 0.50:
                self.buffer()
            elif r < 0.85 and self.active:
                self.step(self.rng.choice(sorted(self.active)))
            elif r < 0.90:
                self.sign()
            elif r < 0.95:
                self.erase()
            elif r < 0.97:
                self.sweep()


# --- the zygote ----------------------------------------------------------------------------------


def report_retries(out: Out) -> None:
    """Make every transaction the engine re-runs after a retryable error (on PostgreSQL a
    deadlock or a serialization failure: :meth:`Dialect.retryable`) write a line ``{"retry":
    class, "message": text}``, so that the test sees them — a retry is invisible otherwise."""
    from store.db.engine import Dialect

    def noted(original: Callable[[Dialect, Exception], bool]) -> Callable[..., bool]:
        def retryable(self: Dialect, exc: Exception) -> bool:
            again = original(self, exc)
            if again:
                out.emit({"retry": type(exc).__name__, "message": str(exc)[:300]})
            return again

        return retryable

    for cls in Dialect.__subclasses__():
        if "retryable" in vars(cls):
            cls.retryable = noted(vars(cls)["retryable"])  # type: ignore[method-assign]


def child(opts: argparse.Namespace, mode: str, out_path: str, args: Json) -> None:
    """A forked child's life (never returns)."""
    status = 0
    try:
        out = Out(out_path)
        clock = FileClock(opts.clock_file)
        with open(opts.key_file, encoding="utf-8") as f:
            key = parse_signer_key(f.read())
        report_retries(out)
        store = open_store(db=opts.db, postgres=opts.postgres, key=key, clock=clock)
        out.emit({"ready": time.time(), "pid": os.getpid(), "backend": backend_pid(store)})
        try:
            if mode == "race":
                race(store, out, args)
            else:
                InboxWriter(store, out, args, clock).loop(args["max_seconds"])
        finally:
            store.close()
    except BaseException as e:  # the test reads this line; the zygote must not resume
        try:
            Out(out_path).emit(error_line(e, fatal=True))
        finally:
            status = 1
    finally:
        os._exit(status)


def zygote(opts: argparse.Namespace) -> None:
    def reply(obj: Json) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        cmd: Json = json.loads(line)
        if cmd["op"] == "spawn":
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                child(opts, cmd["mode"], cmd["out"], cmd["args"])
            reply({"pid": pid})
        elif cmd["op"] == "reap":
            _, status = os.waitpid(cmd["pid"], 0)
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
            reply({"pid": cmd["pid"], "signal": sig, "exit": code})
        else:
            reply({"error": "UnknownCommand"})


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="the inbox tests' zygote")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--db")
    where.add_argument("--postgres")
    p.add_argument("--clock-file", required=True)
    p.add_argument("--key-file", required=True)
    opts = p.parse_args(argv)
    if opts.postgres:
        import store.db.postgres  # noqa: F401 - once here, not in every child; report_retries
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the test ends it (EOF), not a Ctrl-C
    zygote(opts)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
