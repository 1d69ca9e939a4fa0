"""The one import point of the run scanner's C accelerator (``tlog/_speedups.c``).

The C extension is optional (``pyproject.toml`` builds it when a C compiler and the OpenSSL
headers are there). Each name below is its function, or None when it is not built; the scanner
(:mod:`tlog.export.scan`) and the parallel verifier's chunking read them here, at call time, so
that one assignment here switches a fast path off (as the tests do).

* :data:`scan_runs` — whole runs the C code is sure of (a run line in its common spelling, then
  records whose hash is canonical base64, whose body is canonical JSON naming the run and seq
  and keeps the seal-record rule, whose chain link holds, not signed, and the "run or end line"
  after the last), as :data:`tlog.export.scan.VerifiedRun` tuples; it stops at the first run it
  is not sure of.
* :data:`scan_records` — the same for the records of one run, from a given seq.
* :data:`count_lines` — the number of LFs in a byte range.

What the C code takes, the Python scanner would take with the same result
(``tests/test_speedups.py``), so every verdict and message is the Python code's.
"""

from __future__ import annotations

from collections.abc import Callable
from mmap import mmap

from tlog.export.format import VerifiedRun

__all__ = ["count_lines", "scan_records", "scan_runs"]

ScanRecords = Callable[
    [bytes, int, int, bytes, int, int, bytes, bytes | None], tuple[int, int, bytes]
]
"""``(buf, at, end, run ID, first seq, count, prev hash, outcome or None)`` -> ``(offset after
the records taken, how many, the last one's hash)``."""
ScanRuns = Callable[[bytes | mmap, int, int, int], tuple[int, int, list[VerifiedRun]]]
"""``(buf, at, end, number of the last line read)`` -> ``(offset after the runs taken, number of
their last line, the runs)``."""
CountLines = Callable[[bytes | mmap, int, int], int]
"""``(buf, start, end)`` -> the number of LFs in ``buf[start:end]``."""

scan_records: ScanRecords | None = None
scan_runs: ScanRuns | None = None
count_lines: CountLines | None = None

try:
    from tlog import _speedups
except ImportError:  # pragma: no cover - installed without a C compiler
    pass
else:
    scan_records = _speedups.scan_records
    scan_runs = _speedups.scan_runs
    count_lines = _speedups.count_lines
