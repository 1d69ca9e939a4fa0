"""Tests for the ``tlog-store`` command (store.cli).

The main flows run the command as a real subprocess (``python -m store.cli``), as a user would,
on SQLite and once on PostgreSQL; the many error cases call :func:`store.cli.main` in-process,
with standard input and output swapped for byte buffers. Chain hashes and Merkle roots are
recomputed here with hashlib, so that the tests are an oracle for the command's output, and
every proof the command writes is verified with tlog.proof.verify_proof. The command is
described in docs/embedder-guide.md; its proofs are C2SP tlog-proof (https://c2sp.org/tlog-proof).
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import pytest

import store.cli
import store.cliparser
from store import errors
from store.cli import main
from store.export import RestoreError
from store.open import open_store
from tests import clirunner
from tests.oracles import b64, mth, sha
from tlog.checkpoint import Checkpoint, open_checkpoint
from tlog.cosignature import TYPE_COSIGNATURE_V1
from tlog.errors import MalformedError, ProofError, UsageError
from tlog.keys import generate_key, parse_signer_key, parse_vkey
from tlog.note import Ed25519Signer, Verifier, parse_note, sign_note
from tlog.proof import TlogProof, verify_proof

ORIGIN = "example.com/journal"
GENESIS = bytes(32)
ENV_VARS = ("TLOG_STORE_DB", "TLOG_STORE_POSTGRES", "TLOG_STORE_KEY")


class PostgresSchemaLike(Protocol):
    """What the ``pg_schema`` fixture of conftest.py gives: a connection string."""

    @property
    def conninfo(self) -> str: ...


# --- oracles ---------------------------------------------------------------------------------


def unb64(text: str | bytes) -> bytes:
    return base64.b64decode(text, validate=True)


def leaf(head: bytes) -> bytes:
    """RFC 6962 leaf hash of a sealed run's head, by the definition."""
    return sha(b"\x00" + head)


def check_chain(lines: Sequence[bytes], run: str) -> bytes:
    """Check 'SEQ HASH BODY' lines from ``read`` by recomputing every hash; return the head."""
    prev = GENESIS
    for i, line in enumerate(lines, 1):
        seq, h, raw = line.split(b" ", 2)
        assert int(seq) == i
        body = json.loads(raw)
        assert body["run"] == run and body["seq"] == i and body["v"] == 1
        # The body is canonical: sorted keys, no spaces.
        assert raw == json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        assert unb64(h) == sha(prev + raw)
        prev = unb64(h)
    return prev


# --- running the command ---------------------------------------------------------------------


_clean_env = clirunner.clean_env_fixture(ENV_VARS)
"""No TLOG_STORE_* variable from the caller's shell leaks into a test."""


def run(argv: Sequence[str], stdin: bytes = b"") -> clirunner.Result:
    """Call main(argv) in-process: (status, stdout bytes, stderr text)."""
    return clirunner.call_main(main, argv, stdin)


def ok(argv: Sequence[str], stdin: bytes = b"") -> bytes:
    return clirunner.expect_ok(run(argv, stdin))


def fails(argv: Sequence[str], status: int, stdin: bytes = b"") -> str:
    """Run; expect ``status``, one 'tlog-store: VERB: ' line on stderr, nothing on stdout."""
    result = run(argv, stdin)
    err = clirunner.one_error_line(result, status, "tlog-store: ")
    assert result.out == b""
    verb = next((a for a in argv if not a.startswith("-")), None)
    if verb in store.cli._VERBS:
        assert err.startswith(f"tlog-store: {verb}: "), err
    return err


