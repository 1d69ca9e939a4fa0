"""``tlog.tiles.leaf_hashes``, the C accelerator and the Python fallback alike."""

from __future__ import annotations

import array
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlog import accel
from tlog.tiles import leaf_hashes

needs_c = pytest.mark.skipif(accel.leaf_hashes is None, reason="the C accelerator is not built")

BIG = st.one_of(
    st.integers(-3, 80),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**31, 2**32, 2**62, 2**63 - 1, 2**63, 2**64, -(2**63), -(2**63) - 1]),
)


def _outcome(f: Callable[[], bytes]) -> tuple[str, bytes | None]:
    try:
        return "ok", f()
    except (ValueError, OverflowError, TypeError, BufferError, MemoryError) as e:
        return type(e).__name__, None


def _python(monkeypatch: pytest.MonkeyPatch, *args: object) -> tuple[str, bytes | None]:
    with monkeypatch.context() as m:
        m.setattr(accel, "leaf_hashes", None)
        return _outcome(lambda: leaf_hashes(*args))  # type: ignore[arg-type]


@needs_c
@settings(max_examples=400, deadline=None)
@given(
    data=st.binary(max_size=64),
    kind=st.sampled_from(["bytes", "bytearray", "memoryview"]),
    offset=BIG,
    stride=BIG,
    length=BIG,
    count=st.integers(-(2**70), 70) | st.sampled_from([2**63, 2**64, -(2**63)]),
)
def test_c_and_python_agree(
    data: bytes, kind: str, offset: int, stride: int, length: int, count: int
) -> None:
    buf: object = {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data)}[
        kind
    ]
    c = _outcome(lambda: leaf_hashes(buf, offset, stride, length, count))  # type: ignore[arg-type]
    mp = pytest.MonkeyPatch()
    try:
        py = _python(mp, buf, offset, stride, length, count)
    finally:
        mp.undo()
    # The same verdict: the same bytes, or both refused (any refusal is a ValueError)
    assert c == py, (offset, stride, length, count, len(data))


@needs_c
@pytest.mark.parametrize(
    "args",
    [
        (b"", 2**70, 0, 0, 0),  # nothing to hash, an offset past any index
        (b"abc", 0, 2**64, 3, 1),  # one entry: the stride is never used
        (b"abc", 0, 2**63, 3, 1),
    ],
)
def test_arguments_beyond_an_index_are_answered_alike(
    monkeypatch: pytest.MonkeyPatch, args: tuple[object, ...]
) -> None:
    c = _outcome(lambda: leaf_hashes(*args))  # type: ignore[arg-type]
    assert c == _python(monkeypatch, *args)


@needs_c
def test_a_buffer_of_wider_items_is_read_as_bytes_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    # A memoryview of 4-byte items: C reads its 16 bytes; the fallback must not count items.
    view = memoryview(array.array("I", [1, 2, 3, 4]))
    c = _outcome(lambda: leaf_hashes(view, 0, 4, 4, 4))  # type: ignore[arg-type]
    assert c[0] == "ok"
    assert c == _python(monkeypatch, view, 0, 4, 4, 4)
