"""A hostile megabyte in any field is refused with a short message: the one-line error names
the field and shows the start of the value (:func:`tlog.encoding.shown`), never the whole of it
— a message that a CLI prints, a log line records and a witness sends back in a 4xx body."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tlog import journal
from tlog.checkpoint import Checkpoint
from tlog.encoding import parse_decimal, shown
from tlog.errors import TlogError
from tlog.inbox import event_from_json, make_event
from tlog.keys import parse_vkey
from tlog.note import Signature, format_note, open_note
from tlog.tiles import parse_tile_path
from tlog.witnessproto import AddCheckpointRequest

HUGE = "x" * 1_000_000
DIGITS = "9" * 1_000_000
LIMIT = 400


def _note_signed_by(name: str) -> bytes:
    text = Checkpoint("example.com/log", 1, bytes(32)).format()
    return format_note(text, [Signature(name, 0, bytes(64))])


CASES: dict[str, Callable[[], object]] = {
    "run ID": lambda: journal.check_run_id("r " + HUGE),
    "case ID": lambda: journal.check_case_id("c " + HUGE),
    "record kind": lambda: journal.check_kind("1" + HUGE),
    "outcome": lambda: journal.check_outcome("1" + HUGE),
    "source": lambda: journal.check_source("s " + HUGE),
    "tenant": lambda: journal.check_tenant("T" + HUGE),
    "event member": lambda: event_from_json(
        {"source": "s", "id": "i", "kind": "k", "keys": [["a", "b"]], "payload": 1, HUGE: 1}
    ),
    "event key": lambda: make_event("s", "i", "k", [("a" + HUGE, "b")], {}),
    "decimal": lambda: parse_decimal(DIGITS, "size"),
    "decimal spelling": lambda: parse_decimal("+" + DIGITS, "size"),
    "tile width": lambda: parse_tile_path("tile/0/000.p/" + DIGITS),
    "tile group": lambda: parse_tile_path("tile/0/" + DIGITS),
    "vkey": lambda: parse_vkey(HUGE + "+01234567+AAAA"),
    "signature key name": lambda: open_note(_note_signed_by("a" + HUGE + " b"), []),
    "add-checkpoint old": lambda: AddCheckpointRequest.parse(b"old " + DIGITS.encode() + b"\n\n"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_megabyte_is_refused_with_a_short_message(case: str) -> None:
    with pytest.raises(TlogError) as e:
        CASES[case]()
    message = str(e.value)
    assert "\n" not in message
    assert len(message) < LIMIT, (case, message[:200])


def test_shown_keeps_short_values_whole_and_cuts_long_ones() -> None:
    assert shown("abc") == "'abc'"
    assert shown(7) == "7"
    assert shown("y" * 500) == repr("y" * 500)[:120] + "…"
    assert len(shown([1] * 10_000)) == 121
