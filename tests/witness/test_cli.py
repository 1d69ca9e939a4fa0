"""Tests for the ``tlog-witness`` command (witness/cli.py) and its inputs (witness/config.py).

The rules: docs/operator-guide.md, and https://c2sp.org/tlog-witness for what is served.

The main flow runs the command as real subprocesses (``python -m witness.cli``), as an operator
would: init → add-log → list-logs → serve on 127.0.0.1 port 0 (ready when it prints its
``listening on`` line) → add-checkpoint requests built with tlog and sent with ``requests``,
whose cosignatures are verified with the vkeys ``init`` printed → monitoring → evidence →
disable-log (404) → SIGTERM (exit 0). Durability is checked by SIGKILL right after a 200 and a
restart. Everything else calls :func:`witness.cli.main` in-process with standard streams
swapped for byte buffers: export/import round trips, pull-logs (file, URL, dry run), the
config file and its precedence, every verb's ``--help``, and bad input → exit 2 with exactly one
stderr line.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

import witness.cli
from tests import clirunner
from tlog.checkpoint import Checkpoint
from tlog.cosignature import TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1, CosignatureV1Signer, timestamp_of
from tlog.errors import MalformedError, UsageError
from tlog.keys import SignerKey, generate_key, parse_signer_key, parse_vkey
from tlog.merkle import MemoryHashStore, consistency_proof, leaf_hash
from tlog.note import TYPE_ED25519, Signature, format_note, open_note, parse_note, sign_note
from tlog.witnessproto import (
    MAX_REQUEST_SIZE,
    SIZE_CONTENT_TYPE,
    AddCheckpointRequest,
    monitoring_path,
)
from witness import config as wconfig
from witness.cli import main
from witness.config import (
    SETTINGS,
    ListedLog,
    load_config,
    parse_config,
    parse_listen,
    parse_log_list,
    starter_config,
)
from witness.open import open_state
from witness.sqlstate import BackendError, SQLState
from witness.state import Cosigned

ROOT = Path(__file__).resolve().parents[2]
WITNESS = "example.com/w1"
ORIGIN = "example.com/log"
ENV_VARS = ("TLOG_WITNESS_DB", "TLOG_WITNESS_POSTGRES", "TLOG_WITNESS_CONFIG")
CONFIG_TTL = 0.3
"""--config-ttl of the served witness in the end-to-end test (seconds)."""
VERBS = witness.cli._VERBS


_clean_env = clirunner.clean_env_fixture(ENV_VARS)


# --- running the command -------------------------------------------------------------------------


def run(*argv: str, stdin: bytes = b"") -> clirunner.Result:
    """Run :func:`main` in-process with byte-buffer standard streams."""
    return clirunner.call_main(main, argv, stdin, catch_exit=True)  # --help exits


def ok(*argv: str, stdin: bytes = b"") -> bytes:
    return clirunner.expect_ok(run(*argv, stdin=stdin))


def fails(code: int, *argv: str, stdin: bytes = b"") -> str:
    """Run, expect ``code`` and exactly one 'tlog-witness: VERB: ...' line on stderr."""
    verb = next((a for a in argv if a in VERBS), None)
    prefix = f"tlog-witness: {verb}: " if verb else "tlog-witness: "
    return clirunner.one_error_line(run(*argv, stdin=stdin), code, prefix)


def cli_env() -> dict[str, str]:
    return clirunner.command_env(ENV_VARS, root_on_path=True)


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m witness.cli`` as a subprocess, without TLOG_WITNESS_* variables."""
    return clirunner.run_module("witness.cli", *args, cwd=cwd, env=cli_env(), timeout=60)


def cli_ok(*args: str, cwd: Path | None = None) -> bytes:
    proc = cli(*args, cwd=cwd)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stderr == b""
    return proc.stdout


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    vkeys: list[str]
    stderr: Path


@contextlib.contextmanager
def serving(*args: str, stderr: Path, timeout: float = 20.0) -> Iterator[Server]:
    """Start ``serve`` and wait for its 'listening on' line; kill it if the test fails."""
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "witness.cli", "serve", *args],
            stdout=subprocess.PIPE,
            stderr=err,
            env=cli_env(),
        )
    try:
        printed, _ = clirunner.read_until_listening(proc, stderr, timeout)
        vkeys = [line[5:] for line in printed if line.startswith("vkey ")]
        url = next(p for p in printed if p.startswith("listening on "))[len("listening on ") :]
        yield Server(proc, url, vkeys, stderr)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def stop(server: Server) -> int:
    server.proc.send_signal(signal.SIGTERM)
    return server.proc.wait(timeout=20)


# --- logs and checkpoints ------------------------------------------------------------------------


class Log:
    """A transparency log made with tlog: Ed25519 key, Merkle tree, signed checkpoints."""

    def __init__(self, origin: str = ORIGIN, key: SignerKey | None = None) -> None:
        self.origin = origin
        self.key = key or generate_key(origin, TYPE_ED25519)
        self.tree = MemoryHashStore()

    @property
    def vkey(self) -> str:
        return self.key.vkey()

    def grow(self, n: int, tag: bytes = b"") -> None:
        start = self.tree.size
        self.tree.extend(leaf_hash(tag + b"entry %d" % i) for i in range(start, start + n))

    def checkpoint(self, size: int | None = None) -> bytes:
        size = self.tree.size if size is None else size
        text = Checkpoint(self.origin, size, self.tree.root(size)).format()
        return sign_note(text, [self.key.signer()])

    def request(self, old: int, size: int | None = None) -> bytes:
        size = self.tree.size if size is None else size
        proof = () if old in (0, size) else tuple(consistency_proof(old, size, self.tree))
        return AddCheckpointRequest(old, proof, self.checkpoint(size)).format()


def cosigned_note(log: Log, witness_key: SignerKey, ts: int = 1_780_000_000) -> bytes:
    """The log's checkpoint with a cosignature of ``witness_key`` (a stored note)."""
    note = log.checkpoint()
    text, sigs = parse_note(note)
    signer = CosignatureV1Signer(witness_key.name, witness_key.secret)
    return format_note(
        text, [*sigs, Signature(signer.name, signer.key_id, signer.sign_at(text, ts))]
    )


def store(db: str, log: Log, witness_key: SignerKey) -> None:
    """Move the log forward in a state (as the server would) to the log's current tree."""
    state = open_state(db=db, create=False)
    try:
        before = state.latest(log.origin)
        note = cosigned_note(log, witness_key)
        new = Cosigned(log.origin, log.tree.size, log.tree.root(), note, 1_780_000_000)
        assert state.compare_and_swap(before, new)
    finally:
        state.close()


# --- the operator's path, end to end, as subprocesses --------------------------------------------


