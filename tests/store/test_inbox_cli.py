"""``tlog-store event …`` and ``tlog-verify proof`` on inbox receipts, as a user types them.

The verbs are store/cli_inbox.py's (its docstring is the reference), the receipt format
tlog/inbox.py's and docs/formats.md's; each verb runs in-process on both backends, and every
mistake a user can make gets one line on standard error with the documented exit status.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

import store.cli
import verifier.cli
from store.open import init_store
from tests import clirunner
from tests.conftest import Backend
from tlog.keys import generate_key

_clean_env = clirunner.clean_env_fixture(("TLOG_STORE_DB", "TLOG_STORE_POSTGRES", "TLOG_STORE_KEY"))

EVENT = {
    "source": "shop",
    "id": "pay-1",
    "kind": "Paid",
    "keys": [["order", "A-1"]],
    "payload": {"cents": 100},
}


def _line(obj: object) -> bytes:
    return json.dumps(obj).encode() + b"\n"


class Cli:
    """``tlog-store`` against one backend, with its key file."""

    def __init__(self, backend: Backend, tmp: Path) -> None:
        self.key = tmp / "log.key"
        key = generate_key("example.com/log")
        self.key.write_text(key.format())
        init_store(db=backend.db, postgres=backend.postgres, origin="example.com/log", key=key)
        where = ["--db", backend.db] if backend.db else ["--postgres", str(backend.postgres)]
        self.where = [*where, "--key", str(self.key)]

    def run(self, argv: Sequence[str], stdin: bytes = b"") -> clirunner.Result:
        return clirunner.call_main(store.cli.main, [*argv, *self.where], stdin)

    def ok(self, argv: Sequence[str], stdin: bytes = b"") -> bytes:
        return clirunner.expect_ok(self.run(argv, stdin))

    def json(self, argv: Sequence[str], stdin: bytes = b"") -> dict[str, object]:
        out = json.loads(self.ok([*argv, "--json"], stdin))
        assert isinstance(out, dict)
        return out


@pytest.fixture
def cli(backend: Backend, tmp_path: Path) -> Cli:
    return Cli(backend, tmp_path)


def test_buffer_wait_resume_receipt(cli: Cli, tmp_path: Path) -> None:
    assert cli.ok(["event", "buffer"], _line(EVENT)) == b"shop/pay-1 position 0 new\n"
    assert cli.ok(["event", "buffer"], _line(EVENT)) == b"shop/pay-1 position 0 duplicate\n"
    cli.ok(["acquire", "o-1", "--owner", "w", "--ttl", "60"])
    wait = ["o-1", "--effect-key", "pay", "--kind", "Paid", "--match", "order=A-1"]
    got = cli.json(["event", "wait", *wait])
    claimed = got["claimed"]
    assert isinstance(claimed, dict) and claimed["event"]["id"] == "pay-1"
    assert cli.ok(["event", "resume", "o-1", "shop", "pay-1", "--epoch", "1"]) == b"o-1 record 1\n"
    # Idempotent: the same record, not a second one.
    assert cli.ok(["event", "resume", "o-1", "shop", "pay-1", "--epoch", "1"]) == b"o-1 record 1\n"
    stats = cli.json(["event", "stats"])
    assert stats == {"size": 1, "live": 0, "claimed": 1, "dead": 0, "erased": 0, "waits": 0}
    receipt = tmp_path / "pay-1.receipt"
    cli.ok(["event", "receipt", "shop", "pay-1", "--out", str(receipt)])
    vkey = cli.ok(["event", "vkey"]).decode().strip()
    assert vkey.startswith("example.com/log/default/inbox+")
    event_file = tmp_path / "pay-1.json"
    event_file.write_bytes(_line(EVENT))
    verdict = clirunner.call_main(
        verifier.cli.main, ["proof", str(receipt), "--log-vkey", vkey, "--event", str(event_file)]
    )
    assert verdict.code == 0 and verdict.out.startswith(b"tlog-verify proof: VALID"), verdict
    # Another event (one cent more) is not the receipt's.
    event_file.write_bytes(_line({**EVENT, "payload": {"cents": 101}}))
    forged = clirunner.call_main(
        verifier.cli.main, ["proof", str(receipt), "--log-vkey", vkey, "--event", str(event_file)]
    )
    assert forged.code == 1 and "its payload differs" in forged.err
    # An event file that does not parse is the auditor's unusable input, not a verdict.
    for junk in (b"not json\n", b"\xff\n", b'{"source": "shop"}\n'):
        event_file.write_bytes(junk)
        unusable = clirunner.call_main(
            verifier.cli.main,
            ["proof", str(receipt), "--log-vkey", vkey, "--event", str(event_file)],
        )
        assert unusable.code == 2 and "--event" in unusable.err, (junk, unusable)
    # Erasure keeps the receipt valid (the leaf commits to the payload's hash).
    cli.ok(["event", "erase", "shop", "pay-1"])
    event_file.write_bytes(_line(EVENT))
    again = clirunner.call_main(
        verifier.cli.main, ["proof", str(receipt), "--log-vkey", vkey, "--event", str(event_file)]
    )
    assert again.code == 0
    shown = json.loads(cli.ok(["event", "show", "shop", "pay-1"]))
    assert shown["erased"] is True and "payload" not in shown


def test_wait_first_then_the_event_claims_itself(cli: Cli) -> None:
    wait = ["o-2", "--effect-key", "pay", "--kind", "Paid", "--match", "order=A-2"]
    assert cli.ok(["event", "wait", *wait]) == b"o-2 waits\n"
    listed = cli.json(["event", "waiting"])["waiting"]
    assert isinstance(listed, list) and [w["run"] for w in listed] == ["o-2"]
    ev = {**EVENT, "id": "pay-2", "keys": [["order", "A-2"]]}
    out = cli.json(["event", "buffer"], _line(ev))
    buffered = out["buffered"]
    assert isinstance(buffered, list) and len(buffered) == 1
    assert buffered[0]["matched"]["run"] == "o-2"
    assert cli.json(["event", "waiting"]) == {"waiting": []}
    # The claim is recoverable by its run, by nobody else.
    again = cli.json(["event", "claim", *wait])["claimed"]
    assert isinstance(again, dict) and again["recovered"] is True
    other = ["o-3", "--effect-key", "pay", "--kind", "Paid", "--match", "order=A-2"]
    assert cli.run(["event", "claim", *other]).code == 1
    assert cli.ok(["event", "unsubscribe", "o-2"]) == b"0 wait rows removed, 1 payload shed\n"


def test_deliver_match_sweep_dead_letters(cli: Cli) -> None:
    ev = {**EVENT, "id": "t-1", "keys": [["order", "B"]]}
    assert cli.run(["event", "deliver", "o-4"], _line(ev)).out == b"not-waiting\n"
    cli.ok(
        ["event", "subscribe", "o-4", "--effect-key", "e", "--kind", "Paid", "--match", "order=B"]
    )
    assert cli.ok(["event", "deliver", "o-4"], _line(ev)) == b"matched\n"
    assert cli.ok(["event", "deliver", "o-4"], _line(ev)) == b"matched\n"
    assert cli.run(["event", "deliver", "o-5"], _line(ev)).code == 1
    lone = {**EVENT, "id": "lone", "keys": [["order", "C"]]}
    cli.ok(["event", "buffer", "--no-match"], _line(lone))
    nobody = cli.run(["event", "match", "shop", "lone"])
    assert (nobody.code, nobody.out) == (1, b"nobody waits for it\n")
    taken = cli.run(["event", "match", "shop", "t-1"])
    assert (taken.code, taken.out) == (1, b"claimed by o-4 already\n")
    unknown = cli.run(["event", "match", "shop", "none"])
    assert (unknown.code, unknown.out) == (1, b"no event shop/none is buffered\n")
    swept = cli.json(["event", "sweep", "--older-than", str(2**40), "--reason", "expired"])
    assert swept["dead_lettered"] == 1
    dead = cli.json(["event", "dead-letters"])["dead_letters"]
    assert isinstance(dead, list) and [(d["id"], d["dead_reason"]) for d in dead] == [
        ("lone", "expired")
    ]
    assert cli.run(["event", "match", "shop", "lone"]).out == b"a dead letter\n"
    assert cli.ok(["event", "erase", "shop", "lone"]) == b"shop/lone payload erased\n"


@pytest.mark.parametrize(
    ("argv", "stdin", "status", "says"),
    [
        (["event", "buffer"], b"", 2, "holds no event"),
        (["event", "buffer"], b"{", 2, "line 1: not JSON"),
        (["event", "buffer"], b'{"source":"shop"}\n', 2, "line 1: an event has no 'id'"),
        (["event", "buffer"], _line({**EVENT, "extra": 1}), 2, "no member 'extra'"),
        (["event", "buffer"], _line({**EVENT, "payload": 1.5}), 2, "not an integer"),
        (["event", "buffer"], _line({**EVENT, "keys": []}), 2, "1-16"),
        (["event", "buffer"], _line({**EVENT, "keys": [["a", "b"], ["a", "b"]]}), 2, "twice"),
        (["event", "buffer"], b"\xff\n", 2, "not UTF-8"),
        (["event", "buffer", "/nonexistent/x"], b"", 2, "No such file"),
        (
            ["event", "wait", "r", "--effect-key", "e", "--kind", "K", "--match", "nope"],
            b"",
            2,
            "NAMESPACE=VALUE",
        ),
        (
            ["event", "wait", "bad run", "--effect-key", "e", "--kind", "K", "--match", "a=b"],
            b"",
            2,
            "run ID",
        ),
        (["event", "resume", "r", "shop", "none", "--epoch", "1"], b"", 2, "no event shop/none"),
        (["event", "resume", "r", "shop", "none", "--epoch", "0"], b"", 2, "at least 1"),
        (["event", "sweep"], b"", 2, "one of --older-than"),
        (["event", "dead-letters", "--limit", "0"], b"", 2, "at least 1"),
        (["event", "dead-letters", "--limit", "10001"], b"", 2, "at most 10000"),
        (["event", "waiting", "--limit", "100000"], b"", 2, "at most 10000"),
        (["event", "show", "shop", "none"], b"", 2, "no event shop/none"),
        (["event", "erase", "shop", "none"], b"", 2, "no event shop/none"),
        (["event", "receipt", "shop", "none"], b"", 2, "no event shop/none"),
        (["append", "r", "--epoch", "1", "--kind", "EventDelivered"], b"", 2, "reserved"),
    ],
)
def test_mistakes_are_one_line(
    cli: Cli, argv: list[str], stdin: bytes, status: int, says: str
) -> None:
    err = clirunner.one_error_line(cli.run(argv, stdin), status, "tlog-store: ")
    assert says in err, err


def test_a_stale_epoch_is_fenced(cli: Cli) -> None:
    cli.ok(["event", "buffer"], _line(EVENT))
    cli.ok(["acquire", "o-1", "--owner", "w", "--ttl", "60"])
    cli.ok(["event", "wait", "o-1", "--effect-key", "p", "--kind", "Paid", "--match", "order=A-1"])
    err = clirunner.one_error_line(
        cli.run(["event", "resume", "o-1", "shop", "pay-1", "--epoch", "7"]), 3, "tlog-store: "
    )
    assert "epoch" in err


def test_a_run_proof_is_not_a_receipt(cli: Cli, tmp_path: Path) -> None:
    cli.ok(["event", "buffer"], _line(EVENT))
    receipt = tmp_path / "r"
    cli.ok(["event", "receipt", "shop", "pay-1", "--out", str(receipt)])
    vkey = cli.ok(["event", "vkey"]).decode().strip()
    res = clirunner.call_main(
        verifier.cli.main, ["proof", str(receipt), "--log-vkey", vkey, "--head", "A" * 43 + "="]
    )
    clirunner.one_error_line(res, 2, "tlog-verify: ")
    # The journal's log key does not verify the inbox log's checkpoints.
    journal_vkey = cli.ok(["vkey"]).decode().strip()
    wrong = clirunner.call_main(
        verifier.cli.main, ["proof", str(receipt), "--log-vkey", journal_vkey]
    )
    assert wrong.code == 1
