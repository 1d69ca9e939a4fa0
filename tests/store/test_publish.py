"""``tlog-store publish --witness``: a journal store gets its checkpoints cosigned by witnesses.

The store is a SQLite file in tmp_path driven through ``store.cli.main`` in-process; the
witnesses are real witness servers (witness/server.py over SQLite) on 127.0.0.1, in a
background event loop (tests/witness/test_client.py's :class:`ServerThread`).

Covered: two witnesses cosign and the kept note opens with the log key and both witness keys;
a second publish recovers through the 409 with a consistency proof; the same size twice; the
empty log; the quorum (every witness without a policy; a tlog-policy file) and exit 1 with the
note still kept; the alarm when a witness holds more than the log (a rollback); usage errors;
``publish FILE`` still merging a cosigned copy — and refusing (the store unchanged, its export
still valid) a cosignature that does not verify, a line of an undeclared key and a plain
Ed25519 line, which no export could carry. docs/embedder-guide.md §3 describes the command; the
protocol is C2SP tlog-witness (https://c2sp.org/tlog-witness).
"""

from __future__ import annotations

import base64
import io
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from store.api import Append
from store.open import open_store
from tests.clirunner import clean_env_fixture
from tests.servers import ServerThread
from tests.store.test_cli import ENV_VARS, ORIGIN, ok, run
from tests.witness.test_client import Witness, refused_url, start_witness
from tlog.checkpoint import Checkpoint
from tlog.cosignature import TYPE_COSIGNATURE_V1
from tlog.export import verify_export
from tlog.keys import cosigner_from_vkey, format_vkey, generate_key, parse_vkey
from tlog.note import Verifier, open_note, parse_note, sign_note

LOG_ORIGIN = f"{ORIGIN}/default"


_clean_env = clean_env_fixture(ENV_VARS)


@pytest.fixture
def servers() -> Iterator[ServerThread]:
    with ServerThread() as s:
        yield s


def one_error(err: str, status: int, code: int) -> str:
    assert code == status, (code, err)
    assert err.startswith("tlog-store: publish: ") and err.count("\n") == 1, err
    return err


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "journal.db")
    ok(["init", "--db", path, "--origin", ORIGIN])
    return path


def seal(db: str, *runs: str) -> int:
    """Seal one record per run; return the log size."""
    with open_store(db=db) as s:
        for r in runs:
            lease = s.acquire(r, "o", 60)
            s.append(lease.epoch, [Append(r, "Step", {"run": r})])
            s.seal(r, lease.epoch, "ok")
        return s.checkpoint().size


def log_verifier(db: str) -> Verifier:
    return parse_vkey(ok(["vkey", "--db", db]).decode().strip())


def witnesses(servers: ServerThread, tmp_path: Path, db: str, *names: str) -> list[Witness]:
    vkey = ok(["vkey", "--db", db]).decode().strip()
    return [start_witness(servers, tmp_path, n, [(LOG_ORIGIN, vkey)]) for n in names]


def flags(*ws: Witness | str) -> list[str]:
    """--witness URL=VKEY for each witness (or a ready 'URL=VKEY' string)."""
    out: list[str] = []
    for w in ws:
        out += ["--witness", w if isinstance(w, str) else f"{w.url}={w.vkey}"]
    return out


def split_output(out: bytes, n: int) -> tuple[list[str], bytes]:
    """The n witness summary lines and the note after them."""
    lines = out.split(b"\n", n)
    summaries = [line.decode() for line in lines[:n]]
    assert all(s.startswith("witness http://127.0.0.1:") for s in summaries), summaries
    return summaries, lines[n]


def opens_with(note: bytes, *verifiers: Verifier) -> None:
    for v in verifiers:
        assert len(open_note(note, [v]).sigs) == 1


def kept_notes(db: str) -> list[bytes]:
    with open_store(db=db) as s:
        return s.published()


def remembered(db: str) -> list[str]:
    with open_store(db=db) as s:
        return s.remembered_witness_keys()


