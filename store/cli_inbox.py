"""``tlog-store event …``: the inbox from the shell (:mod:`store.inbox`), JSON in and out.

Verbs (every one takes the store options)::

    tlog-store event buffer [FILE|-] [--no-match] [--json]     events, one JSON object a line
    tlog-store event wait RUN --effect-key K --kind KIND --match NS=VALUE... [--case C]
                          [--step N] [--json]                  claim, or register the wait
    tlog-store event subscribe RUN --effect-key K --kind KIND --match NS=VALUE... [--case C]
                          [--step N]                           register only
    tlog-store event claim RUN --effect-key K --kind KIND --match NS=VALUE... [--json]
    tlog-store event match SOURCE ID [--json]                  the broadcast path
    tlog-store event deliver RUN [FILE|-] [--json]             a targeted delivery
    tlog-store event resume RUN SOURCE ID --epoch E [--json]   journal the delivery
    tlog-store event unsubscribe RUN [--effect-key K] [--json]
    tlog-store event sweep (--older-than T | --grace SECONDS) [--reason R] [--json]
    tlog-store event dead-letters [--limit N] [--before POSITION] [--json]
    tlog-store event waiting [--limit N] [--after NUMBER] [--json]
    tlog-store event show SOURCE ID                            the stored event, JSON
    tlog-store event erase SOURCE ID
    tlog-store event stats [--json]
    tlog-store event receipt SOURCE ID [--out FILE]
    tlog-store event checkpoint [--json]                       sign the inbox log's checkpoint
    tlog-store event vkey                                      the inbox log's vkey
    tlog-store event publish [FILE] [--witness URL=VKEY]... [--policy FILE]   as ``publish``

An event's JSON form is :mod:`tlog.inbox`'s: ``{"source", "id", "kind", "keys": [[ns, value],
…], "payload"}``. Exit statuses are ``tlog-store``'s: 0 done, 1 (``claim``, ``match``: nothing
claimed; ``deliver``: not delivered), 2 bad input, 3 refused by the store's rules, 4 backend.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from store import cliparser as ui
from store.cliparser import JSON, KEY, KEY_JSON, PLAIN, verb
from store.inbox.core import MAX_LIMIT, Inbox
from store.inbox.values import Claimed, Wait, make_wait
from tlog.cli.files import input_name, read_input
from tlog.cli.run import Verb, decimal_arg, utf8_arg, write_stdout
from tlog.errors import MalformedError, UsageError
from tlog.inbox import MAX_PAYLOAD, Event, event_from_json
from tlog.journal import parse_json

EXIT_OK = 0
EXIT_NONE = 1
MAX_EVENTS_FILE = 64 * (MAX_PAYLOAD + 16 * 1024)
"""Bytes of a file of events ``event buffer`` reads."""
MAX_BATCH = 10_000
"""Events ``event buffer`` takes from one file (they are buffered in one transaction)."""


@contextmanager
def _inbox(args: argparse.Namespace, *, key: bool = False) -> Iterator[Inbox]:
    with ui.open_store_of(args, key=key) as store:
        yield store.inbox


def _line(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"


def _events(path: str) -> list[Event]:
    """The events of a JSON Lines file (``-``: standard input), each strictly parsed."""
    data = read_input(path, MAX_EVENTS_FILE)
    events = []
    for n, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            events.append(event_from_json(parse_json(raw.decode("utf-8"))))
        except UnicodeDecodeError:
            raise MalformedError(f"{input_name(path)} line {n}: not UTF-8") from None
        except MalformedError as e:
            raise MalformedError(f"{input_name(path)} line {n}: {e}") from None
        if len(events) > MAX_BATCH:
            raise MalformedError(f"{input_name(path)} holds more than {MAX_BATCH} events")
    if not events:
        raise MalformedError(f"{input_name(path)} holds no event")
    return events


def _one_event(path: str) -> Event:
    events = _events(path)
    if len(events) != 1:
        raise MalformedError(f"{input_name(path)} holds {len(events)} events, not one")
    return events[0]


def _key(text: str) -> tuple[str, str]:
    text = utf8_arg(text, "--match")
    if "=" not in text:
        raise MalformedError(f"--match {text!r} is not NAMESPACE=VALUE")
    ns, value = text.split("=", 1)
    return ns, value


def _wait(args: argparse.Namespace) -> Wait:
    run = ui.parse_run(args.run)
    step = 0 if args.step is None else decimal_arg(args.step, "--step")
    return make_wait(
        run,
        utf8_arg(args.effect_key, "--effect-key"),
        utf8_arg(args.kind, "--kind"),
        [_key(k) for k in args.match],
        case=None if args.case is None else utf8_arg(args.case, "--case"),
        step=step,
    )


def _label(text: str, what: str) -> str:
    return utf8_arg(text, what)


def _claimed_json(c: Claimed) -> dict[str, Any]:
    return {"event": c.event.to_json(), "wait": c.wait.to_json(), "recovered": c.recovered}


def _claimed_text(c: Claimed) -> str:
    how = "re-claimed" if c.recovered else "claimed"
    return f"{how} {c.event.source}/{c.event.id} (position {c.event.position}) for {c.wait.run}\n"


# --- handlers -------------------------------------------------------------------------------


def _cmd_buffer(args: argparse.Namespace) -> int:
    events = _events(args.file)
    with _inbox(args) as box:
        done = box.buffer_many(events, match=not args.no_match)
    lines = []
    for b in done:
        what = "duplicate" if b.duplicate else "new"
        if b.matched is not None:
            what += f", claimed for {b.matched.run} ({b.matched.effect_key})"
        lines.append(f"{b.source}/{b.id} position {b.position} {what}\n")
    ui.output(args, {"buffered": [b.to_json() for b in done]}, "".join(lines))
    return EXIT_OK


def _cmd_wait(args: argparse.Namespace) -> int:
    w = _wait(args)
    with _inbox(args) as box:
        got = box.wait(w)
    if got is None:
        ui.output(args, {"claimed": None, "waiting": w.to_json()}, f"{w.run} waits\n")
    else:
        ui.output(args, {"claimed": _claimed_json(got)}, _claimed_text(got))
    return EXIT_OK


def _cmd_subscribe(args: argparse.Namespace) -> int:
    w = _wait(args)
    with _inbox(args) as box:
        new = box.subscribe(w)
    ui.output(args, {"registered": new}, "registered\n" if new else "already registered\n")
    return EXIT_OK


def _cmd_claim(args: argparse.Namespace) -> int:
    w = _wait(args)
    with _inbox(args) as box:
        got = box.claim(w)
    if got is None:
        ui.output(args, {"claimed": None}, "nothing to claim\n")
        return EXIT_NONE
    ui.output(args, {"claimed": _claimed_json(got)}, _claimed_text(got))
    return EXIT_OK


def _cmd_match(args: argparse.Namespace) -> int:
    source, id_ = _label(args.source, "SOURCE"), _label(args.id, "ID")
    with _inbox(args) as box:
        got = box.match(source, id_)
        why = _unmatched(box, source, id_) if got is None else ""
    if got is None:
        ui.output(args, {"matched": None}, why)
        return EXIT_NONE
    ui.output(args, {"matched": got.to_json()}, f"claimed for {got.run} ({got.effect_key})\n")
    return EXIT_OK


def _unmatched(box: Inbox, source: str, id_: str) -> str:
    """Why ``match`` claimed event (source, id) for nobody, read after it (a line)."""
    ev = box.get(source, id_)
    if ev is None:
        return f"no event {source}/{id_} is buffered\n"
    if ev.claimed_by is not None:
        return f"claimed by {ev.claimed_by} already\n"
    if ev.dead:
        return "a dead letter\n"
    return "nobody waits for it\n"


def _cmd_deliver(args: argparse.Namespace) -> int:
    run = ui.parse_run(args.run)
    event = _one_event(args.file)
    with _inbox(args) as box:
        got = box.deliver(run, event)
    obj: dict[str, Any] = {"status": got.status}
    if got.wait is not None:
        obj["wait"] = got.wait.to_json()
        obj["position"] = got.position
    ui.output(args, obj, f"{got.status}\n")
    return EXIT_OK if got.status == "matched" else EXIT_NONE


def _cmd_resume(args: argparse.Namespace) -> int:
    run = ui.parse_run(args.run)
    epoch = decimal_arg(args.epoch, "--epoch", 1)
    source, id_ = _label(args.source, "SOURCE"), _label(args.id, "ID")
    with _inbox(args) as box:
        rec = box.journal_delivery(run, epoch, source, id_)
    ui.output(
        args,
        {"run": rec.run, "seq": rec.seq, "raw": rec.raw.decode("utf-8")},
        f"{rec.run} record {rec.seq}\n",
    )
    return EXIT_OK


def _cmd_unsubscribe(args: argparse.Namespace) -> int:
    run = ui.parse_run(args.run)
    effect = None if args.effect_key is None else utf8_arg(args.effect_key, "--effect-key")
    with _inbox(args) as box:
        waits, shed = box.unsubscribe(run, effect)
    ui.output(
        args,
        {"wait_rows": waits, "payloads_shed": shed},
        f"{waits} wait row{'' if waits == 1 else 's'} removed,"
        f" {shed} payload{'' if shed == 1 else 's'} shed\n",
    )
    return EXIT_OK


def _cmd_sweep(args: argparse.Namespace) -> int:
    if (args.older_than is None) == (args.grace is None):
        raise UsageError("give one of --older-than T and --grace SECONDS")
    reason = "unclaimed" if args.reason is None else utf8_arg(args.reason, "--reason")
    with _inbox(args) as box:
        if args.older_than is not None:
            cutoff = decimal_arg(args.older_than, "--older-than")
        else:
            # The store clock decides received_at; --grace is measured on this machine's.
            cutoff = max(0, int(time.time()) - decimal_arg(args.grace, "--grace"))
        n = box.sweep(cutoff, reason)
    ui.output(args, {"dead_lettered": n, "cutoff": cutoff}, f"{n} dead-lettered\n")
    return EXIT_OK


def _limit(args: argparse.Namespace) -> int:
    return 100 if args.limit is None else decimal_arg(args.limit, "--limit", 1, MAX_LIMIT)


def _cmd_dead_letters(args: argparse.Namespace) -> int:
    limit = _limit(args)
    before = None if args.before is None else decimal_arg(args.before, "--before")
    with _inbox(args) as box:
        dead = box.dead_letters(limit, before)
    text = "".join(f"{d.position} {d.source}/{d.id} {d.kind} {d.dead_reason}\n" for d in dead)
    ui.output(args, {"dead_letters": [d.to_json() for d in dead]}, text)
    return EXIT_OK


def _cmd_waiting(args: argparse.Namespace) -> int:
    limit = _limit(args)
    after = None if args.after is None else decimal_arg(args.after, "--after")
    with _inbox(args) as box:
        waits = box.waiting(limit, after)
    text = "".join(
        f"{w.number} {w.run} {w.effect_key} {w.kind} "
        + " ".join(f"{ns}={v}" for ns, v in w.keys)
        + "\n"
        for w in waits
    )
    ui.output(args, {"waiting": [w.to_json() for w in waits]}, text)
    return EXIT_OK


def _cmd_show(args: argparse.Namespace) -> int:
    source, id_ = _label(args.source, "SOURCE"), _label(args.id, "ID")
    with _inbox(args) as box:
        ev = box.get(source, id_)
    if ev is None:
        raise UsageError(f"no event {source}/{id_} is buffered")
    write_stdout(json.dumps(ev.to_json(), indent=2, ensure_ascii=False) + "\n")
    return EXIT_OK


def _cmd_erase(args: argparse.Namespace) -> int:
    source, id_ = _label(args.source, "SOURCE"), _label(args.id, "ID")
    with _inbox(args) as box:
        if not box.erase(source, id_):
            raise UsageError(f"no event {source}/{id_} is buffered")
    ui.output(args, {"erased": True}, f"{source}/{id_} payload erased\n")
    return EXIT_OK


def _cmd_stats(args: argparse.Namespace) -> int:
    with _inbox(args) as box:
        c = box.counts()
    text = (
        f"{c.size} events: {c.live} live, {c.claimed} claimed, {c.dead} dead;"
        f" {c.erased} payloads erased; {c.waits} waits\n"
    )
    ui.output(args, c.to_json(), text)
    return EXIT_OK


def _cmd_receipt(args: argparse.Namespace) -> int:
    source, id_ = _label(args.source, "SOURCE"), _label(args.id, "ID")

    def sign() -> bytes:
        with _inbox(args, key=True) as signing:
            return signing.sign_checkpoint()

    with _inbox(args) as box:
        data = box.receipt(source, id_, sign=sign).format()
    ui.write_output(args.out, data)
    return EXIT_OK


def _cmd_checkpoint(args: argparse.Namespace) -> int:
    with _inbox(args, key=True) as box:
        note = box.sign_checkpoint()
        cp = box.checkpoint()
    ui.output(
        args, {"origin": cp.origin, "size": cp.size, "note": note.decode("utf-8")}, note.decode()
    )
    return EXIT_OK


def _cmd_vkey(args: argparse.Namespace) -> int:
    with _inbox(args) as box:
        vkey = box.log.log_vkey
    write_stdout(vkey + "\n")
    return EXIT_OK


# --- arguments --------------------------------------------------------------------------------


def _file_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", nargs="?", default="-", help="events (- or none: stdin)")


def _buffer_args(p: argparse.ArgumentParser) -> None:
    _file_arg(p)
    p.add_argument("--no-match", action="store_true", help="buffer only; claim for no waiter")


def _wait_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="the waiting run")
    p.add_argument("--effect-key", required=True, metavar="K", help="the wait's effect key")
    p.add_argument("--kind", required=True, metavar="KIND", help="the event kind awaited")
    p.add_argument(
        "--match",
        action="append",
        required=True,
        metavar="NS=VALUE",
        help="a correlation key (namespace=value; repeat: any one matches)",
    )
    p.add_argument("--case", metavar="C", help="the case, kept with the wait")
    p.add_argument("--step", metavar="N", help="the step, kept with the wait (default 0)")


def _source_id(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", metavar="SOURCE", help="the event's source")
    p.add_argument("id", metavar="ID", help="the event's id at its source")


def _match_args(p: argparse.ArgumentParser) -> None:
    _source_id(p)


def _deliver_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="the run the event is for")
    _file_arg(p)


def _resume_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="the run that resumes")
    _source_id(p)
    p.add_argument("--epoch", required=True, metavar="E", help="the run's lease epoch")


def _unsubscribe_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="the run")
    p.add_argument("--effect-key", metavar="K", help="only this wait (default: all)")


def _sweep_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--older-than", metavar="T", help="received at or before T (Unix seconds)")
    p.add_argument("--grace", metavar="SECONDS", help="received at least this long ago")
    p.add_argument("--reason", metavar="R", help="the dead letters' reason (default unclaimed)")


def _dead_letters_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", metavar="N", help=f"at most N (default 100, at most {MAX_LIMIT})")
    p.add_argument("--before", metavar="POSITION", help="older than this position (paging)")


def _waiting_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", metavar="N", help=f"at most N (default 100, at most {MAX_LIMIT})")
    p.add_argument("--after", metavar="NUMBER", help="after this wait number (paging)")


def _receipt_args(p: argparse.ArgumentParser) -> None:
    _source_id(p)
    p.add_argument("--out", metavar="FILE", default="-", help="write it here (default: stdout)")


EVENT_HELP = """\
The inbound-event inbox: events from outside (JSON: {"source", "id", "kind", "keys":
[[namespace, value], ...], "payload"}), deduplicated by (source, id), each acknowledged by a leaf
of the tenant's inbox log (origin <origin>/<tenant>/inbox); runs wait for them by kind and
correlation key; each event resumes exactly one run. See docs/embedder-guide.md, "The inbox".

