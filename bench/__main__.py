"""Run the benchmarks and print one report: ``python -m bench [--quick] [module ...]``.

Every module (``merkle``, ``store``, ``tiles``, ``verify``, ``witness``, ``inbox``) runs by
default; naming modules runs only those.
``--quick`` uses small sizes for a smoke run; ``--no-peers`` skips the peer virtualenv;
``--peer-build-limit`` bounds one peer build (a longer one is measured at a smaller size).

Progress goes to stderr; the report goes to stdout: per module a table (operation, ours, what
it is compared with, its figure, the ratio ours / theirs) and notes, then one line per target
saying whether it is met, then the total runtime. The exit status is 0 even when a target is
missed: timings are noisy, and the report is for people to read.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Sequence
from time import perf_counter
from typing import Protocol

from bench import (
    inbox_bench,
    merkle_bench,
    store_bench,
    tiles_bench,
    verify_bench,
    witness_bench,
)

Row = tuple[str, str, str, str, str]
HEADER: Row = ("operation", "ours", "floor or peer", "theirs", "ratio ours/theirs")


class Section(Protocol):
    """What a benchmark module's ``run`` returns."""

    @property
    def title(self) -> str: ...

    @property
    def rows(self) -> Sequence[Row]: ...

    @property
    def targets(self) -> Sequence[tuple[str, bool]]: ...

    @property
    def notes(self) -> Sequence[str]: ...


class Runner(Protocol):
    """A benchmark module's entry point."""

    def __call__(
        self, *, quick: bool, peers_enabled: bool, peer_build_limit_s: float
    ) -> Section: ...


MODULES: dict[str, Runner] = {
    merkle_bench.TITLE: merkle_bench.run,
    store_bench.TITLE: store_bench.run,
    tiles_bench.TITLE: tiles_bench.run,
    verify_bench.TITLE: verify_bench.run,
    witness_bench.TITLE: witness_bench.run,
    inbox_bench.TITLE: inbox_bench.run,
}


def render_table(rows: Sequence[Row]) -> list[str]:
    """The rows under :data:`HEADER`, columns padded; times and ratios right-aligned."""
    table = [HEADER, *rows]
    widths = [max(len(row[col]) for row in table) for col in range(len(HEADER))]
    right = {1, 3, 4}
    lines = []
    for n, row in enumerate(table):
        cells = [
            cell.rjust(widths[col]) if col in right else cell.ljust(widths[col])
            for col, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="Run the benchmarks and print one report."
    )
    parser.add_argument(
        "modules", nargs="*", metavar="module", help=f"any of: {', '.join(MODULES)} (default: all)"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--no-peers", action="store_true", help="do not measure peer libraries")
    parser.add_argument(
        "--peer-build-limit",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="longest single peer build before a smaller size is used (default: 120)",
    )
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}; known: {', '.join(MODULES)}")
    chosen = list(dict.fromkeys(args.modules)) or list(MODULES)

    start = perf_counter()
    print(
        f"tlog-toolkit benchmarks: {', '.join(chosen)} ({'quick' if args.quick else 'full'} run)"
        f" on Python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs",
        flush=True,
    )
    targets: list[tuple[str, bool]] = []
    for name in chosen:
        began = perf_counter()
        section = MODULES[name](
            quick=args.quick,
            peers_enabled=not args.no_peers,
            peer_build_limit_s=args.peer_build_limit,
        )
        print()
        print(f"== {section.title} ({perf_counter() - began:.1f} s) ==")
        for line in render_table(section.rows):
            print(line)
        print()
        for note in section.notes:
            print(f"* {note}")
        targets.extend(section.targets)
        sys.stdout.flush()
    print()
    print("targets:")
    for text, met in targets:
        print(f"  {'met    ' if met else 'NOT MET'}  {text}")
    print()
    print(f"total runtime: {perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