def test_serve_end_to_end(tmp_path: Path) -> None:
    wdir = tmp_path / "w"
    printed = cli_ok("init", "--name", WITNESS, "--dir", str(wdir), "--mldsa").decode()
    vkeys = printed.splitlines()
    assert len(vkeys) == 2
    witness_verifiers = [parse_vkey(v) for v in vkeys]
    assert [v.key_type for v in witness_verifiers] == [TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1]
    assert all(v.name == WITNESS for v in witness_verifiers)
    config = str(wdir / "witness.toml")

    log = Log()
    out = cli_ok("add-log", ORIGIN, "--key", log.vkey, "--qpd", "1000", "--config", config)
    assert out == f'added "{ORIGIN}" (1 key)\n'.encode()
    listed = [json.loads(x) for x in cli_ok("list-logs", "--json", "--config", config).splitlines()]
    assert listed == [
        {
            "origin": ORIGIN,
            "keys": [log.vkey],
            "qpd": 1000,
            "disabled": False,
            "tiles": None,
            "size": None,
            "root": None,
            "updated_at": None,
        }
    ]

    with serving(
        "--config",
        config,
        "--listen",
        "127.0.0.1:0",
        "--config-ttl",
        str(CONFIG_TTL),
        stderr=tmp_path / "err",
    ) as srv:
        assert srv.vkeys == vkeys  # serve prints the same vkeys as init
        s = requests.Session()
        add = srv.url + "/add-checkpoint"

        # First checkpoint: old 0, size 5, no proof → 200 with both cosignatures.
        log.grow(5)
        r = s.post(add, data=log.request(0), timeout=10)
        assert r.status_code == 200, r.text
        cosigned = log.checkpoint() + r.content
        opened = open_note(cosigned, witness_verifiers)
        assert {(g.name, g.key_id) for g in opened.sigs} == {
            (v.name, v.key_id) for v in witness_verifiers
        }
        assert all(timestamp_of(g) > 0 for g in opened.sigs)

        # A stale old size → 409 with the stored size.
        r = s.post(add, data=log.request(0), timeout=10)
        assert r.status_code == 409
        assert r.content == b"5\n" and r.headers["Content-Type"] == SIZE_CONTENT_TYPE

        # 5 → 8 with a consistency proof → 200.
        log.grow(3)
        r = s.post(add, data=log.request(5), timeout=10)
        assert r.status_code == 200, r.text
        open_note(log.checkpoint() + r.content, witness_verifiers)

        # The monitoring endpoint serves the log's signature and the cosignatures.
        r = s.get(srv.url + monitoring_path("", ORIGIN), timeout=10)
        assert r.status_code == 200
        served = open_note(r.content, [parse_vkey(log.vkey), *witness_verifiers])
        assert len(served.sigs) == 3 and served.text == log.checkpoint()[: len(served.text)]
        assert Checkpoint.parse(served.text).size == 8

        # A fork at the stored size: 422, kept as evidence, visible to the operator.
        fork = Log(key=log.key)
        fork.grow(8, tag=b"fork ")
        fork_body = fork.request(8)
        r = s.post(add, data=fork_body, timeout=10)
        assert r.status_code == 422
        items = [
            json.loads(x) for x in cli_ok("evidence", "--json", "--config", config).splitlines()
        ]
        assert len(items) == 1 and items[0]["origin"] == ORIGIN
        shown = cli_ok("evidence", "--show", str(items[0]["id"]), "--config", config)
        assert shown == fork_body

        # disable-log while serving → 404 (the body says disabled); enable-log → 200 again.
        assert (
            cli_ok("disable-log", ORIGIN, "--config", config) == f'disabled "{ORIGIN}"\n'.encode()
        )
        time.sleep(CONFIG_TTL + 0.1)  # the server reads a log's configuration this often
        r = s.post(add, data=log.request(8), timeout=10)
        assert r.status_code == 404 and "disabled" in r.text
        cli_ok("enable-log", ORIGIN, "--config", config)
        time.sleep(CONFIG_TTL + 0.1)
        r = s.post(add, data=log.request(8), timeout=10)
        assert r.status_code == 200

        listed = json.loads(cli_ok("list-logs", "--json", "--config", config))
        assert listed["size"] == 8 and listed["disabled"] is False
        assert listed["updated_at"] >= int(time.time()) - 600

        s.close()
        assert stop(srv) == 0

    lines = (tmp_path / "err").read_text().splitlines()
    events = [json.loads(line) for line in lines]  # every line is one JSON object
    assert events[0]["event"] == "start" and events[-1] == {"event": "stop"}
    requests_logged = [e for e in events if "endpoint" in e]
    assert [e["status"] for e in requests_logged] == [200, 409, 200, 200, 422, 404, 200]
    assert requests_logged[0]["origin"] == ORIGIN and requests_logged[0]["size"] == 5


def test_init_then_serve_with_defaults_only(tmp_path: Path) -> None:
    """The documented first run: init, then serve with nothing but --config (and a free port:
    the default 127.0.0.1:7380 may be taken on a shared machine, so --check shows it instead)."""
    cli_ok("init", "--name", WITNESS, "--dir", str(tmp_path / "w"))
    config = str(tmp_path / "w" / "witness.toml")
    checked = cli_ok("serve", "--config", config, "--check", cwd=Path("/")).decode()
    assert "listen 127.0.0.1:7380\n" in checked
    assert f"db {tmp_path / 'w' / 'witness.db'}\n" in checked
    with serving("--config", config, "--listen", "127.0.0.1:0", stderr=tmp_path / "e") as srv:
        assert requests.get(srv.url + "/", timeout=10).status_code == 200
        assert stop(srv) == 0


def witness_following_a_log(tmp_path: Path) -> tuple[str, Log]:
    """A witness initialised in ``tmp_path/w`` (its config file) that follows a new log."""
    wdir = tmp_path / "w"
    cli_ok("init", "--name", WITNESS, "--dir", str(wdir))
    config = str(wdir / "witness.toml")
    log = Log()
    cli_ok("add-log", ORIGIN, "--key", log.vkey, "--config", config)
    return config, log


def test_edge_16_durability_kill_after_200(tmp_path: Path) -> None:
    """Edge case 16 (tlog-witness, https://c2sp.org/tlog-witness): SIGKILL right after a 200; on
    restart the stored size is the cosigned one (the 409 says so, and the monitoring endpoint
    serves it)."""
    config, log = witness_following_a_log(tmp_path)
    log.grow(11)
    with serving("--config", config, "--listen", "127.0.0.1:0", stderr=tmp_path / "e1") as srv:
        r = requests.post(srv.url + "/add-checkpoint", data=log.request(0), timeout=10)
        assert r.status_code == 200
        srv.proc.kill()
        srv.proc.wait()
    with serving("--config", config, "--listen", "127.0.0.1:0", stderr=tmp_path / "e2") as srv:
        r = requests.post(srv.url + "/add-checkpoint", data=log.request(0), timeout=10)
        assert r.status_code == 409 and r.content == b"11\n"
        r = requests.get(srv.url + monitoring_path("", ORIGIN), timeout=10)
        assert Checkpoint.parse(parse_note(r.content)[0]).size == 11
        assert stop(srv) == 0


def test_serve_prefixes_and_disabled_status_endpoints(tmp_path: Path) -> None:
    config, log = witness_following_a_log(tmp_path)
    log.grow(3)
    args = ["--config", config, "--listen", "127.0.0.1:0", "--submission-prefix", "/w"]
    args += ["--monitoring-prefix", "/m", "--no-status-endpoints"]
    with serving(*args, stderr=tmp_path / "e") as srv:
        assert (
            requests.post(srv.url + "/add-checkpoint", data=log.request(0), timeout=10).status_code
            == 404
        )
        assert (
            requests.post(
                srv.url + "/w/add-checkpoint", data=log.request(0), timeout=10
            ).status_code
            == 200
        )
        assert requests.get(srv.url + monitoring_path("/m", ORIGIN), timeout=10).status_code == 200
        assert requests.get(srv.url + "/", timeout=10).status_code == 404
        assert stop(srv) == 0


def test_serve_port_in_use_is_one_line_exit_2(tmp_path: Path) -> None:
    wdir = tmp_path / "w"
    cli_ok("init", "--name", WITNESS, "--dir", str(wdir))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = cli("serve", "--config", str(wdir / "witness.toml"), "--listen", f"127.0.0.1:{port}")
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert err.startswith("tlog-witness: serve: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_request_cut_off_at_sigterm_is_logged_server_stopping(tmp_path: Path) -> None:
    """A handler still waiting for its body when SIGTERM's shutdown_timeout runs out is cancelled
    by the server: logged 499 with error "server stopping" (not "client disconnected"), no
    response, exit 0."""
    wdir = tmp_path / "w"
    cli_ok("init", "--name", WITNESS, "--dir", str(wdir))
    config = str(wdir / "witness.toml")
    cli_ok("add-log", ORIGIN, "--key", Log().vkey, "--config", config)
    args = ["--config", config, "--listen", "127.0.0.1:0", "--shutdown-timeout", "0.5"]
    args += ["--read-timeout", "60"]  # the body deadline must not end the request first
    with serving(*args, stderr=tmp_path / "e") as srv:
        host, port = srv.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=20) as conn:
            # "Expect: 100-continue": aiohttp answers it right before calling the handler, so
            # once the 100 is read the request is in flight, waiting for the rest of its body.
            conn.sendall(
                b"POST /add-checkpoint HTTP/1.1\r\nHost: witness\r\nContent-Length: 500\r\n"
                b"Expect: 100-continue\r\n\r\n"
            )
            assert conn.recv(1024).startswith(b"HTTP/1.1 100 Continue\r\n")
            conn.sendall(b"old 0\n")
            started = time.monotonic()
            assert stop(srv) == 0
            assert time.monotonic() - started >= 0.5  # it waited for the request first
            rest = b""
            while chunk := conn.recv(1024):
                rest += chunk
            assert rest == b""  # no response: the connection is just closed
    lines = [json.loads(x) for x in (tmp_path / "e").read_text().splitlines() if x[:1] == "{"]
    [entry] = [x for x in lines if x.get("endpoint") == "add-checkpoint"]
    assert (entry["status"], entry["error"]) == (499, "server stopping")