def cli(
    *args: str, stdin: bytes = b"", cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m store.cli`` as a subprocess, without TLOG_STORE_* variables."""
    return clirunner.run_module(
        "store.cli", *args, stdin=stdin, cwd=cwd, env=clirunner.command_env(ENV_VARS)
    )


def cli_ok(*args: str, stdin: bytes = b"") -> bytes:
    proc = cli(*args, stdin=stdin)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stderr == b""
    return proc.stdout


def assert_one_error_line(proc: subprocess.CompletedProcess[bytes], status: int) -> str:
    return clirunner.assert_one_error_line(proc, status, "tlog-store: ")


def kv(out: bytes) -> dict[str, str]:
    """'key value' lines as a dict."""
    return dict(line.split(" ", 1) for line in out.decode().splitlines())


# --- the main flow, on either backend ----------------------------------------------------------


def full_flow(where: list[str], tmp_path: Path) -> tuple[Verifier, bytes]:
    """init → acquire → append (one, batch) → seal → checkpoint → prove → verify → export.

    ``where`` selects the store (``--db …`` or ``--postgres … --key …``). Returns the tenant
    log's verifier and the export's bytes.
    """
    vkey = cli_ok("init", *where, "--origin", ORIGIN).decode()
    assert vkey.endswith("\n") and vkey.count("\n") == 1
    log = parse_vkey(vkey[:-1])
    assert log.name == f"{ORIGIN}/default"
    # init is idempotent and vkey prints the same key again.
    assert cli_ok("init", *where, "--origin", ORIGIN).decode() == vkey
    assert cli_ok("vkey", *where).decode() == vkey

    epoch = cli_ok("acquire", "run-1", *where, "--owner", "worker-a", "--ttl", "60")
    assert epoch == b"1\n"
    one = cli_ok(
        "append", "run-1", *where, "--epoch", "1", "--kind", "Started",
        "--data", '{"b": [1, true, null], "a": "x"}', "--case", "case-7",
    )  # fmt: skip
    seq, h1 = one.decode().split()
    assert seq == "1"
    batch = (
        b'{"kind": "EffectStarted", "effect_key": "email:1", "data": {"to": "a@b"}}\n'
        b'{"kind": "RunConcluded", "data": {"outcome": "ok"}, "case": "case-7"}\n'
    )
    two = cli_ok("append", "run-1", *where, "--epoch", "1", "--batch", "-", stdin=batch)
    lines = two.decode().splitlines()
    assert [line.split()[0] for line in lines] == ["2", "3"]

    read = cli_ok("read", "run-1", *where).splitlines()
    head = check_chain(read, "run-1")
    assert unb64(h1) == sha(GENESIS + read[0].split(b" ", 2)[2])
    assert json.loads(read[0].split(b" ", 2)[2])["data"] == {"a": "x", "b": [1, True, None]}
    assert b64(head) == lines[1].split()[1]
    assert kv(cli_ok("head", "run-1", *where)) == {"seq": "3", "hash": b64(head)}

    # A fenced writer: a second owner takes the run after a release; epoch 1 is now stale.
    cli_ok("release", "run-1", *where, "--epoch", "1")
    assert cli_ok("acquire", "run-1", *where, "--owner", "worker-b", "--ttl", "60") == b"2\n"
    fenced = cli("append", "run-1", *where, "--epoch", "1", "--kind", "Late")
    assert "epoch 1 is fenced" in assert_one_error_line(fenced, 3)

    sealed = kv(cli_ok("seal", "run-1", *where, "--epoch", "2", "--outcome", "ok"))
    # The seal appends the seal record (naming the outcome); its hash is the sealed head.
    read = cli_ok("read", "run-1", *where).splitlines()
    assert len(read) == 4 and check_chain(read[:3], "run-1") == head
    assert json.loads(read[3].split(b" ", 2)[2]) == {
        "data": {"outcome": "ok"},
        "epoch": 2,
        "kind": "RunSealed",
        "run": "run-1",
        "seq": 4,
        "v": 1,
    }
    head = check_chain(read, "run-1")
    assert sealed == {"position": "0", "head": b64(head)}
    late = cli("append", "run-1", *where, "--epoch", "2", "--kind", "Late")
    assert_one_error_line(late, 3)
    assert cli_ok("verify", *where).decode() == f"ok run-1 records 4 head {b64(head)} sealed 0 ok\n"

    note = cli_ok("checkpoint", *where)
    cp = open_checkpoint(note, [log]).checkpoint
    assert (cp.origin, cp.size, cp.root) == (f"{ORIGIN}/default", 1, leaf(head))
    assert cli_ok("checkpoint", *where, "--unsigned") == cp.format()

    proof_path = tmp_path / "run-1.tlog-proof"
    assert cli_ok("prove", "run-1", *where, "--out", str(proof_path)) == b""
    proof = TlogProof.parse(proof_path.read_bytes())
    assert proof.extra == head and proof.index == 0
    assert proof.checkpoint == note  # the kept checkpoint covers position 0
    verified = verify_proof(proof, leaf(head), [log], origin=f"{ORIGIN}/default")
    assert verified.checkpoint.root == leaf(head)
    assert cli_ok("prove", "run-1", *where) == proof_path.read_bytes()

    # A second run, sealed after the last checkpoint: prove signs a new checkpoint (size 2).
    assert cli_ok("acquire", "run-2", *where, "--owner", "worker-a", "--ttl", "60") == b"1\n"
    cli_ok("append", "run-2", *where, "--epoch", "1", "--kind", "Started")
    seal2 = kv(cli_ok("seal", "run-2", *where, "--epoch", "1", "--outcome", "failed"))
    head2 = unb64(seal2["head"])
    proof2 = TlogProof.parse(cli_ok("prove", "run-2", *where))
    assert proof2.index == 1 and proof2.extra == head2
    v2 = verify_proof(proof2, leaf(head2), [log], origin=f"{ORIGIN}/default")
    assert v2.checkpoint.root == mth([leaf(head), leaf(head2)])
    published = cli_ok("published", *where).decode().splitlines()
    assert [p.split()[0] for p in published] == ["1", "2"]
    assert all(p.split()[2] == f"{log.name}+{log.key_id:08x}" for p in published)

    export_path = tmp_path / "journal.export"
    assert cli_ok("export", *where, "--out", str(export_path)) == b""
    exported = export_path.read_bytes()
    assert cli_ok("export", *where) == exported
    return log, exported


def restore_into_new_sqlite(tmp_path: Path, key: str, exported: bytes, log: Verifier) -> None:
    """Restore an export into a new SQLite store with the same key; re-export identically."""
    path = tmp_path / "journal.export"
    path.write_bytes(exported)
    copy = str(tmp_path / "copy.db")
    vkey = cli_ok("init", "--db", copy, "--key", key, "--origin", ORIGIN).decode()
    assert parse_vkey(vkey[:-1]).key_id == log.key_id
    cli_ok("restore", "--db", copy, "--key", key, str(path))
    assert cli_ok("export", "--db", copy) == exported
    out = cli_ok("verify", "--db", copy).decode().splitlines()
    assert [line.split()[1] for line in out] == ["run-1", "run-2"]
    # A restore needs an empty store.
    again = cli("restore", "--db", copy, "--key", key, str(path))
    assert again.returncode != 0
    assert "Traceback" not in again.stderr.decode()
    assert again.stderr.decode().count("\n") == 1


def test_flow_sqlite_subprocess(tmp_path: Path) -> None:
    db = str(tmp_path / "journal.db")
    log, exported = full_flow(["--db", db], tmp_path)
    key = db + ".key"  # the default key file, created by init
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    restore_into_new_sqlite(tmp_path, key, exported, log)


def test_flow_postgres_subprocess(tmp_path: Path, pg_schema: PostgresSchemaLike) -> None:
    key = str(tmp_path / "log.key")
    log, exported = full_flow(["--postgres", pg_schema.conninfo, "--key", key], tmp_path)
    # The export of the PostgreSQL store restores into SQLite and exports identically.
    restore_into_new_sqlite(tmp_path, key, exported, log)


def test_bad_json_subprocess_exit_2_one_line(tmp_path: Path) -> None:
    db = str(tmp_path / "j.db")
    cli_ok("init", "--db", db, "--origin", ORIGIN)
    proc = cli("append", "r", "--db", db, "--epoch", "1", "--kind", "K", "--data", "{bad")
    err = assert_one_error_line(proc, 2)
    assert err.startswith("tlog-store: append: --data: not JSON")
    proc = cli(
        "append", "r", "--db", db, "--epoch", "1", "--batch", "-", stdin=b'{"kind":"K"}\n[\n'
    )
    assert "line 2" in assert_one_error_line(proc, 2)


def test_broken_pipe_is_silent(tmp_path: Path) -> None:
    db = str(tmp_path / "j.db")
    ok(["init", "--db", db, "--origin", ORIGIN])
    ok(["acquire", "r", "--db", db, "--owner", "o", "--ttl", "60"])
    lines = b"".join(b'{"kind":"K","data":"%s"}\n' % (b"x" * 500) for _ in range(3000))
    ok(["append", "r", "--db", db, "--epoch", "1", "--batch", "-"], stdin=lines)
    proc = subprocess.Popen(
        [sys.executable, "-m", "store.cli", "read", "r", "--db", db],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 2
    assert err == b""


# --- in-process: a store per test ---------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> str:
    """An initialised SQLite store (key file at the default <db>.key)."""
    path = str(tmp_path / "j.db")
    ok(["init", "--db", path, "--origin", ORIGIN])
    return path


def acquire(db: str, run_id: str = "r", owner: str = "o") -> int:
    return int(ok(["acquire", run_id, "--db", db, "--owner", owner, "--ttl", "60"]))


def append(db: str, run_id: str, epoch: int, kind: str = "K", *extra: str) -> list[str]:
    out = ok(["append", run_id, "--db", db, "--epoch", str(epoch), "--kind", kind, *extra])
    return out.decode().splitlines()


def sealed_run(db: str, run_id: str = "r") -> bytes:
    """A run with two records, sealed (so three records: the seal record); returns its head."""
    e = acquire(db, run_id)
    append(db, run_id, e)
    append(db, run_id, e)
    out = kv(ok(["seal", run_id, "--db", db, "--epoch", str(e), "--outcome", "ok"]))
    return unb64(out["head"])


def log_verifier(db: str) -> Verifier:
    return parse_vkey(ok(["vkey", "--db", db]).decode().strip())


# --- help and usage ------------------------------------------------------------------------------


@pytest.mark.parametrize("verb", [[], *[[v] for v in store.cli._VERBS]])
def test_every_verb_help_exits_0(verb: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([*verb, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    examples = out.split("examples:")[1]
    assert "tlog-store " + (verb[0] if verb else "") in examples


def test_top_level_help_documents_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    section = out.split("exit status:")[1]
    for status in ("0  success", "1  verification", "2  unusable", "3  refused", "4  backend"):
        assert status in section
    assert "may or may not have been written" in section
    for var in ENV_VARS:
        assert var in out


def test_prove_help_explains_the_leaf(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["prove", "--help"])
    out = capsys.readouterr().out
    assert "SHA-256(0x00 || head)" in out
    assert "extra" in out


def test_top_level_help_subprocess() -> None:
    proc = cli("--help")
    assert proc.returncode == 0
    assert b"exit status:" in proc.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "required: VERB"),
        (["frobnicate"], "invalid choice"),
        (["head"], "required: RUN"),
        (["head", "r", "--bogus"], "unrecognized arguments"),
        (["head", "r", "--db", "a", "--postgres", "b"], "not allowed with argument"),
        (["append", "r", "--db", "x", "--epoch", "1"], "one of the arguments --kind --batch"),
        (["append", "r", "--epoch", "1", "--kind", "K", "--batch", "-"], "not allowed"),
        (["head", "r"], "no store given"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], message: str) -> None:
    err = fails(argv, 2)
    assert message in err


def test_argparse_error_points_at_help() -> None:
    err = fails(["seal", "r", "--db", "x"], 2)
    assert "(see 'tlog-store seal --help')" in err


def test_missing_sqlite_store_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    err = fails(["head", "r", "--db", str(path)], 2)
    assert "no store at" in err and "tlog-store init" in err
    assert not path.exists()


def test_mistakes_in_paths_name_the_path_given(tmp_path: Path) -> None:
    """A directory as the store, a missing key file, an --out in a missing directory or onto
    a directory: one line naming what the operator typed, exit 2 (not a backend failure, and
    not the temporary file the export writes first)."""
    db = str(tmp_path / "j.db")
    ok(["init", "--db", db, "--origin", "example.com/j"])
    assert fails(["vkey", "--db", str(tmp_path)], 2) == (
        f"tlog-store: vkey: {tmp_path} is a directory, not a store file\n"
    )
    missing = str(tmp_path / "nokey")
    assert fails(["checkpoint", "--db", db, "--key", missing], 2) == (
        f"tlog-store: checkpoint: no log key at {missing}: pass the store's key file with"
        " --key FILE (or TLOG_STORE_KEY)\n"
    )
    out = str(tmp_path / "nowhere" / "x.export")
    assert fails(["export", "--db", db, "--out", out], 2) == (
        f"tlog-store: export: {out}: No such file or directory\n"
    )
    assert fails(["export", "--db", db, "--out", str(tmp_path)], 2) == (
        f"tlog-store: export: {tmp_path}: Is a directory\n"
    )
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tlog-store-")]


def test_environment_selects_the_store(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TLOG_STORE_DB", db)
    assert kv(ok(["head", "r"]))["seq"] == "0"
    # A flag wins over the environment.
    other = str(tmp_path / "other.db")
    ok(["init", "--db", other, "--origin", "other.example"])
    assert ok(["vkey", "--db", other]).startswith(b"other.example/default+")
    assert ok(["vkey"]).startswith(f"{ORIGIN}/default+".encode())
    monkeypatch.setenv("TLOG_STORE_POSTGRES", "postgresql://nowhere/db")
    assert "both TLOG_STORE_DB and TLOG_STORE_POSTGRES" in fails(["head", "r"], 2)
    assert kv(ok(["head", "r", "--db", db]))["seq"] == "0"


def test_environment_key(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    moved = tmp_path / "elsewhere.key"
    os.rename(db + ".key", moved)
    assert f"no log key at {db}.key: pass" in fails(["checkpoint", "--db", db], 2)
    monkeypatch.setenv("TLOG_STORE_KEY", str(moved))
    assert parse_note(ok(["checkpoint", "--db", db]))[1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tenant", "Acme"], "tenant 'Acme'"),
        (["--tenant", ""], "tenant ''"),
        (["--tenant", "a\udcffb"], "--tenant is not valid UTF-8"),
    ],
)
def test_bad_tenant_exit_2(db: str, argv: list[str], message: str) -> None:
    assert message in fails(["head", "r", "--db", db, *argv], 2)


# --- init and keys -------------------------------------------------------------------------------


def test_init_creates_key_0600_and_never_overwrites(tmp_path: Path) -> None:
    path = str(tmp_path / "j.db")
    old = os.umask(0)
    try:
        info = json.loads(ok(["init", "--db", path, "--origin", ORIGIN, "--json"]))
    finally:
        os.umask(old)
    key_path = path + ".key"
    assert info["key"] == key_path and info["created"] is True
    assert stat.S_IMODE(os.stat(key_path).st_mode) == 0o600
    text = Path(key_path).read_text()
    key = parse_signer_key(text)
    assert key.name == ORIGIN and key.key_type == 1
    vkey = parse_vkey(info["vkey"])
    assert vkey.name == f"{ORIGIN}/default" and vkey.public_key == key.signer().public_key
    assert info["origin"] == f"{ORIGIN}/default"
    again = json.loads(ok(["init", "--db", path, "--origin", ORIGIN, "--json"]))
    assert again == info | {"created": False}
    assert Path(key_path).read_text() == text


def test_init_uses_an_existing_key(tmp_path: Path) -> None:
    key = generate_key("any-name")
    key_path = tmp_path / "given.key"
    key_path.write_text(key.format() + "\n")
    path = str(tmp_path / "j.db")
    out = ok(["init", "--db", path, "--key", str(key_path), "--origin", ORIGIN, "--tenant", "acme"])
    v = parse_vkey(out.decode().strip())
    assert v.name == f"{ORIGIN}/acme"
    assert v.public_key == key.signer().public_key
    assert not os.path.exists(path + ".key")


def test_tenants_have_their_own_log_names(db: str) -> None:
    a = parse_vkey(ok(["vkey", "--db", db, "--tenant", "a"]).decode().strip())
    b = parse_vkey(ok(["vkey", "--db", db, "--tenant", "b"]).decode().strip())
    assert (a.name, b.name) == (f"{ORIGIN}/a", f"{ORIGIN}/b")
    assert a.public_key == b.public_key and a.key_id != b.key_id


@pytest.mark.parametrize(
    ("key_text", "message"),
    [
        # A fixed seed: parameters must be identical in every xdist worker's collection.
        (
            generate_key("w", TYPE_COSIGNATURE_V1, seed=bytes(32)).format(),
            "not an Ed25519 (type 0x01) log key",
        ),
        ("PRIVATE+KEY+garbage", "signer key does not have the form"),
        ("", "signer key does not have the form"),
    ],
)
def test_init_refuses_unusable_key_files(tmp_path: Path, key_text: str, message: str) -> None:
    key_path = tmp_path / "k.key"
    key_path.write_text(key_text)
    path = tmp_path / "j.db"
    err = fails(["init", "--db", str(path), "--key", str(key_path), "--origin", ORIGIN], 2)
    assert message in err and str(key_path) in err
    assert not path.exists()


def test_init_refuses_a_key_file_that_is_not_utf8(tmp_path: Path) -> None:
    key_path = tmp_path / "k.key"
    key_path.write_bytes(b"\xff\xfe")
    err = fails(
        ["init", "--db", str(tmp_path / "j.db"), "--key", str(key_path), "--origin", "o"], 2
    )
    assert "is not UTF-8" in err


@pytest.mark.parametrize(
    ("origin", "message"),
    [("has space", "key name"), ("", "--origin is empty"), ("a\nb", "control character")],
)
def test_init_refuses_bad_origins(tmp_path: Path, origin: str, message: str) -> None:
    path = tmp_path / "j.db"
    assert message in fails(["init", "--db", str(path), "--origin", origin], 2)
    assert not path.exists()


def test_init_refuses_another_origin_or_key_and_leaves_no_new_key(db: str) -> None:
    assert "initialised with the origin" in fails(
        ["init", "--db", db, "--origin", "other.example"], 2
    )
    os.rename(db + ".key", db + ".old")
    # No key file: init makes one, the store refuses it, and the new key is taken back.
    assert "another log key" in fails(["init", "--db", db, "--origin", ORIGIN], 2)
    assert not os.path.exists(db + ".key")
    other = Path(db).parent / "other.key"
    other.write_text(generate_key("x").format())
    err = fails(["checkpoint", "--db", db, "--key", str(other)], 2)
    assert "not the key this store was initialised with" in err


def test_init_postgres_needs_a_key() -> None:
    err = fails(["init", "--postgres", "postgresql://nowhere/db", "--origin", ORIGIN], 2)
    assert "--key FILE" in err


def test_init_unwritable_key_directory(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    err = fails(
        ["init", "--db", str(tmp_path / "j.db"), "--key", str(missing / "k"), "--origin", "o"], 2
    )
    assert "No such file or directory" in err


def test_checkpoint_without_key_file_exit_2(db: str) -> None:
    os.unlink(db + ".key")
    err = fails(["checkpoint", "--db", db], 2)
    assert f"{db}.key" in err
    assert ok(["checkpoint", "--db", db, "--unsigned"]).startswith(
        f"{ORIGIN}/default\n0\n".encode()
    )


# --- leases --------------------------------------------------------------------------------------


def test_lease_verbs(db: str) -> None:
    assert acquire(db) == 1
    err = fails(["acquire", "r", "--db", db, "--owner", "o", "--ttl", "60"], 3)
    assert "leased to 'o' at epoch 1" in err
    lease = json.loads(
        ok(["renew", "r", "--db", db, "--owner", "o", "--epoch", "1", "--ttl", "90", "--json"])
    )
    assert lease["run"] == "r" and lease["owner"] == "o" and lease["epoch"] == 1
    assert isinstance(lease["expires_at"], int)
    assert ok(["renew", "r", "--db", db, "--owner", "o", "--epoch", "1", "--ttl", "9"]) == b"1\n"
    fails(["renew", "r", "--db", db, "--owner", "other", "--epoch", "1", "--ttl", "9"], 3)
    fails(["renew", "r", "--db", db, "--owner", "o", "--epoch", "2", "--ttl", "9"], 3)
    assert ok(["release", "r", "--db", db, "--epoch", "1"]) == b""
    assert ok(["release", "r", "--db", db, "--epoch", "1"]) == b""  # idempotent
    fails(["renew", "r", "--db", db, "--owner", "o", "--epoch", "1", "--ttl", "9"], 3)
    got = json.loads(ok(["acquire", "r", "--db", db, "--owner", "p", "--ttl", "5", "--json"]))
    assert got["epoch"] == 2 and got["owner"] == "p"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["acquire", "r", "--owner", "o", "--ttl", "0"], "--ttl must be at least 1"),
        (["acquire", "r", "--owner", "o", "--ttl", "07"], "--ttl"),
        (["acquire", "r", "--owner", "o", "--ttl", "1.5"], "--ttl"),
        (["acquire", "r", "--owner", "o", "--ttl", "-1"], "--ttl"),
        (["acquire", "r", "--owner", "o", "--ttl", "١"], "--ttl"),
        (["acquire", "r", "--owner", "", "--ttl", "5"], "--owner is empty"),
        (["acquire", "r", "--owner", "a\tb", "--ttl", "5"], "--owner contains a control"),
        (["acquire", "r", "--owner", "\udcff", "--ttl", "5"], "--owner is not valid UTF-8"),
        (["acquire", "bad run", "--owner", "o", "--ttl", "5"], "run ID 'bad run'"),
        (["acquire", "-r", "--owner", "o", "--ttl", "5"], "required: RUN"),
        (
            ["renew", "r", "--owner", "o", "--epoch", "0", "--ttl", "5"],
            "--epoch must be at least 1",
        ),
        (["release", "r", "--epoch", "x"], "--epoch"),
        (["seal", "r", "--epoch", "1", "--outcome", ""], "--outcome: outcome ''"),
        (["seal", "r", "--epoch", "1", "--outcome", "has space"], "--outcome: outcome 'has"),
        (["seal", "r", "--epoch", "1", "--outcome", "échec"], "--outcome: outcome"),
        (["seal", "r", "--epoch", "1", "--outcome", "o" * 65], "--outcome: outcome"),
        (["read", "r", "--from", "0"], "--from must be at least 1"),
        (["read", "r", "--from", "9223372036854775808"], "--from"),
    ],
)
def test_bad_arguments_exit_2(db: str, argv: list[str], message: str) -> None:
    assert message in fails([*argv, "--db", db], 2)


# --- append --------------------------------------------------------------------------------------


def test_append_one_record_with_every_field(db: str) -> None:
    e = acquire(db)
    out = json.loads(
        ok(
            [
                "append", "r", "--db", db, "--epoch", str(e), "--kind", "EffectStarted",
                "--data", ' {"z": -9007199254740991, "a": "é\\n"} ', "--case", "c-1",
                "--effect-key", "mail: to=x",
                "--json",
            ]
        )
    )  # fmt: skip
    assert out["run"] == "r" and [r["seq"] for r in out["records"]] == [1]
    (line,) = ok(["read", "r", "--db", db]).splitlines()
    raw = line.split(b" ", 2)[2]
    assert (
        raw
        == (
            '{"case":"c-1","data":{"a":"é\\n","z":-9007199254740991},"effect_key":"mail: to=x",'
            '"epoch":1,"kind":"EffectStarted","run":"r","seq":1,"v":1}'
        ).encode()
    )
    assert unb64(out["records"][0]["hash"]) == sha(GENESIS + raw)


def test_append_without_data_has_no_data_field(db: str) -> None:
    e = acquire(db)
    append(db, "r", e, "Bare")
    # Optional fields are absent, never null: --data null is refused, nothing is written.
    assert "record data is null" in fails(
        ["append", "r", "--db", db, "--epoch", str(e), "--kind", "Null", "--data", "null"], 2
    )
    append(db, "r", e, "Nulls", "--data", "[null]")
    bodies = [
        json.loads(line.split(b" ", 2)[2]) for line in ok(["read", "r", "--db", db]).splitlines()
    ]
    assert "data" not in bodies[0]
    assert len(bodies) == 2 and bodies[1]["data"] == [None]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{bad", "--data: not JSON"),
        ("", "--data: not JSON"),
        ('{"a": 1.5}', "not an integer"),
        ("1e3", "not an integer"),
        ('{"a": NaN}', "JSON constant NaN is not allowed"),
        ("Infinity", "JSON constant Infinity is not allowed"),
        ('{"a": 1, "a": 2}', "repeats the key 'a'"),
        ("9007199254740992", "beyond"),
        ('"\\ud800"', "lone surrogate"),
        ("[" * 100 + "]" * 100, "nests deeper"),
        ('{"a": 1} x', "Extra data"),
        ("\udcff", "--data is not valid UTF-8"),
    ],
)
def test_append_bad_data_exit_2(db: str, data: str, message: str) -> None:
    e = acquire(db)
    err = fails(["append", "r", "--db", db, "--epoch", str(e), "--kind", "K", "--data", data], 2)
    assert message in err
    assert kv(ok(["head", "r", "--db", db]))["seq"] == "0"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kind", "1x"], "record kind '1x'"),
        (["--kind", "K", "--case", "bad case"], "case ID 'bad case'"),
        (["--kind", "K", "--effect-key", ""], "effect key must be"),
        (["--kind", "K", "--effect-key", "a\x01"], "effect key must be"),
        (["--kind", "K", "--effect-key", "\udcff"], "lone surrogate"),
        (["--batch", "-", "--data", "1"], "--data goes with --kind"),
        (["--batch", "-", "--case", "c"], "--case goes with --kind"),
        (["--batch", "-", "--effect-key", "k"], "--effect-key goes with --kind"),
        (["--batch", "/no/such/batch"], "/no/such/batch: No such file"),
    ],
)
def test_append_bad_fields_exit_2(db: str, argv: list[str], message: str) -> None:
    assert message in fails(["append", "r", "--db", db, "--epoch", "1", *argv], 2)


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        (b"", "batch stdin holds no records"),
        (b'{"kind":"K"}', "batch stdin does not end in a newline"),
        (b'{"kind":"K"}\n\n{"kind":"K"}\n', "batch stdin line 2 is empty"),
        (b'{"kind":"K"}\r\n', "line 1 contains a carriage return"),
        (b'{"kind":"K"}\n{"kind":"K","extra":1}\n', "line 2 has unknown key 'extra'"),
        (b'{"kind":"K","run":"other"}\n', "line 1 has unknown key 'run'"),
        (b'{"data":1}\n', "line 1 has no 'kind'"),
        (b'{"kind":7}\n', "line 1: 'kind' is not a string"),
        (b'{"kind":"K","case":null}\n', "line 1: 'case' is not a string"),
        (b'{"kind":"K","effect_key":5}\n', "line 1: 'effect_key' is not a string"),
        (b'{"kind":"K","case":"a b"}\n', "line 1: case ID 'a b'"),
        (b'{"kind":"K"}\n["kind"]\n', "line 2 is not a JSON object"),
        (b'{"kind":"K"}\n{"kind":"K","data":0.5}\n', "line 2: JSON number 0.5 is not an integer"),
        (b'{"kind":"K","kind":"L"}\n', "line 1: JSON object repeats the key 'kind'"),
        (b'{"kind":"K"}\n{"kind":"\xff"}\n', "line 2 is not valid UTF-8"),
        (b'{"kind":"K","data":[9007199254740992]}\n', "line 1: value holds an integer beyond"),
    ],
)
def test_append_bad_batch_exit_2(db: str, batch: bytes, message: str) -> None:
    e = acquire(db)
    err = fails(["append", "r", "--db", db, "--epoch", str(e), "--batch", "-"], 2, stdin=batch)
    assert message in err
    assert kv(ok(["head", "r", "--db", db]))["seq"] == "0"


def test_append_batch_from_file(db: str, tmp_path: Path) -> None:
    e = acquire(db)
    path = tmp_path / "batch.jsonl"
    path.write_bytes(b"".join(b'{"kind":"Step","data":%d}\n' % i for i in range(50)))
    out = ok(["append", "r", "--db", db, "--epoch", str(e), "--batch", str(path)]).splitlines()
    assert [int(line.split()[0]) for line in out] == list(range(1, 51))
    head = check_chain(ok(["read", "r", "--db", db]).splitlines(), "r")
    assert out[-1].split()[1] == b64(head).encode()


def test_append_refusals_exit_3(db: str) -> None:
    e = acquire(db)
    append(db, "r", e, "EffectStarted", "--effect-key", "k1")
    err = fails(
        [
            "append",
            "r",
            "--db",
            db,
            "--epoch",
            str(e),
            "--kind",
            "EffectStarted",
            "--effect-key",
            "k1",
        ],
        3,
    )
    assert "effect 'k1' has already started" in err
    # A batch is atomic: its first line is fine, its second is a duplicate effect.
    batch = b'{"kind":"Fine"}\n{"kind":"EffectStarted","effect_key":"k1"}\n'
    fails(["append", "r", "--db", db, "--epoch", str(e), "--batch", "-"], 3, stdin=batch)
    assert kv(ok(["head", "r", "--db", db]))["seq"] == "1"
    # Stale and future epochs are both fenced.
    fails(["append", "r", "--db", db, "--epoch", str(e + 1), "--kind", "K"], 3)
    ok(["seal", "r", "--db", db, "--epoch", str(e), "--outcome", "ok"])
    assert "is sealed" in fails(["append", "r", "--db", db, "--epoch", str(e), "--kind", "K"], 3)


def test_fencing_is_for_leased_runs_as_the_help_says(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for verb in ("append", "seal"):
        with pytest.raises(SystemExit):
            main([verb, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--epoch E the run's lease epoch, when it has a lease (a run never leased" in text
        if verb == "append":
            assert (
                "When RUN has a lease (live, lapsed or released: the store keeps its epoch), EPOCH"
                " must equal its epoch, else exit 3 (fenced). A run never leased is not fenced: it"
                " takes any epoch, even one below its last record's"
            ) in text
    # A run never leased: any epoch, going backwards too, for append and seal.
    append(db, "free", 5)
    append(db, "free", 2)
    ok(["seal", "free", "--db", db, "--epoch", "1", "--outcome", "ok"])
    lines = ok(["read", "free", "--db", db]).splitlines()
    assert [json.loads(line.split(b" ", 2)[2])["epoch"] for line in lines] == [5, 2, 1]
    # A leased run: exactly its epoch, while live and after a release.
    e = acquire(db, "held")
    for step in ("live", "released"):
        if step == "released":
            ok(["release", "held", "--db", db, "--epoch", str(e)])
        for wrong in (e + 1, e + 7):
            err = fails(["append", "held", "--db", db, "--epoch", str(wrong), "--kind", "K"], 3)
            assert f"epoch {wrong} is fenced, the lease epoch is {e}" in err
            seal = ["seal", "held", "--db", db, "--epoch", str(wrong), "--outcome", "ok"]
            assert "is fenced" in fails(seal, 3)
        append(db, "held", e)


# --- seal, head, read, verify --------------------------------------------------------------------


def test_seal_is_first_wins_and_json(db: str) -> None:
    head = sealed_run(db)
    again = json.loads(ok(["seal", "r", "--db", db, "--epoch", "1", "--outcome", "ok", "--json"]))
    want = {"run": "r", "position": 0, "head": b64(head), "outcome": "ok", "already": True}
    assert again == want
    assert kv(ok(["seal", "r", "--db", db, "--epoch", "1", "--outcome", "ok"])) == {
        "position": "0",
        "head": b64(head),
    }
    err = fails(["seal", "r", "--db", db, "--epoch", "1", "--outcome", "other"], 3)
    assert "run r is sealed (ok); the first seal stands, it cannot be sealed again as other" in err
    e = acquire(db, "s")
    append(db, "s", e)
    first = ["seal", "s", "--db", db, "--epoch", str(e), "--outcome", "ok", "--json"]
    sealed = json.loads(ok(first))
    assert sealed["already"] is False and sealed["position"] == 1


def test_head_of_an_unwritten_run(db: str) -> None:
    assert kv(ok(["head", "nothing", "--db", db])) == {"seq": "0", "hash": b64(GENESIS)}
    assert json.loads(ok(["head", "nothing", "--db", db, "--json"]))["seq"] == 0


def test_read_pages_from_and_json(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store.cli, "READ_PAGE", 3)  # several pages, one short last page
    e = acquire(db)
    batch = b"".join(b'{"kind":"K","data":%d}\n' % i for i in range(10))
    ok(["append", "r", "--db", db, "--epoch", str(e), "--batch", "-"], stdin=batch)
    lines = ok(["read", "r", "--db", db]).splitlines()
    assert len(lines) == 10
    check_chain(lines, "r")
    assert ok(["read", "r", "--db", db, "--from", "4"]).splitlines() == lines[3:]
    assert ok(["read", "r", "--db", db, "--from", "11"]) == b""
    records = [
        json.loads(x) for x in ok(["read", "r", "--db", db, "--json", "--from", "9"]).splitlines()
    ]
    assert [r["seq"] for r in records] == [9, 10]
    assert records[1]["prev_hash"] == records[0]["hash"]
    assert records[1]["raw"].encode() == lines[9].split(b" ", 2)[2]
    assert "signature" not in records[0]
    assert ok(["read", "other", "--db", db]) == b""


def test_verify_every_run_and_named_runs(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store.cli, "READ_PAGE", 2)
    heads = [sealed_run(db, f"r{i}") for i in range(3)]
    e = acquire(db, "s-open")
    append(db, "s-open", e)
    out = ok(["verify", "--db", db]).decode().splitlines()  # every run, by run ID
    assert out[:3] == [
        f"ok r{i} records 3 head {b64(h)} sealed {i} ok" for i, h in enumerate(heads)
    ]
    assert len(out) == 4 and out[3].startswith("ok s-open records 1 head ")
    assert out[3].split()[-1] == b64(
        check_chain(ok(["read", "s-open", "--db", db]).splitlines(), "s-open")
    )
    got = json.loads(ok(["verify", "r1", "s-open", "--db", db, "--json"]))
    assert got["size"] == 3 and got["origin"] == f"{ORIGIN}/default"
    assert got["runs"][0] == {
        "run": "r1",
        "records": 3,
        "head": b64(heads[1]),
        "sealed": {"position": 1, "outcome": "ok"},
    }
    assert got["runs"][1]["sealed"] is None
    assert "run nothing has no records" in fails(["verify", "nothing", "--db", db], 2)


class _StaleFirstCheckpoint:
    """A store whose first checkpoint() answer is the empty log: as if every seal came later."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.stale = True

    def checkpoint(self) -> Checkpoint:
        cp: Checkpoint = self.inner.checkpoint()
        if self.stale:
            self.stale = False
            return Checkpoint(cp.origin, 0, sha(b""))
        return cp

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __enter__(self) -> _StaleFirstCheckpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.close()


def test_verify_proves_runs_sealed_after_its_first_checkpoint(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = sealed_run(db)
    monkeypatch.setattr(
        store.cliparser, "open_store", lambda **kw: _StaleFirstCheckpoint(open_store(**kw))
    )
    assert ok(["verify", "--db", db]).decode() == f"ok r records 3 head {b64(head)} sealed 0 ok\n"


def tamper(db: str, old: bytes, new: bytes) -> int:
    """Replace ``old`` by ``new`` in every stored value of the SQLite file that holds it."""
    changed = 0
    with sqlite3.connect(db) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
            for col in cols:
                for value in (old, old.decode()):
                    cur = conn.execute(
                        f'UPDATE "{table}" SET "{col}" = ? WHERE "{col}" = ?',
                        (new if isinstance(value, bytes) else new.decode(), value),
                    )
                    changed += cur.rowcount
    return changed


def test_tampered_record_exits_1(db: str) -> None:
    e = acquire(db)
    append(db, "r", e, "K", "--data", '"secret-1"')
    append(db, "r", e, "K", "--data", '"secret-2"')
    raw = ok(["read", "r", "--db", db]).splitlines()[1].split(b" ", 2)[2]
    assert tamper(db, raw, raw.replace(b"secret-2", b"secret-3")) >= 1
    err = fails(["verify", "r", "--db", db], 1)
    assert "corrupt" in err and "record 2" in err
    fails(["read", "r", "--db", db, "--from", "2"], 1)


def test_read_checks_links_across_pages(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store.cli, "READ_PAGE", 2)
    e = acquire(db)
    for i in range(4):
        append(db, "r", e, "K", "--data", str(i))
    # Relink record 3 (the first of the second page) to a fabricated predecessor and give it
    # the hash that covers its body after that: each record is self-consistent, the chain is
    # broken. (This reaches into the SQL backends' journal table: see store/sql.py.)
    with sqlite3.connect(db) as conn:
        (raw,) = conn.execute("SELECT raw FROM journal WHERE run = 'r' AND seq = 3").fetchone()
        fake = sha(b"another past")
        conn.execute(
            "UPDATE journal SET prev_hash = ?, hash = ? WHERE run = 'r' AND seq = 3",
            (fake, sha(fake + bytes(raw))),
        )
    # read streams: the first page is out before the break is found.
    code, out, err = run(["read", "r", "--db", db])
    assert code == 1 and err.count("\n") == 1
    assert "run r record 3: does not link" in err
    assert [line.split()[0] for line in out.splitlines()] == [b"1", b"2"]
    assert "record 3" in fails(["verify", "r", "--db", db], 1)
    # From record 3 on, the first link is taken on trust; record 4 then no longer links.
    assert "record 4: does not link" in fails(["read", "r", "--db", db, "--from", "3"], 1)


def test_prove_unsealed_run_exit_1(db: str) -> None:
    e = acquire(db)
    append(db, "r", e)
    assert "run r is not sealed" in fails(["prove", "r", "--db", db], 1)
    assert "run nothing is not sealed" in fails(["prove", "nothing", "--db", db], 1)


# --- checkpoints and proofs ----------------------------------------------------------------------


def test_checkpoint_json_and_empty_log(db: str) -> None:
    got = json.loads(ok(["checkpoint", "--db", db, "--json"]))
    assert (got["origin"], got["size"], got["root"]) == (f"{ORIGIN}/default", 0, b64(sha(b"")))
    open_checkpoint(got["note"].encode(), [log_verifier(db)])
    unsigned = json.loads(ok(["checkpoint", "--db", db, "--unsigned", "--json"]))
    assert unsigned == {k: got[k] for k in ("origin", "size", "root")}


def test_prove_uses_the_newest_covering_checkpoint_with_cosignatures(db: str) -> None:
    log = log_verifier(db)
    head0 = sealed_run(db, "a")
    note = ok(["checkpoint", "--db", db])
    witness = generate_key("witness.example/w1", TYPE_COSIGNATURE_V1).signer()
    text, sigs = parse_note(note)
    cosigned = sign_note(text, [witness], sigs)
    merged = ok(["publish", "--db", db, "--witness-key", witness_vkey(witness)], stdin=cosigned)
    assert merged == cosigned
    listed = ok(["published", "--db", db]).decode().splitlines()
    assert listed == [
        f"1 {b64(leaf(head0))} {log.name}+{log.key_id:08x} {witness.name}+{witness.key_id:08x}"
    ]
    described = json.loads(ok(["published", "--db", db, "--json"]))["checkpoints"]
    assert described[0]["note"].encode() == cosigned

    # A later seal does not change which checkpoint proves 'a': the newest covering one.
    head1 = sealed_run(db, "b")
    proof = TlogProof.parse(ok(["prove", "a", "--db", db]))
    assert proof.checkpoint == cosigned
    v = verify_proof(proof, leaf(head0), [log], cosigners=[witness.verifier()])
    assert len(v.cosignatures) == 1
    # 'b' is not covered by the kept checkpoint of size 1: a new one is signed and kept.
    proof_b = TlogProof.parse(ok(["prove", "b", "--db", db]))
    cp = Checkpoint.parse(parse_note(proof_b.checkpoint)[0])
    assert cp.size == 2 and cp.root == mth([leaf(head0), leaf(head1)])
    verify_proof(proof_b, leaf(head1), [log])
    assert [line.split()[0] for line in ok(["published", "--db", db]).decode().splitlines()] == [
        "1",
        "2",
    ]
    # Now 'a' is proven against the newest kept checkpoint, size 2.
    assert TlogProof.parse(ok(["prove", "a", "--db", db])).checkpoint == proof_b.checkpoint


def test_prove_needs_the_key_only_to_sign(db: str) -> None:
    sealed_run(db)
    os.rename(db + ".key", db + ".moved")
    assert f"{db}.key" in fails(["prove", "r", "--db", db], 2)
    ok(["checkpoint", "--db", db, "--key", db + ".moved"])
    assert TlogProof.parse(ok(["prove", "r", "--db", db])).index == 0


def test_prove_out_file_is_replaced_atomically(db: str, tmp_path: Path) -> None:
    head = sealed_run(db)
    out = tmp_path / "p.tlog-proof"
    out.write_bytes(b"old contents")
    ok(["prove", "r", "--db", db, "--out", str(out)])
    assert TlogProof.parse(out.read_bytes()).extra == head
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tlog-store-")] == []
    assert "No such file" in fails(
        ["prove", "r", "--db", db, "--out", str(tmp_path / "no" / "p")], 2
    )


def test_prove_refuses_a_chain_that_no_longer_gives_the_sealed_head(db: str) -> None:
    e = acquire(db)
    append(db, "r", e, "K", "--data", '"v-1"')
    ok(["seal", "r", "--db", db, "--epoch", str(e), "--outcome", "ok"])
    raw = ok(["read", "r", "--db", db]).splitlines()[0].split(b" ", 2)[2]
    assert tamper(db, raw, raw.replace(b"v-1", b"v-2")) >= 1
    fails(["prove", "r", "--db", db], 1)


@pytest.mark.parametrize(
    ("note", "message"),
    [(b"", "note"), (b"not a note\n", "note"), (b"\xff\n", "not valid UTF-8")],
)
def test_publish_refuses_malformed_notes(db: str, note: bytes, message: str) -> None:
    assert message in fails(["publish", "--db", db], 2, stdin=note)


def test_publish_refuses_a_checkpoint_it_did_not_sign(db: str) -> None:
    sealed_run(db)
    ok(["checkpoint", "--db", db])
    # A checkpoint text of this log that the store never signed (another size and root).
    text = f"{ORIGIN}/default\n7\n{b64(sha(b'forged'))}\n".encode()
    key = parse_signer_key(Path(db + ".key").read_text())
    forged = sign_note(text, [Ed25519Signer(f"{ORIGIN}/default", key.secret)])
    code, out, err = run(["publish", "--db", db], stdin=forged)
    assert code != 0 and out == b""
    assert err.count("\n") == 1 and err.startswith("tlog-store: publish: "), err
    assert len(ok(["published", "--db", db]).splitlines()) == 1


# --- export and restore --------------------------------------------------------------------------


def test_export_out_dash_is_stdout(db: str) -> None:
    sealed_run(db)
    assert ok(["export", "--db", db, "--out", "-"]) == ok(["export", "--db", db])


def test_restore_missing_file_exit_2(db: str, tmp_path: Path) -> None:
    err = fails(["restore", str(tmp_path / "none.export"), "--db", db], 2)
    assert "none.export: No such file" in err


def test_restore_refuses_a_tampered_export(db: str, tmp_path: Path) -> None:
    e = acquire(db)
    append(db, "r", e, "K", "--data", '"payload-1"')
    ok(["seal", "r", "--db", db, "--epoch", str(e), "--outcome", "ok"])
    data = ok(["export", "--db", db])
    assert b"payload-1" in data
    bad = tmp_path / "bad.export"
    bad.write_bytes(data.replace(b"payload-1", b"payload-2"))
    copy = str(tmp_path / "copy.db")
    ok(["init", "--db", copy, "--key", db + ".key", "--origin", ORIGIN])
    fails(["restore", str(bad), "--db", copy], 1)
    assert ok(["verify", "--db", copy]) == b""  # nothing was restored


def test_restore_of_a_malformed_export_exits_1_like_tlog_verify(db: str, tmp_path: Path) -> None:
    """An export that does not follow the format does not verify: 1, as tlog-verify says, not
    2 (unusable input); the restore help says so too."""
    e = acquire(db)
    append(db, "r", e, "K")
    data = ok(["export", "--db", db])
    bad = tmp_path / "bad.export"
    bad.write_bytes(data.replace(b"run r 1\n", b"run r 01\n"))
    copy = str(tmp_path / "copy.db")
    ok(["init", "--db", copy, "--key", db + ".key", "--origin", ORIGIN])
    assert "leading zero" in fails(["restore", str(bad), "--db", copy], 1)
    assert ok(["verify", "--db", copy]) == b""


def cosigned_store(db: str) -> tuple[Any, bytes]:
    """A store with a sealed run and a kept checkpoint cosigned by a witness; (witness, note)."""
    sealed_run(db)
    note = ok(["checkpoint", "--db", db])
    witness = generate_key("witness.example/w1", TYPE_COSIGNATURE_V1).signer()
    text, sigs = parse_note(note)
    cosigned = sign_note(text, [witness], sigs)
    ok(["publish", "--db", db, "--witness-key", witness_vkey(witness)], stdin=cosigned)
    return witness, cosigned


def witness_vkey(witness: Any) -> str:
    v = witness.verifier()
    return f"{v.name}+{v.key_id:08x}+{b64(bytes([v.key_type]) + v.public_key)}"


def forget_witness_keys(db: str) -> None:
    """Make ``db`` a store that kept cosignatures before it remembered witness keys (as one
    upgraded from schema version 2 is)."""
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM witness_key")
    conn.close()


def test_export_declares_the_witnesses_the_store_published_to(db: str, tmp_path: Path) -> None:
    witness, cosigned = cosigned_store(db)
    vkey = witness_vkey(witness)
    out = tmp_path / "j.export"
    # publish remembered the witness key: export declares it with no flag.
    ok(["export", "--db", db, "--out", str(out)])
    exported = out.read_bytes()
    assert cosigned in exported
    header = [x for x in exported.split(b"\n") if x.startswith(b"witness-key ")]
    assert header == [f"witness-key {vkey}".encode()]
    # Declaring it again changes nothing, from a flag or a file.
    assert ok(["export", "--db", db, "--witness-key", vkey]) == exported
    keys = tmp_path / "witnesses.vkeys"
    keys.write_text(vkey + "\n")
    assert ok(["export", "--db", db, "--witness-keys", str(keys)]) == exported
    assert (
        ok(["export", "--db", db, "--witness-keys", "-"], stdin=(vkey + "\n").encode()) == exported
    )
    # --witness-key still declares more (a witness that cosigned nothing here).
    other = witness_vkey(generate_key("witness.example/w2", TYPE_COSIGNATURE_V1).signer())
    more = ok(["export", "--db", db, "--witness-key", other])
    assert f"witness-key {other}\n".encode() in more and f"witness-key {vkey}\n".encode() in more

    copy = str(tmp_path / "copy.db")
    ok(["init", "--db", copy, "--key", db + ".key", "--origin", ORIGIN])
    summary = json.loads(ok(["restore", str(out), "--db", copy, "--json"]))
    assert summary["origin"] == f"{ORIGIN}/default"
    assert (summary["checkpoints"], summary["runs"], summary["sealed_runs"]) == (1, 1, 1)
    assert (summary["records"], summary["signed_records"], summary["log_size"]) == (3, 0, 1)
    cp = Checkpoint.parse(parse_note(cosigned)[0])
    assert summary["log_root"] == b64(cp.root)
    assert unb64(summary["digest"]) and len(unb64(summary["digest"])) == 32
    assert ok(["published", "--db", copy]) == ok(["published", "--db", db])
    # The restore remembered the export's witness keys: export → restore → export, no flags.
    assert ok(["export", "--db", copy]) == exported
    # An export that declared one more key restores into a store that declares it too.
    more_path = tmp_path / "more.export"
    more_path.write_bytes(more)
    copy2 = str(tmp_path / "copy2.db")
    ok(["restore", str(more_path), "--db", copy2, "--key", db + ".key"])
    assert ok(["export", "--db", copy2]) == more


def test_export_of_a_store_that_forgot_its_witness_needs_the_key(db: str, tmp_path: Path) -> None:
    """Lines kept before the store remembered witness keys: export names the key and the flag,
    and leaves no file behind; merging the cosigned copy again teaches the store the key."""
    witness, cosigned = cosigned_store(db)
    forget_witness_keys(db)
    out = tmp_path / "j.export"
    err = fails(["export", "--db", db, "--out", str(out)], 2)
    assert witness.name in err and "tlog-store export --witness-key VKEY" in err, err
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tlog-store-")] == []
    vkey = witness_vkey(witness)
    exported = ok(["export", "--db", db, "--witness-key", vkey])
    ok(["publish", "--db", db, "--witness-key", vkey], stdin=cosigned)  # the kept line again
    assert ok(["export", "--db", db]) == exported


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--witness-key", "not a vkey"], "not a vkey"),
        (["--witness-key", "\udcff"], "--witness-key is not valid UTF-8"),
        (["--witness-keys", "/no/such/file"], "/no/such/file: No such file"),
        (["--witness-keys", "-", "--witness-keys", "-"], "only one input can be standard input"),
    ],
)
def test_export_bad_keys_exit_2(db: str, argv: list[str], message: str) -> None:
    assert message in fails(["export", "--db", db, *argv], 2)


