# Types of the C extension tlog/_speedups.c (its header comment states the contract);
# imported by tlog.export.accel (scan_records, scan_runs, count_lines), tlog.merkle, tlog.journal.
from mmap import mmap

from tlog.export.format import VerifiedRun

def body_names(raw: bytes, run: bytes, seq: int, /) -> bool: ...
def scan_records(
    buf: bytes,
    at: int,
    end: int,
    run: bytes,
    seq: int,
    count: int,
    prev: bytes,
    outcome: bytes | None,
    /,
) -> tuple[int, int, bytes]: ...
def scan_runs(
    buf: bytes | mmap, at: int, end: int, lineno: int, /
) -> tuple[int, int, list[VerifiedRun]]: ...
def count_lines(buf: bytes | mmap, start: int, end: int, /) -> int: ...
def fold_leaves(frontier: list[bytes], leaves: list[bytes], start: int, /) -> list[bytes]: ...
def leaf_hashes(
    buf: bytes | bytearray | memoryview | mmap, offset: int, stride: int, length: int, count: int, /
) -> bytes: ...