def canonical(vkey: str) -> str:
    """A witness vkey as a store remembers it and an export declares it (0x04 or 0x06)."""
    return format_vkey(cosigner_from_vkey(vkey))


# --- publishing ----------------------------------------------------------------------------------


def test_publish_to_two_witnesses(servers: ServerThread, tmp_path: Path, db: str) -> None:
    size = seal(db, "a", "b", "c")
    w1, w2 = witnesses(servers, tmp_path, db, "w1.example", "w2.example")
    out = ok(["publish", "--db", db, *flags(w1, w2)])
    summaries, note = split_output(out, 2)
    assert summaries[0].startswith(f"witness {w1.url} cosigned: w1.example+")
    assert summaries[1].startswith(f"witness {w2.url} cosigned: w2.example+")
    # The kept note opens with the log key and both witness keys.
    opens_with(note, log_verifier(db), w1.signers[0].verifier(), w2.signers[0].verifier())
    assert Checkpoint.parse(parse_note(note)[0]).size == size == 3
    assert kept_notes(db) == [note]
    listed = ok(["published", "--db", db]).decode().split()
    assert listed[0] == "3" and len(listed) == 5  # size, root, log key, two witness keys
    # Each witness holds the checkpoint and serves it.
    for w in (w1, w2):
        latest = w.state.latest(LOG_ORIGIN)
        assert latest is not None and latest.size == 3
        assert w.requests == [200]


def test_publish_again_recovers_through_409(servers: ServerThread, tmp_path: Path, db: str) -> None:
    seal(db, "a", "b", "c")
    w1, w2 = witnesses(servers, tmp_path, db, "w1.example", "w2.example")
    first = split_output(ok(["publish", "--db", db, *flags(w1, w2)]), 2)[1]
    seal(db, "d", "e")
    # A new process knows nothing: 'old 0', 409 with 3, then the proof 3 -> 5.
    out = ok(["publish", "--db", db, *flags(w1, w2), "--timeout", "20"])
    note = split_output(out, 2)[1]
    assert Checkpoint.parse(parse_note(note)[0]).size == 5
    opens_with(note, log_verifier(db), w1.signers[0].verifier(), w2.signers[0].verifier())
    assert kept_notes(db) == [first, note]
    assert w1.requests == w2.requests == [200, 409, 200]
    assert "[witness size 5]" in out.decode()


def test_publish_same_size_twice_keeps_the_first_lines(
    servers: ServerThread, tmp_path: Path, db: str
) -> None:
    seal(db, "a")
    (w1,) = witnesses(servers, tmp_path, db, "w1.example")
    first = split_output(ok(["publish", "--db", db, *flags(w1)]), 1)[1]
    again = split_output(ok(["publish", "--db", db, *flags(w1)]), 1)[1]
    # The witness cosigned again (a fresh 200), but the kept note keeps its first line.
    assert w1.requests == [200, 409, 200]
    assert again == first
    assert kept_notes(db) == [first]


def test_publish_the_empty_log(servers: ServerThread, tmp_path: Path, db: str) -> None:
    (w1,) = witnesses(servers, tmp_path, db, "w1.example")
    note = split_output(ok(["publish", "--db", db, *flags(w1)]), 1)[1]
    assert Checkpoint.parse(parse_note(note)[0]).size == 0
    opens_with(note, log_verifier(db), w1.signers[0].verifier())


# --- quorum and alarms ---------------------------------------------------------------------------


