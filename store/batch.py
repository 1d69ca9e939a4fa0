"""Records from outside the process: a record's data as strict JSON, and the batch format.

A record's ``data`` arrives as JSON text (RFC 8259) and is refused unless the store can write
it canonically (:mod:`tlog.journal`): no repeated object key, no floating-point number, no NaN
or infinity, integers within +-(2^53-1), strings without lone surrogates, at most 64 levels
deep. Whitespace and key order are free: the store writes the canonical form.

The *batch format* (``tlog-store append --batch``) is JSON Lines: one JSON object per line,
every line ending in LF, no empty line, no CR. Each object has the key ``kind`` (a string) and
optionally ``data`` (any JSON value but ``null``: a record without data leaves the key out),
``case`` and ``effect_key`` (strings); any other key is refused, naming its line. Example::

    {"kind": "Started", "data": {"input": 42}, "case": "case-7"}
    {"kind": "EffectStarted", "effect_key": "email:1"}

:func:`parse_batch` turns such a file into the :class:`~store.api.Append` list that
:meth:`~store.api.JournalStore.append` writes atomically. Every error is a
:class:`tlog.errors.MalformedError` whose message begins with where the fault is (``WHAT line
N``), as the callers name their inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from store.api import Append
from tlog.errors import MalformedError
from tlog.journal import canonical_json, check_case_id, check_effect_key, check_kind, parse_json

__all__ = ["BATCH_KEYS", "check_field", "parse_batch", "parse_data"]

BATCH_KEYS = frozenset({"kind", "data", "case", "effect_key"})
"""The keys a batch line may have."""


def parse_data(text: str, where: str) -> Any:
    """Parse one JSON value strictly enough that the store can write it canonically.

    Whitespace and key order are free (the store canonicalises); repeated keys, floats, NaN,
    integers beyond +-(2^53-1), lone surrogates and nesting deeper than 64 levels are refused
    with a MalformedError whose message begins with ``where``.
    """
    try:
        value = parse_json(text)
    except MalformedError as e:
        raise MalformedError(f"{where}: {e}") from None
    try:
        canonical_json(value)
    except MalformedError as e:
        raise MalformedError(f"{where}: {e}") from None
    except UnicodeEncodeError:
        # "\ud800" parses to a lone surrogate, which has no UTF-8 form.
        raise MalformedError(f"{where} holds a lone surrogate (not valid Unicode)") from None
    except RecursionError:
        raise MalformedError(f"{where} nests too deeply") from None
    return value


def check_field(check: Callable[[str], None], value: object, name: str, where: str) -> str:
    """``value`` as the string field ``name`` that ``check`` accepts (for example
    :func:`tlog.journal.check_kind`), else a MalformedError that begins with ``where``."""
    if not isinstance(value, str):
        raise MalformedError(f"{where}: {name!r} is not a string")
    try:
        value.encode("utf-8")
        check(value)
    except UnicodeEncodeError:
        raise MalformedError(f"{where}: {name!r} holds a lone surrogate") from None
    except MalformedError as e:
        raise MalformedError(f"{where}: {e}") from None
    return value


def _line(text: str, run: str, where: str) -> Append:
    obj = parse_data(text, where)
    if not isinstance(obj, dict):
        raise MalformedError(f"{where} is not a JSON object")
    unknown = sorted(set(obj) - BATCH_KEYS)
    if unknown:
        raise MalformedError(
            f"{where} has unknown key {unknown[0]!r} (known: kind, data, case, effect_key)"
        )
    if "kind" not in obj:
        raise MalformedError(f"{where} has no 'kind'")
    kind = check_field(check_kind, obj["kind"], "kind", where)
    case = effect_key = None
    if "case" in obj:
        case = check_field(check_case_id, obj["case"], "case", where)
    if "effect_key" in obj:
        effect_key = check_field(check_effect_key, obj["effect_key"], "effect_key", where)
    if "data" in obj:
        return Append(run, kind, obj["data"], case=case, effect_key=effect_key)
    return Append(run, kind, case=case, effect_key=effect_key)


def parse_batch(data: bytes, run: str, what: str = "batch") -> list[Append]:
    """Parse a batch file (the module docstring's format) into appends to ``run``.

    ``what`` names the input in messages (``batch FILE``): ``WHAT holds no records``, ``WHAT
    line N ...``. The run ID itself is checked by the store when the batch is appended.
    """
    if not data:
        raise MalformedError(f"{what} holds no records")
    if not data.endswith(b"\n"):
        raise MalformedError(f"{what} does not end in a newline")
    batch = []
    for i, line in enumerate(data[:-1].split(b"\n"), 1):
        where = f"{what} line {i}"
        if not line:
            raise MalformedError(f"{where} is empty")
        if b"\r" in line:
            raise MalformedError(f"{where} contains a carriage return (lines end in LF alone)")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MalformedError(f"{where} is not valid UTF-8 (byte {e.start})") from None
        batch.append(_line(text, run, where))
    return batch