def test_bad_input_subprocess_has_no_traceback(tmp_path: Path) -> None:
    proc = cli("add-log", "example.com/x", "--key", "not-a-vkey", "--db", str(tmp_path / "no.db"))
    assert proc.returncode == 2
    assert proc.stderr.decode().count("\n") == 1 and b"Traceback" not in proc.stderr
    proc = cli("frobnicate")
    assert proc.returncode == 2 and b"Traceback" not in proc.stderr


# --- init and vkey -------------------------------------------------------------------------------


def test_init_writes_go_format_keys_mode_0600_and_never_overwrites(tmp_path: Path) -> None:
    wdir = tmp_path / "w"
    out = json.loads(ok("init", "--name", WITNESS, "--dir", str(wdir), "--mldsa", "--json"))
    assert out["name"] == WITNESS and out["db"] == str(wdir / "witness.db")
    keys = []
    for path, key_type in zip(out["keys"], [TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1], strict=True):
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode == 0o600, oct(mode)
        text = Path(path).read_text()
        assert text.startswith(f"PRIVATE+KEY+{WITNESS}+") and text.endswith("\n")
        key = parse_signer_key(text)
        assert key.key_type == key_type and key.name == WITNESS
        keys.append(key)
    assert out["vkeys"] == [k.vkey() for k in keys]
    assert stat.S_IMODE(os.stat(out["config"]).st_mode) == 0o600
    assert (wdir / "witness.db").exists()
    # vkey reads the same keys, from the config or from the directory.
    vkeys = "".join(v + "\n" for v in out["vkeys"]).encode()
    assert ok("vkey", "--config", out["config"]) == vkeys
    assert ok("vkey", "--key", out["keys"][0]) == vkeys.splitlines(keepends=True)[0]

    before = {p: Path(p).read_bytes() for p in [*out["keys"], out["config"]]}
    err = fails(2, "init", "--name", "other.example/w", "--dir", str(wdir))
    assert "never overwrites" in err
    assert {p: Path(p).read_bytes() for p in before} == before


def test_init_creates_the_state_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        ok("init", "--name", WITNESS, "--dir", str(tmp_path / "w"))
        db = str(tmp_path / "w" / "witness.db")
        ok("add-log", ORIGIN, "--key", Log().vkey, "--db", db)  # a write: -wal and -shm exist
    finally:
        os.umask(old)
    for name in os.listdir(tmp_path / "w"):
        mode = stat.S_IMODE(os.stat(tmp_path / "w" / name).st_mode)
        assert mode == 0o600, (name, oct(mode))


def test_serve_connection_limits_from_file_and_flags(tmp_path: Path) -> None:
    ok("init", "--name", WITNESS, "--dir", str(tmp_path / "w"))
    config = tmp_path / "w" / "witness.toml"
    defaults = check_settings("--config", str(config))
    assert defaults["idle_timeout"] == ["5"] and defaults["header_timeout"] == ["10"]
    assert defaults["request_timeout"] == ["60"] and defaults["max_header_bytes"] == ["16384"]
    assert defaults["max_connections"] == ["1024"]
    assert defaults["max_connections_per_address"] == ["128"]
    assert defaults["max_body_memory"] == ["67108864"]
    text = config.read_text().replace("max_connections = 1024", "max_connections = 10")
    config.write_text(text.replace("idle_timeout = 5", "idle_timeout = 0.5"))
    got = check_settings("--config", str(config), "--header-timeout", "2.5")
    assert got["max_connections"] == ["10"] and got["idle_timeout"] == ["0.5"]
    assert got["header_timeout"] == ["2.5"]
    for setting, value, needle in [
        ("max_connections", "0", "max_connections must be at least 1"),
        ("idle_timeout", "0", "idle_timeout must be a finite number of seconds > 0"),
        ("max_body_memory", '"64M"', "max_body_memory must be an integer, not a string"),
        ("header_timeout", "true", "header_timeout must be a number, not a boolean"),
    ]:
        config.write_text(f"{setting} = {value}\n")
        assert needle in fails(2, "serve", "--check", "--config", str(config))
    config.write_text("")
    assert "--max-connections" in fails(
        2, "serve", "--check", "--config", str(config), "--max-connections", "0"
    )


def test_init_config_names_an_outside_db_absolutely(tmp_path: Path) -> None:
    db = tmp_path / "elsewhere" / "state.db"
    db.parent.mkdir()
    ok("init", "--name", WITNESS, "--dir", str(tmp_path / "w"), "--db", str(db))
    cfg = load_config(str(tmp_path / "w" / "witness.toml"))
    assert cfg.db == str(db) and cfg.keys == (str(tmp_path / "w" / "witness.key"),)
    assert db.exists()


def test_init_refuses_bad_name_and_writes_nothing(tmp_path: Path) -> None:
    fails(2, "init", "--name", "bad name", "--dir", str(tmp_path / "w"))
    fails(2, "init", "--name", "a+b", "--dir", str(tmp_path / "w"))
    assert not (tmp_path / "w").exists()


def test_edge_08_type_confusion_log_key_refused_as_witness_key(tmp_path: Path) -> None:
    """Edge case 8 (https://c2sp.org/tlog-cosignature): a 0x01 (note) key is not a 0x04 cosigner
    key; serve and vkey refuse an Ed25519 log key file instead of signing cosignatures with the
    wrong type."""
    ok("init", "--name", WITNESS, "--dir", str(tmp_path))
    note_key = tmp_path / "note.key"
    note_key.write_text(generate_key(WITNESS, TYPE_ED25519).format() + "\n")
    err = fails(2, "serve", "--db", str(tmp_path / "witness.db"), "--key", str(note_key), "--check")
    assert "0x01" in err and "cosignature/v1 (0x04)" in err
    fails(2, "vkey", "--key", str(note_key))


def test_serve_refuses_keys_of_two_names(tmp_path: Path) -> None:
    ok("init", "--name", WITNESS, "--dir", str(tmp_path))
    other = tmp_path / "other.key"
    other.write_text(generate_key("other.example/w", TYPE_COSIGNATURE_V1).format() + "\n")
    key = str(tmp_path / "witness.key")
    db = str(tmp_path / "witness.db")
    assert "is named" in fails(2, "serve", "--db", db, "--key", key, "--key", str(other), "--check")
    assert "is named" in fails(
        2, "serve", "--db", db, "--key", key, "--name", "x.example/w", "--check"
    )


def test_serve_refuses_a_missing_state(tmp_path: Path) -> None:
    ok("init", "--name", WITNESS, "--dir", str(tmp_path))
    err = fails(
        2, "serve", "--db", str(tmp_path / "nothing.db"), "--key", str(tmp_path / "witness.key")
    )
    assert "no witness state" in err
    assert not (tmp_path / "nothing.db").exists()


# --- settings: file, environment, flags ----------------------------------------------------------


def check_settings(*argv: str) -> dict[str, list[str]]:
    out = ok("serve", "--check", *argv).decode()
    settings_: dict[str, list[str]] = {}
    for line in out.splitlines():
        k, _, v = line.partition(" ")
        settings_.setdefault(k, []).append(v)
    return settings_


