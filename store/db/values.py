"""Checks of the values that cross the database boundary, both ways.

Arguments going in: :func:`check_int` (a caller bug is a :class:`~tlog.errors.UsageError`).
Values coming out: a :class:`StoredValues` checks the shape of what a query returned and
raises the schema's own "corrupt" error when it is wrong — a database edited by hand, or a
bug, never a value to use. Each schema makes one, with its error class; the extra arguments
of a check (``*where``: the journal's run and record seq) are passed to that class after the
message, so that the error can say where the bad value is.
"""

from __future__ import annotations

from collections.abc import Callable

from tlog.encoding import MAX_INT63
from tlog.errors import UsageError


def check_int(value: object, what: str, lo: int, hi: int = MAX_INT63) -> int:
    """``value`` if it is an int (not a bool) in [lo, hi], else UsageError naming ``what``."""
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise UsageError(f"{what} must be an integer in [{lo}, {hi}], not {value!r}")
    return value


class StoredValues:
    """Checks of stored values that raise ``corrupt(message, *where)`` on a wrong shape."""

    __slots__ = ("_corrupt",)

    def __init__(self, corrupt: Callable[..., Exception]) -> None:
        self._corrupt = corrupt

    def integer(self, value: object, what: str, lo: int = 0, *where: object) -> int:
        """An integer in [lo, 2^63-1]."""
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= MAX_INT63:
            raise self._corrupt(f"stored {what} {value!r} is not an integer >= {lo}", *where)
        return value

    def blob(self, value: object, what: str, size: int | None = None, *where: object) -> bytes:
        """Bytes, of exactly ``size`` when given (a driver's memoryview is accepted)."""
        if isinstance(value, memoryview):
            value = value.tobytes()
        if not isinstance(value, bytes) or (size is not None and len(value) != size):
            raise self._corrupt(f"stored {what} is not {size or 'any number of'} bytes", *where)
        return value

    def text(self, value: object, what: str, *where: object) -> str:
        """A str."""
        if not isinstance(value, str):
            raise self._corrupt(f"stored {what} is not text", *where)
        return value

    def boolean(self, value: object, what: str, *where: object) -> bool:
        """A boolean: the driver's bool (PostgreSQL) or 0/1 (SQLite)."""
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise self._corrupt(f"stored {what} {value!r} is not a boolean", *where)


__all__ = ["StoredValues", "check_int"]
