"""Times pymerkle's on-disk ``SqliteTree``. Run INSIDE ``.venv-peers`` by :mod:`bench.store_bench`.

Never imported by the project: it needs Python >= 3.12 with pymerkle installed, and only the
standard library besides (pymerkle is loaded with :func:`importlib.import_module` so that type
checking this file does not need it).

Input, one JSON object on stdin::

    {"db": "/tmp/.../pymerkle.db",   the tree's SQLite file (created; must not exist yet)
     "heads": "/tmp/.../heads.bin",  the log's entries: 32 bytes each, in log order
     "sizes": [10000, 100000, ...],  increasing tree sizes to measure at
     "inclusion": {"10000": [p, ...], ...},    0-based leaf positions in [0, size)
     "consistency": {"10000": [m, ...], ...},  old sizes in [1, size)
     "proof_budget_s": 60.0,         stop a proof series once this much time is spent on it
     "uncached_budget_s": 8.0,       the same for the cache-off series
     "uncached_min": 3,              ... which always times at least this many proofs
     "build_limit_s": 120.0,         a stage whose build is estimated longer is not built
     "samples": 3}                   inclusion proofs returned per size, for cross-checking

Procedure. One tree file grows stage by stage: ``append_entries`` adds the entries up to the
next size (timed: "build"), then the tree is closed and opened again, so that every stage
starts like a fresh process, with pymerkle's in-process subroot cache empty. Then:

* ``get_root()`` once (timed: "root after open"): pymerkle computes the root from the leaves,
  filling its subroot cache as a side effect, as a long-lived process would have done;
* ``get_root()`` repeated (warm) and ``prove_inclusion`` / ``prove_consistency`` for the given
  samples, each call timed alone (perf_counter, garbage collector off): median and p99;
* the same proofs on a second handle opened with ``disable_cache=True`` (every subroot from the
  leaves: what a proof costs when the cache does not hold it), time-capped.

A stage whose build is estimated (from the previous stage's rate, scaled as n log n) beyond
``build_limit_s`` is not built; ``stopped`` says so and the stages before it stand.

Output, one JSON object on stdout: ``{"python": ..., "pymerkle": version, "stages": [...],
"stopped": null or why, "error": null or why}``; each stage has ``size``, ``build_s``,
``open_root_s``, ``root`` (hex), ``root_warm``, ``inclusion``, ``consistency``,
``uncached_inclusion``, ``uncached_consistency`` (each ``{"median", "p99", "n"}`` in seconds) and
``inclusion_samples`` (``[position, [RFC 6962 path in hex]]``; pymerkle's path starts with the
leaf hash itself, which is dropped). Progress goes to stderr.
"""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import json
import math
import platform
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from time import perf_counter
from typing import Any


def _log(message: str) -> None:
    print(f"  [peer_store] {message}", file=sys.stderr, flush=True)


def latency(
    fn: Callable[[int], object], args: Sequence[int], budget_s: float, minimum: int = 1
) -> dict[str, float | int]:
    """Each call of ``fn`` timed alone, garbage collector off: median, p99 (nearest rank) and
    how many calls were made; stops once ``budget_s`` is spent (after at least ``minimum``
    calls). The same statistics as ``bench.store_bench.latency``."""
    times: list[float] = []
    spent = 0.0
    enabled = gc.isenabled()
    gc.disable()
    try:
        for a in args:
            start = perf_counter()
            fn(a)
            elapsed = perf_counter() - start
            times.append(elapsed)
            spent += elapsed
            if spent > budget_s and len(times) >= minimum:
                break
    finally:
        if enabled:
            gc.enable()
    times.sort()
    n = len(times)
    return {
        "median": times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2,
        "p99": times[max(math.ceil(0.99 * n) - 1, 0)],
        "n": n,
    }


