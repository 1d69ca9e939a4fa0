"""The witness state's export file: one text format for moving a witness's state.

Export format (``export_state``/``import_state``; UTF-8, every line ends in LF, no other
control characters)::

    tlog-witness-state v1                       exactly this header line
    log <origin>                                a log block; the origin is the rest of the line
    key <vkey>                                  one or more, in strictly increasing order
    qpd <decimal>                               optional: requests per day, 1..2^63-1
    disabled                                    optional: the log is disabled
    cosigned <updated_at> <base64 note>         optional: the latest cosigned note
    end <number of log blocks>                  last line, exactly once (catches truncation)

Log blocks come in strictly increasing origin order; decimals are canonical (no leading
zero); base64 is canonical and padded. The cosigned note's size and root are those of its
checkpoint text, whose origin must be the block's; the note must verify with at least one of
the block's keys (the witness's own cosignature lines are unknown to those keys, and ignored).
One state has exactly one spelling: parsing then formatting gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tlog.checkpoint import Checkpoint
from tlog.encoding import b64decode, b64encode, parse_decimal
from tlog.errors import (
    MalformedError,
    ProofError,
    UnverifiedNoteError,
    UsageError,
    VerificationError,
)
from tlog.keys import parse_vkey
from tlog.note import open_note, parse_note
from witness.state import Cosigned, LogConfig
from witness.statecheck import check_log_vkey, check_origin

STATE_HEADER = "tlog-witness-state v1"
"""First line of an exported state."""


def format_state(entries: Sequence[tuple[LogConfig, Cosigned | None]]) -> bytes:
    """The export file of ``entries`` (see the module docstring); logs and keys are sorted.

    Requires: entries as a state holds them (valid origins and vkeys, at least one key each,
    notes whose checkpoint is the log's), as :meth:`SQLState.export_state` passes them.
    """
    lines = [STATE_HEADER]
    for cfg, cos in sorted(entries, key=lambda e: e[0].origin):
        lines.append(f"log {cfg.origin}")
        lines.extend(f"key {k}" for k in sorted(cfg.keys))
        if cfg.qpd is not None:
            lines.append(f"qpd {cfg.qpd}")
        if cfg.disabled:
            lines.append("disabled")
        if cos is not None:
            lines.append(f"cosigned {cos.updated_at} {b64encode(cos.note)}")
    lines.append(f"end {len(entries)}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def parse_state(data: bytes) -> list[tuple[LogConfig, Cosigned | None]]:
    """Parse an export file strictly: MalformedError naming the line; a cosigned note that does
    not verify with its log's keys raises UnverifiedNoteError naming the line."""
    if not isinstance(data, bytes):
        raise UsageError("a state file is bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedError(f"state file is not valid UTF-8 (byte {e.start})") from None
    if not text.endswith("\n"):
        raise MalformedError("state file does not end in a newline")
    lines = text[:-1].split("\n")
    if lines[0] != STATE_HEADER:
        raise MalformedError(f"state line 1: expected the header {STATE_HEADER!r}")
    out: list[tuple[LogConfig, Cosigned | None]] = []
    i = 1

    def peek(prefix: str) -> str | None:
        # The rest of line i if it starts with prefix ("" when prefix is the whole line).
        if i < len(lines) and lines[i].startswith(prefix):
            return lines[i][len(prefix) :]
        return None

    def fail(detail: str, at: int | None = None) -> MalformedError:
        return MalformedError(f"state line {(i if at is None else at) + 1}: {detail}")

    while True:
        if i >= len(lines):
            raise fail("missing the final 'end' line (is the file truncated?)")
        if (rest := peek("end ")) is not None:
            try:
                count = parse_decimal(rest, "the log count")
            except MalformedError as e:
                raise fail(str(e)) from None
            if count != len(out):
                raise fail(f"'end' counts {count} logs, the file holds {len(out)}")
            if i != len(lines) - 1:
                raise fail("text after the 'end' line", i + 1)
            return out
        origin = peek("log ")
        if origin is None:
            raise fail("expected 'log <origin>' or 'end <count>'")
        try:
            check_origin(origin)
        except MalformedError as e:
            raise fail(str(e)) from None
        if out and origin <= out[-1][0].origin:
            raise fail(f"log {origin} is out of order or repeated (origins increase strictly)")
        i += 1
        keys: list[str] = []
        while (vkey := peek("key ")) is not None:
            try:
                check_log_vkey(vkey)
            except (MalformedError, UsageError) as e:
                raise fail(str(e)) from None
            if keys and vkey <= keys[-1]:
                raise fail("keys are out of order or repeated (they increase strictly)")
            keys.append(vkey)
            i += 1
        if not keys:
            raise fail(f"log {origin} has no 'key' line")
        qpd = None
        if (rest := peek("qpd ")) is not None:
            try:
                qpd = parse_decimal(rest, "qpd")
            except MalformedError as e:
                raise fail(str(e)) from None
            if qpd == 0:
                raise fail("qpd must be at least 1")
            i += 1
        disabled = peek("disabled") == ""
        if disabled:
            i += 1
        cos = None
        if (rest := peek("cosigned ")) is not None:
            cos = _parse_cosigned(rest, origin, keys, fail)
            i += 1
        out.append((LogConfig(origin, tuple(keys), qpd, disabled), cos))


def _parse_cosigned(
    rest: str, origin: str, keys: list[str], fail: Callable[[str], MalformedError]
) -> Cosigned:
    fields = rest.split(" ")
    if len(fields) != 2:
        raise fail("expected 'cosigned <updated_at> <base64 note>'")
    try:
        updated_at = parse_decimal(fields[0], "the update time")
        note = b64decode(fields[1], "the cosigned note")
        text, _ = parse_note(note)
        cp = Checkpoint.parse(text)
    except (MalformedError, ProofError) as e:
        raise fail(str(e)) from None
    if cp.origin != origin:
        raise fail(f"the cosigned note is a checkpoint of {cp.origin}, not of {origin}")
    try:
        open_note(note, [parse_vkey(k) for k in keys])
    except (VerificationError, UsageError) as e:
        where = str(fail("")).rstrip(": ")
        raise UnverifiedNoteError(
            f"{where}: log {origin}: the cosigned note does not verify with the log's keys: {e}"
        ) from None
    return Cosigned(origin, cp.size, cp.root, note, updated_at)


__all__ = ["STATE_HEADER", "format_state", "parse_state"]
