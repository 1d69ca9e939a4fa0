"""tlog.journal's record-body fast paths, ``body_names``, against ``decode_body`` (the record
body is docs/export-format.md §4.5).

``body_names(raw, run, seq)`` may answer True only when ``decode_body(raw)`` accepts the bytes
and names that run and seq; it may answer False when unsure. It asks two fast paths, and each is
tested here on its own against ``decode_body``: the C scanner of ``tlog/_speedups.c`` (its
conservative cases: an escaped object key or effect key, an integer of 16 digits in ``data``,
more than 32 nested containers), then ``orjson_body_names``, which parses and re-encodes with
orjson, so:

1. orjson spells every string as the canonical encoder does (every Unicode scalar value), and
   sorts object keys as ``sorted()`` sorts str — by code point, not by UTF-16 unit
   (Hypothesis over nested objects with arbitrary keys).
2. Valid bodies (``Body.encode`` of random fields and nested ``data``: Unicode keys and
   strings, integers at ±(2^53−1), lists and objects) take the fast path, unless they hold one
   of its documented conservative cases: an integer of 16 digits; more than 64 ``{``/``[``
   bytes; strings that both have a digit followed by ``.``, ``e``, ``E`` or 15 more digits and
   a digit after one of ``[ ] , : }`` (and signs) — such as ``"a,1.5]"``. Strings with digits
   and no such neighbours (UUIDs, hex digests, ``"x1.txt"``, ``"12:30:00.5Z"``) do pass.
3. Mutants of valid bodies — respelled (other key orders, repeated keys, whitespace, escapes
   such as ``\\u0041``, ``\\/`` and uppercase hex, ``-0``, ``1.0``, ``1e3``) and then changed
   byte-wise (flips, insertions, deletions, spliced tokens: 2^53, NaN, lone surrogate escapes,
   invalid UTF-8, field names) — never pass where ``decode_body`` refuses or names another run
   or seq; and where ``decode_body`` accepts and no conservative case applies, they pass.
4. A fixed list of tricky bodies: both functions give the expected verdict.

Points 2-4 hold for the C scanner too, with its own conservative cases; it must be built (the
Makefile's install compiles it), since the verifiers' speed rests on it.
"""

from __future__ import annotations

import json
import operator
import random
import re
import string
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlog.errors import MalformedError
from tlog.journal import (
    MAX_RECORD_SIZE,
    MAX_SAFE_INT,
    MAX_SEQ,
    Body,
    body_names,
    canonical_json,
    decode_body,
    orjson_body_names,
)

_c_body_names: Callable[[bytes, bytes, int], bool] | None = None
try:
    from tlog._speedups import body_names as _c_implementation
except ImportError:  # test_the_c_fast_path_is_built fails; the others test the orjson path
    pass
else:
    _c_body_names = _c_implementation

_ALNUM = string.ascii_letters + string.digits
# Run and case IDs, and kinds, in their alphabets (kept short; st.from_regex is twice as slow).
IDS = st.builds(operator.add, st.sampled_from(_ALNUM), st.text(_ALNUM + "._:@-", max_size=20))
KINDS = st.builds(
    operator.add, st.sampled_from(string.ascii_letters), st.text(_ALNUM + "_.-", max_size=15)
)

# Where body_names may say False about a body that decode_body accepts (its docstring's
# conservative tests, stated here on the decoded value rather than on bytes).
_FLOAT_LIKE = re.compile(r"[0-9](?:[.eE]|[0-9]{15})")
# A literal "S" counts too: the precise test writes every separator as "S" (and leaves S as it
# is), so "x S0.5" in a string looks like a number after a separator.
_AFTER_SEPARATOR = re.compile(r"[\[\],:}S][+-]*[0-9]")


def orjson_conservative(raw: bytes, body: Body) -> bool:
    if len(raw) > MAX_RECORD_SIZE or raw.count(b"{") + raw.count(b"[") > 64:
        return True
    ints, strings = [body.seq, body.epoch], [body.run, body.kind, body.case, body.effect_key]
    _leaves(body.data, ints, strings)
    spelled = [json.dumps(t, ensure_ascii=False) for t in strings if t is not None]
    return any(abs(n) >= 10**15 for n in ints) or (
        any(_FLOAT_LIKE.search(t) for t in spelled)
        and any(_AFTER_SEPARATOR.search(t) for t in spelled)
    )