def measure(config: dict[str, Any], pymerkle: Any, out: dict[str, Any]) -> None:
    """Every stage, appended to ``out["stages"]`` as it completes (see the module docstring)."""
    db = Path(config["db"])
    if db.exists():
        raise FileExistsError(f"{db} exists: the tree must start empty")
    raw = Path(config["heads"]).read_bytes()
    limit = float(config["build_limit_s"])
    built = 0
    rate: float | None = None  # seconds per entry of the last build, divided by log2(size)
    for size in config["sizes"]:
        if len(raw) < 32 * size:
            raise ValueError(f"the heads file holds {len(raw) // 32} entries, not {size}")
        if rate is not None:
            estimate = rate * (size - built) * math.log2(size)
            if estimate > limit:
                out["stopped"] = (
                    f"not built at {size:,} leaves: estimated {estimate:.3g} s, over the "
                    f"{limit:g} s build limit; measured up to {built:,}"
                )
                _log(out["stopped"])
                return
        entries = [raw[32 * i : 32 * i + 32] for i in range(built, size)]
        tree = pymerkle.SqliteTree(str(db))
        start = perf_counter()
        tree.append_entries(entries)
        build_s = perf_counter() - start
        tree.close()
        del entries
        rate = build_s / (size - built) / math.log2(max(size, 2))
        _log(f"append_entries: {size - built:,} entries in {build_s:.2f} s (tree of {size:,})")
        built = size

        stage = _stage(pymerkle, db, size, config)
        stage["build_s"] = build_s
        out["stages"].append(stage)


def _stage(pymerkle: Any, db: Path, size: int, config: dict[str, Any]) -> dict[str, Any]:
    """The figures of the tree in ``db`` at ``size`` leaves (see the module docstring)."""
    budget = float(config["proof_budget_s"])
    uncached_budget = float(config["uncached_budget_s"])
    uncached_min = int(config["uncached_min"])
    tree = pymerkle.SqliteTree(str(db))  # a fresh handle: the subroot cache is empty
    start = perf_counter()
    root = bytes(tree.get_root())
    open_root_s = perf_counter() - start
    stage: dict[str, Any] = {
        "size": size,
        "open_root_s": open_root_s,
        "root": root.hex(),
    }
    key = str(size)
    incl = [p + 1 for p in config["inclusion"][key]]  # pymerkle counts leaves from one
    cons = list(config["consistency"][key])
    stage["root_warm"] = latency(lambda _: tree.get_root(), range(len(incl)), budget)
    stage["inclusion"] = latency(lambda i: tree.prove_inclusion(i, size), incl, budget)
    stage["consistency"] = latency(lambda m: tree.prove_consistency(m, size), cons, budget)
    stage["inclusion_samples"] = [
        [i - 1, [bytes(h).hex() for h in tree.prove_inclusion(i, size).path[1:]]]
        for i in incl[: int(config["samples"])]
    ]
    _log(
        f"{size:,}: root after open {open_root_s * 1e3:.1f} ms; inclusion median "
        f"{stage['inclusion']['median'] * 1e3:.2f} ms, consistency median "
        f"{stage['consistency']['median'] * 1e3:.2f} ms"
    )
    tree.close()

    bare = pymerkle.SqliteTree(str(db), disable_cache=True)
    stage["uncached_inclusion"] = latency(
        lambda i: bare.prove_inclusion(i, size), incl, uncached_budget, uncached_min
    )
    stage["uncached_consistency"] = latency(
        lambda m: bare.prove_consistency(m, size), cons, uncached_budget, uncached_min
    )
    bare.close()
    _log(
        f"{size:,}: cache off: inclusion median "
        f"{stage['uncached_inclusion']['median'] * 1e3:.1f} ms "
        f"({stage['uncached_inclusion']['n']} proofs)"
    )
    return stage


def main() -> None:
    config: dict[str, Any] = json.load(sys.stdin)
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "pymerkle": None,
        "stages": [],
        "stopped": None,
        "error": None,
    }
    try:
        out["pymerkle"] = importlib.metadata.version("pymerkle")
        measure(config, importlib.import_module("pymerkle"), out)
    except Exception as e:  # reported; the stages measured so far still count
        traceback.print_exc(file=sys.stderr)
        out["error"] = f"{type(e).__name__}: {e}"
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