def test_quorum_not_met_exit_1_note_kept(servers: ServerThread, tmp_path: Path, db: str) -> None:
    seal(db, "a", "b")
    (w1,) = witnesses(servers, tmp_path, db, "w1.example")
    other = generate_key("w2.example", TYPE_COSIGNATURE_V1)
    down = f"{refused_url()}={other.vkey()}"
    code, out, err = run(["publish", "--db", db, *flags(w1, down), "--timeout", "3"])
    one_error(err, 1, code)
    assert "1 of 2 witnesses cosigned; without a policy every witness is required" in err
    assert err.endswith("(the signed checkpoint is kept with 1 other signature)\n")
    summaries, note = split_output(out, 2)
    assert " cosigned: " in summaries[0]
    assert " unavailable: request failed" in summaries[1]
    opens_with(note, log_verifier(db), w1.signers[0].verifier())
    assert kept_notes(db) == [note]
    # The store remembers the witness whose cosignature it kept, not the one that was down.
    assert remembered(db) == [canonical(w1.vkey)]


def test_policy_quorum(servers: ServerThread, tmp_path: Path, db: str) -> None:
    seal(db, "a", "b")
    (w1,) = witnesses(servers, tmp_path, db, "w1.example")
    other = generate_key("w2.example", TYPE_COSIGNATURE_V1)
    policy = tmp_path / "log.policy"
    log_vkey = ok(["vkey", "--db", db]).decode().strip()
    policy.write_text(
        f"log {log_vkey}\n"
        f"witness w1 {w1.vkey}\n"
        f"witness w2 {other.vkey()}\n"
        "group any-of-them 1 w1 w2\n"
        "quorum any-of-them\n"
    )
    down = f"{refused_url()}={other.vkey()}"
    out = ok(["publish", "--db", db, *flags(w1, down), "--policy", str(policy), "--timeout", "3"])
    summaries, note = split_output(out, 2)
    assert " unavailable: " in summaries[1]
    opens_with(note, w1.signers[0].verifier())
    # A 2-of-2 policy is not met: exit 1, naming the group.
    policy.write_text(
        f"witness w1 {w1.vkey}\nwitness w2 {other.vkey()}\ngroup both all w1 w2\nquorum both\n"
    )
    code, _, err = run(["publish", "--db", db, *flags(w1, down), "--policy", str(policy)])
    one_error(err, 1, code)
    assert "quorum both not met: group both has 1 of 2" in err


def test_policy_naming_another_log_is_refused(
    servers: ServerThread, tmp_path: Path, db: str
) -> None:
    (w1,) = witnesses(servers, tmp_path, db, "w1.example")
    policy = tmp_path / "log.policy"
    policy.write_text(
        f"log {generate_key('example.com/other').vkey()}\nwitness w1 {w1.vkey}\nquorum w1\n"
    )
    code, _, err = run(["publish", "--db", db, *flags(w1), "--policy", str(policy)])
    one_error(err, 2, code)
    assert "the policy lists logs, but not this log's key" in err
    assert w1.requests == []
    policy.write_text("witness w1 bogus\n")
    code, _, err = run(["publish", "--db", db, *flags(w1), "--policy", str(policy)])
    one_error(err, 2, code)
    assert f"policy {policy}: line 1:" in err


def test_alarm_when_a_witness_holds_more_than_the_log(
    servers: ServerThread, tmp_path: Path, db: str
) -> None:
    # Store A publishes size 3. Store B has the same origin and key but only one run: a log
    # rolled back. Its witness holds 3 > 1: an alarm, exit 1, whatever the quorum says.
    seal(db, "a", "b", "c")
    w1, w2 = witnesses(servers, tmp_path, db, "w1.example", "w2.example")
    ok(["publish", "--db", db, *flags(w1)])
    rolled = str(tmp_path / "rolled-back.db")
    shutil.copy(db + ".key", rolled + ".key")
    ok(["init", "--db", rolled, "--origin", ORIGIN])
    seal(rolled, "a")
    code, out, err = run(["publish", "--db", rolled, *flags(w1, w2)])
    one_error(err, 1, code)
    assert "ALARM from " in err and "witness holds a larger tree than this log" in err
    summaries, note = split_output(out, 2)
    assert summaries[0].startswith(f"witness {w1.url} alarm: witness holds a larger tree")
    assert summaries[0].endswith("[witness size 3]")
    assert " cosigned: " in summaries[1]
    # The rolled-back store still kept its note with w2's cosignature.
    opens_with(note, w2.signers[0].verifier())
    assert kept_notes(rolled) == [note]