def c_conservative(raw: bytes, body: Body) -> bool:
    # What tlog/_speedups.c leaves to the other paths, stated on the decoded value.
    del raw
    keys: list[str] = []
    ints: list[int] = []
    _keys_and_ints(body.data, keys, ints)
    escaped = re.compile(r'["\\\x00-\x1f]')
    return (
        any(escaped.search(k) for k in keys)
        or (body.effect_key is not None and escaped.search(body.effect_key) is not None)
        or any(abs(n) >= 10**15 for n in ints)
        or _depth(body.data) > 32
    )


def _keys_and_ints(value: Any, keys: list[str], ints: list[int]) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        ints.append(value)
    elif isinstance(value, list):
        for v in value:
            _keys_and_ints(v, keys, ints)
    elif isinstance(value, dict):
        for k, v in value.items():
            keys.append(k)
            _keys_and_ints(v, keys, ints)


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


def _c_names(raw: bytes, run: str, seq: int) -> bool:
    assert _c_body_names is not None, "tlog._speedups is not built"
    return _c_body_names(raw, run.encode(), seq)


FastPath = Any  # (raw, run, seq) -> bool
PATHS = [
    pytest.param(orjson_body_names, orjson_conservative, id="orjson"),
    pytest.param(
        _c_names,
        c_conservative,
        id="c",
        marks=pytest.mark.skipif(_c_body_names is None, reason="tlog._speedups is not built"),
    ),
]


def test_the_c_fast_path_is_built() -> None:
    # `make` compiles tlog/_speedups.c (gcc and the OpenSSL headers are on every machine this
    # project is set up on); without it the export verifiers are several times slower.
    assert _c_body_names is not None, "tlog._speedups is not built: see pyproject.toml"


def _leaves(value: Any, ints: list[int], strings: list[str | None]) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        ints.append(value)
    elif isinstance(value, str):
        strings.append(value)
    elif isinstance(value, list):
        for v in value:
            _leaves(v, ints, strings)
    else:
        for k, v in value.items():
            strings.append(k)
            _leaves(v, ints, strings)


def decoded(raw: bytes) -> Body | None:
    """decode_body's verdict: the body, or None when it refuses the bytes."""
    try:
        return decode_body(raw)
    except (MalformedError, UnicodeError):
        return None


def names(body: Body | None, run: str, seq: int) -> bool:
    return body is not None and body.run == run and body.seq == seq


# --- strategies ------------------------------------------------------------------------------

# Characters with special spellings or orders: escapes, DEL, line separators, the BOM, the top
# of the BMP (after every surrogate pair in UTF-16 order, before them in code point order).
_SPECIAL = '"\\/\x00\x08\x0c\x1f\x7f\u2028\u2029\ufeff\ue000\uffffé€\U00010000\U0001f600'
CHARS = st.characters(codec="utf-8") | st.sampled_from(list(_SPECIAL))
# Strings with digits: the byte tests for floats must not send most of these to the slow path.
DIGITS = st.sampled_from(
    [
        "550e8400-e29b-41d4-a716-446655440000",
        "9e3f2b1c0d4e5f60718293a4b5c6d7e8f9",
        "2024-05-01T12:30:00.123Z",
        "x1.txt",
        "10.0.0.1",
        "v1e5",
        "1234567890123456",
        "a,1.5]",
        ":-2E+3}",
        "[1.0,",
        "+-1.5",
    ]
)
TEXTS = st.text(CHARS, max_size=10) | DIGITS


@st.composite
def mostly(draw: st.DrawFn, common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> Any:
    # rare one time in eight: 16-digit integers would send most bodies to the slow path.
    return draw(rare) if draw(st.integers(0, 7)) == 0 else draw(common)


EDGE_INTS = [
    MAX_SAFE_INT,
    -MAX_SAFE_INT,
    MAX_SAFE_INT - 1,
    -MAX_SAFE_INT + 1,
    10**15 - 1,
    -(10**15) + 1,
    10**15,
]
INTS = mostly(
    st.integers(-(10**6), 10**6),
    st.sampled_from(EDGE_INTS) | st.integers(-MAX_SAFE_INT, MAX_SAFE_INT),
)
SCALARS = st.none() | st.booleans() | INTS | TEXTS
JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXTS, inner, max_size=4),
    max_leaves=16,
)
POSITIVE = mostly(st.integers(1, 10**6), st.sampled_from([10**15 - 1, 10**15, MAX_SEQ]))