def test_serve_flags_override_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok("init", "--name", WITNESS, "--dir", str(tmp_path / "w"), "--mldsa")
    config = tmp_path / "w" / "witness.toml"
    text = config.read_text()
    text = text.replace('listen = "127.0.0.1:7380"', 'listen = "[::1]:9000"')
    text = text.replace('submission_prefix = ""', 'submission_prefix = "/sub"')
    text = text.replace("read_timeout = 10", "read_timeout = 2.5")
    text = text.replace("status_endpoints = true", "status_endpoints = false")
    config.write_text(text)
    got = check_settings("--config", str(config))
    assert got["listen"] == ["[::1]:9000"] and got["submission_prefix"] == ["/sub"]
    assert got["read_timeout"] == ["2.5"] and got["status_endpoints"] == ["false"]
    assert got["db"] == [str(tmp_path / "w" / "witness.db")]
    assert got["key"] == [
        str(tmp_path / "w" / "witness.key"),
        str(tmp_path / "w" / "witness-mldsa.key"),
    ]
    assert got["name"] == [WITNESS] and len(got["vkey"]) == 2

    got = check_settings(
        "--config", str(config), "--listen", "0.0.0.0:1234", "--submission-prefix", "/x/y",
        "--read-timeout", "7", "--status-endpoints", "--max-body", "4096",
        "--shutdown-timeout", "0", "--config-ttl", "0.5",
        "--key", str(tmp_path / "w" / "witness.key"),
    )  # fmt: skip
    assert got["listen"] == ["0.0.0.0:1234"] and got["submission_prefix"] == ["/x/y"]
    assert got["read_timeout"] == ["7"] and got["status_endpoints"] == ["true"]
    assert got["max_body"] == ["4096"] and got["shutdown_timeout"] == ["0"]
    assert got["config_ttl"] == ["0.5"] and len(got["key"]) == 1 and len(got["vkey"]) == 1

    # The config file from the environment; the state from the environment beats the file's.
    other_db = tmp_path / "other.db"
    ok("init", "--name", WITNESS, "--dir", str(tmp_path / "o"), "--db", str(other_db))
    monkeypatch.setenv("TLOG_WITNESS_CONFIG", str(config))
    monkeypatch.setenv("TLOG_WITNESS_DB", str(other_db))
    got = check_settings()
    assert got["listen"] == ["[::1]:9000"] and got["db"] == [str(other_db)]
    # ... and a flag beats the environment.
    got = check_settings("--db", str(tmp_path / "w" / "witness.db"))
    assert got["db"] == [str(tmp_path / "w" / "witness.db")]


