"""The one-pass streaming reader and verifier of an export.

:func:`read_export` yields an export's items in file order, checking everything that needs no
signature and no chain hash; :class:`ExportVerifier` (and :func:`verify_export`) adds the
cryptography and the rebuilt log. Both drive the shared checks: :mod:`tlog.export.check` for
each element, :mod:`tlog.export.scan` for the records and the order of runs,
:mod:`tlog.export.follow` for the rebuilt log, the checkpoints and the end line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO

from tlog.export.check import (
    HeaderKeys,
    canonical_vkey,
    check_header,
    decimal,
    describe,
    keyword,
    parse_checkpoint,
    read_run_line,
    text_of,
)
from tlog.export.follow import LogFollower
from tlog.export.format import (
    MAGIC,
    MAGIC_V1,
    CheckpointItem,
    EndItem,
    ExportFormatError,
    ExportHeader,
    ExportVerificationError,
    HeaderItem,
    RecordItem,
    RunItem,
    RunSeal,
)
from tlog.export.inbox import InboxVerifier, read_tail
from tlog.export.scan import RunOrder, StreamLines, expect, read_record, verify_record
from tlog.journal import GENESIS, Record
from tlog.merkle import leaf_hash
from tlog.note import MAX_NOTE_SIZE

if TYPE_CHECKING:  # in annotations only
    from tlog.export.format import ExportItem, ExportSummary


def _read_magic(lines: StreamLines) -> None:
    got = lines.next()
    if got is None:
        raise ExportFormatError(1, f"the export is empty (expected {MAGIC.decode()!r})")
    if got[1] == MAGIC_V1:
        raise ExportFormatError(
            1,
            "this is a version 1 export, which is no longer read: its sealed runs carry no seal"
            " record, so no signature covers their outcomes; export the store again with this"
            " version",
        )
    if got[1] != MAGIC:
        raise ExportFormatError(1, f"expected {MAGIC.decode()!r}, found {describe(got[1])}")


def _read_header(lines: StreamLines) -> tuple[ExportHeader, HeaderKeys]:
    n, data = expect(lines, "the origin line")
    rest = keyword(data, b"origin")
    if rest is None:
        raise ExportFormatError(n, f"expected 'origin <origin>', found {describe(data)}")
    origin = text_of(rest, n)
    n, data = expect(lines, "the log-key line")
    rest = keyword(data, b"log-key")
    if rest is None:
        raise ExportFormatError(n, f"expected 'log-key <vkey>', found {describe(data)}")
    log_key = text_of(rest, n)
    record_keys: list[str] = []
    witness_keys: list[str] = []
    while True:
        got = expect(lines, "a key, checkpoint, run or end line")
        n, data = got
        rest = keyword(data, b"record-key")
        if rest is not None:
            if witness_keys:
                raise ExportFormatError(n, "record-key line after the witness-key lines")
            record_keys.append(text_of(rest, n))
            continue
        rest = keyword(data, b"witness-key")
        if rest is not None:
            witness_keys.append(text_of(rest, n))
            continue
        lines.push_back(got)
        break
    header = ExportHeader(origin, log_key, tuple(record_keys), tuple(witness_keys))
    return header, check_header(header)


def _read_checkpoints(
    lines: StreamLines, keys: HeaderKeys, origin: str, sizes: list[tuple[int, int]]
) -> Iterator[CheckpointItem]:
    """The checkpoints; (size, line) of each is appended to ``sizes``."""
    while True:
        got = expect(lines, "a checkpoint, run or end line")
        n, data = got
        rest = keyword(data, b"checkpoint")
        if rest is None:
            lines.push_back(got)
            return
        size = decimal(rest, n, "checkpoint length", 1, MAX_NOTE_SIZE)
        note = lines.read_note(size, n)
        item = parse_checkpoint(note, n, keys, origin, sizes[-1][0] if sizes else None)
        sizes.append((item.checkpoint.size, n))
        yield item


def read_export(stream: BinaryIO) -> Iterator[ExportItem]:
    """Parse an export strictly, streaming; yield its items in file order.

    Checks every rule that needs no signature or chain hash (see :mod:`tlog.export`) and
    raises :class:`ExportFormatError` (a MalformedError), :class:`ExportVerificationError`,
    :class:`ExportChainError` or :class:`ExportProofError`, each message starting with
    ``"line N: "``. An item is yielded once its own checks pass; the ``end`` line's checks
    (counts, digest, nothing after it) pass before :class:`EndItem` is yielded, so a consumer
    must not treat the export as valid before then.

    Requires: ``stream`` is a binary stream positioned at the start of the export; it is read
    sequentially, never sought.
    """
    lines = StreamLines(stream)
    _read_magic(lines)
    header, keys = _read_header(lines)
    yield HeaderItem(header, 2)
    sizes: list[tuple[int, int]] = []  # (size, line): few, kept for the end check
    yield from _read_checkpoints(lines, keys, header.origin, sizes)
    order = RunOrder()
    records = 0
    while True:
        n, data = expect(lines, "a run or end line")
        fields = read_run_line(n, data)
        if fields is None:
            break
        _, run, count, pos, outcome = fields
        order.run_line(n, run, pos)
        sealed_as = None if outcome is None else outcome.decode("ascii")
        yield RunItem(run, count, None if sealed_as is None else RunSeal(pos, sealed_as), n)
        run_line = n
        prev = GENESIS
        for seq in range(1, count + 1):
            n, h, raw, sig = read_record(lines, keys, run, seq, count, run_line, sealed_as)
            records += 1
            yield RecordItem(Record(run, seq, raw, prev, h, sig), n)
            prev = h
    counted = (len(sizes), order.runs, records, order.position)
    yield from read_tail(lines, keys, header, n, data, counted, lambda: lines.before_end, sizes)


_NO_RUN = RunItem("-", 0, None, 0)
"""Stands for the runs once the inbox section is reached without any."""


@dataclass
class ExportVerifier:
    """The full offline check of an export, in one streaming pass (see :func:`verify_export`).

    ``log_key``: the vkey the caller trusts for the log; the header's must be exactly it.
    ``record_keys``: when given, the vkeys the caller trusts for records; every record-key of
    the header must be one of them. ``require_record_signatures``: every record must be signed.

    :meth:`items` yields each item once it and everything before it verified, so a restore
    can replay while verifying; :attr:`summary` is set once the last item (the end) verified.
    :attr:`follower` is the rebuilt log and its checkpoints so far, from the header on (the
    parallel verifier goes on from it after the first run line).
    """

    log_key: str | None = None
    record_keys: Iterable[str] | None = None
    require_record_signatures: bool = False
    summary: ExportSummary | None = field(default=None, init=False)
    follower: LogFollower | None = field(default=None, init=False)
    inbox: InboxVerifier | None = field(default=None, init=False)
    """The inbox section's verification (and the runs' EventDelivered records), from the
    header on."""

    def _trusted(self) -> tuple[str | None, set[str] | None]:
        """The trusted keys, canonical (an unusable one is a UsageError)."""
        trusted_log = canonical_vkey(self.log_key, "trusted log key") if self.log_key else None
        trusted_records = (
            None
            if self.record_keys is None
            else {canonical_vkey(k, "trusted record key") for k in self.record_keys}
        )
        return trusted_log, trusted_records

    def _header(
        self, item: HeaderItem, trusted_log: str | None, trusted_records: set[str] | None
    ) -> LogFollower:
        header = item.header
        keys = check_header(header)
        if trusted_log is not None and header.log_key != trusted_log:
            raise ExportVerificationError(3, "log-key is not the trusted log key")
        if trusted_records is not None:
            for i, k in enumerate(header.record_keys):
                if k not in trusted_records:
                    raise ExportVerificationError(
                        4 + i, "record-key is not one of the trusted record keys"
                    )
        return LogFollower(header, keys)

    def items(self, stream: BinaryIO) -> Iterator[ExportItem]:
        """Verify ``stream`` item by item; yield each verified item."""
        trusted = self._trusted()  # before the stream is read
        follow: LogFollower | None = None
        tail: InboxVerifier | None = None
        run: RunItem | None = None
        signed = 0
        require = self.require_record_signatures
        for item in read_export(stream):
            if isinstance(item, RecordItem):
                assert follow is not None and tail is not None and run is not None
                r = item.record
                if r.signature is not None:
                    signed += 1
                verify_record(
                    follow.keys, item.line, r.run, r.seq, r.prev_hash, r.hash, r.raw,
                    r.signature, require,
                )  # fmt: skip
                tail.deliveries.note(item.line, r.raw)
                if run.seal is not None and r.seq == run.count:
                    follow.add_leaves([leaf_hash(r.hash)], item.line)
            elif isinstance(item, RunItem):
                assert follow is not None
                if run is None:
                    follow.reach(item.line)  # a checkpoint of size 0
                run = item
            elif isinstance(item, CheckpointItem):
                assert follow is not None
                follow.checkpoint(item)
            elif isinstance(item, HeaderItem):
                follow = self.follower = self._header(item, *trusted)
                tail = self.inbox = InboxVerifier(item.header, follow.keys)
            elif isinstance(item, EndItem):
                assert follow is not None and tail is not None
                if run is None:
                    follow.reach(item.line)
                self.summary = follow.summary(item, signed, tail.end(item))
            else:
                assert follow is not None and tail is not None
                if run is None:
                    follow.reach(item.line)  # the inbox line: a checkpoint of size 0
                    run = _NO_RUN
                tail.item(item)
            yield item


def verify_export(
    stream: BinaryIO,
    *,
    log_key: str | None = None,
    record_keys: Iterable[str] | None = None,
    require_record_signatures: bool = False,
) -> ExportSummary:
    """Verify a whole export in one streaming pass and return what was checked.

    Everything :func:`read_export` checks, then: every checkpoint signature line verifies
    under its declared key; every record's hash is SHA-256(previous hash || body); every
    record signature verifies; each sealed run's head (its last record's hash) is its log leaf
    at its position; each checkpoint's root equals the root rebuilt at its size; successive
    checkpoints are consistent (RFC 6962 proof from the rebuilt tree). Options: see
    :class:`ExportVerifier`.

    Raises a :class:`~tlog.errors.TlogError` whose message starts with ``"line N: "``:
    :class:`ExportFormatError` (a MalformedError) for format errors, and
    :class:`ExportVerificationError`, :class:`ExportChainError`, :class:`ExportSignatureError`
    or :class:`ExportProofError` (VerificationErrors) for content that does not verify; a
    :class:`UsageError` for an unparsable trusted key argument. The witness quorum is not
    checked here (apply a tlog.policy to the checkpoint notes).
    """
    v = ExportVerifier(log_key, record_keys, require_record_signatures)
    for _ in v.items(stream):
        pass
    assert v.summary is not None
    return v.summary