@st.composite
def bodies(draw: st.DrawFn) -> Body:
    has_data = draw(st.integers(0, 4)) > 0
    key_chars = st.characters(min_codepoint=0x20, codec="utf-8")
    return Body(
        run=draw(IDS),
        seq=draw(POSITIVE),
        epoch=draw(POSITIVE),
        kind=draw(KINDS),
        case=draw(st.none() | IDS),
        effect_key=draw(st.none() | st.text(key_chars, min_size=1, max_size=12)),
        # "data": null is refused (optional fields are absent): data is left out instead.
        data=draw(JSON_VALUES.filter(lambda v: v is not None)) if has_data else None,
        has_data=has_data,
    )


# --- 1. orjson spells JSON as the canonical encoder does ------------------------------------


def test_orjson_escapes_every_scalar_value_as_the_canonical_encoder() -> None:
    for start in range(0, 0x110000, 0x800):
        text = "".join(chr(c) for c in range(start, start + 0x800) if not 0xD800 <= c < 0xE000)
        assert orjson.dumps(text) == canonical_json(text), hex(start)


# Keys that often share prefixes and mix characters whose UTF-16 order differs from their code
# point order (U+E000..U+FFFF sort after surrogate pairs in UTF-16, before them by code point).
SORT_KEYS = TEXTS | st.text(
    st.sampled_from(list("a\x00\x7f\xe9\ue000\uffff\U00010000\U0001f600")), max_size=3
)


