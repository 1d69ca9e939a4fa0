"""The inbox formats (tlog/inbox.py, whose module docstring is the document these tests check):
events, their log entries, delivery records and receipts' extra data.

* An entry has one spelling: every entry round-trips byte for byte (Hypothesis), and every other
  spelling of one — members reordered, whitespace, a member extra or missing, another version,
  base64 that is not canonical, a float, keys out of order or twice, an escaped character —
  is refused by :meth:`Entry.parse`, as is anything over :data:`MAX_ENTRY_SIZE`.
* The field rules of the docstring's table: ``check_keys`` (1..16 pairs, labels of 1..256
  characters without control characters, canonical order, none twice), ``make_event`` (source,
  id, kind, the payload's canonical JSON and its size), ``event_from_json`` (exactly five
  members).
* Every event ``make_event`` accepts has an entry that ``Entry.parse`` reads back and that fits
  a receipt: so an event whose entry would be over :data:`MAX_ENTRY_SIZE` (16 keys of 256
  four-byte characters) or would not be Unicode text (a lone surrogate) is refused when it is
  made, not when its receipt is asked for.
* The delivery record's data (``delivery_data`` / ``delivery_of``) round-trips and is strict;
  ``Entry.matches`` compares every field; a receipt without extra data is no receipt.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlog.encoding import b64encode
from tlog.errors import MalformedError
from tlog.inbox import (
    KIND_EVENT_DELIVERED,
    MAX_ENTRY_SIZE,
    MAX_KEYS,
    MAX_PAYLOAD,
    Entry,
    Event,
    buffered_encodings,
    check_keys,
    delivery_data,
    delivery_of,
    entry_leaf,
    event_from_json,
    inbox_origin,
    keys_json,
    make_event,
    parse_keys_json,
    payload_hash,
    receipt_entry,
    stored_leaf,
)
from tlog.journal import MAX_SAFE_INT, canonical_json
from tlog.merkle import leaf_hash
from tlog.proof import MAX_EXTRA_SIZE

DIGEST = hashlib.sha256(b"payload").digest()
ENTRY = Entry("bank", "msg-1", "PaymentSettled", (("order", "A-1"),), DIGEST, 1_700_000_000)

labels = st.text(
    alphabet=st.characters(min_codepoint=0x20, exclude_characters="\x7f", codec="utf-8"),
    min_size=1,
    max_size=24,
)
ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,20}", fullmatch=True)
kinds = st.from_regex(r"[A-Za-z][A-Za-z0-9_.-]{0,20}", fullmatch=True)
key_lists = st.lists(st.tuples(labels, labels), min_size=1, max_size=MAX_KEYS, unique=True)
entries = st.builds(
    Entry,
    source=ids,
    id=labels,
    kind=kinds,
    keys=key_lists.map(lambda ks: tuple(sorted(ks))),
    payload_sha256=st.binary(min_size=32, max_size=32),
    received_at=st.integers(0, MAX_SAFE_INT),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-MAX_SAFE_INT, MAX_SAFE_INT) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


def entry_obj(entry: Entry = ENTRY) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(entry.encode())
    return obj


def spell(obj: Any, **options: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, **options).encode("utf-8")


# =============================================================================================
# the entry: one spelling
# =============================================================================================


@settings(max_examples=300, deadline=None)
@given(entries)
def test_every_entry_round_trips_byte_for_byte(entry: Entry) -> None:
    raw = entry.encode()
    assert Entry.parse(raw) == entry
    assert Entry.parse(raw).encode() == raw
    assert entry.leaf == leaf_hash(raw) == entry_leaf(raw)
    assert receipt_entry(raw) == entry
    # the store's catch-up: the leaf from the row as stored, its keys' text taken verbatim
    stored = keys_json(entry.keys).decode("utf-8")
    assert (
        stored_leaf(
            entry.source, entry.id, entry.kind, stored, entry.payload_sha256, entry.received_at
        )
        == entry.leaf
    )


# Any text at all, control characters, quotes, backslashes and lone surrogates included: the
# direct spelling of entries and key lists (tlog.inbox._entry_text, _keys_text) must be
# canonical_json's, byte for byte, or fail as canonical_json does.
any_text = st.text(max_size=12) | st.sampled_from(["\ud800", "a\udfffb", '"\\/\x00\x1f\x7f\u2028'])
any_key_lists = st.lists(st.tuples(any_text, any_text), max_size=MAX_KEYS)


def canonical_or_error(value: Any) -> bytes | type[Exception]:
    try:
        return canonical_json(value)
    except MalformedError:
        return MalformedError


@settings(max_examples=500, deadline=None)
@given(any_text, any_text, any_text, any_key_lists, st.integers(0, MAX_SAFE_INT))
def test_the_entry_is_spelled_as_canonical_json_spells_it(
    source: str, id_: str, kind: str, keys: list[tuple[str, str]], at: int
) -> None:
    entry = Entry(source, id_, kind, tuple(keys), DIGEST, at)
    expected = canonical_or_error(
        {
            "id": id_,
            "keys": [list(k) for k in keys],
            "kind": kind,
            "payload_sha256": b64encode(DIGEST),
            "received_at": at,
            "source": source,
            "v": 1,
        }
    )
    got: bytes | type[Exception]
    try:
        got = entry.encode()
    except MalformedError:
        got = MalformedError
    assert got == expected
    # What buffering stores: both at once, the keys spelled once.
    event = Event(source, id_, kind, tuple(keys), None, b"null")
    both: tuple[bytes, bytes] | type[Exception]
    try:
        both = buffered_encodings(event, DIGEST, at)
    except MalformedError:
        both = MalformedError
    keys_raw = canonical_or_error([list(k) for k in keys])
    if expected is MalformedError or keys_raw is MalformedError:
        assert both is MalformedError
    else:
        assert isinstance(expected, bytes)
        assert both == (keys_raw, leaf_hash(expected))
    forms: list[Any] = [keys, tuple(keys), [list(k) for k in keys]]
    for form in forms:
        try:
            got = keys_json(form)
        except MalformedError:
            got = MalformedError
        assert got == canonical_or_error([list(k) for k in keys])


def test_an_entry_of_other_types_is_still_canonical_json() -> None:
    class Text(str):
        pass

    odd = Entry(Text("bank"), "msg-1", "K", (["order", Text("A-1")],), DIGEST, 5)  # type: ignore[arg-type]
    assert odd.encode() == Entry("bank", "msg-1", "K", (("order", "A-1"),), DIGEST, 5).encode()
    assert keys_json(k for k in (("a", "b"),)) == b'[["a","b"]]'
    with pytest.raises(MalformedError):
        Entry("bank", 1.5, "K", (("a", "b"),), DIGEST, 5).encode()  # type: ignore[arg-type]


def test_the_entry_is_the_documented_object() -> None:
    assert ENTRY.encode() == (
        b'{"id":"msg-1","keys":[["order","A-1"]],"kind":"PaymentSettled","payload_sha256":"'
        + b64encode(DIGEST).encode()
        + b'","received_at":1700000000,"source":"bank","v":1}'
    )


def _non_canonical() -> list[tuple[str, bytes]]:
    obj = entry_obj()
    out = [
        (
            "members in insertion order",
            spell(dict(reversed(list(obj.items()))), separators=(",", ":")),
        ),
        ("spaces after separators", spell(obj, sort_keys=True)),
        ("indented", spell(obj, sort_keys=True, indent=1)),
        ("a trailing newline", ENTRY.encode() + b"\n"),
        ("a leading space", b" " + ENTRY.encode()),
        (
            "ASCII escapes",
            json.dumps({**obj, "id": "caf\u00e9"}, sort_keys=True, separators=(",", ":")).encode(),
        ),
        ("a repeated member", ENTRY.encode()[:-1] + b',"v":1}'),
    ]
    cases: list[tuple[str, Any]] = [
        ("an extra member", {**obj, "payload": None}),
        ("an extra member z", {**obj, "z": 1}),
        ("version 2", {**obj, "v": 2}),
        ("version 0", {**obj, "v": 0}),
        ("version as text", {**obj, "v": "1"}),
        ("version true", {**obj, "v": True}),
        ("received_at negative", {**obj, "received_at": -1}),
        ("received_at as text", {**obj, "received_at": "1700000000"}),
        ("received_at beyond 2^53", {**obj, "received_at": MAX_SAFE_INT + 1}),
        ("unpadded base64", {**obj, "payload_sha256": obj["payload_sha256"].rstrip("=")}),
        (
            "URL-safe base64",
            {
                **obj,
                "payload_sha256": b64encode(b"\xfb\xff" * 16).replace("+", "-").replace("/", "_"),
            },
        ),
        ("base64 of 31 bytes", {**obj, "payload_sha256": b64encode(DIGEST[:31])}),
        ("base64 of 33 bytes", {**obj, "payload_sha256": b64encode(DIGEST + b"\x00")}),
        ("non-zero trailing bits", {**obj, "payload_sha256": obj["payload_sha256"][:-2] + "B="}),
        ("the digest as hex", {**obj, "payload_sha256": DIGEST.hex()}),
        ("the digest as a list", {**obj, "payload_sha256": list(DIGEST)}),
        ("keys out of order", {**obj, "keys": [["z", "1"], ["a", "1"]]}),
        ("a key twice", {**obj, "keys": [["a", "1"], ["a", "1"]]}),
        ("no keys", {**obj, "keys": []}),
        ("17 keys", {**obj, "keys": [["k", f"{i:02}"] for i in range(17)]}),
        ("a key of three parts", {**obj, "keys": [["a", "b", "c"]]}),
        ("a key as an object", {**obj, "keys": [{"a": "b"}]}),
        ("a control character in the id", {**obj, "id": "a\tb"}),
        ("an empty id", {**obj, "id": ""}),
        ("a source with a slash", {**obj, "source": "a/b"}),
        ("a kind starting with a digit", {**obj, "kind": "1Paid"}),
        ("the id as a number", {**obj, "id": 1}),
        ("an array", [obj]),
        ("null", None),
    ]
    for name, value in cases:
        out.append(
            (
                name,
                canonical_json(value)
                if name != "received_at beyond 2^53"
                else spell(value, sort_keys=True, separators=(",", ":")),
            )
        )
    out.append(("a float", ENTRY.encode().replace(b"1700000000", b"1700000000.0")))
    out.append(("an exponent", ENTRY.encode().replace(b"1700000000", b"17e8")))
    out.append(("a leading zero", ENTRY.encode().replace(b"1700000000", b"01700000000")))
    out.append(("invalid UTF-8", ENTRY.encode().replace(b"msg-1", b"msg-\xff")))
    out.append(("truncated", ENTRY.encode()[:-1]))
    out.append(("empty", b""))
    return out


@pytest.mark.parametrize(("name", "raw"), _non_canonical(), ids=[n for n, _ in _non_canonical()])
def test_every_other_spelling_of_an_entry_is_refused(name: str, raw: bytes) -> None:
    assert raw != ENTRY.encode()
    with pytest.raises(MalformedError):
        Entry.parse(raw)


def test_an_entry_over_the_size_limit_is_refused_before_it_is_parsed() -> None:
    over = Entry("s", "x" * 256, "K", (("n", "v"),), DIGEST, 0).encode()
    padded = over.replace(b'"x', b'"' + b" " * (MAX_ENTRY_SIZE + 1 - len(over)) + b"x")
    with pytest.raises(MalformedError, match="at most"):
        Entry.parse(padded)


def test_an_entry_refuses_to_encode_out_of_range_fields() -> None:
    with pytest.raises(MalformedError):
        Entry("s", "i", "K", (("n", "v"),), DIGEST[:31], 0).encode()
    for at in (-1, MAX_SAFE_INT + 1, True, 1.0):
        with pytest.raises(MalformedError):
            Entry("s", "i", "K", (("n", "v"),), DIGEST, at).encode()  # type: ignore[arg-type]


def test_matches_compares_every_field() -> None:
    event = make_event("bank", "msg-1", "PaymentSettled", [["order", "A-1"]], "payload")
    entry = Entry.of(event, 5)
    assert entry.matches(event)
    assert entry.payload_sha256 == payload_hash(b'"payload"')
    for other in (
        make_event("bank2", "msg-1", "PaymentSettled", [["order", "A-1"]], "payload"),
        make_event("bank", "msg-2", "PaymentSettled", [["order", "A-1"]], "payload"),
        make_event("bank", "msg-1", "PaymentFailed", [["order", "A-1"]], "payload"),
        make_event("bank", "msg-1", "PaymentSettled", [["order", "A-2"]], "payload"),
        make_event("bank", "msg-1", "PaymentSettled", [["order", "A-1"], ["x", "y"]], "payload"),
        make_event("bank", "msg-1", "PaymentSettled", [["order", "A-1"]], "payload!"),
    ):
        assert not entry.matches(other)


def test_a_receipt_without_extra_data_is_no_receipt() -> None:
    with pytest.raises(MalformedError, match="no extra data"):
        receipt_entry(None)
    with pytest.raises(MalformedError):
        receipt_entry(bytes(32))  # a journal run's proof carries a 32-byte head


def test_the_inbox_origin_follows_the_tenant_log() -> None:
    assert inbox_origin("example.com/journal/a") == "example.com/journal/a/inbox"


# =============================================================================================
# correlation keys
# =============================================================================================


def test_keys_are_put_in_canonical_order() -> None:
    assert check_keys([["b", "1"], ["a", "2"], ["a", "10"]]) == (
        ("a", "10"),
        ("a", "2"),
        ("b", "1"),
    )
    assert check_keys((("x", "y"),)) == (("x", "y"),)
    # code point order, not locale order
    assert check_keys([["a", "b"], ["B", "a"], ["\u00e9", "x"]])[0] == ("B", "a")


@pytest.mark.parametrize(
    "keys",
    [
        [],
        [["k", f"{i:02}"] for i in range(MAX_KEYS + 1)],
        "ab",
        b"ab",
        None,
        {"a": "b"},
        [["a"]],
        [["a", "b", "c"]],
        ["ab"],
        [[1, "b"]],
        [["a", None]],
        [["", "b"]],
        [["a", ""]],
        [["a" * 257, "b"]],
        [["a", "b" * 257]],
        [["a", "b\x1f"]],
        [["a\x00", "b"]],
        [["a", "b\x7f"]],
        [["a", "b\n"]],
        [["a", "b"], ["a", "b"]],
        [["a", "b"], ("a", "b")],
    ],
)
def test_bad_keys_are_refused(keys: Any) -> None:
    with pytest.raises(MalformedError):
        check_keys(keys)


def test_the_key_limits_are_inclusive() -> None:
    assert len(check_keys([["k", f"{i:02}"] for i in range(MAX_KEYS)])) == MAX_KEYS
    assert check_keys([["a" * 256, "b" * 256]]) == (("a" * 256, "b" * 256),)
    assert check_keys([[" ", "~\u0080\U0001f600"]]) == ((" ", "~\u0080\U0001f600"),)


@settings(max_examples=200, deadline=None)
@given(key_lists)
def test_stored_keys_round_trip_and_only_in_order(keys: list[tuple[str, str]]) -> None:
    ordered = check_keys(keys)
    assert parse_keys_json(keys_json(ordered)) == ordered
    if list(ordered) != keys:
        with pytest.raises(MalformedError):
            parse_keys_json(canonical_json([list(k) for k in keys]))


# =============================================================================================
# events
# =============================================================================================


def test_make_event_checks_and_canonicalises() -> None:
    e = make_event("bank", "1", "Paid", [["z", "1"], ["a", "1"]], {"b": 1, "a": [True, None]})
    assert e.keys == (("a", "1"), ("z", "1"))
    assert e.payload_bytes == b'{"a":[true,null],"b":1}'
    assert e.payload_sha256 == hashlib.sha256(e.payload_bytes).digest()
    assert e.to_json() == {
        "source": "bank",
        "id": "1",
        "kind": "Paid",
        "keys": [["a", "1"], ["z", "1"]],
        "payload": {"b": 1, "a": [True, None]},
    }
    assert make_event("bank", "1", "Paid", [["a", "1"]], None).payload_bytes == b"null"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("source", ""),
        ("source", "a/b"),
        ("source", "-a"),
        ("source", "a" * 129),
        ("source", 1),
        ("id", ""),
        ("id", "x" * 257),
        ("id", "a\nb"),
        ("id", "a\x7f"),
        ("id", 7),
        ("kind", ""),
        ("kind", "1x"),
        ("kind", "a b"),
        ("kind", "K" * 65),
        ("keys", []),
        ("payload", 1.5),
        ("payload", 1.0),
        ("payload", {"a": [0.5]}),
        ("payload", float("nan")),
        ("payload", MAX_SAFE_INT + 1),
        ("payload", -MAX_SAFE_INT - 1),
        ("payload", {1: "a"}),
        ("payload", b"bytes"),
        ("payload", {"a": {1, 2}}),
    ],
)
def test_make_event_refuses_each_bad_field(field: str, value: Any) -> None:
    fields: dict[str, Any] = {
        "source": "bank",
        "id": "1",
        "kind": "Paid",
        "keys": [["order", "A"]],
        "payload": None,
    }
    fields[field] = value
    with pytest.raises(MalformedError):
        make_event(**fields)


def test_the_payload_limits() -> None:
    # A JSON string of n characters is n + 2 bytes of canonical JSON.
    at_limit = make_event("s", "i", "K", [["a", "b"]], "x" * (MAX_PAYLOAD - 2))
    assert len(at_limit.payload_bytes) == MAX_PAYLOAD
    with pytest.raises(MalformedError, match=str(MAX_PAYLOAD)):
        make_event("s", "i", "K", [["a", "b"]], "x" * (MAX_PAYLOAD - 1))
    deep: Any = []
    for _ in range(63):
        deep = [deep]
    make_event("s", "i", "K", [["a", "b"]], deep)  # 64 levels
    with pytest.raises(MalformedError):
        make_event("s", "i", "K", [["a", "b"]], [deep])
    assert make_event("s", "i", "K", [["a", "b"]], MAX_SAFE_INT).payload == MAX_SAFE_INT


def test_the_largest_event_of_plain_text_has_an_entry_that_fits() -> None:
    e = make_event(
        "s" * 128, "i" * 256, "K" * 64, [[f"{i:x}" * 256, "v" * 256] for i in range(16)], None
    )
    raw = Entry.of(e, MAX_SAFE_INT).encode()
    assert len(raw) <= MAX_ENTRY_SIZE <= MAX_EXTRA_SIZE
    assert Entry.parse(raw).matches(e)


def test_an_event_whose_entry_would_not_fit_is_refused_when_it_is_made() -> None:
    # 16 keys of 256 + 256 characters of four UTF-8 bytes each: within every field's rule,
    # but an entry of more than 32 KiB, which no receipt can carry and Entry.parse refuses.
    wide = "\U0001f600" * 255
    keys = [[f"{i:x}" + wide, wide + "!"] for i in range(16)]
    with pytest.raises(MalformedError, match="entry"):
        make_event("bank", "1", "Paid", keys, None)
    # Half as many keys fit.
    e = make_event("bank", "1", "Paid", keys[:3], None)
    assert Entry.parse(Entry.of(e, MAX_SAFE_INT).encode()).matches(e)


@pytest.mark.parametrize("where", ["id", "namespace", "value"])
def test_an_event_that_is_not_unicode_text_is_refused_when_it_is_made(where: str) -> None:
    lone = "a\ud800b"
    fields: dict[str, Any] = {
        "source": "bank",
        "id": lone if where == "id" else "1",
        "kind": "Paid",
        "keys": [[lone if where == "namespace" else "n", lone if where == "value" else "v"]],
        "payload": None,
    }
    with pytest.raises(MalformedError):
        make_event(**fields)


@settings(max_examples=200, deadline=None)
@given(ids, labels, kinds, key_lists, json_values, st.integers(0, MAX_SAFE_INT))
def test_every_event_has_an_entry_that_commits_to_it(
    source: str, id_: str, kind: str, keys: list[tuple[str, str]], payload: Any, at: int
) -> None:
    e = make_event(source, id_, kind, keys, payload)
    assert event_from_json(json.loads(json.dumps(e.to_json()))) == e
    raw = Entry.of(e, at).encode()
    entry = receipt_entry(raw)
    assert entry.matches(e) and entry.received_at == at
    assert entry.payload_sha256 == hashlib.sha256(canonical_json(payload)).digest()
    # What make_event keeps of its work is what computing it again gives; a copy made by
    # hand or by replace() keeps nothing and computes its own.
    assert e.stored_keys == keys_json(e.keys)
    for other in (
        Event(e.source, e.id, e.kind, e.keys, e.payload, e.payload_bytes),
        dataclasses.replace(e, keys=(("other", "key"),), payload_bytes=b"[]"),
    ):
        assert other.payload_sha256 == hashlib.sha256(other.payload_bytes).digest()
        assert other.stored_keys == keys_json(other.keys)


def test_event_from_json_takes_exactly_five_members() -> None:
    good = {
        "source": "bank",
        "id": "1",
        "kind": "Paid",
        "keys": [["b", "2"], ["a", "1"]],
        "payload": None,
    }
    e = event_from_json(good)
    assert isinstance(e, Event) and e.keys == (("a", "1"), ("b", "2")) and e.payload is None
    for name in good:
        without = {k: v for k, v in good.items() if k != name}
        with pytest.raises(MalformedError, match=repr(name)):
            event_from_json(without)
    for extra in ("position", "received_at", "Payload", "v"):
        with pytest.raises(MalformedError, match=repr(extra)):
            event_from_json({**good, extra: 1})
    for not_an_object in (None, [good], "event", 1):
        with pytest.raises(MalformedError):
            event_from_json(not_an_object)
    with pytest.raises(MalformedError):
        event_from_json({**good, "keys": [["a", "1"], ["a", "1"]]})
    with pytest.raises(MalformedError):
        event_from_json({**good, "payload": 0.5})


# =============================================================================================
# the delivery record's data
# =============================================================================================


def test_delivery_data_round_trips() -> None:
    data = delivery_data(ENTRY, 7)
    assert canonical_json(data) == (
        b'{"id":"msg-1","keys":[["order","A-1"]],"kind":"PaymentSettled","payload_sha256":"'
        + b64encode(DIGEST).encode()
        + b'","position":7,"source":"bank"}'
    )
    assert delivery_of(data) == ("bank", "msg-1", "PaymentSettled", (("order", "A-1"),), DIGEST, 7)
    assert KIND_EVENT_DELIVERED == "EventDelivered"
    for position in (-1, True, 1.0, "7"):
        with pytest.raises(MalformedError):
            delivery_data(ENTRY, position)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "change",
    [
        {"extra": 1},
        {"position": -1},
        {"position": True},
        {"position": "7"},
        {"keys": [["z", "1"], ["a", "1"]]},
        {"keys": []},
        {"payload_sha256": b64encode(DIGEST[:31])},
        {"payload_sha256": DIGEST.hex()},
        {"payload_sha256": 5},
        {"source": "a/b"},
        {"id": ""},
        {"kind": "1x"},
    ],
)
def test_delivery_of_is_strict(change: dict[str, Any]) -> None:
    data = {**delivery_data(ENTRY, 7), **change}
    with pytest.raises(MalformedError):
        delivery_of(data)
    missing = delivery_data(ENTRY, 7)
    del missing["position"]
    with pytest.raises(MalformedError):
        delivery_of(missing)
    with pytest.raises(MalformedError):
        delivery_of([data])