# --- usage ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["FILE", "--witness", "http://127.0.0.1:9=V"], "give FILE (a cosigned copy) or --witness"),
        (["--policy", "p"], "--policy goes with --witness"),
        (["--timeout", "5"], "--timeout goes with --witness"),
        (["--witness", "http://127.0.0.1:9"], "is not URL=VKEY"),
        (["--witness", "=V"], "is not URL=VKEY"),
        (["--witness", "http://127.0.0.1:9=not-a-vkey"], "--witness http://127.0.0.1:9: "),
        (["--witness", "ftp://x=V"], "not an http:// or https:// URL"),
        (["--witness", "http://127.0.0.1:9=V", "--timeout", "0"], "--timeout must be at least 1"),
        (["--witness", "http://127.0.0.1:9=V", "--timeout", "1.5"], "--timeout"),
        (["--witness", "http://127.0.0.1:9=V", "--policy", "/nonexistent"], "No such file"),
    ],
)
def test_usage_errors_exit_2(db: str, tmp_path: Path, extra: list[str], message: str) -> None:
    vkey = generate_key("w.example", TYPE_COSIGNATURE_V1).vkey()
    note = tmp_path / "note"
    note.write_bytes(b"x")
    argv = ["publish", "--db", db] + [
        a.replace("=V", "=" + vkey).replace("FILE", str(note)) for a in extra
    ]
    code, out, err = run(argv)
    one_error(err, 2, code)
    assert out == b""
    assert message in err, err


def test_publish_needs_the_log_key(servers: ServerThread, tmp_path: Path, db: str) -> None:
    (w1,) = witnesses(servers, tmp_path, db, "w1.example")
    Path(db + ".key").rename(tmp_path / "moved.key")
    code, _, err = run(["publish", "--db", db, *flags(w1)])
    one_error(err, 2, code)
    assert f"{db}.key" in err
    assert w1.requests == []
    ok(["publish", "--db", db, "--key", str(tmp_path / "moved.key"), *flags(w1)])


def test_publish_file_still_merges_a_cosigned_copy(db: str) -> None:
    seal(db, "a")
    note = ok(["checkpoint", "--db", db])
    key = generate_key("w9.example", TYPE_COSIGNATURE_V1)
    witness = key.signer()
    text, sigs = parse_note(note)
    cosigned = sign_note(text, [witness], sigs)
    assert ok(["publish", "--db", db, "--witness-key", key.vkey()], stdin=cosigned) == cosigned
    assert kept_notes(db) == [cosigned]


# --- the store remembers its witnesses: export and restore need no witness key ---------------


def test_publish_then_export_restore_export_needs_no_witness_key(
    servers: ServerThread, tmp_path: Path, db: str
) -> None:
    seal(db, "a", "b")
    w1, w2 = witnesses(servers, tmp_path, db, "w1.example", "w2.example")
    assert remembered(db) == []
    ok(["publish", "--db", db, *flags(w1, w2)])
    seal(db, "c")
    ok(["publish", "--db", db, *flags(w1)])  # w1 alone this time
    keys = sorted([canonical(w1.vkey), canonical(w2.vkey)])
    assert remembered(db) == keys
    data = ok(["export", "--db", db])  # no --witness-key: the store declares what it kept
    header = [x.decode() for x in data.split(b"\n") if x.startswith(b"witness-key ")]
    assert header == [f"witness-key {k}" for k in keys]
    summary = verify_export(io.BytesIO(data), log_key=log_verifier_vkey(db))
    assert summary.checkpoint_sizes == (2, 3)
    assert summary.cosignatures == {canonical(w1.vkey): 2, canonical(w2.vkey): 1}
    path = tmp_path / "journal.export"
    path.write_bytes(data)
    copy = str(tmp_path / "copy.db")
    ok(["restore", str(path), "--db", copy, "--key", db + ".key"])
    assert remembered(copy) == keys
    assert ok(["export", "--db", copy]) == data  # byte for byte, no flags on either side