def test_state_defaults_to_witness_db_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok("init", "--name", WITNESS, "--dir", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    log = Log()
    ok("add-log", ORIGIN, "--key", log.vkey)
    assert ORIGIN.encode() in ok("list-logs")
    monkeypatch.chdir(tmp_path.parent)
    err = fails(2, "list-logs")
    # Elsewhere the verb finds nothing, and says how to name the witness.
    assert "no witness state" in err and "--config FILE (or TLOG_WITNESS_CONFIG)" in err
    monkeypatch.setenv("TLOG_WITNESS_CONFIG", str(tmp_path / "witness.toml"))
    assert ORIGIN.encode() in ok("list-logs")


def test_state_options_before_the_verb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--config, --db and --postgres may come before the verb as well as after it; a verb that
    does not take one refuses it there rather than ignore it."""
    ok("init", "--name", WITNESS, "--dir", str(tmp_path / "w"))
    monkeypatch.chdir(tmp_path)
    config = str(tmp_path / "w" / "witness.toml")
    log = Log()
    ok("--config", config, "add-log", ORIGIN, "--key", log.vkey)
    assert ORIGIN.encode() in ok("--config", config, "list-logs")
    assert ORIGIN.encode() in ok("--db", str(tmp_path / "w" / "witness.db"), "list-logs")
    # Given on both sides, the later wins: the verb's.
    assert ORIGIN.encode() in ok("--config", str(tmp_path / "nothing.toml"), "list-logs",
                                 "--config", config)  # fmt: skip
    assert WITNESS.encode() in ok("--config", config, "vkey")
    assert fails(2, "--config", config, "init", "--name", WITNESS) == (
        "tlog-witness: init: init takes no --config\n"
    )
    assert "vkey takes no --db" in fails(2, "--db", "x.db", "vkey")


def test_a_verb_outside_the_witness_directory_says_how_to_name_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for verb in (["vkey"], ["serve", "--check"]):
        err = fails(2, *verb)
        assert "no witness key at ./witness.key" in err, err
        assert "--config FILE (or TLOG_WITNESS_CONFIG), or pass --key FILE" in err


def test_environment_names_the_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(tmp_path / "env.db")
    monkeypatch.setenv("TLOG_WITNESS_DB", db)
    ok("init", "--name", WITNESS, "--dir", str(tmp_path / "w"))
    assert load_config(str(tmp_path / "w" / "witness.toml")).db == db
    ok("add-log", ORIGIN, "--key", Log().vkey)
    assert len(ok("list-logs", "--json").splitlines()) == 1
    monkeypatch.setenv("TLOG_WITNESS_POSTGRES", "postgresql://nowhere/x")
    assert "both" in fails(2, "list-logs")


# --- log configuration verbs ---------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> str:
    ok("init", "--name", WITNESS, "--dir", str(tmp_path))
    return str(tmp_path / "witness.db")


def test_add_log_add_key_disable_enable_list(db: str) -> None:
    log = Log()
    second = generate_key(ORIGIN, TYPE_ED25519)
    ok("add-log", ORIGIN, "--key", log.vkey, "--db", db)
    assert "already configured" in fails(2, "add-log", ORIGIN, "--key", log.vkey, "--db", db)
    assert ok("add-key", ORIGIN, second.vkey(), "--db", db) == f'key added to "{ORIGIN}"\n'.encode()
    assert b"already trusts" in ok("add-key", ORIGIN, second.vkey(), "--db", db)
    ok("disable-log", ORIGIN, "--db", db)
    text = ok("list-logs", "--db", db).decode()
    assert text.startswith(f'"{ORIGIN}" disabled never cosigned qpd -\n')
    assert sorted(line.removeprefix("  key ") for line in text.splitlines()[1:]) == sorted(
        [log.vkey, second.vkey()]
    )
    ok("enable-log", ORIGIN, "--db", db)
    assert json.loads(ok("list-logs", "--json", "--db", db))["disabled"] is False
    # An origin with a space, several keys and a quota.
    spaced = Log("go.sum database tree", generate_key("sum.golang.org", TYPE_ED25519))
    mldsa = generate_key("sum.golang.org", TYPE_SUBTREE_V1)
    out = ok(
        "add-log",
        spaced.origin,
        "--key",
        spaced.vkey,
        "--key",
        mldsa.vkey(),
        "--qpd",
        "24",
        "--db",
        db,
    )
    assert out == b'added "go.sum database tree" (2 keys)\n'
    got = json.loads(ok("list-logs", "--json", "--db", db).splitlines()[1])
    assert got["origin"] == spaced.origin and got["qpd"] == 24 and len(got["keys"]) == 2


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["add-log", ORIGIN, "--key", "example.com/log+00000000+AQ=="], "log key"),
        (["add-log", ORIGIN], "required"),
        (["add-log", ORIGIN, "--key", "VKEY", "--qpd", "0"], "--qpd"),
        (["add-log", ORIGIN, "--key", "VKEY", "--qpd", "07"], "leading zero"),
        (["add-log", "", "--key", "VKEY"], "empty"),
        (["add-log", "bad\x01origin", "--key", "VKEY"], "control character"),
        (["add-log", ORIGIN, "--key", "WITNESSVKEY"], "cosignature/v1"),
        (["add-key", "example.com/unknown", "VKEY"], "not configured"),
        (["disable-log", "example.com/unknown"], "not configured"),
        (["enable-log", "example.com/unknown"], "not configured"),
        (["evidence", "--show", "0"], "at least 1"),
        (["evidence", "--show", "99"], "no evidence 99"),
        (["evidence", "--limit", "-1"], "--limit"),
        (["import-state", "/nonexistent/state"], "No such file"),
        (["pull-logs", "/nonexistent/list"], "No such file"),
        (["pull-logs", "LIST", "--timeout", "0"], "--timeout"),
        (["serve", "--check", "--listen", "localhost"], "HOST:PORT"),
        (["serve", "--check", "--listen", "::1:80"], "brackets"),
        (["serve", "--check", "--listen", "127.0.0.1:65536"], "larger than 65535"),
        (["serve", "--check", "--submission-prefix", "/w/"], "trailing slash"),
        (["serve", "--check", "--monitoring-prefix", "w"], "monitoring-prefix"),
        (["serve", "--check", "--max-body", "0"], "at least 1"),
        (["serve", "--check", "--read-timeout", "0"], "> 0"),
        (["serve", "--check", "--read-timeout", "1e3"], "number of seconds"),
        (["serve", "--check", "--name", "a b"], "white space"),
        (["serve", "--check", "--workers", "0"], "--workers must be from 1 to 256"),
        (["serve", "--check", "--workers", "257"], "--workers must be from 1 to 256"),
        (["serve", "--check", "--workers", "01"], "leading zero"),
        (["serve", "--check", "--workers", "two"], "not a canonical decimal"),
        (["serve", "--check", "--bogus"], "unrecognized"),
        (["list-logs", "--db", "x", "--postgres", "y"], "not allowed"),
        (["list-logs", "--config", "/nonexistent/witness.toml"], "No such file"),
    ],
)
def test_bad_inputs_exit_2_with_one_line(db: str, argv: list[str], needle: str) -> None:
    log = Log()
    witness_vkey = ok("vkey", "--key", str(Path(db).parent / "witness.key")).decode().strip()
    argv = [
        a.replace("WITNESSVKEY", witness_vkey).replace("VKEY", log.vkey).replace("LIST", db)
        for a in argv
    ]
    if "--db" not in argv and "--config" not in argv:
        argv += ["--db", db]
        if argv[0] == "serve":
            argv += ["--key", str(Path(db).parent / "witness.key")]
    err = fails(2, *argv)
    assert needle in err, err


def test_no_verb_and_unknown_verb(db: str) -> None:
    assert "required" in fails(2)
    assert "invalid choice" in fails(2, "frobnicate")


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_help_with_examples(verb: str) -> None:
    r = run(verb, "--help")
    assert r.code == 0 and r.err == ""
    text = r.out.decode()
    assert text.startswith(f"usage: tlog-witness {verb}")
    assert "examples:\n  tlog-witness " in text


def test_main_help_lists_every_verb_and_exit_status() -> None:
    text = run("--help").out.decode()
    for verb in VERBS:
        assert verb in text
    for code in ("0  success", "1  verification", "2  unusable", "4  backend"):
        assert code in text


def test_serve_help_documents_every_setting() -> None:
    text = run("serve", "--help").out.decode()
    for s in SETTINGS:
        assert f"  {s.name} " in text, s.name
        flag = "--" + ("key" if s.name == "keys" else s.name.replace("_", "-"))
        assert flag in text.replace("--[no-]", "--"), flag
    assert "TLOG_WITNESS_DB" in text


def test_closed_stdout_is_silent(db: str) -> None:
    """A reader that went away (``tlog-witness list-logs | head -0``): exit 2, nothing said."""
    ok("add-log", ORIGIN, "--key", Log().vkey, "--db", db)
    read_end, write_end = os.pipe()
    os.close(read_end)  # no reader: the child's first write fails with EPIPE
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "witness.cli", "list-logs", "--db", db],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=cli_env(),
            timeout=30,
            check=False,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 2
    assert proc.stderr == b""


def test_backend_trouble_exits_4() -> None:
    err = fails(
        4, "list-logs", "--postgres", "postgresql://postgres@127.0.0.1:1/none?connect_timeout=3"
    )
    assert "postgres" in err.lower()


# --- evidence ------------------------------------------------------------------------------------


def test_evidence_list_json_and_show(db: str) -> None:
    log = Log()
    ok("add-log", ORIGIN, "--key", log.vkey, "--db", db)
    assert ok("evidence", "--db", db) == b""
    state = open_state(db=db, create=False)
    try:
        first = state.add_evidence(
            ORIGIN, "same size, different root", b"old 1\n\nA\x00\xff", None, 100
        )
        second = state.add_evidence(ORIGIN, "not consistent: x", b"req2", b"stored", 1_780_000_000)
    finally:
        state.close()
    text = ok("evidence", "--db", db).decode().splitlines()
    assert text == [
        f'{second} 2026-05-28T20:26:40Z "{ORIGIN}" not consistent: x',
        f'{first} 1970-01-01T00:01:40Z "{ORIGIN}" same size, different root',
    ]
    items = [
        json.loads(x) for x in ok("evidence", "--json", "--limit", "1", "--db", db).splitlines()
    ]
    assert [i["id"] for i in items] == [second] and items[0]["stored_note"] == "c3RvcmVk"
    assert ok("evidence", "--show", str(first), "--db", db) == b"old 1\n\nA\x00\xff"
    shown = json.loads(ok("evidence", "--show", str(second), "--json", "--db", db))
    assert shown["request"] == "cmVxMg=="
    assert ok("evidence", "--origin", "example.com/other", "--db", db) == b""
    fails(2, "evidence", "--show", str(first), "--origin", "example.com/other", "--db", db)


# --- export and import ---------------------------------------------------------------------------


def test_export_import_round_trip_and_refused_backwards(tmp_path: Path) -> None:
    ok("init", "--name", WITNESS, "--dir", str(tmp_path / "a"))
    db_a = str(tmp_path / "a" / "witness.db")
    witness_key = parse_signer_key((tmp_path / "a" / "witness.key").read_text())
    log, other = Log(), Log("example.com/other")
    ok("add-log", log.origin, "--key", log.vkey, "--qpd", "50", "--db", db_a)
    ok("add-log", other.origin, "--key", other.vkey, "--db", db_a)
    ok("disable-log", other.origin, "--db", db_a)
    log.grow(6)
    store(db_a, log, witness_key)

    exported = tmp_path / "state.txt"
    assert ok("export-state", "--out", str(exported), "--db", db_a) == b""
    assert ok("export-state", "--db", db_a) == exported.read_bytes()
    assert exported.read_bytes().startswith(b"tlog-witness-state v1\nlog example.com/log\n")

    db_b = str(tmp_path / "b.db")  # a new state: import-state creates it
    assert ok("import-state", str(exported), "--db", db_b) == b"imported 2 logs\n"
    assert ok("export-state", "--db", db_b) == exported.read_bytes()
    assert ok("list-logs", "--json", "--db", db_b) == ok("list-logs", "--json", "--db", db_a)
    # Importing the same file again changes nothing.
    assert (
        ok("import-state", "-", "--db", db_b, stdin=exported.read_bytes()) == b"imported 2 logs\n"
    )
    assert ok("export-state", "--db", db_b) == exported.read_bytes()

    # The source moves on; the old export would move it backwards: refused, nothing written.
    log.grow(4)
    store(db_a, log, witness_key)
    before = ok("export-state", "--db", db_a)
    err = fails(2, "import-state", str(exported), "--db", db_a)
    assert "backwards" in err and ORIGIN in err
    assert ok("export-state", "--db", db_a) == before
    # The newer export moves the copy forward.
    newer = tmp_path / "newer.txt"
    ok("export-state", "--out", str(newer), "--db", db_a)
    ok("import-state", str(newer), "--db", db_b)
    assert json.loads(ok("list-logs", "--json", "--db", db_b).splitlines()[0])["size"] == 10


def exported_state(tmp_path: Path) -> tuple[Log, bytes]:
    """A witness initialised in ``tmp_path/a`` that cosigned a log at size 2, and its
    ``export-state`` output."""
    ok("init", "--name", WITNESS, "--dir", str(tmp_path / "a"))
    db_a = str(tmp_path / "a" / "witness.db")
    witness_key = parse_signer_key((tmp_path / "a" / "witness.key").read_text())
    log = Log()
    ok("add-log", log.origin, "--key", log.vkey, "--db", db_a)
    log.grow(2)
    store(db_a, log, witness_key)
    return log, ok("export-state", "--db", db_a)


def test_import_state_verification_failure_exits_1(tmp_path: Path) -> None:
    log, data = exported_state(tmp_path)
    # Swap the trusted key for another one: the cosigned note no longer verifies.
    forged = data.replace(log.vkey.encode(), Log().vkey.encode())
    err = fails(1, "import-state", "-", "--db", str(tmp_path / "b.db"), stdin=forged)
    assert "does not verify" in err
    err = fails(2, "import-state", "-", "--db", str(tmp_path / "b.db"), stdin=data[:-9])
    assert "state" in err


def test_refused_import_into_a_new_state_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file refused (bad syntax, a note that does not verify) is refused before the state is
    opened: a SQLite path that did not exist stays absent, with no -writer.lock, -wal or -shm
    beside it. A failure after creating it (the database) removes what this invocation made,
    and only that; an existing state is left exactly as it was."""
    log, data = exported_state(tmp_path)
    forged = data.replace(log.vkey.encode(), Log().vkey.encode())

    new = tmp_path / "new"
    new.mkdir()
    db_new = str(new / "witness.db")
    assert "does not verify" in fails(1, "import-state", "-", "--db", db_new, stdin=forged)
    truncated = data.rpartition(b"end ")[0]
    assert "truncated" in fails(2, "import-state", "-", "--db", db_new, stdin=truncated)
    assert "header" in fails(2, "import-state", "-", "--db", db_new, stdin=b"nonsense\n")
    assert os.listdir(new) == []

    # The database fails after the file was created: everything it made goes, but not a
    # file that was there before (a lock file left by an earlier run).
    def broken(self: object, data: object) -> None:
        raise BackendError("disk on fire")

    monkeypatch.setattr(SQLState, "import_state", broken)
    assert "disk on fire" in fails(4, "import-state", "-", "--db", db_new, stdin=data)
    assert os.listdir(new) == []
    (new / "witness.db-writer.lock").write_bytes(b"")
    fails(4, "import-state", "-", "--db", db_new, stdin=data)
    assert os.listdir(new) == ["witness.db-writer.lock"]
    # An existing state is never removed, and stays as it was.
    before = {p: (tmp_path / "a" / p).read_bytes() for p in os.listdir(tmp_path / "a")}
    db_a = str(tmp_path / "a" / "witness.db")
    fails(4, "import-state", "-", "--db", db_a, stdin=data)
    fails(1, "import-state", "-", "--db", db_a, stdin=forged)
    assert {p: (tmp_path / "a" / p).read_bytes() for p in os.listdir(tmp_path / "a")} == before
    monkeypatch.undo()
    assert ok("import-state", "-", "--db", db_new, stdin=data) == b"imported 1 log\n"
    assert ok("export-state", "--db", db_new) == data


def test_export_state_errors_name_the_file_given(tmp_path: Path) -> None:
    """export-state writes through a temporary file; an error names --out, not that file."""
    ok("init", "--name", WITNESS, "--dir", str(tmp_path / "a"))
    db = str(tmp_path / "a" / "witness.db")
    missing = str(tmp_path / "no" / "such" / "x.txt")
    err = fails(2, "export-state", "--out", missing, "--db", db)
    assert err == f"tlog-witness: export-state: {missing}: No such file or directory\n"
    (tmp_path / "out").mkdir()
    directory = str(tmp_path / "out")
    err = fails(2, "export-state", "--out", directory, "--db", db)
    assert err == f"tlog-witness: export-state: {directory}: Is a directory\n"
    assert os.listdir(tmp_path / "out") == []  # the temporary file is gone
    assert sorted(os.listdir(tmp_path)) == ["a", "out"]


# --- pull-logs -----------------------------------------------------------------------------------


def log_list(*entries: str) -> bytes:
    return ("# a witness-network list\n#\nlogs/v0\n\n" + "\n".join(entries)).encode()


def entry(
    vkey: str, qpd: int = 86400, origin: str | None = None, bastion: str | None = None
) -> str:
    lines = [f"vkey {vkey}"]
    if origin is not None:
        lines.append(f"origin {origin}")
    if bastion is not None:
        lines.append(f"bastion {bastion}")
    lines += [f"qpd {qpd}", "contact ops (at) example.com"]
    return "".join(line + "\n" for line in lines)


# A real ECDSA log key (sigstore's Rekor, from transparency-dev/witness's omniwitness/logs.yaml).
ECDSA_VKEY = next(
    line.split("PublicKey: ", 1)[1]
    for line in (ROOT / "testdata" / "transparency-dev-witness" / "omniwitness_logs.yaml")
    .read_text()
    .splitlines()
    if "PublicKey: rekor.sigstore.dev+" in line
)


def test_pull_logs_from_a_file(tmp_path: Path, db: str) -> None:
    a, b = Log("a.example/log"), Log("b.example/log")
    c_key = generate_key("c.example/key", TYPE_SUBTREE_V1)
    listing = tmp_path / "list"
    listing.write_bytes(
        log_list(
            entry(a.vkey, 24),
            entry(b.vkey, 8640, origin="none", bastion="none"),
            entry(
                c_key.vkey(), 100, origin="c.example/log with spaces", bastion="https://b.example/"
            ),
            entry(ECDSA_VKEY, 10, origin="rekor.sigstore.dev - 1"),
        )
    )
    out = ok("pull-logs", "--dry-run", str(listing), "--db", db).decode()
    assert out.endswith(
        "3 added, 0 keys added, 0 quotas changed, 0 unchanged, 1 skipped"
        " (dry run: nothing written)\n"
    )
    assert ok("list-logs", "--db", db) == b""

    lines = ok("pull-logs", str(listing), "--db", db).decode().splitlines()
    assert lines == [
        f'added "a.example/log": qpd 24, key {a.vkey}',
        f'added "b.example/log": qpd 8640, key {b.vkey}',
        f'added "c.example/log with spaces": qpd 100, key {c_key.vkey()}',
        'skipped "rekor.sigstore.dev - 1" (line 21): key type 0x02 (ECDSA): logs here sign with'
        " 0x01 (Ed25519) or 0x06 (ML-DSA-44)",
        "3 added, 0 keys added, 0 quotas changed, 0 unchanged, 1 skipped",
    ]
    logs = {
        j["origin"]: j for j in map(json.loads, ok("list-logs", "--json", "--db", db).splitlines())
    }
    assert set(logs) == {"a.example/log", "b.example/log", "c.example/log with spaces"}
    assert logs["c.example/log with spaces"]["keys"] == [c_key.vkey()]
    assert logs["a.example/log"]["qpd"] == 24

    # Idempotent.
    assert (
        ok("pull-logs", str(listing), "--db", db)
        .decode()
        .endswith("0 added, 0 keys added, 0 quotas changed, 3 unchanged, 1 skipped\n")
    )

    # A new key for a (disabled) log and a new quota: added and updated, never re-enabled; logs
    # absent from the list and keys absent from it are kept.
    ok("disable-log", "a.example/log", "--db", db)
    a2 = generate_key("a.example/log", TYPE_ED25519)
    listing.write_bytes(log_list(entry(a2.vkey(), 48)))
    lines = ok("pull-logs", str(listing), "--db", db).decode().splitlines()
    assert lines == [
        f'new key for "a.example/log": {a2.vkey()} (disabled, stays disabled)',
        'qpd of "a.example/log": 24 -> 48 (disabled, stays disabled)',
        "0 added, 1 keys added, 1 quotas changed, 0 unchanged, 0 skipped",
    ]
    logs = {
        j["origin"]: j for j in map(json.loads, ok("list-logs", "--json", "--db", db).splitlines())
    }
    assert len(logs) == 3
    assert logs["a.example/log"]["disabled"] is True
    assert sorted(logs["a.example/log"]["keys"]) == sorted([a.vkey, a2.vkey()])
    assert logs["a.example/log"]["qpd"] == 48

    # A malformed list writes nothing and names the line.
    listing.write_bytes(log_list(entry(Log("d.example/log").vkey), "vkey broken\n"))
    err = fails(2, "pull-logs", str(listing), "--db", db)
    assert "line 9" in err
    assert len(ok("list-logs", "--json", "--db", db).splitlines()) == 3


def test_pull_logs_from_stdin(db: str) -> None:
    a = Log("a.example/log")
    out = ok("pull-logs", "-", "--db", db, stdin=log_list(entry(a.vkey)))
    assert out.startswith(b'added "a.example/log"')


class _ListHandler(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        if self.path != "/log-list.1":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def list_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ListHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_pull_logs_from_a_url(db: str, list_server: str) -> None:
    a = Log("a.example/log")
    _ListHandler.body = log_list(entry(a.vkey, 1440))
    out = ok("pull-logs", list_server + "/log-list.1", "--timeout", "10", "--db", db)
    assert out.startswith(b'added "a.example/log": qpd 1440')
    err = fails(4, "pull-logs", list_server + "/missing", "--db", db)
    assert "HTTP status 404" in err
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = fails(4, "pull-logs", f"http://127.0.0.1:{port}/x", "--timeout", "5", "--db", db)
    # The socket's own words, not requests' repr of urllib3's wrapping of them.
    assert err == f"tlog-witness: pull-logs: http://127.0.0.1:{port}/x: ConnectionError:" + (
        " Connection refused\n"
    )


# --- the logs/v0 parser --------------------------------------------------------------------------


def test_parse_log_list_documented_example_shape() -> None:
    a = Log("tlog.foo.org")
    b = Log("bar.org/tlog")
    data = (
        "#\n# List:      10qps-1Mlogs\n# Revision:  123\n#\nlogs/v0\n\n"
        "# 1st list item -- foo's log\n"
        f"vkey {a.vkey}\norigin none\nqpd 86400\nbastion https://bastion.tlog.foo.org/\n"
    )
    # The document's example puts bastion after qpd, against its own "order is significant"
    # list (vkey, origin, bastion, qpd, contact): the list order is the one enforced.
    with pytest.raises(MalformedError, match=r"line 11.*out of order"):
        parse_log_list(data.encode())
    data = (
        "logs/v0\n"
        f"vkey {a.vkey}\norigin none\nbastion https://bastion.tlog.foo.org/\nqpd 86400\n"
        "contact https://tlog.foo.org/contact\n\n"
        f"vkey {b.vkey}\norigin something-not-equal-to-vkey-keyname\nbastion none\nqpd 24\n"
        "contact sysadmin (at) bar.org\n"
    )
    assert parse_log_list(data.encode()) == [
        ListedLog(
            "tlog.foo.org", a.vkey, 86400, "https://tlog.foo.org/contact",
            "https://bastion.tlog.foo.org/", 2,
        ),
        ListedLog(
            "something-not-equal-to-vkey-keyname", b.vkey, 24, "sysadmin (at) bar.org", None, 8
        ),
    ]  # fmt: skip
    assert parse_log_list(b"logs/v0\n") == []
    assert parse_log_list(b"# only a header\n\nlogs/v0\n# no logs yet\n") == []


# Deterministic: parametrized test IDs must be equal in every pytest-xdist worker.
_V = generate_key("x.example/log", TYPE_ED25519, hashlib.sha256(b"x.example/log").digest()).vkey()


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"", "no 'logs/v0' header"),
        (b"# nothing\n", "no 'logs/v0' header"),
        (b"logs/v1\n", "line 1: expected the header"),
        (b"logs/v0", "does not end in a newline"),
        (b"logs/v0\r\n", "line 1: contains a carriage return"),
        (b"logs/v0 \n", "line 1: has white space"),
        (b"logs/v0\n  \n", "line 2: has white space"),
        (b"\xfflogs/v0\n", "not valid UTF-8"),
        (f"logs/v0\nvkey {_V}\nqpd 1\n".encode(), "line 2: the log entry has no 'contact'"),
        (f"logs/v0\nvkey {_V}\ncontact c\n".encode(), "line 3: 'contact' before 'qpd'"),
        (f"logs/v0\nvkey {_V}\n".encode(), "line 2: the log entry has no 'qpd'"),
        (f"logs/v0\nvkey {_V}\nqpd 1\nqpd 2\ncontact c\n".encode(), "line 4: 'qpd' is repeated"),
        (f"logs/v0\nvkey {_V}\nqpd 1\norigin o\ncontact c\n".encode(), "line 4: 'origin' is"),
        (f"logs/v0\nvkey {_V}\nqpd 0\ncontact c\n".encode(), "line 3: qpd must be at least 1"),
        (f"logs/v0\nvkey {_V}\nqpd 010\ncontact c\n".encode(), "line 3: qpd '010' has a leading"),
        (f"logs/v0\nvkey {_V}\nqpd  1\ncontact c\n".encode(), "line 3: qpd ' 1'"),
        (f"logs/v0\nvkey {_V}\nqpd 1\ncontact\n".encode(), "line 4: 'contact' has no value"),
        (f"logs/v0\nvkey {_V}\nqpd 1\ncontact c\nfoo bar\n".encode(), "line 5: unknown keyword"),
        (b"logs/v0\nqpd 1\n", "line 2: 'qpd' before any 'vkey'"),
        (b"logs/v0\nvkey nonsense\nqpd 1\ncontact c\n", "line 2: vkey 'nonsense'"),
        (b"logs/v0\nvkey a+0000000g+AQ==\nqpd 1\ncontact c\n", "line 2: vkey: key ID"),
        (f"logs/v0\nvkey {_V[:-2]}\nqpd 1\ncontact c\n".encode(), "line 2: vkey: the key"),
        (f"logs/v0\nvkey {_V[:16]}0{_V[17:]}\nqpd 1\ncontact c\n".encode(), "line 2"),
        (
            f"logs/v0\nvkey {_V}\nqpd 1\ncontact c\nvkey {_V}\nqpd 2\ncontact d\n".encode(),
            "line 5: log x.example/log is listed twice (first at line 2)",
        ),
        (
            f"logs/v0\nvkey {_V}\norigin a\x01b\nqpd 1\ncontact c\n".encode(),
            "line 3: contains a control",
        ),
        (
            f"logs/v0\nvkey {_V}\nbastion a b\nqpd 1\ncontact c\n".encode(),
            "line 3: the bastion URL",
        ),
    ],
)
def test_parse_log_list_refuses(data: bytes, needle: str) -> None:
    with pytest.raises(MalformedError) as e:
        parse_log_list(data, "list")
    assert needle in str(e.value), str(e.value)