examples:
  echo '{"source":"shop","id":"42","kind":"Paid","keys":[["order","A-1"]],"payload":{"eur":5}}' \\
      | tlog-store event buffer
  tlog-store event wait order-1 --effect-key pay --kind Paid --match order=A-1
  tlog-store event resume order-1 shop 42 --epoch 1
  tlog-store event receipt shop 42 --out shop-42.receipt
"""

_BUFFER = """\
Reads events, one JSON object a line, and buffers them in one transaction. A (source, id)
buffered before is reported as a duplicate and changes nothing. Unless --no-match, each new
event is claimed at once for the oldest run waiting for its kind on one of its keys.
"""
_WAIT = """\
Claims for RUN the oldest buffered event of KIND on any --match key (or one RUN claimed already and
did not resume from), or else registers the wait, in one transaction: the race-free way to wait.
"""
_SUBSCRIBE = (
    "Registers the wait (idempotent); it does not look at the buffer ('event wait' does).\n"
)
_CLAIM = "Claims the oldest buffered event for the wait; exit 1 when there is none.\n"
_MATCH = "Claims a buffered event for the oldest run waiting for it; exit 1 when none waits.\n"
_DELIVER = """\
Delivers one event (FILE: one JSON object) to the named RUN: buffered already claimed by RUN
when RUN waits for its kind on one of its keys ('matched', exit 0; again on a retry);
'duplicate' (exit 1) when buffered before and not claimed by RUN (one buffered but unclaimed
is RUN's through 'event wait' or 'event match'); 'not-waiting' (exit 1) when RUN waits for no
such event.
"""
_RESUME = """\
Journals the delivery: appends to RUN's chain an EventDelivered record naming the event (its
source, id, kind, keys, payload hash and log position), under RUN's lease epoch. Idempotent.
"""
_UNSUBSCRIBE = (
    "Removes RUN's waits (with --effect-key, that one) and sheds the payloads of the events\n"
    "RUN holds claimed for them.\n"
)
_SWEEP = "Dead-letters unclaimed events received at or before the cutoff.\n"
_DEAD = "Dead letters, newest first.\n"
_WAITING = "Registered waits, in registration order.\n"
_SHOW = "The stored event as JSON (state, claim, payload unless erased).\n"
_ERASE = "Strips the event's payload; its identity, accounting and receipts stay valid.\n"
_STATS = "The inbox's accounting: events live, claimed and dead, payloads erased, waits.\n"
_RECEIPT = """\
Writes the event's receipt: a C2SP tlog-proof@v1 whose extra data is the event's inbox entry,
under the newest kept inbox checkpoint covering it, or one signed now (reads --key then).
Verify it offline: tlog-verify proof FILE --log-vkey "$(tlog-store event vkey)" --event EVENT
"""
_CHECKPOINT = "Signs and keeps the inbox log's current checkpoint (reads --key).\n"
_VKEY = "Prints the inbox log's vkey (the log key, named by the inbox origin).\n"


INBOX_PUBLISH = """\
'tlog-store publish' for the inbox log (origin <origin>/<tenant>/inbox): with --witness, signs
its current checkpoint, has the witnesses cosign it (they follow the inbox log's origin and
vkey, 'tlog-store event vkey') and keeps the cosignatures; with FILE, keeps a cosigned copy.
Receipts carry the newest kept inbox checkpoint that covers their event.

