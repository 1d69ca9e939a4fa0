"""The one import point of the C accelerator (``tlog/_speedups.c``) of tlog's hot loops.

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
* :data:`count_lines` — the number of LFs in a byte range;
* :data:`fold_leaves` — the Merkle fold of :meth:`tlog.merkle.MemoryHashStore.extend` (about
  6x the Python loop), read by :mod:`tlog.merkle`;
* :data:`leaf_hashes` — RFC 6962 leaf hashes of equal-length entries at a fixed stride of a
  buffer, joined (a bundle's entries, or sealed heads: a level-0 tile), with the GIL released;
  read by :func:`tlog.tiles.leaf_hashes`;
* :data:`body_names` — :func:`tlog.journal.body_names`'s question (does a record body name this
  run and seq, in canonical JSON?), about 8x the Python code, read by :mod:`tlog.journal`.

What the C code takes, the Python scanner would take with the same result
(``tests/tlog/test_speedups.py``), so every verdict and message is the Python code's.
"""

from __future__ import annotations

from collections.abc import Callable
from mmap import mmap

# Not typing.TYPE_CHECKING: this module is imported by tlog.merkle, below tlog.export (type
# checkers treat any TYPE_CHECKING name so).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from tlog.export.format import VerifiedRun

__all__ = ["body_names", "count_lines", "fold_leaves", "leaf_hashes", "scan_records", "scan_runs"]

ScanRecords = Callable[
    [bytes, int, int, bytes, int, int, bytes, bytes | None], tuple[int, int, bytes]
]
"""``(buf, at, end, run ID, first seq, count, prev hash, outcome or None)`` -> ``(offset after
the records taken, how many, the last one's hash)``."""
ScanRuns = Callable[[bytes | mmap, int, int, int], tuple[int, int, "list[VerifiedRun]"]]
"""``(buf, at, end, number of the last line read)`` -> ``(offset after the runs taken, number of
their last line, the runs)``."""
CountLines = Callable[[bytes | mmap, int, int], int]
"""``(buf, start, end)`` -> the number of LFs in ``buf[start:end]``."""
FoldLeaves = Callable[[list[bytes], list[bytes], int], list[bytes]]
"""``(stored hashes, new leaf hashes, size before)`` -> the new stored hashes."""
LeafHashes = Callable[[bytes, int, int, int, int], bytes]
"""``(buf, offset, stride, length, count)`` -> the leaf hashes of those entries, joined."""
BodyNames = Callable[[bytes, bytes, int], bool]
"""``(raw body, run ID as UTF-8, seq)`` -> True only when sure that the body names them."""

scan_records: ScanRecords | None = None
scan_runs: ScanRuns | None = None
count_lines: CountLines | None = None
fold_leaves: FoldLeaves | None = None
body_names: BodyNames | None = None
leaf_hashes: LeafHashes | None = None

try:
    from tlog import _speedups
except ImportError:  # pragma: no cover - installed without a C compiler
    pass
else:
    scan_records = _speedups.scan_records
    scan_runs = _speedups.scan_runs
    count_lines = _speedups.count_lines
    fold_leaves = _speedups.fold_leaves
    body_names = _speedups.body_names
    leaf_hashes = _speedups.leaf_hashes