@settings(max_examples=400, deadline=None)
@given(
    st.recursive(
        SCALARS,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(SORT_KEYS, inner, max_size=6),
        max_leaves=30,
    )
)
def test_orjson_sorts_keys_by_code_point(value: Any) -> None:
    out = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    assert out == canonical_json(value)
    seen = []

    def in_order(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        assert keys == sorted(keys)
        seen.append(len(keys))
        return dict(pairs)

    assert json.loads(out, object_pairs_hook=in_order) == value
    assert len(seen) == _objects(value)


def _objects(value: Any) -> int:
    # How many JSON objects a value holds, so the test above knows the hook saw each one.
    if isinstance(value, list):
        return sum(_objects(v) for v in value)
    if isinstance(value, dict):
        return 1 + sum(_objects(v) for v in value.values())
    return 0


def test_orjson_refuses_lone_surrogate_escapes_and_non_utf8() -> None:
    for raw in (b'"\\ud800"', b'"\\udfff"', b'"\\udc00\\ud800"', b'"\xed\xa0\x80"', b'"\xff"'):
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(raw)


# --- 2. valid bodies take the fast path -----------------------------------------------------


@pytest.mark.parametrize(("fast", "conservative"), PATHS)
@settings(max_examples=1500, deadline=None)
@given(body=bodies())
def test_valid_bodies_take_the_fast_path(fast: FastPath, conservative: Any, body: Body) -> None:
    raw = body.encode()
    assert decode_body(raw) == body
    assert fast(raw, body.run, body.seq) or conservative(raw, body), raw
    assert not fast(raw, body.run, body.seq + 1)
    assert not fast(raw, body.run + "x", body.seq)
    if body.seq > 1:
        assert not fast(raw, body.run, body.seq - 1)
    either = _c_body_names is not None and _c_names(raw, body.run, body.seq)
    assert body_names(raw, body.run, body.seq) == (
        either or orjson_body_names(raw, body.run, body.seq)
    )


def test_ordinary_bodies_take_the_fast_path() -> None:
    raw = (
        b'{"data":{"args":{"path":"/tmp/x","size":123},"tool":"read_file"},'
        b'"epoch":1,"kind":"ToolCalled","run":"run-000123","seq":5,"v":1}'
    )
    assert body_names(raw, "run-000123", 5)
    for i in range(1, 200):
        data = {"i": i, "é": [None, True, "x\u2028"]}
        body = Body(f"run-{i}", i, 2, "Step", case="c", effect_key="k é", data=data, has_data=True)
        assert body_names(body.encode(), f"run-{i}", i)


# --- 3. mutants: True only where decode_body accepts; True wherever it surely could -----------


def _escape(c: str, rng: random.Random) -> str:
    # Another JSON spelling of one character (the canonical one is json.dumps's).
    n = ord(c)
    hexes = [f"{n:04x}", f"{n:04X}"] if n < 0x10000 else []
    if n >= 0x10000:
        hi, lo = 0xD800 + ((n - 0x10000) >> 10), 0xDC00 + ((n - 0x10000) & 0x3FF)
        hexes = [f"{hi:04x}\\u{lo:04x}", f"{hi:04X}\\u{lo:04X}"]
    spellings = ["\\u" + h for h in hexes]
    if c == "/":
        spellings.append("\\/")
    return rng.choice(spellings)


def respell(value: Any, rng: random.Random, p: float) -> str:
    """A JSON spelling of ``value``: canonical, but each choice deviates with probability p."""

    def odd() -> bool:
        return rng.random() < p

    def space() -> str:
        return rng.choice([" ", "\t", "\n", "\r"]) if odd() else ""

    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        if odd():
            return rng.choice(
                [f"{value}.0", f"{value}e0", f"{value}E0", f"{value}e+0", f"{value}0e-1", "-0"]
            )
        return str(value)
    if isinstance(value, str):
        chars = [
            _escape(c, rng) if odd() else json.dumps(c, ensure_ascii=False)[1:-1] for c in value
        ]
        return '"' + "".join(chars) + '"'
    if isinstance(value, list):
        items = [space() + respell(v, rng, p) + space() for v in value]
        return "[" + ",".join(items) + "]"
    keys = sorted(value)
    if odd():
        rng.shuffle(keys)
    if keys and odd():
        keys.insert(rng.randrange(len(keys) + 1), rng.choice(keys))
    items = [
        space() + respell(k, rng, p) + space() + ":" + space() + respell(value[k], rng, p)
        for k in keys
    ]
    return "{" + ",".join(items) + space() + "}"


TOKENS = [
    b"1.0",
    b"1e3",
    b"1E3",
    b"-0",
    b"0",
    b"-1",
    b"9007199254740991",
    b"9007199254740992",
    b"-9007199254740992",
    b"18446744073709551616",
    b"1e400",
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"\\ud800",
    b"\\udfff",
    b"\\ud83d\\ude00",
    b"\\u0041",
    b"\\u00e9",
    b"\\u00E9",
    b"\\u001f",
    b"\\u001F",
    b"\\/",
    b'\\"',
    b"\\n",
    b" ",
    b"\t",
    b"\n",
    b"\xed\xa0\x80",
    b"\xff",
    b"\xc3",
    b"\xef\xbb\xbf",
    b'"',
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"null",
    b"true",
    b"false",
    b'"v":1,',
    b'"seq":1,',
    b'"data":1,',
    b'"case":null,',
    b'"effect_key":"k",',
    b'"x":1,',
]


def mutate(raw: bytes, rng: random.Random) -> bytes:
    out = bytearray(raw)
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        i = rng.randrange(len(out) + 1)
        what = rng.randrange(4)
        if what == 0 and i < len(out):
            out[i] ^= rng.choice([0x01, 0x20, 0x80, rng.randrange(1, 256)])
        elif what == 1:
            out[i:i] = bytes([rng.randrange(256)])
        elif what == 2:
            del out[i : i + rng.randrange(1, 4)]
        else:
            out[i : i + rng.randrange(0, 4)] = rng.choice(TOKENS)
    return bytes(out)


@pytest.mark.parametrize(("fast", "conservative"), PATHS)
@settings(max_examples=3000, deadline=None)
@given(body=bodies(), seed=st.integers(0, 2**64), p=st.sampled_from([0.0, 0.02, 0.1, 0.4]))
def test_mutated_bodies_pass_only_where_decode_body_accepts(
    fast: FastPath, conservative: Any, body: Body, seed: int, p: float
) -> None:
    # A plain Random from a drawn seed: reproducible, and much cheaper than st.randoms().
    rng = random.Random(seed)
    obj = json.loads(body.encode())
    raw = mutate(respell(obj, rng, p).encode(), rng)
    slow = decoded(raw)
    for run, seq in ((body.run, body.seq), (body.run, body.seq + 1), ("other", body.seq)):
        if fast(raw, run, seq):
            assert names(slow, run, seq), raw
        elif slow is not None and names(slow, run, seq):
            assert conservative(raw, slow), raw


# --- 4. tricky bodies ------------------------------------------------------------------------


def _b(data: bytes, **fields: bytes) -> bytes:
    parts = {b"epoch": b"1", b"kind": b'"K"', b"run": b'"r"', b"seq": b"1", b"v": b"1"}
    parts.update({k.encode(): v for k, v in fields.items()})
    if data:
        parts[b"data"] = data
    return b"{" + b",".join(b'"' + k + b'":' + parts[k] for k in sorted(parts)) + b"}"


ACCEPTED, CONSERVATIVE, REFUSED = (True, True), (False, True), (False, False)
TRICKY: list[tuple[bytes, tuple[bool, bool]]] = [
    (_b(b""), ACCEPTED),
    (_b(b"null"), REFUSED),  # optional fields are absent, never null
    (_b(b"[null]"), ACCEPTED),  # null inside data is a value
    (_b(b'{"a":null}'), ACCEPTED),
    (_b(b'{"a":1,"\xc3\xa9":2,"\xef\xbf\xbf":3,"\xf0\x9f\x98\x80":4}'), ACCEPTED),
    (_b(b'{"\xf0\x9f\x98\x80":4,"\xef\xbf\xbf":3}'), REFUSED),  # UTF-16 order, not code point
    (_b(b'{"a":1,"a":1}'), REFUSED),
    (_b(b'{"b":1,"a":1}'), REFUSED),
    (_b(b'"\\u001f"'), ACCEPTED),
    (_b(b'"\\u001F"'), REFUSED),
    (_b(b'"\\u0041"'), REFUSED),
    (_b(b'"\\/"'), REFUSED),
    (_b(b'"/"'), ACCEPTED),
    (_b(b'"\x7f"'), ACCEPTED),
    (_b(b'"\\u007f"'), REFUSED),
    (_b(b'"\\b\\f\\n\\r\\t\\"\\\\"'), ACCEPTED),
    (_b(b'"\\u0008"'), REFUSED),
    (_b(b'"\xe2\x80\xa8"'), ACCEPTED),
    (_b(b'"\\u2028"'), REFUSED),
    (_b(b'"\xf0\x9f\x98\x80"'), ACCEPTED),
    (_b(b'"\\ud83d\\ude00"'), REFUSED),
    (_b(b'"\\ud800"'), REFUSED),
    (_b(b'"\\udc00"'), REFUSED),
    (_b(b'"\\ud800\\ud800"'), REFUSED),
    (_b(b'"\xed\xa0\x80"'), REFUSED),
    (_b(b'"\xff"'), REFUSED),
    (b"\xef\xbb\xbf" + _b(b""), REFUSED),
    (_b(b'"\x1f"'), REFUSED),
    (_b(b"999999999999999"), ACCEPTED),
    (_b(b"-999999999999999"), ACCEPTED),
    (_b(b"9007199254740991"), CONSERVATIVE),
    (_b(b"-9007199254740991"), CONSERVATIVE),
    (_b(b"9007199254740992"), REFUSED),
    (_b(b"-9007199254740992"), REFUSED),
    (_b(b"18446744073709551615"), REFUSED),
    (_b(b"18446744073709551616"), REFUSED),
    (_b(b"0"), ACCEPTED),
    (_b(b"-0"), REFUSED),
    (_b(b"1.0"), REFUSED),
    (_b(b"1.5"), REFUSED),
    (_b(b"-0.0"), REFUSED),
    (_b(b"1e3"), REFUSED),
    (_b(b"1E3"), REFUSED),
    (_b(b"1e400"), REFUSED),
    (_b(b"NaN"), REFUSED),
    (_b(b"Infinity"), REFUSED),
    (_b(b"-Infinity"), REFUSED),
    (_b(b"[1.5]"), REFUSED),
    (_b(b"[1,-1.5e+3]"), REFUSED),
    (_b(b'{"a":[0,9007199254740992]}'), REFUSED),
    (_b(b'"v1.5 and 2e3"'), ACCEPTED),
    (_b(b'"sha 9e3f"'), ACCEPTED),
    (_b(b'"550e8400-e29b-41d4-a716-446655440000"'), ACCEPTED),
    (_b(b'"2024-05-01T12:30:00.123Z"'), ACCEPTED),
    (_b(b'{"1.5":"1e5","x1.txt":"1234567890123456"}'), ACCEPTED),
    (_b(b'"a,1.5]"'), CONSERVATIVE),
    (_b(b'"x:-2E+3}"'), CONSERVATIVE),
    (_b(b'["[1.0,",1]'), CONSERVATIVE),
    (_b(b"[" * 63 + b"]" * 63), ACCEPTED),
    (_b(b"[" * 64 + b"]" * 64), CONSERVATIVE),  # depth 64: the limit
    (_b(b"[" * 64 + b"1" + b"]" * 64), CONSERVATIVE),
    (_b(b"[" * 65 + b"]" * 65), REFUSED),  # depth 65, empty innermost: refused as well
    (_b(b"[" * 63 + b"{}" + b"]" * 63), CONSERVATIVE),
    (_b(b"[" * 64 + b"{}" + b"]" * 64), REFUSED),
    (_b(b"[" * 65 + b"1" + b"]" * 65), REFUSED),
    (_b(b"[" * 66 + b"]" * 66), REFUSED),
    (_b(b'"' + b"x" * MAX_RECORD_SIZE + b'"'), REFUSED),
    (_b(b"", seq=b"2"), REFUSED),  # names record 2, not 1
    (_b(b"", run=b'"s"'), REFUSED),
    (_b(b"", seq=b"true"), REFUSED),
    (_b(b"", seq=b"1.0"), REFUSED),
    (_b(b"", seq=b"01"), REFUSED),
    (_b(b"", v=b"true"), REFUSED),
    (_b(b"", v=b"2"), REFUSED),
    (_b(b"", v=b"1.0"), REFUSED),
    (_b(b"", epoch=b"0"), REFUSED),
    (_b(b"", epoch=b"-1"), REFUSED),
    (_b(b"", epoch=b"true"), REFUSED),
    (_b(b"", epoch=b"9223372036854775807"), CONSERVATIVE),
    (_b(b"", epoch=b"9223372036854775808"), REFUSED),
    (_b(b"", kind=b'"1K"'), REFUSED),
    (_b(b"", kind=b'"K\\n"'), REFUSED),
    (_b(b"", kind=b"null"), REFUSED),
    (_b(b"", case=b'"c"'), ACCEPTED),
    (_b(b"", case=b'""'), REFUSED),
    (_b(b"", case=b"null"), REFUSED),
    (_b(b"", case=b'"c d"'), REFUSED),
    (_b(b"", effect_key=b'"k \xc3\xa9"'), ACCEPTED),
    (_b(b"", effect_key=b'""'), REFUSED),
    (_b(b"", effect_key=b'"a\\u0001"'), REFUSED),
    (_b(b"", effect_key=b"1"), REFUSED),
    (_b(b"", x=b"1"), REFUSED),
    (b'{"epoch":1,"kind":"K","run":"r","seq":1}', REFUSED),
    (b'{"epoch":1,"kind":"K","run":"r","seq":1,"v":1} ', REFUSED),
    (b' {"epoch":1,"kind":"K","run":"r","seq":1,"v":1}', REFUSED),
    (b'{"epoch":1,"kind":"K","run":"r","seq":1,"v":1}\n', REFUSED),
    (b'{"epoch":1,"kind":"K","run":"r","seq":1, "v":1}', REFUSED),
    (b'{"epoch":1,"kind":"K","run":"r","seq":1,"v":1,"v":1}', REFUSED),
    (b'{"epoch":1,"kind":"K","run":"r","seq":1,"seq":1,"v":1}', REFUSED),
    (b"[1]", REFUSED),
    (b'"r"', REFUSED),
    (b"", REFUSED),
]


@pytest.mark.parametrize(("raw", "verdict"), TRICKY, ids=[str(i) for i in range(len(TRICKY))])
def test_tricky_bodies(raw: bytes, verdict: tuple[bool, bool]) -> None:
    # The verdicts are the orjson path's; the C scanner's follow from its conservative cases.
    assert (orjson_body_names(raw, "r", 1), names(decoded(raw), "r", 1)) == verdict, raw[:200]
    if _c_body_names is None:  # test_the_c_fast_path_is_built fails
        assert body_names(raw, "r", 1) == verdict[0]
        return
    slow = decoded(raw)
    sure = names(slow, "r", 1) and not c_conservative(raw, slow)  # type: ignore[arg-type]
    assert _c_names(raw, "r", 1) == sure, raw[:200]
    assert body_names(raw, "r", 1) == (sure or verdict[0]), raw[:200]


# The C scanner's own edges: (body, its verdict). Every True is also decode_body's verdict.
C_EDGES: list[tuple[bytes, bool]] = [
    (_b(b'"\\u001f\\u0000\\"\\\\\\b\\f\\n\\r\\t"'), True),
    (_b(b'"\\u001F"'), False),  # uppercase hex
    (_b(b'"\\u0009"'), False),  # \t has a short escape
    (_b(b'"\\u0041"'), False),  # A needs none
    (_b(b'"\\/"'), False),
    (_b(b'"\\ud800"'), False),
    (_b(b'"\x7f\xe2\x80\xa8\xef\xbb\xbf\xf4\x8f\xbf\xbf"'), True),  # DEL, U+2028, BOM, max
    (_b(b'"\xc0\x80"'), False),  # overlong
    (_b(b'"\xed\xa0\x80"'), False),  # an encoded surrogate
    (_b(b'"\xf4\x90\x80\x80"'), False),  # beyond U+10FFFF
    (_b(b'"\xe2\x82"'), False),  # truncated
    (_b(b'"\x1f"'), False),  # a raw control character
    (_b(b"999999999999999"), True),
    (_b(b"-999999999999999"), True),
    (_b(b"1000000000000000"), False),  # 16 digits: left to the other paths
    (_b(b"-0"), False),
    (_b(b"01"), False),
    (_b(b"1.0"), False),
    (_b(b"1e3"), False),
    (_b(b"null"), False),  # "data":null is refused
    (_b(b"[null]"), True),
    (_b(b"[" * 32 + b"]" * 32), True),
    (_b(b"[" * 33 + b"]" * 33), False),
    (_b(b'{"a\\"b":1}'), False),  # an escaped key
    (_b(b'{"":1,"a":{"a":2,"b":[]}}'), True),
    (_b(b'{"a":1,"":1}'), False),
    (_b(b"", epoch=b"9223372036854775807"), True),
    (_b(b"", epoch=b"9223372036854775808"), False),
    (_b(b"", epoch=b"0"), False),
    (_b(b"", epoch=b"01"), False),
    (_b(b"", effect_key=b'"' + "é".encode() * 256 + b'"'), True),
    (_b(b"", effect_key=b'"' + "é".encode() * 257 + b'"'), False),
    (_b(b"", effect_key=b'""'), False),
    (_b(b"", effect_key=b'"a\\"b"'), False),  # escaped: left to the other paths
    (_b(b"", case=b'"' + b"c" * 128 + b'"'), True),
    (_b(b"", case=b'"' + b"c" * 129 + b'"'), False),
    (_b(b"", case=b'"-c"'), False),
    (_b(b"", kind=b'"' + b"K" * 65 + b'"'), False),
    (_b(b"", kind=b'"1K"'), False),
    (_b(b"", v=b"true"), False),
    (_b(b"", v=b"10"), False),
    (_b(b"", seq=b"01"), False),
    (_b(b"", seq=b"2"), False),
    (_b(b"", run=b'"r2"'), False),
    (_b(b"", other=b"1"), False),
    (_b(b"").replace(b',"v":1', b""), False),
    (_b(b"") + b" ", False),
    (b" " + _b(b""), False),
    (_b(b"").replace(b":", b": ", 1), False),
]


@pytest.mark.skipif(_c_body_names is None, reason="tlog._speedups is not built")
@pytest.mark.parametrize(("raw", "verdict"), C_EDGES, ids=[str(i) for i in range(len(C_EDGES))])
def test_c_scanner_edges(raw: bytes, verdict: bool) -> None:
    assert _c_names(raw, "r", 1) == verdict, raw[:200]
    if verdict:
        assert names(decoded(raw), "r", 1), raw[:200]
