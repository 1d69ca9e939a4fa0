"""The tour run by ``make run``: a journal, sealed into a Merkle log, checkpointed, cosigned,
exported and verified offline — on the embedded default (SQLite), in a temporary directory.

1. a store is initialised with an Ed25519 log key (Go note key format);
2. five runs are journaled under leases, with an exactly-once effect and a fenced writer;
3. four of them are sealed into the tenant's RFC 6962 log;
4. the log signs a C2SP checkpoint, and a local witness (``tlog-witness serve`` on loopback)
   cosigns it (Ed25519 cosignature/v1);
5. a tlog-proof@v1 for one run is written and checked against a tlog-policy;
6. the journal is exported, the export verified offline, restored and exported again;
7. the inbox: a message that arrives before its wait and one that arrives after it each resume
   their run exactly once (a replayed message changes nothing), the resumption is journaled,
   and the sender's receipt is verified offline;
8. tampering is caught: one changed byte in the export, a changed record in the database.

Every step prints what it did; the tour exits 0 when every check came out as expected.
"""

from __future__ import annotations

import io
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from store import (
    Append,
    DuplicateEffectError,
    FencedError,
    export_store,
    init_store,
    make_event,
    make_wait,
    open_store,
    restore_store,
)
from tlog import merkle
from tlog.errors import TlogError
from tlog.export import verify_export
from tlog.keys import generate_key
from tlog.policy import Policy
from tlog.proof import TlogProof, verify_proof
from witness import WitnessClient, gather

ORIGIN = "example.com/tour"


def step(title: str) -> None:
    print(f"\n== {title}")


def show(label: str, value: object) -> None:
    print(f"   {label:<24} {value}")