examples:
  tlog-store event publish --witness http://127.0.0.1:7380/=WITNESS_VKEY
"""


def event_verb(*more: Verb) -> Verb:
    """The ``event`` verb of ``tlog-store``, with its subverbs (and ``more``, declared by
    :mod:`store.cli`: ``publish``, which shares ``tlog-store publish``'s handler)."""
    return Verb(
        "event",
        "the inbound-event inbox",
        EVENT_HELP,
        None,
        subverbs=(
            verb("buffer", "buffer events", _BUFFER, _cmd_buffer, _buffer_args),
            verb("wait", "claim an event, or wait for one", _WAIT, _cmd_wait, _wait_args),
            verb("subscribe", "register a wait", _SUBSCRIBE, _cmd_subscribe, _wait_args),
            verb("claim", "claim a buffered event", _CLAIM, _cmd_claim, _wait_args),
            verb("match", "claim an event for a waiter", _MATCH, _cmd_match, _match_args),
            verb("deliver", "deliver to a named run", _DELIVER, _cmd_deliver, _deliver_args),
            verb("resume", "journal a delivery", _RESUME, _cmd_resume, _resume_args),
            verb(
                "unsubscribe",
                "end a run's waits",
                _UNSUBSCRIBE,
                _cmd_unsubscribe,
                _unsubscribe_args,
            ),
            verb("sweep", "dead-letter old events", _SWEEP, _cmd_sweep, _sweep_args),
            verb("dead-letters", "list dead letters", _DEAD, _cmd_dead_letters, _dead_letters_args),
            verb("waiting", "list waits", _WAITING, _cmd_waiting, _waiting_args),
            verb("show", "print a stored event", _SHOW, _cmd_show, _source_id, PLAIN),
            verb("erase", "erase an event's payload", _ERASE, _cmd_erase, _source_id, PLAIN),
            verb("stats", "the inbox's accounting", _STATS, _cmd_stats, None, JSON),
            verb("receipt", "write an event's receipt", _RECEIPT, _cmd_receipt, _receipt_args, KEY),
            verb(
                "checkpoint",
                "sign the inbox checkpoint",
                _CHECKPOINT,
                _cmd_checkpoint,
                None,
                KEY_JSON,
            ),
            verb("vkey", "print the inbox log's vkey", _VKEY, _cmd_vkey, None, PLAIN),
            *more,
        ),
    )


__all__ = ["event_verb"]
