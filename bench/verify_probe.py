"""Time :func:`verifier.parallel.verify_export_parallel` in a fresh process, as ``tlog-verify``
runs it: ``python -m bench.verify_probe PATH JOBS REPS [--one-core]``.

Used by :mod:`bench.verify_bench`, so that the measured process is as small as the command's
(the benchmark's own process holds the exports it built and the objects of the runs before,
which a fork must copy on write). Prints one JSON object: the best wall time of ``REPS`` calls
(garbage collector off), the CPU time of that call (this process and its reaped workers), and
the SHA-256 of the summary's ``repr``, which the caller compares with its own verifier's.
``--one-core`` pins this process, and the threads it starts, to one CPU first.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import resource
import sys
from time import perf_counter

from verifier.parallel import verify_export_parallel


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main(argv: list[str]) -> int:
    path, jobs, reps = argv[0], int(argv[1]), int(argv[2])
    if "--one-core" in argv[3:]:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    best = (float("inf"), 0.0)
    summary = None
    for _ in range(reps):
        gc.collect()
        gc.disable()
        try:
            cpu, start = _cpu(), perf_counter()
            summary = verify_export_parallel(path, jobs=jobs)
            wall, cpu = perf_counter() - start, _cpu() - cpu
        finally:
            gc.enable()
        best = min(best, (wall, cpu))
    print(
        json.dumps(
            {
                "wall": best[0],
                "cpu": best[1],
                "summary": hashlib.sha256(repr(summary).encode()).hexdigest(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