def main() -> int:
    started = time.perf_counter()
    failures = 0
    with tempfile.TemporaryDirectory(prefix="tlog-tour-") as tmp:
        db = str(Path(tmp) / "journal.db")

        step("1. a journal store (SQLite, WAL, synchronous=FULL) and its log key")
        key = generate_key(ORIGIN)
        init_store(db=db, origin=ORIGIN, key=key)
        store = open_store(db=db, key=key)
        show("origin", store.origin)
        show("log vkey", store.log_vkey)

        step("2. five runs journaled under leases")
        for i in range(5):
            run = f"order-{i}"
            lease = store.acquire(run, owner="worker-1", ttl=60)
            store.append(
                lease.epoch,
                [
                    Append(run, "RunStarted", data={"order": i}),
                    Append(run, "EffectStarted", effect_key="charge", data={"cents": 100 * i}),
                    Append(run, "EffectDone", effect_key="charge"),
                ],
            )
            if i < 4:
                store.append(lease.epoch, [Append(run, "RunConcluded", data={"outcome": "ok"})])
            store.release(run, lease.epoch)
        show("records", sum(store.head(f"order-{i}").seq for i in range(5)))
        lease = store.acquire("order-4", owner="worker-2", ttl=60)
        try:
            store.append(lease.epoch, [Append("order-4", "EffectStarted", effect_key="charge")])
            failures += 1
            show("second charge", "NOT REFUSED")
        except DuplicateEffectError as e:
            show("second charge", f"refused: {e}")
        try:
            store.append(lease.epoch - 1, [Append("order-4", "Note")])
            failures += 1
            show("stale writer", "NOT FENCED")
        except FencedError as e:
            show("stale writer", f"fenced: {e}")

        step("3. four finished runs sealed into the log")
        for i in range(4):
            run = f"order-{i}"
            lease = store.acquire(run, owner="worker-1", ttl=60)
            seal = store.seal(run, lease.epoch, "ok")
            store.release(run, lease.epoch)
            show(run, f"position {seal.position}, head {seal.head.hex()[:16]}…")

        step("4. a signed checkpoint, cosigned by a witness on loopback (tlog-witness serve)")
        wdir = Path(tmp) / "witness"
        witness_vkey = _cli(
            "tlog-witness", "init", "--name", "witness.example/w1", "--dir", str(wdir)
        ).split()[0]
        config = ["--config", str(wdir / "witness.toml")]
        _cli("tlog-witness", "add-log", store.origin, "--key", store.log_vkey, *config)
        server = subprocess.Popen(
            [_tool("tlog-witness"), "serve", *config, "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            url = _listening(server)
            show("witness", f"{url}  {witness_vkey}")
            note = store.sign_checkpoint()
            size = store.checkpoint().size
            gathered = gather(
                note,
                [WitnessClient(url, [witness_vkey])],
                lambda old: store.consistency_proof(old, size),
                None,
                my_size=size,
                deadline=10,
            )
            note = store.add_cosignatures(gathered.note, witness_keys=[witness_vkey])
        finally:
            server.terminate()
            server.wait(10)
        show("cosigned", "yes" if gathered.quorum_met else "NO")
        failures += 0 if gathered.quorum_met else 1
        print("   " + note.decode().replace("\n", "\n   ").rstrip())

        step("5. a tlog-proof for one run, checked against a tlog-policy")
        policy = Policy.parse(
            f"log {store.log_vkey}\nwitness w1 {witness_vkey}\nquorum w1\n".encode()
        )
        inclusion = store.inclusion_proof("order-2")  # NotSealedError if it were not sealed
        proof = TlogProof(inclusion.index, inclusion.proof, note, extra=inclusion.head)
        data = proof.format()
        verified = verify_proof(
            TlogProof.parse(data),
            merkle.leaf_hash(inclusion.head),
            policy.log_verifiers,
            origin=store.origin,
            cosigners=policy.witness_verifiers,
        )
        result = policy.verify(proof.checkpoint)
        show("proof file", f"{len(data)} bytes, index {verified.index}")
        show("quorum", f"met by {', '.join(sorted(result.satisfied))}")

        step("6. export, offline verification, restore, export again")
        exported = io.BytesIO()
        export_store(store, exported, witness_keys=[witness_vkey])
        blob = exported.getvalue()
        summary = verify_export(io.BytesIO(blob), log_key=store.log_vkey)
        show("export", f"{len(blob)} bytes")
        show(
            "verified",
            f"{summary.runs} runs, {summary.records} records, "
            f"{summary.sealed_runs} sealed, {summary.checkpoints} checkpoint(s)",
        )
        show("log", f"size {summary.log_size}, root {summary.log_root.hex()[:16]}…")
        export_path = Path(tmp) / "journal.export"
        export_path.write_bytes(blob)
        policy_path = Path(tmp) / "policy.txt"
        policy_path.write_bytes(policy.format())
        print("   $ tlog-verify export journal.export --policy policy.txt")
        report = subprocess.run(
            [
                _tool("tlog-verify"),
                "export",
                str(export_path),
                "--policy",
                str(policy_path),
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        print("   " + report.stdout.replace("\n", "\n   ").rstrip())
        failures += 0 if report.returncode == 0 else 1
        db2 = str(Path(tmp) / "restored.db")
        init_store(db=db2, origin=ORIGIN, key=key)
        with open_store(db=db2, key=key) as restored:
            restore_store(restored, export_path)
            again = io.BytesIO()
            export_store(restored, again, witness_keys=[witness_vkey])
        same = again.getvalue() == blob
        failures += 0 if same else 1
        show("re-export", "byte-identical" if same else "DIFFERENT")

        step("7. the inbox: messages from outside resume waiting runs exactly once")
        failures += _inbox_tour(store, Path(tmp))

        step("8. tampering is caught")
        bad = bytearray(blob)
        bad[blob.index(b'"cents":200') + len(b'"cents":')] ^= 0x01  # 200 cents become 300
        try:
            verify_export(io.BytesIO(bytes(bad)), log_key=store.log_vkey)
            failures += 1
            show("one byte of the export", "NOT DETECTED")
        except TlogError as e:
            show("one byte of the export", f"refused: {e}")
        with sqlite3.connect(db) as conn:  # an operator edits a record behind the store's back
            conn.execute(
                "UPDATE journal SET raw = CAST(replace(CAST(raw AS TEXT), '\"cents\":100',"
                " '\"cents\":900') AS BLOB)"
                " WHERE run = 'order-1' AND seq = 2"
            )
        try:
            store.verify("order-1")
            failures += 1
            show("a record in the database", "NOT DETECTED")
        except TlogError as e:
            show("a record in the database", f"refused: {e}")
        store.close()

    print(f"\nTour finished in {time.perf_counter() - started:.2f} s.")
    return 1 if failures else 0


def _inbox_tour(store: Any, tmp: Path) -> int:
    """Step 7; returns the number of unexpected outcomes."""
    failures = 0
    box = store.inbox
    paid = make_event("shop", "pay-7", "PaymentConfirmed", [["order", "A-7"]], {"cents": 700})
    early = box.buffer(paid)  # before anybody waits: buffered, live
    show("pay-7 arrives first", f"position {early.position}, nobody waits yet")
    lease = store.acquire("ship-7", "worker-1", 60)
    got = box.wait(make_wait("ship-7", "payment", "PaymentConfirmed", [["order", "A-7"]]))
    failures += 0 if got is not None and got.event.id == "pay-7" else 1
    box.journal_delivery("ship-7", lease.epoch, "shop", "pay-7")
    box.unsubscribe("ship-7")
    show("ship-7 waits", "claims pay-7 from the buffer at once")

    lease8 = store.acquire("ship-8", "worker-1", 60)
    waiting = box.wait(make_wait("ship-8", "payment", "PaymentConfirmed", [["order", "A-8"]]))
    failures += 0 if waiting is None else 1
    late = make_event("shop", "pay-8", "PaymentConfirmed", [["order", "A-8"]], {"cents": 800})
    arrived = box.buffer(late)  # the waiter is found in the buffering transaction
    failures += 0 if arrived.matched is not None and arrived.matched.run == "ship-8" else 1
    show("ship-8 waits first", "registered; pay-8 then arrives and claims itself for ship-8")
    resumed = box.claim(make_wait("ship-8", "payment", "PaymentConfirmed", [["order", "A-8"]]))
    failures += 0 if resumed is not None and resumed.recovered else 1
    box.journal_delivery("ship-8", lease8.epoch, "shop", "pay-8")
    box.unsubscribe("ship-8")
    replay = box.buffer(late)
    failures += 0 if replay.duplicate and replay.matched is None else 1
    show("pay-8 sent again", "a duplicate: nothing changes")
    for run in ("ship-7", "ship-8"):
        delivered = [r for r in store.read(run) if b'"kind":"EventDelivered"' in r.raw]
        failures += 0 if len(delivered) == 1 else 1
        show(f"{run} journal", f"{len(delivered)} EventDelivered record (resumed once)")
    counts = box.counts()
    show("inbox", f"{counts.size} events, {counts.claimed} claimed, {counts.live} live")

    receipt = tmp / "pay-7.receipt"
    receipt.write_bytes(box.receipt("shop", "pay-7").format())
    event_file = tmp / "pay-7.json"
    event_file.write_text(json.dumps(paid.to_json()))
    print('   $ tlog-verify proof pay-7.receipt --log-vkey "$(tlog-store event vkey)" \\')
    print("         --event pay-7.json")
    report = subprocess.run(
        [
            _tool("tlog-verify"),
            "proof",
            str(receipt),
            "--log-vkey",
            box.log.log_vkey,
            "--event",
            str(event_file),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    print("   " + report.stdout.splitlines()[0] if report.stdout else report.stderr)
    failures += 0 if report.returncode == 0 else 1
    return failures


def _tool(name: str) -> str:
    """The console script next to this interpreter (the project's .venv)."""
    return str(Path(sys.executable).with_name(name))


def _cli(*argv: str) -> str:
    """Run one of the project's commands; return its standard output."""
    done = subprocess.run(
        [_tool(argv[0]), *argv[1:]], capture_output=True, text=True, check=False, timeout=60
    )
    if done.returncode != 0:
        raise SystemExit(f"tour: {' '.join(argv[:2])} failed: {done.stderr.strip()}")
    return done.stdout


def _listening(server: subprocess.Popen[str]) -> str:
    """Read the server's startup lines until it says where it listens."""
    assert server.stdout is not None
    for line in server.stdout:
        if line.startswith("listening on "):
            return line.split()[2]
    raise SystemExit("tour: the witness did not start")


if __name__ == "__main__":
    sys.exit(main())
