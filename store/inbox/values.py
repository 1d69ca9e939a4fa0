"""The inbox's values: a wait, a stored event, and what its operations return; and the readers
of stored rows, which check every value's shape (a wrong one is a CorruptError)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from store.errors import CorruptError
from store.inbox.schema import STORED
from tlog.errors import MalformedError, UsageError
from tlog.inbox import Entry, Event, check_keys, make_event, parse_keys_json
from tlog.journal import check_case_id, check_effect_key, check_kind, check_run_id, parse_json

MAX_STEP = (1 << 53) - 1


@dataclass(frozen=True)
class Wait:
    """A run's wait for an event: ``run`` waits, under its effect key ``effect_key``, for an
    event of ``kind`` carrying any of ``keys`` (canonical order); ``case`` and ``step`` are the
    embedder's, kept and given back. ``number`` (registration order) and ``created_at`` are
    set by the store on the waits it returns (0 on one the caller builds)."""

    run: str
    effect_key: str
    kind: str
    keys: tuple[tuple[str, str], ...]
    case: str | None = None
    step: int = 0
    number: int = 0
    created_at: int = 0

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "run": self.run,
            "effect_key": self.effect_key,
            "kind": self.kind,
            "keys": [list(k) for k in self.keys],
            "step": self.step,
        }
        if self.case is not None:
            obj["case"] = self.case
        if self.number:
            obj["number"] = self.number
            obj["created_at"] = self.created_at
        return obj


def make_wait(
    run: str,
    effect_key: str,
    kind: str,
    keys: object,
    *,
    case: str | None = None,
    step: int = 0,
) -> Wait:
    """A :class:`Wait` from its fields, each checked (UsageError naming the first bad one)."""
    try:
        check_run_id(run)
        check_effect_key(effect_key)
        check_kind(kind, "wait kind")
        ordered = check_keys(keys)
        if case is not None:
            check_case_id(case)
    except MalformedError as e:
        raise UsageError(f"wait: {e}") from None
    if type(step) is not int or not 0 <= step <= MAX_STEP:
        raise UsageError(f"wait: step must be an integer in [0, {MAX_STEP}], not {step!r}")
    return Wait(run, effect_key, kind, ordered, case, step)


_WAIT_FIELDS = frozenset({"run", "effect_key", "kind", "keys", "case", "step"})


def wait_from_json(value: object) -> Wait:
    """A wait from its JSON form: ``run``, ``effect_key``, ``kind``, ``keys`` and the optional
    ``case`` and ``step``."""
    if not isinstance(value, dict):
        raise UsageError("a wait is a JSON object")
    extra = sorted(set(value) - _WAIT_FIELDS)
    if extra:
        raise UsageError(f"a wait has no member {extra[0]!r}")
    for name in ("run", "effect_key", "kind", "keys"):
        if name not in value:
            raise UsageError(f"a wait has no {name!r}")
    return make_wait(
        value["run"],
        value["effect_key"],
        value["kind"],
        value["keys"],
        case=value.get("case"),
        step=value.get("step", 0),
    )


@dataclass(frozen=True)
class StoredEvent:
    """A buffered event as the store holds it. ``payload`` is None and ``erased`` True once
    its payload was shed or erased (``payload_sha256`` stays). ``claimed_by`` is the run that
    claimed it (None: unclaimed); ``held`` is true until that run unsubscribes; ``dead`` with
    ``dead_reason`` and ``dead_at`` for a dead letter; ``delivered_seq`` the seq of the run's
    ``EventDelivered`` record once journaled; ``claimed_for`` the effect key of the wait the
    claim satisfied."""

    source: str
    id: str
    kind: str
    keys: tuple[tuple[str, str], ...]
    payload: Any
    erased: bool
    payload_sha256: bytes
    position: int
    received_at: int
    claimed_by: str | None = None
    claimed_at: int | None = None
    held: bool = False
    dead: bool = False
    dead_reason: str | None = None
    dead_at: int | None = None
    delivered_seq: int | None = None
    claimed_for: str | None = None

    @property
    def entry(self) -> Entry:
        """The inbox log entry of this event."""
        return Entry(
            self.source, self.id, self.kind, self.keys, self.payload_sha256, self.received_at
        )

    @property
    def state(self) -> str:
        """``live``, ``claimed`` or ``dead``."""
        if self.dead:
            return "dead"
        return "live" if self.claimed_by is None else "claimed"

    def event(self) -> Event:
        """The event as it arrived; UsageError when its payload is gone."""
        if self.erased:
            raise UsageError(f"the payload of event {self.source}/{self.id} was erased")
        return make_event(self.source, self.id, self.kind, self.keys, self.payload)

    def to_json(self) -> dict[str, Any]:
        from tlog.encoding import b64encode  # noqa: PLC0415 - one function

        obj: dict[str, Any] = {
            "source": self.source,
            "id": self.id,
            "kind": self.kind,
            "keys": [list(k) for k in self.keys],
            "payload_sha256": b64encode(self.payload_sha256),
            "position": self.position,
            "received_at": self.received_at,
            "state": self.state,
            "erased": self.erased,
        }
        if not self.erased:
            obj["payload"] = self.payload
        if self.claimed_by is not None:
            obj["claimed_by"] = self.claimed_by
            obj["claimed_for"] = self.claimed_for
            obj["claimed_at"] = self.claimed_at
            obj["held"] = self.held
        if self.dead:
            obj["dead_reason"] = self.dead_reason
            obj["dead_at"] = self.dead_at
        if self.delivered_seq is not None:
            obj["delivered_seq"] = self.delivered_seq
        return obj


@dataclass(frozen=True)
class Claimed:
    """A claim: ``event`` now belongs to ``wait``'s run. ``recovered`` when the run had claimed
    it already (it crashed between the claim and resuming)."""

    event: StoredEvent
    wait: Wait
    recovered: bool = False


@dataclass(frozen=True)
class Buffered:
    """What buffering an event did: its ``position`` in the inbox log and ``received_at``;
    ``duplicate`` when (source, id) was buffered before (nothing changed; position and time are
    the first arrival's); ``matched`` the wait it resumed when it was claimed on arrival."""

    source: str
    id: str
    position: int
    received_at: int
    duplicate: bool
    matched: Wait | None = None

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "source": self.source,
            "id": self.id,
            "position": self.position,
            "received_at": self.received_at,
            "duplicate": self.duplicate,
        }
        if self.matched is not None:
            obj["matched"] = self.matched.to_json()
        return obj