@pytest.mark.parametrize(
    ("data", "message"),
    [(b"k", "does not end in a newline"), (b"\xff\n", "line 1 is not UTF-8")],
)
def test_export_bad_witness_key_file_exit_2(db: str, data: bytes, message: str) -> None:
    assert message in fails(["export", "--db", db, "--witness-keys", "-"], 2, stdin=data)


def test_restore_prints_a_summary(db: str, tmp_path: Path) -> None:
    head = sealed_run(db)
    out = tmp_path / "j.export"
    ok(["export", "--db", db, "--out", str(out)])
    copy = str(tmp_path / "copy.db")
    ok(["init", "--db", copy, "--key", db + ".key", "--origin", ORIGIN])
    summary = kv(ok(["restore", str(out), "--db", copy]))
    assert list(summary) == [
        "origin", "checkpoints", "runs", "sealed_runs", "records", "signed_records",
        "log_size", "log_root", "digest",
    ]  # fmt: skip
    assert summary["log_root"] == b64(leaf(head)) and summary["records"] == "3"
    # The restored store is not empty any more: a second restore is refused before writing.
    assert "needs an empty" in fails(["restore", str(out), "--db", copy], 2)


def test_restore_refuses_an_export_of_another_log(db: str, tmp_path: Path) -> None:
    sealed_run(db)
    out = tmp_path / "j.export"
    ok(["export", "--db", db, "--out", str(out)])
    copy = str(tmp_path / "copy.db")
    ok(["init", "--db", copy, "--origin", ORIGIN])  # a new key: another log
    assert "line 3" in fails(["restore", str(out), "--db", copy], 1)
    assert ok(["verify", "--db", copy]) == b""