def test_parse_log_list_skips_key_types_a_log_cannot_use() -> None:
    witness_key = generate_key("w.example/w", TYPE_COSIGNATURE_V1)
    data = log_list(entry(ECDSA_VKEY, 10), entry(witness_key.vkey(), 10))
    got = parse_log_list(data)
    assert [g.origin for g in got] == ["rekor.sigstore.dev", "w.example/w"]
    assert got[0].unsupported is not None and "ECDSA" in got[0].unsupported
    assert got[1].unsupported is not None and "cosignature/v1" in got[1].unsupported


_ORIGIN_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp")),
    min_size=1,
    max_size=20,
).filter(lambda o: o != "none")  # the format's "no origin line" spelling, not an origin


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(_ORIGIN_TEXT, st.integers(1, 2**63 - 1), st.booleans(), st.booleans()),
        max_size=4,
        unique_by=lambda t: t[0],
    )
)
def test_parse_log_list_round_trip(items: list[tuple[str, int, bool, bool]]) -> None:
    keys = {
        o: generate_key("k.example", TYPE_ED25519, hashlib.sha256(o.encode()).digest())
        for o, *_ in items
    }
    text = ""
    expected = []
    line = 2
    for origin, qpd, with_bastion, comment in items:
        vkey = keys[origin].vkey()
        e = entry(vkey, qpd, origin=origin, bastion="https://b.example/" if with_bastion else None)
        if comment:
            text += "# a comment\n\n"
            line += 2
        text += e
        expected.append(
            ListedLog(
                origin,
                vkey,
                qpd,
                "ops (at) example.com",
                "https://b.example/" if with_bastion else None,
                line,
            )
        )
        line += e.count("\n")
    assert parse_log_list(("logs/v0\n" + text).encode()) == expected