@dataclass(frozen=True)
class Targeted:
    """What a targeted delivery to a named run did: ``status`` is ``matched`` (the event is
    the run's: ``wait`` is the wait it satisfies, ``position`` its place in the log),
    ``duplicate`` (the event was buffered before and is not this run's) or ``not-waiting``
    (the run waits for no such event; nothing was stored)."""

    status: str
    wait: Wait | None = None
    position: int | None = None


@dataclass(frozen=True)
class InboxCounts:
    """How many events the inbox log holds (``size``) and in which state; ``erased`` counts
    payloads gone (of any state), ``waits`` the registered waits."""

    size: int
    live: int
    claimed: int
    dead: int
    erased: int
    waits: int

    def to_json(self) -> dict[str, int]:
        return dict(self.__dict__)


def _opt_int(value: object, what: str) -> int | None:
    return None if value is None else STORED.integer(value, what)


def stored_event(row: Sequence[Any]) -> StoredEvent:
    """A row of :data:`~store.inbox.schema.EVENT_COLUMNS`, checked."""
    (
        source,
        id_,
        position,
        kind,
        keys,
        payload,
        payload_hash,
        received_at,
        claimed_by,
        claimed_at,
        held,
        dead,
        dead_reason,
        dead_at,
        delivered_seq,
        claimed_for,
    ) = row
    source = STORED.text(source, "event source")
    id_ = STORED.text(id_, "event id")
    where = f"event {source}/{id_}"
    try:
        parsed_keys = parse_keys_json(STORED.blob(keys, "event keys"))
        value = None
        if payload is not None:
            value = parse_json(STORED.blob(payload, "event payload").decode("utf-8"))
    except (MalformedError, UnicodeDecodeError) as e:
        raise CorruptError(f"{where}: stored {e}") from None
    return StoredEvent(
        source,
        id_,
        STORED.text(kind, "event kind"),
        parsed_keys,
        value,
        payload is None,
        STORED.blob(payload_hash, "payload hash", 32),
        STORED.integer(position, "event position"),
        STORED.integer(received_at, "event time"),
        None if claimed_by is None else STORED.text(claimed_by, "claiming run"),
        _opt_int(claimed_at, "claim time"),
        STORED.boolean(held, "held flag"),
        STORED.boolean(dead, "dead flag"),
        None if dead_reason is None else STORED.text(dead_reason, "dead-letter reason"),
        _opt_int(dead_at, "dead-letter time"),
        _opt_int(delivered_seq, "delivery seq"),
        None if claimed_for is None else STORED.text(claimed_for, "claiming wait"),
    )


