"""The inbox section of an export (``docs/export-format.md`` §4.7), and the end of the file.

An export of a tenant whose inbox holds anything (an event, a wait, a kept inbox checkpoint)
carries, after its runs and before its ``end`` line::

    inbox <inbox origin> <size> <waits> <wait counter>
    checkpoint <L> LF <L bytes: a signed note of the inbox log>     0..n, sizes increasing
    event <canonical JSON object>                                   exactly <size>, by position
    [payload <canonical JSON>]                                      after an event, unless erased
    wait <canonical JSON object>                                    exactly <waits>, by number

Every rule of one line is here, once, for every reader and the writer: :func:`read_inbox` (the
format: grammar, spelling, members, order, counts, states), :func:`read_tail` (the inbox section,
if any, then the end line, :func:`tlog.export.follow.check_end`), and :class:`InboxVerifier`
(the cryptography and the cross-references: the inbox log rebuilt from the entries, its
checkpoints' signatures and roots, each kept payload's hash, and each ``EventDelivered`` record
of the runs matched with the event it names). The one-pass verifier
(:class:`tlog.export.ExportVerifier`) and the parallel verifier (``verifier.parallel``) both
drive :func:`read_tail` and :class:`InboxVerifier`, so their verdicts and messages are one.

Memory: the inbox log's stored hashes (about two per event), one entry per ``EventDelivered``
record until its event is read, and one per wait (for uniqueness): it grows with the events,
deliveries and waits, never with the records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tlog.encoding import b64encode, shown
from tlog.errors import MalformedError
from tlog.export.check import (
    HeaderKeys,
    decimal,
    describe,
    keyword,
    parse_note_item,
    text_of,
)
from tlog.export.follow import LogFollower, check_end
from tlog.export.format import (
    EndItem,
    EventItem,
    ExportFormatError,
    ExportHeader,
    ExportProofError,
    ExportVerificationError,
    InboxCheckpointItem,
    InboxItem,
    InboxSummary,
    WaitItem,
)
from tlog.export.scan import StreamLines, expect
from tlog.inbox import (
    KIND_EVENT_DELIVERED,
    MAX_PAYLOAD,
    Entry,
    check_keys,
    check_label,
    delivery_of,
    inbox_origin,
    payload_hash,
)
from tlog.journal import (
    MAX_SAFE_INT,
    canonical_json,
    check_case_id,
    check_effect_key,
    check_kind,
    check_run_id,
    decode_body,
    parse_canonical_json,
)
from tlog.keys import format_vkey
from tlog.merkle import leaf_hash
from tlog.note import MAX_NOTE_SIZE, Ed25519Verifier, Verifier

DELIVERED_TEXT = b'"kind":"EventDelivered"'
"""In the body of every ``EventDelivered`` record (a fast filter: a body holding it is decoded)."""

MAX_DEAD_REASON = 500
"""Characters of a dead-letter reason (``store.inbox.core.MAX_REASON``)."""

_EVENT_MEMBERS = frozenset(
    {"claimed_at", "claimed_by", "claimed_for", "dead_at", "dead_reason", "delivered_seq",
     "entry", "held", "position"}
)  # fmt: skip
_CLAIM_MEMBERS = ("claimed_at", "claimed_by", "claimed_for", "held")
_DEAD_MEMBERS = ("dead_at", "dead_reason")
_WAIT_MEMBERS = frozenset(
    {"case", "created_at", "effect_key", "keys", "kind", "number", "run", "step"}
)


# --- one line ---------------------------------------------------------------------------------


def parse_inbox_line(n: int, data: bytes, origin: str) -> InboxItem:
    """The ``inbox`` line ``n`` of an export of log ``origin``."""
    rest = keyword(data, b"inbox")
    if rest is None:  # pragma: no cover - the caller dispatches on the keyword
        raise ExportFormatError(n, f"expected the inbox line, found {describe(data)}")
    tokens = rest.split(b" ")
    if len(tokens) != 4:
        raise ExportFormatError(n, "expected 'inbox <inbox origin> <size> <waits> <wait counter>'")
    name = text_of(tokens[0], n)
    want = inbox_origin(origin)
    if name != want:
        raise ExportFormatError(n, f"the inbox origin is {name!r}, not {want!r}")
    size = decimal(tokens[1], n, "inbox size")
    waits = decimal(tokens[2], n, "inbox waits")
    counter = decimal(tokens[3], n, "inbox wait counter")
    if counter < waits:
        raise ExportFormatError(
            n, f"the wait counter {counter} is below the number of waits {waits}"
        )
    return InboxItem(name, size, waits, counter, n)


def _object(rest: bytes, n: int, what: str) -> dict[str, Any]:
    try:
        value = parse_canonical_json(rest)
    except MalformedError as e:
        raise ExportFormatError(n, f"{what}: {e}") from None
    if not isinstance(value, dict):
        raise ExportFormatError(n, f"{what} is not a JSON object")
    return value


def _members(obj: dict[str, Any], n: int, what: str, allowed: frozenset[str]) -> None:
    extra = sorted(set(obj) - allowed)
    if extra:
        raise ExportFormatError(n, f"{what} has no member {extra[0]!r}")


def _int(obj: dict[str, Any], name: str, n: int, what: str, lo: int = 0) -> int:
    value = obj.get(name)
    if type(value) is not int or not lo <= value <= MAX_SAFE_INT:
        raise ExportFormatError(
            n, f"{what}: {name} is {describe(canonical_json(value))}, not an integer >= {lo}"
        )
    return value


def _checked(n: int, what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except MalformedError as e:
        raise ExportFormatError(n, f"{what}: {e}") from None


def parse_event_line(n: int, data: bytes, position: int, inbox: InboxItem) -> EventItem:
    """Event line ``n``, which must hold the event at ``position`` of the inbox of ``inbox``
    (its payload, on the next line, is :func:`parse_payload_line`'s: None here)."""
    rest = keyword(data, b"event")
    if rest is None:
        if data.startswith((b"wait ", b"end ")):
            raise ExportFormatError(
                n,
                f"the inbox (line {inbox.line}) announced {inbox.size} events, the export "
                f"holds {position}",
            )
        raise ExportFormatError(
            n, f"expected event {position} of the inbox ('event <JSON>'): {describe(data)}"
        )
    what = f"event {position}"
    obj = _object(rest, n, what)
    _members(obj, n, what, _EVENT_MEMBERS)
    for name in ("position", "entry"):
        if name not in obj:
            raise ExportFormatError(n, f"{what} has no {name!r}")
    got = obj["position"]
    if type(got) is not int or got != position:
        raise ExportFormatError(
            n, f"the event line holds position {describe(canonical_json(got))}, the next is "
            f"{position} (events are listed once each, by position)",
        )  # fmt: skip
    if not isinstance(obj["entry"], dict):
        raise ExportFormatError(n, f"{what}: its entry is not a JSON object")
    raw = canonical_json(obj["entry"])  # the line is canonical: so is each member
    entry = _checked(n, what, lambda: Entry.parse(raw))
    claim = [m for m in _CLAIM_MEMBERS if m in obj]
    if claim and len(claim) != len(_CLAIM_MEMBERS):
        raise ExportFormatError(
            n, f"{what}: a claimed event has claimed_at, claimed_by, claimed_for and held"
        )
    dead = [m for m in _DEAD_MEMBERS if m in obj]
    if dead and len(dead) != len(_DEAD_MEMBERS):
        raise ExportFormatError(n, f"{what}: a dead letter has dead_at and dead_reason")
    if claim and dead:
        raise ExportFormatError(n, f"{what} is both claimed and dead")
    claimed_by = claimed_at = claimed_for = None
    held = False
    if claim:
        claimed_by = obj["claimed_by"]
        _checked(n, what, lambda: check_run_id(claimed_by))
        claimed_for = obj["claimed_for"]
        _checked(n, what, lambda: check_effect_key(claimed_for))
        claimed_at = _int(obj, "claimed_at", n, what)
        held = obj["held"]
        if not isinstance(held, bool):
            raise ExportFormatError(n, f"{what}: held is true or false")
    reason = dead_at = None
    if dead:
        reason = _checked(
            n,
            what,
            lambda: check_label(obj["dead_reason"], "a dead-letter reason", MAX_DEAD_REASON),
        )
        dead_at = _int(obj, "dead_at", n, what)
    delivered = None
    if "delivered_seq" in obj:
        if not claim:
            raise ExportFormatError(n, f"{what} has a delivered_seq but is not claimed")
        delivered = _int(obj, "delivered_seq", n, what, 1)
    return EventItem(
        position, entry, raw, None, claimed_by, claimed_at, held, reason, dead_at, delivered, n,
        claimed_for,
    )  # fmt: skip


def parse_payload_line(n: int, data: bytes, position: int) -> bytes:
    """Payload line ``n`` (of the event at ``position``): its canonical JSON bytes."""
    rest = data[len(b"payload ") :]
    if len(rest) > MAX_PAYLOAD:
        raise ExportFormatError(
            n, f"event {position}: the payload is longer than {MAX_PAYLOAD} bytes"
        )
    try:
        parse_canonical_json(rest)
    except MalformedError as e:
        raise ExportFormatError(n, f"event {position}: payload: {e}") from None
    return rest


def parse_wait_line(n: int, data: bytes, i: int, inbox: InboxItem, prev: int) -> WaitItem:
    """Wait line ``n``, the ``i``-th (from 0) of ``inbox``; ``prev``: the previous wait's
    number (0 for the first)."""
    rest = keyword(data, b"wait")
    if rest is None:
        if data.startswith(b"end "):
            raise ExportFormatError(
                n, f"the inbox (line {inbox.line}) announced {inbox.waits} waits, the export "
                f"holds {i}",
            )  # fmt: skip
        raise ExportFormatError(n, f"expected wait {i + 1} of the inbox: {describe(data)}")
    what = f"wait {i + 1}"
    obj = _object(rest, n, what)
    _members(obj, n, what, _WAIT_MEMBERS)
    for name in sorted(_WAIT_MEMBERS - {"case"}):
        if name not in obj:
            raise ExportFormatError(n, f"{what} has no {name!r}")
    run, effect, kind, case = obj["run"], obj["effect_key"], obj["kind"], obj.get("case")
    _checked(n, what, lambda: check_run_id(run))
    _checked(n, what, lambda: check_effect_key(effect))
    _checked(n, what, lambda: check_kind(kind))
    if "case" in obj:
        _checked(n, what, lambda: check_case_id(obj["case"]))
    keys = _checked(n, what, lambda: check_keys(obj["keys"]))
    if [list(k) for k in keys] != obj["keys"]:
        raise ExportFormatError(n, f"{what}: its keys are not in canonical order")
    step = _int(obj, "step", n, what)
    number = _int(obj, "number", n, what, 1)
    if number <= prev:
        raise ExportFormatError(
            n, f"{what} has number {number}, not above the previous wait's {prev}"
        )
    if number > inbox.wait_counter:
        raise ExportFormatError(
            n, f"{what} has number {number}, above the wait counter {inbox.wait_counter}"
        )
    created = _int(obj, "created_at", n, what)
    return WaitItem(run, effect, kind, keys, case, step, number, created, n)


def event_line(item: EventItem) -> bytes:
    """The ``event`` line (and ``payload`` line) of ``item``, LF-terminated."""
    obj: dict[str, Any] = {"position": item.position, "entry": parse_canonical_json(item.entry_raw)}
    if item.claimed_by is not None:
        obj.update(
            claimed_by=item.claimed_by,
            claimed_for=item.claimed_for,
            claimed_at=item.claimed_at,
            held=item.held,
        )
    if item.dead_reason is not None:
        obj.update(dead_reason=item.dead_reason, dead_at=item.dead_at)
    if item.delivered_seq is not None:
        obj["delivered_seq"] = item.delivered_seq
    out = b"event " + canonical_json(obj) + b"\n"
    if item.payload is not None:
        out += b"payload " + item.payload + b"\n"
    return out


def wait_line(item: WaitItem) -> bytes:
    """The ``wait`` line of ``item``, LF-terminated."""
    obj: dict[str, Any] = {
        "run": item.run,
        "effect_key": item.effect_key,
        "kind": item.kind,
        "keys": [list(k) for k in item.keys],
        "step": item.step,
        "number": item.number,
        "created_at": item.created_at,
    }
    if item.case is not None:
        obj["case"] = item.case
    return b"wait " + canonical_json(obj) + b"\n"


def inbox_keys(keys: HeaderKeys, origin: str, line: int) -> HeaderKeys:
    """The keys of the inbox log's notes: the log key's public key under the inbox origin's
    name (the store signs the inbox log's checkpoints so), and the witness keys."""
    log: Verifier = Ed25519Verifier(origin, keys.log.public_key)
    own = (log.name, log.key_id)
    note_keys = {own: (log, format_vkey(log))}
    for k, (v, text) in keys.note_keys.items():
        if v is keys.log:
            continue
        if k == own:  # pragma: no cover - a 2^-32 coincidence of key IDs
            raise ExportFormatError(line, f"witness key {text} has the inbox log key's key ID")
        note_keys[k] = (v, text)
    return HeaderKeys(log, note_keys, {})


# --- the section and the end line -------------------------------------------------------------

InboxPart = InboxItem | InboxCheckpointItem | EventItem | WaitItem


def _read_events(lines: StreamLines, inbox: InboxItem) -> Iterator[EventItem]:
    """The ``size`` event items of ``inbox``'s section, each with its payload line if any."""
    # The inbox deduplicates by (source, id): two events of one pair are no inbox's, and a
    # restore would fail half-way on them.
    pairs: set[tuple[str, str]] = set()
    for position in range(inbox.size):
        n, data = expect(lines, f"event {position} of the inbox ({inbox.size} announced)")
        event = parse_event_line(n, data, position, inbox)
        pair = (event.entry.source, event.entry.id)
        if pair in pairs:
            raise ExportFormatError(
                n, f"event {position} is {shown(pair[0])}/{shown(pair[1])} again: events are "
                "deduplicated by (source, id)",
            )  # fmt: skip
        pairs.add(pair)
        nxt = lines.next()
        if nxt is not None and nxt[1].startswith(b"payload "):
            payload = parse_payload_line(nxt[0], nxt[1], position)
            event = EventItem(
                position, event.entry, event.entry_raw, payload, event.claimed_by,
                event.claimed_at, event.held, event.dead_reason, event.dead_at,
                event.delivered_seq, event.line, event.claimed_for,
            )  # fmt: skip
        elif nxt is not None:
            lines.push_back(nxt)
        yield event


def read_inbox(
    lines: StreamLines, keys: HeaderKeys, header: ExportHeader, n: int, data: bytes
) -> Iterator[InboxPart]:
    """The inbox section whose ``inbox`` line is line ``n`` (``data``), item by item, each
    checked as far as no hash and no signature is needed (the payload's hash is
    :class:`InboxVerifier`'s). The line after it is left to read."""
    inbox = parse_inbox_line(n, data, header.origin)
    yield inbox
    ikeys = inbox_keys(keys, inbox.origin, n)
    prev_size: int | None = None
    checkpoints = 0
    while True:
        got = expect(lines, "a checkpoint, event, wait or end line")
        n, data = got
        rest = keyword(data, b"checkpoint")
        if rest is None:
            lines.push_back(got)
            break
        length = decimal(rest, n, "checkpoint length", 1, MAX_NOTE_SIZE)
        note = lines.read_note(length, n)
        cp = parse_note_item(note, n, ikeys, inbox.origin, prev_size, InboxCheckpointItem)
        size = cp.checkpoint.size
        if size > inbox.size:
            raise ExportProofError(
                n, f"inbox checkpoint of size {size} is larger than the inbox log ({inbox.size} "
                "events)",
            )  # fmt: skip
        prev_size = size
        checkpoints += 1
        yield cp
    if not (inbox.size or inbox.waits or checkpoints):
        raise ExportFormatError(
            inbox.line,
            "the inbox section is empty (no event, wait or checkpoint): an export of an empty "
            "inbox has no inbox section",
        )
    yield from _read_events(lines, inbox)
    seen: set[tuple[str, str]] = set()
    prev = 0
    for i in range(inbox.waits):
        n, data = expect(lines, f"wait {i + 1} of the inbox ({inbox.waits} announced)")
        wait = parse_wait_line(n, data, i, inbox, prev)
        ident = (wait.run, wait.effect_key)
        if ident in seen:
            raise ExportFormatError(
                n, f"run {wait.run} waits twice under the effect key {wait.effect_key!r}"
            )
        seen.add(ident)
        prev = wait.number
        yield wait
    after = lines.next()
    if after is not None:
        lines.push_back(after)
        if not after[1].startswith(b"end "):
            raise ExportFormatError(
                after[0],
                f"the inbox (line {inbox.line}) announced {inbox.size} events and "
                f"{inbox.waits} waits; expected the end line, found {describe(after[1])}",
            )


def read_tail(
    lines: StreamLines,
    keys: HeaderKeys,
    header: ExportHeader,
    n: int,
    data: bytes,
    counted: tuple[int, int, int, int],
    before_end: Callable[[], bytes | None],
    sizes: list[tuple[int, int]],
) -> Iterator[InboxPart | EndItem]:
    """What follows the runs, from line ``n`` (``data``, where a run line is no longer due):
    the inbox section if the line opens one, then the end line (:func:`check_end`, with
    ``counted``, ``before_end`` and ``sizes``)."""
    if data.startswith(b"inbox "):
        yield from read_inbox(lines, keys, header, n, data)
        n, data = expect(lines, "the end line")
    yield check_end(n, data, counted, before_end, lines.at_eof, sizes)


# --- verification -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    """An ``EventDelivered`` record of a run: where it is and the event it names."""

    line: int
    run: str
    seq: int
    source: str
    id: str
    kind: str
    keys: tuple[tuple[str, str], ...]
    payload_sha256: bytes
    position: int

    def where(self) -> str:
        return f"run {self.run} record {self.seq} (line {self.line})"


class Deliveries:
    """The records of the runs that may be ``EventDelivered`` records, in file order: a
    body holding :data:`DELIVERED_TEXT` (line, body), decoded by :meth:`resolve`."""

    def __init__(self) -> None:
        self.found: list[tuple[int, bytes]] = []

    def note(self, line: int, raw: bytes) -> None:
        if DELIVERED_TEXT in raw:
            self.found.append((line, raw))

    def resolve(self) -> list[Delivery]:
        """The ``EventDelivered`` records, each checked to be exactly what the inbox writes
        (:func:`tlog.inbox.delivery_of`); an ExportFormatError at the first that is not."""
        out: list[Delivery] = []
        for line, raw in self.found:
            body = decode_body(raw)  # the run scan checked it
            if body.kind != KIND_EVENT_DELIVERED:
                continue
            try:
                source, id_, kind, keys, digest, position = delivery_of(
                    body.data if body.has_data else None
                )
            except MalformedError as e:
                raise ExportFormatError(line, f"run {body.run} record {body.seq}: {e}") from None
            d = Delivery(line, body.run, body.seq, source, id_, kind, keys, digest, position)
            out.append(d)
        self.found = []
        return out


class InboxVerifier:
    """The verification of an export's inbox section and of the runs' ``EventDelivered``
    records (module docstring), fed the items :func:`read_tail` yields, in order; the records'
    bodies go to :attr:`deliveries` as the runs are read."""

    def __init__(self, header: ExportHeader, keys: HeaderKeys) -> None:
        self.header = header
        self.keys = keys
        self.deliveries = Deliveries()
        self.inbox: InboxItem | None = None
        self.follow: LogFollower | None = None
        self.pending: dict[int, Delivery] = {}  # position -> the record that names it
        self.counts = dict.fromkeys(
            ("live", "claimed", "dead", "erased", "delivered", "held", "waits"), 0
        )

    def item(self, item: InboxPart) -> None:
        if isinstance(item, EventItem):
            self.event(item)
        elif isinstance(item, WaitItem):
            self.wait(item)
        elif isinstance(item, InboxCheckpointItem):
            assert self.follow is not None
            self.follow.checkpoint(item)
        else:
            self.start(item)

    def start(self, item: InboxItem) -> None:
        """The inbox line: the deliveries the runs hold must name events of the section."""
        self.inbox = item
        ikeys = inbox_keys(self.keys, item.origin, item.line)
        header = ExportHeader(item.origin, format_vkey(ikeys.log), (), self.header.witness_keys)
        self.follow = LogFollower(header, ikeys, "the inbox's entries")
        for d in self.deliveries.resolve():
            if d.position >= item.size:
                raise ExportVerificationError(
                    d.line,
                    f"run {d.run} record {d.seq} is the delivery of the event at position "
                    f"{d.position}, which the inbox (line {item.line}, {item.size} events) lacks",
                )
            other = self.pending.get(d.position)
            if other is not None:
                raise ExportVerificationError(
                    d.line,
                    f"run {d.run} record {d.seq} is a second delivery of the event at position "
                    f"{d.position} (the first: {other.where()})",
                )
            self.pending[d.position] = d

    def _reach(self, line: int) -> None:
        follow = self.follow
        assert follow is not None
        if follow.tree.size == 0:
            follow.reach(line)  # a checkpoint of size 0

    def event(self, item: EventItem) -> None:
        self._reach(item.line)
        p = item.position
        entry = item.entry
        if item.payload is not None and payload_hash(item.payload) != entry.payload_sha256:
            raise ExportVerificationError(
                item.line + 1,
                f"event {p}: the payload's SHA-256 is not the entry's payload_sha256 "
                f"{b64encode(entry.payload_sha256)}",
            )
        d = self.pending.pop(p, None)
        if item.delivered_seq is not None:
            if d is None:
                raise ExportVerificationError(
                    item.line,
                    f"event {p} was delivered by record {item.delivered_seq} of run "
                    f"{item.claimed_by}, which is no EventDelivered record of the export",
                )
            if (d.run, d.seq) != (item.claimed_by, item.delivered_seq):
                raise ExportVerificationError(
                    item.line,
                    f"event {p} is claimed by run {item.claimed_by} and delivered by its record "
                    f"{item.delivered_seq}; the EventDelivered record naming it is {d.where()}",
                )
            named = (d.source, d.id, d.kind, d.keys, d.payload_sha256)
            own = (entry.source, entry.id, entry.kind, entry.keys, entry.payload_sha256)
            if named != own:
                field = next(
                    f
                    for f, a, b in zip(
                        ("source", "id", "kind", "keys", "payload_sha256"), named, own, strict=True
                    )
                    if a != b
                )
                raise ExportVerificationError(
                    item.line,
                    f"event {p}: its EventDelivered record, {d.where()}, names another event "
                    f"({field} differs)",
                )
            self.counts["delivered"] += 1
        elif d is not None:
            raise ExportVerificationError(
                item.line,
                f"event {p} records no delivery ({item.state}), but {d.where()} is the "
                "EventDelivered record of it",
            )
        self.counts[item.state] += 1
        self.counts["erased"] += item.payload is None
        self.counts["held"] += item.held
        assert self.follow is not None
        self.follow.add_leaves([leaf_hash(item.entry_raw)], item.line)

    def wait(self, item: WaitItem) -> None:
        self._reach(item.line)
        self.counts["waits"] += 1

    def end(self, item: EndItem) -> InboxSummary | None:
        """The end line verified: the inbox's summary (None: the export has no inbox section,
        and then no run may hold an EventDelivered record)."""
        inbox, follow = self.inbox, self.follow
        if inbox is None or follow is None:
            for d in self.deliveries.resolve():
                raise ExportVerificationError(
                    d.line,
                    f"run {d.run} record {d.seq} is the delivery of the event at position "
                    f"{d.position}, but the export has no inbox section",
                )
            return None
        self._reach(item.line)
        c = self.counts
        return InboxSummary(
            origin=inbox.origin,
            size=follow.tree.size,
            root=follow.tree.root(),
            checkpoints=len(follow.sizes),
            checkpoint_sizes=tuple(s for s, _ in follow.sizes),
            consistency_proofs=follow.consistency,
            cosignatures=follow.cosignatures,
            live=c["live"],
            claimed=c["claimed"],
            dead=c["dead"],
            erased=c["erased"],
            delivered=c["delivered"],
            held=c["held"],
            waits=c["waits"],
        )


__all__ = [
    "DELIVERED_TEXT",
    "MAX_DEAD_REASON",
    "Deliveries",
    "Delivery",
    "InboxVerifier",
    "event_line",
    "inbox_keys",
    "parse_event_line",
    "parse_inbox_line",
    "parse_payload_line",
    "parse_wait_line",
    "read_inbox",
    "read_tail",
    "wait_line",
]