# --- publish FILE keeps only what verifies and what an export can carry --------------------------


def _cosigned_copy(db: str, tmp_path: Path) -> tuple[bytes, bytes, str]:
    """(kept note, a copy cosigned by witness w9, the witness's 0x04 vkey)."""
    seal(db, "a", "b")
    note = ok(["checkpoint", "--db", db])
    key = generate_key("w9.example", TYPE_COSIGNATURE_V1, seed=bytes(range(32)))
    text, sigs = parse_note(note)
    return note, sign_note(text, [key.signer()], sigs), key.vkey()


def _export_verifies(db: str, vkey: str) -> None:
    data = ok(["export", "--db", db, "--witness-key", vkey])
    verify_export(io.BytesIO(data), log_key=log_verifier_vkey(db))


def log_verifier_vkey(db: str) -> str:
    return ok(["vkey", "--db", db]).decode().strip()


def test_publish_file_refuses_a_cosignature_that_does_not_verify(db: str, tmp_path: Path) -> None:
    note, cosigned, vkey = _cosigned_copy(db, tmp_path)
    line = cosigned[len(note) :]  # the witness's line
    b64 = line.split(b" ")[-1].rstrip(b"\n")
    raw = base64.b64decode(b64)
    for i in (4, 9, 20, len(raw) - 1):  # in the timestamp and in the signature
        flipped = base64.b64encode(raw[:i] + bytes([raw[i] ^ 1]) + raw[i + 1 :])
        code, out, err = run(
            ["publish", "--db", db, "--witness-key", vkey],
            stdin=cosigned.replace(b64, flipped),
        )
        one_error(err, 1, code)
        assert "invalid signature" in err and "w9.example" in err, err
        assert out == b""
        assert kept_notes(db) == [note]  # the store is unchanged
        assert remembered(db) == []  # and remembers no witness
        _export_verifies(db, vkey)  # and its export still verifies
    # The good copy is kept, and the export with it verifies.
    assert ok(["publish", "--db", db, "--witness-key", vkey], stdin=cosigned) == cosigned
    _export_verifies(db, vkey)


def test_publish_file_refuses_a_line_no_export_could_carry(db: str, tmp_path: Path) -> None:
    note, cosigned, vkey = _cosigned_copy(db, tmp_path)
    text, sigs = parse_note(note)
    # No --witness-key: the line is of an undeclared key; the error names the flag.
    code, _, err = run(["publish", "--db", db], stdin=cosigned)
    assert "--witness-key" in one_error(err, 2, code)
    # A plain Ed25519 (type 0x01) signature by the witness's key: refused even when its key
    # is declared (as 0x01 or as 0x04), since an export carries witness lines of 0x04 or 0x06.
    plain = generate_key("w9.example", seed=bytes(range(32)))
    plain_copy = sign_note(text, [plain.signer()], sigs)
    for declared in (vkey, plain.vkey()):
        code, _, err = run(["publish", "--db", db, "--witness-key", declared], stdin=plain_copy)
        assert "plain Ed25519 signature (type 0x01)" in one_error(err, 2, code)
    assert kept_notes(db) == [note]
    assert remembered(db) == []
    _export_verifies(db, vkey)
    # The keys may come from a file; --witness-key goes with FILE only.
    keys = tmp_path / "w.vkeys"
    keys.write_text(vkey + "\n")
    copy = tmp_path / "cosigned"
    copy.write_bytes(cosigned)
    assert ok(["publish", "--db", db, "--witness-keys", str(keys), str(copy)]) == cosigned
    code, _, err = run(["publish", "--db", db, "--witness-key", vkey, *flags("http://x=" + vkey)])
    assert "--witness-key and --witness-keys go with FILE" in one_error(err, 2, code)