def stored_waits(rows: Sequence[Sequence[Any]]) -> list[Wait]:
    """Rows of :data:`~store.inbox.schema.WAIT_COLUMNS` ordered by (number, run, effect key),
    as one :class:`Wait` per (run, effect key)."""
    out: list[Wait] = []
    pending: dict[str, Any] | None = None
    for run, effect, ns, value, kind, case, step, number, created in rows:
        ident = (STORED.text(run, "wait run"), STORED.text(effect, "wait effect key"))
        key = (STORED.text(ns, "wait namespace"), STORED.text(value, "wait value"))
        if pending is not None and pending["ident"] == ident:
            pending["keys"].append(key)
            continue
        if pending is not None:
            out.append(_wait_of(pending))
        pending = {
            "ident": ident,
            "keys": [key],
            "kind": STORED.text(kind, "wait kind"),
            "case": None if case is None else STORED.text(case, "wait case"),
            "step": STORED.integer(step, "wait step"),
            "number": STORED.integer(number, "wait number", 1),
            "created": STORED.integer(created, "wait time"),
        }
    if pending is not None:
        out.append(_wait_of(pending))
    return out


def _wait_of(p: dict[str, Any]) -> Wait:
    run, effect = p["ident"]
    return Wait(
        run,
        effect,
        p["kind"],
        tuple(sorted(p["keys"])),
        p["case"],
        p["step"],
        p["number"],
        p["created"],
    )


def checked_event(event: object, verb: str) -> Event:
    """``event`` when it is an Event exactly as :func:`tlog.inbox.make_event` gives it (a
    hand-built one could store keys out of order, a source the format refuses, or payload bytes
    that are not its payload's: a corrupt row and an entry no receipt can carry)."""
    if not isinstance(event, Event):
        raise UsageError(
            f"{verb} takes Event values (tlog.inbox.make_event), not {type(event).__name__}"
        )
    if event.made:  # checked by make_event already (a third of a batch's time, twice)
        return event
    try:
        same = make_event(event.source, event.id, event.kind, event.keys, event.payload)
    except MalformedError as e:
        raise UsageError(f"{verb}: event {event.source!r}/{event.id!r}: {e}") from None
    if same != event:
        raise UsageError(
            f"{verb}: event {event.source}/{event.id} is not as tlog.inbox.make_event gives it"
            " (keys in canonical order, payload_bytes its payload's canonical JSON)"
        )
    return event


def checked_wait(wait: object) -> Wait:
    """``wait`` when it is a Wait whose fields :func:`make_wait` accepts as they are (a
    hand-built one could hold a run ID no export can name, a negative step, no key, or keys
    out of order); UsageError otherwise."""
    if not isinstance(wait, Wait):
        raise UsageError(f"a wait is a Wait (store.inbox.make_wait), not {type(wait).__name__}")
    same = make_wait(
        wait.run, wait.effect_key, wait.kind, wait.keys, case=wait.case, step=wait.step
    )
    if same.keys != wait.keys:
        raise UsageError(
            f"wait {wait.run}/{wait.effect_key}: keys are not in canonical order (make_wait)"
        )
    return wait


__all__ = [
    "Buffered",
    "Claimed",
    "InboxCounts",
    "StoredEvent",
    "Targeted",
    "Wait",
    "checked_event",
    "checked_wait",
    "make_wait",
    "stored_event",
    "stored_waits",
    "wait_from_json",
]
