"""The inbox section of an export (docs/export-format.md §4.7), for :mod:`store.export`:
written from one snapshot of a tenant's inbox (:func:`write_section`), and replayed into an
empty inbox (:class:`InboxReplay`) with the rows :mod:`store.inbox.transfer` writes back.

Replay order: events are written in batches, in position order, each batch extending the
inbox log; an exported inbox checkpoint is kept once the rebuilt log reaches its size; the
waits follow the events, then the wait counter. At the end the rebuilt inbox must reproduce
the export's: its log's size and root, its kept checkpoints, its counts and its wait counter
(:class:`~store.errors.RestoreError` otherwise, naming the export's line).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from store.errors import CorruptError, RestoreError
from store.inbox import transfer
from store.inbox.values import StoredEvent, Wait
from tlog.errors import MalformedError, TlogError, VerificationError
from tlog.export import (
    EndItem,
    EventItem,
    ExportWriter,
    InboxCheckpointItem,
    InboxItem,
    InboxSummary,
    WaitItem,
)
from tlog.journal import canonical_json, parse_canonical_json

if TYPE_CHECKING:
    from store.inbox.core import Inbox

__all__ = ["BATCH", "InboxReplay", "write_section"]

BATCH = 500
"""Most events, or waits, written back in one transaction."""


def write_section(
    inbox: Inbox, w: ExportWriter, notes: list[bytes], delivered: set[tuple[str, int]]
) -> None:
    """The inbox section, unless the inbox is empty, from one snapshot of the inbox
    (:func:`store.inbox.transfer.read_inbox`). An event's delivery whose record is not in the
    export (journaled after its run was written) is left out: the export shows the event as
    claimed and not yet delivered, as it was when the run was read."""
    size_seen = [0]
    written = [0]

    def start(size: int, waits: int, counter: int) -> bool:
        if not (size or waits or notes):
            return False
        w.inbox(inbox.origin, size, waits, counter)
        for note in notes:
            w.inbox_checkpoint(note)
        size_seen[0] = size
        return True

    def event(ev: StoredEvent) -> None:
        seq = ev.delivered_seq
        if seq is not None and (ev.claimed_by, seq) not in delivered:
            seq = None
        try:
            w.event(
                EventItem(
                    ev.position, ev.entry, ev.entry.encode(),
                    None if ev.erased else canonical_json(ev.payload), ev.claimed_by,
                    ev.claimed_at, ev.held, ev.dead_reason if ev.dead else None,
                    ev.dead_at if ev.dead else None, seq, 0, ev.claimed_for,
                )
            )  # fmt: skip
        except (MalformedError, VerificationError) as e:
            raise CorruptError(f"inbox event {ev.source}/{ev.id} cannot be exported: {e}") from None
        written[0] += 1

    def wait(wt: Wait) -> None:
        w.wait(
            WaitItem(
                wt.run, wt.effect_key, wt.kind, wt.keys, wt.case, wt.step, wt.number,
                wt.created_at, 0,
            )
        )  # fmt: skip

    transfer.read_inbox(inbox, start, event, wait)
    if written[0] != size_seen[0]:
        raise CorruptError(
            f"the inbox log holds {size_seen[0]} events, the inbox table {written[0]} of them"
        )


class InboxReplay:
    """The replay of one export's inbox section into ``inbox`` (see the module docstring):
    fed its items in file order, then :meth:`finish`."""

    def __init__(self, inbox: Inbox | None, item: InboxItem) -> None:
        if inbox is None:
            raise RestoreError(item.line, "the target store has no inbox to restore into")
        if inbox.origin != item.origin:  # pragma: no cover - the verifier checked the origin
            raise RestoreError(item.line, f"the target's inbox is {inbox.origin}")
        self.inbox = inbox
        self.item = item
        self.size = 0
        self.pending: deque[InboxCheckpointItem] = deque()  # kept once the log reaches them
        self.notes: list[InboxCheckpointItem] = []
        self.events: list[tuple[EventItem, StoredEvent]] = []
        self.waits: list[Wait] = []

    def checkpoint(self, item: InboxCheckpointItem) -> None:
        self.notes.append(item)
        self.pending.append(item)
        self._import_reached()

    def _import_reached(self) -> None:
        while self.pending and self.pending[0].checkpoint.size <= self.size:
            item = self.pending.popleft()
            try:
                self.inbox._log.import_checkpoint(item.note)
            except TlogError as e:
                raise RestoreError(
                    item.line,
                    f"inbox checkpoint of size {item.checkpoint.size}: the store refused to "
                    f"keep it: {e}",
                ) from e

    def event(self, item: EventItem) -> None:
        e = item.entry
        payload = None if item.payload is None else parse_canonical_json(item.payload)
        dead = item.dead_reason is not None
        ev = StoredEvent(
            e.source, e.id, e.kind, e.keys, payload, item.payload is None, e.payload_sha256,
            item.position, e.received_at, item.claimed_by, item.claimed_at, item.held, dead,
            item.dead_reason, item.dead_at, item.delivered_seq, item.claimed_for,
        )  # fmt: skip
        self.events.append((item, ev))
        if len(self.events) >= BATCH:
            self._flush_events()

    def _flush_events(self) -> None:
        batch, self.events = self.events, []
        if not batch:
            return
        try:
            self.size = transfer.restore_events(self.inbox, [ev for _, ev in batch])
        except TlogError as e:
            raise RestoreError(
                batch[0][0].line,
                f"inbox events {batch[0][0].position}-{batch[-1][0].position}: the store refused "
                f"them: {e}",
            ) from e
        self._import_reached()

    def wait(self, item: WaitItem) -> None:
        self._flush_events()
        self.waits.append(
            Wait(
                item.run, item.effect_key, item.kind, item.keys, item.case, item.step,
                item.number, item.created_at,
            )
        )  # fmt: skip
        if len(self.waits) >= BATCH:
            self._flush_waits(item.line)

    def _flush_waits(self, line: int) -> None:
        batch, self.waits = self.waits, []
        if not batch:
            return
        try:
            transfer.restore_waits(self.inbox, batch)
        except TlogError as e:
            raise RestoreError(line, f"inbox waits: the store refused them: {e}") from e

    def finish(self, end: EndItem, summary: InboxSummary | None) -> None:
        """The restored inbox reproduces the export's: its log's size and root, its kept
        checkpoints, its counts, and its wait counter."""
        item, inbox = self.item, self.inbox
        self._flush_events()
        self._flush_waits(end.line)
        self._import_reached()
        assert summary is not None
        if item.wait_counter:
            transfer.set_wait_counter(inbox, item.wait_counter)
        cp = inbox._log.checkpoint()
        if (cp.origin, cp.size, cp.root) != (summary.origin, summary.size, summary.root):
            raise RestoreError(
                item.line,
                f"the rebuilt inbox log is {cp.origin} of size {cp.size}, the export's "
                f"{summary.origin} of size {summary.size}"
                + ("" if cp.size != summary.size or cp.root == summary.root else ", another root"),
            )
        if inbox._log.published() != [i.note for i in self.notes]:
            raise RestoreError(end.line, "the store's kept inbox checkpoints are not the exported")
        counts = inbox.counts()
        want = (summary.live, summary.claimed, summary.dead, summary.erased, summary.waits)
        got = (counts.live, counts.claimed, counts.dead, counts.erased, counts.waits)
        if got != want:
            raise RestoreError(
                end.line, f"the restored inbox counts {got} (live, claimed, dead, erased, "
                f"waits), the export {want}",
            )  # fmt: skip
        if transfer.wait_counter(inbox) != item.wait_counter:
            raise RestoreError(item.line, "the restored wait counter is not the exported")