# --- witness.toml --------------------------------------------------------------------------------


def test_config_defaults_match_the_server() -> None:
    from witness.server import DEFAULT_READ_TIMEOUT

    assert wconfig.DEFAULT_MAX_BODY == MAX_REQUEST_SIZE
    assert wconfig.DEFAULT_READ_TIMEOUT == DEFAULT_READ_TIMEOUT


def test_every_setting_is_documented_and_in_the_starter_file() -> None:
    doc = wconfig.__doc__ or ""
    text = starter_config(WITNESS, keys=("witness.key",), db="witness.db")
    table = tomllib.loads(text)
    for s in SETTINGS:
        assert f"``{s.name}``" in doc, s.name
        assert s.name in table or f"# {s.name} = " in text, s.name
    cfg = parse_config(text.encode(), where="w.toml", base_dir="/etc/w")
    assert cfg.name == WITNESS and cfg.listen == ("127.0.0.1", 7380)
    assert cfg.db == "/etc/w/witness.db" and cfg.postgres is None
    assert cfg.keys == ("/etc/w/witness.key",)
    assert cfg.submission_prefix == "" and cfg.max_body == MAX_REQUEST_SIZE
    assert cfg.read_timeout == 10 and cfg.config_ttl == 1 and cfg.shutdown_timeout == 5
    assert cfg.status_endpoints is True and cfg.workers == 1
    pg = starter_config(WITNESS, keys=("/k", "m.key"), postgres="postgresql://u:p@h/d")
    cfg = parse_config(pg.encode(), where="w.toml", base_dir="/etc/w")
    assert cfg.postgres == "postgresql://u:p@h/d" and cfg.db is None
    assert cfg.keys == ("/k", "/etc/w/m.key")