def test_restore_require_record_signatures(db: str, tmp_path: Path) -> None:
    sealed_run(db)
    out = tmp_path / "j.export"
    ok(["export", "--db", db, "--out", str(out)])
    copy = str(tmp_path / "copy.db")
    ok(["init", "--db", copy, "--key", db + ".key", "--origin", ORIGIN])
    fails(["restore", str(out), "--db", copy, "--require-record-signatures"], 1)
    assert ok(["verify", "--db", copy]) == b""


def test_vkey_needs_no_key_file(db: str) -> None:
    vkey = ok(["vkey", "--db", db])
    os.unlink(db + ".key")
    assert ok(["vkey", "--db", db]) == vkey
    assert ok(["vkey", "--db", db, "--key", "/ignored/by/vkey"]) == vkey


# --- the one exception-to-status mapping ---------------------------------------------------------


class _RaisingStore:
    """Stands in for a store whose ``head`` raises a given exception."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def head(self, run: str) -> Any:
        raise self.error

    def close(self) -> None:
        pass

    def __enter__(self) -> _RaisingStore:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (errors.CorruptError("hash does not cover the stored body", "r", 3), 1),
        (ProofError("inclusion proof does not lead to the root"), 1),
        (RestoreError(7, "the store did not rebuild record 2", "r", 2), 1),
        (MalformedError("bad"), 2),
        (UsageError("bad"), 2),
        (PermissionError(13, "Permission denied", "/x"), 2),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), 2),
        (errors.FencedError("r", 1, 2), 3),
        (errors.LeaseHeldError("r", "o", 1, 30), 3),
        (errors.LeaseNotHeldError("r", "o", 1), 3),
        (errors.DuplicateEffectError("r", "k"), 3),
        (errors.RunSealedError("r", "ok"), 3),
        (errors.BackendError("database is locked"), 4),
        (errors.CommitUnknownError("connection lost during COMMIT"), 4),
    ],
)
def test_exit_status_mapping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: BaseException, status: int
) -> None:
    path = tmp_path / "j.db"
    path.write_bytes(b"")
    monkeypatch.setattr(store.cliparser, "open_store", lambda **kw: _RaisingStore(error))
    err = fails(["head", "r", "--db", str(path)], status)
    if isinstance(error, errors.CommitUnknownError):
        assert "may or may not have been written" in err
    if isinstance(error, OSError):
        assert err == "tlog-store: head: /x: Permission denied\n"


def test_multiline_messages_stay_on_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "j.db"
    path.write_bytes(b"")
    error = errors.BackendError("line one\nline two\r")
    monkeypatch.setattr(store.cliparser, "open_store", lambda **kw: _RaisingStore(error))
    assert (
        fails(["head", "r", "--db", str(path)], 4) == "tlog-store: head: line one\\nline two\\r\n"
    )


def test_bugs_are_not_swallowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "j.db"
    path.write_bytes(b"")
    monkeypatch.setattr(store.cliparser, "open_store", lambda **kw: _RaisingStore(KeyError("bug")))
    with pytest.raises(KeyError):
        run(["head", "r", "--db", str(path)])


# --- store options before the verb -------------------------------------------------------------


def test_store_options_before_or_after_the_verb(tmp_path: Path) -> None:
    """The store options go before the verb, after it, or both (the later wins)."""
    db = str(tmp_path / "journal.db")
    other = str(tmp_path / "other.db")
    cli_ok("init", "--db", db, "--origin", ORIGIN)
    after = cli_ok("head", "c-1", "--db", db)
    assert cli_ok("--db", db, "head", "c-1") == after == f"seq 0\nhash {b64(bytes(32))}\n".encode()
    # --tenant given before the verb is not reset to its default by the verb's own parser.
    assert cli_ok("--db", db, "--tenant", "acme", "vkey").startswith(f"{ORIGIN}/acme+".encode())
    assert cli_ok("--tenant", "acme", "vkey", "--db", db).startswith(f"{ORIGIN}/acme+".encode())
    # Both sides: the later one wins.
    assert cli_ok("--tenant", "acme", "vkey", "--db", db, "--tenant", "default").startswith(
        f"{ORIGIN}/default+".encode()
    )
    assert cli_ok("--db", other, "head", "c-1", "--db", db) == after
    proc = cli("--db", db, "head", "c-1", "--db", other)
    assert assert_one_error_line(proc, 2) == f"tlog-store: head: no store at {other} " + (
        "(create one with 'tlog-store init')\n"
    )
    # --db on one side and --postgres on the other is refused, as on one side.
    proc = cli("--db", db, "head", "c-1", "--postgres", "postgresql://nowhere/x")
    assert assert_one_error_line(proc, 2) == "tlog-store: head: give --db or --postgres, not both\n"
    # --key before the verb is read by a verb that signs.
    key = str(tmp_path / "other.key")
    fails(["--db", db, "--key", key, "checkpoint"], 2)
    assert cli_ok("--db", db, "--key", db + ".key", "checkpoint").startswith(ORIGIN.encode())


def test_undeclared_witness_messages_name_the_flag(db: str) -> None:
    """From the CLI, a signature of an undeclared witness is refused naming --witness-key."""
    sealed_run(db)
    note = ok(["checkpoint", "--db", db])
    witness = generate_key("witness.example/w1", TYPE_COSIGNATURE_V1).signer()
    text, sigs = parse_note(note)
    cosigned = sign_note(text, [witness], sigs)
    err = fails(["publish", "--db", db], 2, stdin=cosigned)
    assert "--witness-key VKEY" in err and "witness_keys" in err
    ok(["publish", "--db", db, "--witness-key", witness_vkey(witness)], stdin=cosigned)
    ok(["export", "--db", db])  # the store remembers the witness it kept a line of


def test_restore_with_key_creates_the_store_in_one_command(db: str, tmp_path: Path) -> None:
    """restore --key FILE creates a missing store from the source's key and the export's origin."""
    sealed_run(db, "a")
    ok(["checkpoint", "--db", db])
    exported = ok(["export", "--db", db])
    path = tmp_path / "journal.export"
    path.write_bytes(exported)
    new = str(tmp_path / "new.db")
    err = fails(["restore", str(path), "--db", new], 2)
    assert "pass --key FILE" in err and not os.path.exists(new)
    # A key file that does not exist is refused; no key is made.
    fails(["restore", str(path), "--db", new, "--key", str(tmp_path / "none.key")], 2)
    assert not os.path.exists(tmp_path / "none.key")
    summary = kv(ok(["restore", str(path), "--db", new, "--key", db + ".key"]))
    assert summary["origin"] == f"{ORIGIN}/default" and summary["sealed_runs"] == "1"
    assert ok(["export", "--db", new]) == exported
    assert ok(["vkey", "--db", new]) == ok(["vkey", "--db", db])
    # Another tenant than the export's is refused, naming --tenant.
    other = str(tmp_path / "other.db")
    err = fails(["restore", str(path), "--db", other, "--key", db + ".key", "--tenant", "x"], 2)
    assert "--tenant" in err


# --- admitted, waiting ---------------------------------------------------------------------------


def test_admitted_and_waiting(db: str) -> None:
    admit = ["--kind", "RunAdmitted", "--data", '{"source": "billing", "id": "inv-1"}']
    ok(["append", "r1", "--db", db, "--epoch", "1", *admit])
    assert ok(["admitted", "billing/inv-1", "--db", db]) == b"r1\n"
    assert ok(["admitted", "billing/inv-2", "--db", db]) == b"billing/inv-2 is not admitted\n"
    assert json.loads(ok(["admitted", "billing/inv-2", "--db", db, "--json"])) == {
        "key": "billing/inv-2",
        "run": None,
    }
    # A second admission with the key: refused by the store's rules (exit 3), naming the holder.
    err = fails(["append", "r2", "--db", db, "--epoch", "1", *admit], 3)
    assert "held by run r1" in err
    assert ok(["head", "r2", "--db", db]).startswith(b"seq 0\n")
    fails(["admitted", "billing", "--db", db], 2)
    assert ok(["waiting", "--db", db]) == b""
    wait = '{"until": 1700000000, "message": "pay:1"}'
    ok(["append", "r1", "--db", db, "--epoch", "1", "--kind", "RunSuspended", "--data", wait])
    ok(
        [
            "append",
            "r3",
            "--db",
            db,
            "--epoch",
            "1",
            "--kind",
            "RunSuspended",
            "--data",
            '{"until": 9}',
        ]
    )
    assert ok(["waiting", "--db", db]) == b"r3 until 9 instant\nr1 until 1700000000 message pay:1\n"
    assert ok(["waiting", "--db", db, "--limit", "1"]) == b"r3 until 9 instant\n"
    assert json.loads(ok(["waiting", "--db", db, "--json"]))["waiting"][1] == {
        "run": "r1",
        "until": 1700000000,
        "message": "pay:1",
        "seq": 2,
    }
    fails(["waiting", "--db", db, "--limit", "0"], 2)
    # Keys are retired only when asked (claimed now: nothing is older than 1000).
    assert ok(["forget-admissions", "--db", db, "--older-than", "1000"]) == b"forgotten 0\n"
    far = str(2**62)
    assert json.loads(ok(["forget-admissions", "--db", db, "--older-than", far, "--json"])) == {
        "forgotten": 1
    }
    assert ok(["admitted", "billing/inv-1", "--db", db]) == b"billing/inv-1 is not admitted\n"
    ok(["append", "r4", "--db", db, "--epoch", "1", *admit])  # the door is open again
    assert ok(["admitted", "billing/inv-1", "--db", db]) == b"r4\n"
    fails(["forget-admissions", "--db", db, "--older-than", "-1"], 2)
