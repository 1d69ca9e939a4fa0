"""The transparency-dev/witness-network ``logs/v0`` log list, which ``tlog-witness pull-logs``
reads (:mod:`witness.pull` applies it to a state).

It is parsed strictly: anything the format does not allow raises
:class:`~tlog.errors.MalformedError` naming the list and the line.

**logs/v0** (transparency-dev/witness-network ``docs/log-list-format.md``; the lists under its
``lists/``) — UTF-8 text, every line ending in LF::

    # comment lines start with '#'; empty lines are ignored
    logs/v0                      the header: the first line that is neither
    vkey <vkey>                  a log entry starts with its key, then, in this order:
    origin <origin> | none       optional: the checkpoint origin; none: the vkey's name
    bastion <url> | none         optional: an https-bastion URL (recorded nowhere here)
    qpd <requests per day>       canonical decimal, 1 .. 2^63-1
    contact <text>               free text for humans

The document lists all five entry lines; the published lists omit ``origin`` and ``bastion``,
and the network's own validator (cmd/validate) treats ``origin`` as optional: both are
optional here, the order is enforced. Stricter than that validator, as this project's parsers
are: no CR, no space or tab at either end of a line (a whitespace-only line is not empty), one
space after the keyword, no unknown keyword, no entry cut short by the end of the file, no
origin listed twice. A vkey that does not parse makes the list malformed; a well-formed vkey of
a type a log cannot sign checkpoints with here (anything but 0x01 Ed25519 and 0x06 ML-DSA-44:
ECDSA, a cosignature key, a future type) is kept as a *skipped* entry with the reason, so that
one log this witness cannot follow does not block the rest of the list (torchwood's witnessctl
skips such keys too).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tlog.encoding import b64decode, parse_decimal
from tlog.errors import MalformedError, UsageError
from tlog.keys import TYPE_NAMES
from tlog.note import check_key_name
from witness.sqlstate import LOG_KEY_TYPES, check_log_vkey, check_origin

__all__ = ["LOG_LIST_HEADER", "ListedLog", "parse_log_list"]

LOG_LIST_HEADER = "logs/v0"


@dataclass(frozen=True)
class ListedLog:
    """One entry of a logs/v0 list.

    ``origin`` is the explicit origin or, for ``origin none`` or no origin line, the vkey's
    name; ``bastion`` is None for ``none`` or no bastion line; ``unsupported`` is None for a
    usable log key, else why this witness cannot follow the log; ``line`` is the entry's first
    line (its ``vkey`` line), counted from 1.
    """

    origin: str
    vkey: str
    qpd: int
    contact: str
    bastion: str | None
    line: int
    unsupported: str | None = None


_KNOWN_UNSUPPORTED = {0x02: "ECDSA", 0x05: "RFC 6962 STH"}
_HEX8 = re.compile(r"[0-9a-f]{8}")
_ORDER = ("vkey", "origin", "bastion", "qpd", "contact")


def _list_vkey(vkey: str, fail: Callable[[str], MalformedError]) -> tuple[str, str | None]:
    """(key name, None) for a usable log key; (key name, reason) for a well-formed key of
    another type; MalformedError (through ``fail``) for a key that does not parse."""
    parts = vkey.split("+", 2)
    if len(parts) != 3:
        raise fail(f"vkey {vkey[:60]!r} does not have the form name+id+key")
    name, id_text, b64 = parts
    try:
        check_key_name(name)
        if not _HEX8.fullmatch(id_text):
            raise MalformedError(f"key ID {id_text!r} is not 8 lowercase hex digits")
        raw = b64decode(b64, "the key")
        if not raw:
            raise MalformedError("the key is empty")
    except MalformedError as e:
        raise fail(f"vkey: {e}") from None
    key_type = raw[0]
    if key_type not in LOG_KEY_TYPES:
        kind = _KNOWN_UNSUPPORTED.get(key_type) or TYPE_NAMES.get(key_type) or "unknown"
        return name, (
            f"key type 0x{key_type:02x} ({kind}): logs here sign with 0x01 (Ed25519) or"
            " 0x06 (ML-DSA-44)"
        )
    try:
        check_log_vkey(vkey)
    except (MalformedError, UsageError) as e:
        raise fail(str(e)) from None
    return name, None


class _LogListParser:
    """The state of :func:`parse_log_list` between lines: the entry being read and the
    entries done."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.seen_header = False
        self.entries: list[ListedLog] = []
        self.first_line: dict[str, int] = {}  # origin -> the line of its entry
        self.entry: dict[str, Any] = {}
        self.entry_line = 0
        self.expect = 0  # index in _ORDER of the next keyword allowed

    def fail_at(self, n: int) -> Callable[[str], MalformedError]:
        def fail(detail: str) -> MalformedError:
            return MalformedError(f"{self.where} line {n}: {detail}")

        return fail

    def finish(self) -> None:
        """The entry being read is complete: check it and add it."""
        entry = self.entry
        if not entry:
            return
        if "contact" not in entry:
            missing = "qpd" if "qpd" not in entry else "contact"
            raise MalformedError(
                f"{self.where} line {self.entry_line}: the log entry has no {missing!r} line"
            )
        origin = entry.get("origin") or entry["name"]
        fail = self.fail_at(entry.get("origin_line", self.entry_line))
        try:
            check_origin(origin)
        except MalformedError as e:
            raise fail(str(e)) from None
        if origin in self.first_line:
            raise fail(f"log {origin} is listed twice (first at line {self.first_line[origin]})")
        self.first_line[origin] = self.entry_line
        self.entries.append(
            ListedLog(
                origin=origin,
                vkey=entry["vkey"],
                qpd=entry["qpd"],
                contact=entry["contact"],
                bastion=entry.get("bastion"),
                line=self.entry_line,
                unsupported=entry["unsupported"],
            )
        )
        self.entry, self.expect = {}, 0

    def line(self, n: int, line: str) -> None:
        """Read line ``n`` (without its LF)."""
        fail = self.fail_at(n)
        if "\r" in line:
            raise fail("contains a carriage return (lines end in LF alone)")
        if line == "" or line.startswith("#"):
            return
        if line != line.strip():
            raise fail("has white space at its start or end")
        if any(c < " " or c == "\x7f" for c in line):
            raise fail("contains a control character")
        if not self.seen_header:
            if line != LOG_LIST_HEADER:
                raise fail(f"expected the header {LOG_LIST_HEADER!r}, found {line[:60]!r}")
            self.seen_header = True
            return
        keyword, sep, value = line.partition(" ")
        if keyword not in _ORDER:
            raise fail(f"unknown keyword {keyword[:40]!r} (known: {', '.join(_ORDER)})")
        if not sep or not value:
            raise fail(f"{keyword!r} has no value")
        if keyword == "vkey":
            self.finish()
            name, unsupported = _list_vkey(value, fail)
            self.entry = {"vkey": value, "name": name, "unsupported": unsupported}
            self.entry_line = n
            self.expect = 1
            return
        if not self.entry:
            raise fail(f"{keyword!r} before any 'vkey' line")
        position = _ORDER.index(keyword)
        if position < self.expect:
            raise fail(
                f"{keyword!r} is repeated or out of order (an entry is vkey, origin, bastion,"
                " qpd, contact)"
            )
        if keyword == "contact" and "qpd" not in self.entry:
            # origin and bastion may be left out, qpd may not.
            raise fail("'contact' before 'qpd' (every entry has a qpd line)")
        self.expect = position + 1
        self.field(n, keyword, value, fail)

    def field(
        self, n: int, keyword: str, value: str, fail: Callable[[str], MalformedError]
    ) -> None:
        """An entry's ``origin``, ``bastion``, ``qpd`` or ``contact`` line, in its place."""
        entry = self.entry
        if keyword == "origin":
            if value != "none":
                entry["origin"] = value
            entry["origin_line"] = n
        elif keyword == "bastion":
            if value != "none":
                if any(c.isspace() for c in value):
                    raise fail("the bastion URL contains white space")
                entry["bastion"] = value
        elif keyword == "qpd":
            try:
                qpd = parse_decimal(value, "qpd")
            except MalformedError as e:
                raise fail(str(e)) from None
            if qpd < 1:
                raise fail("qpd must be at least 1")
            entry["qpd"] = qpd
        else:
            entry["contact"] = value


def parse_log_list(data: bytes, where: str = "log list") -> list[ListedLog]:
    """Parse a logs/v0 list strictly (see the module docstring), entries in list order."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedError(f"{where} is not valid UTF-8 (byte {e.start})") from None
    if text and not text.endswith("\n"):
        raise MalformedError(f"{where} does not end in a newline")
    parser = _LogListParser(where)
    for n, line in enumerate(text[:-1].split("\n") if text else [], 1):
        parser.line(n, line)
    if not parser.seen_header:
        raise MalformedError(f"{where} has no {LOG_LIST_HEADER!r} header line")
    parser.finish()
    return parser.entries