@settings(max_examples=50, deadline=None)
@given(
    name=st.text(
        alphabet=st.characters(
            blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp"), blacklist_characters="+\u0085"
        ),
        min_size=1,
        max_size=20,
    ),
    path=st.text(
        alphabet=st.characters(codec="utf-8", blacklist_characters="\x00"),
        min_size=1,
    ),
)
def test_starter_config_round_trips_any_name_and_path(name: str, path: str) -> None:
    try:
        text = starter_config(name, keys=(path,), db=path)
    except MalformedError:
        return  # not a key name (white space Python does not class as Zs, say)
    cfg = parse_config(text.encode(), where="w.toml", base_dir="/base")
    assert cfg.name == name
    expected = path if os.path.isabs(path) else os.path.join("/base", path)
    assert cfg.db == expected and cfg.keys == (expected,)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("nmae = 'x'\n", "unknown setting 'nmae'"),
        ("[server]\nlisten = 'a:1'\n", "unknown setting 'server'"),
        ("listen = 80\n", "listen must be a string, not an integer"),
        ("listen = 'nohost'\n", "HOST:PORT"),
        ("db = 'a'\npostgres = 'b'\n", "not both"),
        ("db = ''\n", "non-empty path"),
        ("postgres = ''\n", "postgres is empty"),
        ("keys = 'witness.key'\n", "keys must be an array"),
        ("keys = []\n", "keys is empty"),
        ("keys = [1]\n", "keys[0] must be a string"),
        ("max_body = 0\n", "max_body must be at least 1"),
        ("max_body = 1.5\n", "max_body must be an integer, not a float"),
        ("max_body = true\n", "max_body must be an integer, not a boolean"),
        ("read_timeout = 0\n", "> 0"),
        ("read_timeout = nan\n", "finite"),
        ("read_timeout = '10'\n", "read_timeout must be a number, not a string"),
        ("config_ttl = -1\n", ">= 0"),
        ("shutdown_timeout = inf\n", "finite"),
        ("status_endpoints = 1\n", "status_endpoints must be a boolean"),
        ("workers = 0\n", "workers must be from 1 to 256"),
        ("workers = 257\n", "workers must be from 1 to 256"),
        ("workers = '2'\n", "workers must be an integer, not a string"),
        ("workers = true\n", "workers must be an integer, not a boolean"),
        ("workers = 2.0\n", "workers must be an integer, not a float"),
        ("submission_prefix = '/a/'\n", "trailing slash"),
        ("monitoring_prefix = 'a'\n", "monitoring_prefix"),
        ("name = 'a b'\n", "name: key name"),
        ("name = 1979-05-27\n", "name must be a string, not a date"),
        ("listen = 'a:1\n", "not valid TOML"),
    ],
)
def test_config_refuses(text: str, needle: str) -> None:
    with pytest.raises(MalformedError) as e:
        parse_config(text.encode(), where="w.toml", base_dir="/")
    assert needle in str(e.value), str(e.value)
    assert str(e.value).startswith("w.toml")


def test_bad_config_file_is_exit_2_naming_the_file(tmp_path: Path) -> None:
    config = tmp_path / "witness.toml"
    config.write_text("listen = 'x'\n")
    err = fails(2, "serve", "--check", "--config", str(config))
    assert str(config) in err and "HOST:PORT" in err


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("0.0.0.0:7380", ("0.0.0.0", 7380)),
        ("[::1]:443", ("::1", 443)),
        ("witness.example:65535", ("witness.example", 65535)),
    ],
)
def test_parse_listen(text: str, want: tuple[str, int]) -> None:
    assert parse_listen(text) == want
    assert wconfig.format_listen(*want) == text


@pytest.mark.parametrize(
    "text", ["", ":80", "host", "host:", "host:+1", "host:080", "[]:1", "[::1:1", "a b:1", "::1:80"]
)
def test_parse_listen_refuses(text: str) -> None:
    with pytest.raises(MalformedError):
        parse_listen(text)


def test_starter_config_preconditions() -> None:
    with pytest.raises(UsageError):
        starter_config(WITNESS, keys=("k",))
    with pytest.raises(UsageError):
        starter_config(WITNESS, keys=(), db="d")


# --- PostgreSQL ----------------------------------------------------------------------------------


def test_init_and_manage_logs_on_postgres(tmp_path: Path, pg_schema: Any) -> None:
    url = pg_schema.conninfo
    vkeys = ok("init", "--name", WITNESS, "--dir", str(tmp_path), "--postgres", url).decode()
    cfg = load_config(str(tmp_path / "witness.toml"))
    assert cfg.postgres == url and cfg.db is None
    config = str(tmp_path / "witness.toml")
    log = Log()
    ok("add-log", ORIGIN, "--key", log.vkey, "--config", config)
    assert json.loads(ok("list-logs", "--json", "--config", config))["keys"] == [log.vkey]
    got = check_settings("--config", config)
    assert got["postgres"] == ["(set)"] and got["vkey"] == vkeys.splitlines()
    data = ok("export-state", "--config", config)
    assert (
        ok("import-state", "-", "--db", str(tmp_path / "copy.db"), stdin=data)
        == b"imported 1 log\n"
    )


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs a directory no one can create in")
def test_a_state_where_no_file_can_be_created_is_one_usage_error(tmp_path: Path) -> None:
    """The database's directory must be writable (the writers' lock file, SQLite's -wal and
    -shm live there): otherwise exit 2 with one line naming the path and the reason, and no
    witness directory left half made."""
    out = tmp_path / "w"
    err = fails(2, "init", "--name", WITNESS, "--db", "/proc/witness.db", "--dir", str(out))
    assert "/proc/witness.db-writer.lock" in err and "must exist and be writable" in err, err
    assert not out.exists() or os.listdir(out) == [], os.listdir(out)
